// detnccl records: folded per-peer block digests (block_digests.h).
#include "records/block_digests.h"

#include "hash/xxh3_host.h"

namespace detnccl::records {

std::uint64_t fold_block_digests(std::span<const std::uint64_t> block_digests) noexcept {
  return hash::xxh3_64(block_digests.data(), block_digests.size_bytes(), kBlockFoldSeed);
}

void fold_call_blocks(CallRecord& call, bool keep_lists) noexcept {
  if (!call.input_blocks.empty()) {
    call.input_blocks_digest = fold_block_digests(call.input_blocks);
    call.flags |= kCallInputBlocksFolded;
  }
  if (!call.output_blocks.empty()) {
    call.output_blocks_digest = fold_block_digests(call.output_blocks);
    call.flags |= kCallOutputBlocksFolded;
  }
  if (!keep_lists) {
    call.input_blocks = {};
    call.output_blocks = {};
  }
}

std::optional<std::uint64_t> input_blocks_fold(const CallRecord& call) noexcept {
  if ((call.flags & kCallInputBlocksFolded) != 0) return call.input_blocks_digest;
  if (!call.input_blocks.empty()) return fold_block_digests(call.input_blocks);
  return std::nullopt;
}

std::optional<std::uint64_t> output_blocks_fold(const CallRecord& call) noexcept {
  if ((call.flags & kCallOutputBlocksFolded) != 0) return call.output_blocks_digest;
  if (!call.output_blocks.empty()) return fold_block_digests(call.output_blocks);
  return std::nullopt;
}

}  // namespace detnccl::records
