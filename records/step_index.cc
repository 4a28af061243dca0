// detnccl records: the step index (step_index.h).
#include "records/step_index.h"

#include <cstring>
#include <utility>

#include "abi/traced_ops.h"

namespace detnccl::records {

bool is_paired_op(OpId op) noexcept {
  const abi::TracedOpRow* row = abi::traced_op_row(static_cast<std::uint16_t>(op));
  return row != nullptr && row->peer == abi::PeerRole::kPeer;
}

void StepIndexBuilder::step_ended(const std::vector<StepDigestRecord>& ended) {
  if (!group_open_ || ended.empty()) return;
  group_open_ = false;
  if (ended.size() != open_.size()) failed_ = true;
  auto open = open_.begin();
  for (const StepDigestRecord& digest : ended) {
    if (failed_ || open == open_.end() || open->first != digest.comm_ordinal) {
      failed_ = true;
      break;
    }
    StepIndexEntry entry;
    entry.comm_ordinal = digest.comm_ordinal;
    entry.step = digest.step;
    entry.calls = digest.calls;
    entry.input_digest = digest.input_digest;
    entry.output_digest = digest.output_digest;
    entry.group_offset = group_offset_;
    entry.fingerprinted_calls = open->second.fingerprinted;
    entry.collectives_before = open->second.collectives_before;
    entry.first_comm_seq = open->second.first_comm_seq;
    entry.step_sources = open->second.step_sources;
    for (StepIndexPair pair : open->second.pairs) {
      pair.entry = static_cast<std::uint32_t>(chunk_.entries.size());
      chunk_.pairs.push_back(pair);
    }
    chunk_.entries.push_back(entry);
    ++open;
  }
  open_.clear();
}

void StepIndexBuilder::call(const CallFields& call, std::uint64_t offset) {
  if (!group_open_) {
    group_open_ = true;
    group_offset_ = offset;
  }
  Counters& counters = counters_[call.comm_ordinal];
  auto [found, inserted] = open_.try_emplace(call.comm_ordinal);
  OpenCommunicator& open = found->second;
  if (inserted) {
    open.collectives_before = counters.collectives;
    open.first_comm_seq = call.comm_seq;
  }
  const auto source = static_cast<std::uint32_t>(call.step_source);
  open.step_sources |= source < 63 ? std::uint64_t{1} << source : std::uint64_t{1} << 63;
  if ((call.flags & (kCallInputFingerprint | kCallOutputFingerprint)) != 0) ++open.fingerprinted;
  if (!is_paired_op(call.op)) {
    ++counters.collectives;
    return;
  }
  const std::uint64_t key = pair_key(call.op, call.peer);
  std::uint64_t& count = counters.pairs[key];
  bool seen = false;
  for (const StepIndexPair& pair : open.pairs) {
    seen = seen || (pair.peer == call.peer && pair.op == static_cast<std::uint32_t>(call.op));
  }
  if (!seen) {
    StepIndexPair pair;
    pair.peer = call.peer;
    pair.op = static_cast<std::uint32_t>(call.op);
    pair.count_before = count;
    open.pairs.push_back(pair);
  }
  ++count;
}

std::vector<std::uint64_t> encode_step_index(const StepIndexChunk& chunk, std::uint64_t previous_offset) {
  StepIndexFields fields;
  fields.previous_offset = previous_offset;
  fields.entry_count = static_cast<std::uint32_t>(chunk.entries.size());
  fields.pair_count = static_cast<std::uint32_t>(chunk.pairs.size());
  fields.communicator_count = static_cast<std::uint32_t>(chunk.communicator_offsets.size());
  const std::size_t bytes = sizeof(fields) + chunk.entries.size() * sizeof(StepIndexEntry) +
                            chunk.pairs.size() * sizeof(StepIndexPair) + chunk.communicator_offsets.size() * 8;
  std::vector<std::uint64_t> words(bytes / 8);
  auto* at = reinterpret_cast<std::byte*>(words.data());
  const auto put = [&at](const void* data, std::size_t size) {
    if (size != 0) std::memcpy(at, data, size);
    at += size;
  };
  put(&fields, sizeof fields);
  put(chunk.entries.data(), chunk.entries.size() * sizeof(StepIndexEntry));
  put(chunk.pairs.data(), chunk.pairs.size() * sizeof(StepIndexPair));
  put(chunk.communicator_offsets.data(), chunk.communicator_offsets.size() * 8);
  return words;
}

}  // namespace detnccl::records
