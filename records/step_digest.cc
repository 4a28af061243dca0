// detnccl records: step digests (step_digest.h).
#include "records/step_digest.h"

#include <cstring>

#include "hash/xxh3_host.h"

namespace detnccl::records {
namespace {

// The compared fields of one call's inputs, laid out without padding so that the hash sees no uninitialised byte.
struct InputFields {
  std::uint64_t count;
  std::uint64_t premulsum_scalar;
  std::uint64_t fingerprint;
  std::int32_t redop;
  std::int32_t peer;
  std::uint16_t op;
  std::uint16_t datatype;
  std::uint32_t present;  // bit 0: input fingerprint computed, bit 1: PreMulSum scalar recorded
};
static_assert(sizeof(InputFields) == 40);

struct OutputFields {
  std::uint64_t fingerprint;
  std::int32_t result;
  std::uint32_t present;  // bit 0: output fingerprint computed
};
static_assert(sizeof(OutputFields) == 16);

// ncclInProgress (7) is what a non-blocking communicator returns for the same call another returns ncclSuccess for.
constexpr std::int32_t kInProgress = 7;

}  // namespace

std::uint64_t fold_call_input(std::uint64_t digest, const CallFields& call) noexcept {
  InputFields fields;
  std::memset(&fields, 0, sizeof fields);
  const bool input = (call.flags & kCallInputFingerprint) != 0;
  const bool scalar = (call.flags & kCallPreMulSumScalar) != 0;
  fields.count = call.count;
  fields.premulsum_scalar = scalar ? call.premulsum_scalar : 0;
  fields.fingerprint = input ? call.input_fingerprint : 0;
  fields.redop = call.redop;
  fields.peer = call.peer;
  fields.op = static_cast<std::uint16_t>(call.op);
  fields.datatype = call.datatype;
  fields.present = (input ? 1u : 0u) | (scalar ? 2u : 0u);
  return hash::xxh3_64(&fields, sizeof fields, digest);
}

std::uint64_t fold_call_output(std::uint64_t digest, const CallFields& call) noexcept {
  OutputFields fields;
  std::memset(&fields, 0, sizeof fields);
  const bool output = (call.flags & kCallOutputFingerprint) != 0;
  fields.fingerprint = output ? call.output_fingerprint : 0;
  fields.result = call.result == kInProgress ? 0 : call.result;
  fields.present = output ? 1u : 0u;
  return hash::xxh3_64(&fields, sizeof fields, digest);
}

void StepDigester::add(const CallFields& call, std::vector<StepDigestRecord>& ended) {
  if (open_ && call.step != step_) finish(ended);
  open_ = true;
  step_ = call.step;
  auto [entry, inserted] = by_communicator_.try_emplace(call.comm_ordinal);
  StepDigestRecord& record = entry->second;
  if (inserted) {
    record.comm_ordinal = call.comm_ordinal;
    record.step = call.step;
    record.input_digest = kStepDigestSeed;
    record.output_digest = kStepDigestSeed;
  }
  record.input_digest = fold_call_input(record.input_digest, call);
  record.output_digest = fold_call_output(record.output_digest, call);
  ++record.calls;
}

void StepDigester::finish(std::vector<StepDigestRecord>& ended) {
  for (const auto& [ordinal, record] : by_communicator_) ended.push_back(record);
  by_communicator_.clear();
  open_ = false;
}

}  // namespace detnccl::records
