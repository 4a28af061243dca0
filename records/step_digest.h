// detnccl records: step digests — what `detnccl diff` compares of one communicator's calls in one step, folded into
// one 64-bit digest per (communicator, step), so that two runs can be compared step by step without their call
// records (DETNCCL_TRACE=steps), or their call records read only where the digests differ.
//
// Folded per call, in log order, into the input digest: the operation, datatype, reduction operator, count, root or
// peer, the PreMulSum scalar when recorded, whether the input fingerprint was computed and its value; into the
// output digest: the result (with ncclInProgress taken as ncclSuccess, as diff does), whether the output fingerprint
// was computed and its value. Not folded: sequence numbers, the step itself (the key), group ids, flags that do not
// change what diff reports (in place, deterministic, captured), the block and segment digests (they only locate a
// difference the whole-buffer fingerprints already show). Equal digests mean diff would find the step's calls
// equal, but for a collision (XXH3-64 chained over the calls); different digests mean they differ, or that one run
// fingerprinted calls the other did not (then the records decide).
#ifndef DETNCCL_RECORDS_STEP_DIGEST_H
#define DETNCCL_RECORDS_STEP_DIGEST_H

#include <cstdint>
#include <map>
#include <vector>

#include "records/log_format.h"

namespace detnccl::records {

// The digest of a (communicator, step) with no call folded in.
inline constexpr std::uint64_t kStepDigestSeed = 0x6465746e63636c31ull;  // "detnccl1"

// The input (output) digest after folding one more call into it.
std::uint64_t fold_call_input(std::uint64_t digest, const CallFields& call) noexcept;
std::uint64_t fold_call_output(std::uint64_t digest, const CallFields& call) noexcept;

// Folds a log's calls, in log order, into the digests of their (communicator, step): the writer's side. A step ends
// when a call of another step arrives, or at finish(); the digests of the step that ended come out then, by
// communicator ordinal.
class StepDigester {
 public:
  // Adds a call; appends to `ended` the digests of the step that ended before it, if it did.
  void add(const CallFields& call, std::vector<StepDigestRecord>& ended);

  // Appends the open step's digests to `ended` (the log is closing).
  void finish(std::vector<StepDigestRecord>& ended);

 private:
  bool open_ = false;
  std::uint64_t step_ = 0;
  std::map<std::uint64_t, StepDigestRecord> by_communicator_;  // ordinal -> the open step's digest
};

}  // namespace detnccl::records

#endif  // DETNCCL_RECORDS_STEP_DIGEST_H
