// detnccl records: the step index — where each step's calls start in a log with call records, with the step's
// digests (step_digest.h) and the counts that number its calls, so that `detnccl diff` can compare two runs step by
// step and read call records only where the digests differ (docs/log-format.md, "Step index").
//
// The writer's side is StepIndexBuilder: the writer tells it each call as it writes it and each step's digests as
// they end, and writes what it gathered as a StepIndexRecord every kStepIndexChunkEntries entries and at close. The
// reader's side is LogReader::read_step_index().
#ifndef DETNCCL_RECORDS_STEP_INDEX_H
#define DETNCCL_RECORDS_STEP_INDEX_H

#include <cstdint>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "records/log_format.h"

namespace detnccl::records {

// Whether an op is matched per peer (Send, Recv) rather than per collective: the k-th Send from a to b is the
// partner of the k-th Recv on b from a, per communicator.
bool is_paired_op(OpId op) noexcept;

// The key of a Send/Recv pair within a communicator: (op, peer).
inline std::uint64_t pair_key(OpId op, std::int32_t peer) noexcept {
  return std::uint64_t{static_cast<std::uint16_t>(op)} << 32 | static_cast<std::uint32_t>(peer);
}

// One step index record's contents.
struct StepIndexChunk {
  std::vector<StepIndexEntry> entries;
  std::vector<StepIndexPair> pairs;  // StepIndexPair::entry indexes entries
  std::vector<std::uint64_t> communicator_offsets;
  bool empty() const noexcept { return entries.empty() && communicator_offsets.empty(); }
};

// Gathers the step index as a writer writes a log. Not thread-safe (the writer holds its lock).
class StepIndexBuilder {
 public:
  // The digests of the step that ended (what StepDigester::add or finish appended), in ordinal order: they close the
  // open group's entries. Call it before call() of the call that ended the step.
  void step_ended(const std::vector<StepDigestRecord>& ended);

  // A call record about to be written at `offset`.
  void call(const CallFields& call, std::uint64_t offset);

  // A communicator record written at `offset`.
  void communicator(std::uint64_t offset) { chunk_.communicator_offsets.push_back(offset); }

  // Whether enough entries have gathered to write a record.
  bool chunk_due() const noexcept { return chunk_.entries.size() >= kStepIndexChunkEntries; }

  // What gathered since the last take (the builder keeps its counters).
  StepIndexChunk take() {
    StepIndexChunk next;
    next.entries.reserve(kStepIndexChunkEntries + 64);  // RATIONALE: no doubling past the chunk: flat memory
    return std::exchange(chunk_, std::move(next));
  }

  // Whether the index went wrong (a step's digests that do not match its calls): the writer then writes none.
  bool failed() const noexcept { return failed_; }

 private:
  struct OpenCommunicator {
    std::uint64_t fingerprinted = 0;
    std::uint64_t collectives_before = 0;
    std::uint64_t first_comm_seq = 0;
    std::uint64_t step_sources = 0;
    std::vector<StepIndexPair> pairs;  // entry set when the group closes
  };
  struct Counters {
    std::uint64_t collectives = 0;
    std::unordered_map<std::uint64_t, std::uint64_t> pairs;  // pair_key -> calls so far
  };
  bool group_open_ = false;
  std::uint64_t group_offset_ = 0;
  std::map<std::uint64_t, OpenCommunicator> open_;  // ordinal -> the open group's counts
  std::unordered_map<std::uint64_t, Counters> counters_;
  StepIndexChunk chunk_;
  bool failed_ = false;
};

// The bytes of a step index record's payload (fixed part and arrays) for `chunk` chained after `previous_offset`.
std::vector<std::uint64_t> encode_step_index(const StepIndexChunk& chunk, std::uint64_t previous_offset);

}  // namespace detnccl::records

#endif  // DETNCCL_RECORDS_STEP_INDEX_H
