// detnccl records: folded per-peer block digests. An operation with per-peer blocks (abi/traced_ops.h's per_peer:
// AllGather's output, AlltoAll's input and output, Gather's output, Scatter's input) has one block fingerprint per
// rank of its communicator. Writing them all makes a record grow with the world size (2 KiB per side at 256 ranks),
// so at DETNCCL_TRACE=hash a record carries instead one digest over them, in peer order: the fold defined here,
// once, for the shim that writes it, the CLI that compares it and the tests that expect it. At
// DETNCCL_TRACE=segments the record carries the per-peer list as well.
//
// What the fold keeps: whether the blocks, as a sequence, equal another sequence of block fingerprints (the fold of
// the members' inputs of an AllGather, in rank order, equals the gathered output's fold). What it loses: which
// block differs, so which peer sent or received the differing data (diff's "per-peer blocks that differ", check's
// naming of the AllGather, Gather or Scatter member at fault) and every relation between single blocks of different
// ranks (AlltoAll's "output block p of rank r is input block r of rank p"). The whole-buffer fingerprint cannot be
// derived from the blocks (hash/fingerprint.h: each block's fingerprint is a seeded tree root), so the fold is a
// digest of its own, not a fingerprint.
#ifndef DETNCCL_RECORDS_BLOCK_DIGESTS_H
#define DETNCCL_RECORDS_BLOCK_DIGESTS_H

#include <cstdint>
#include <optional>
#include <span>

#include "records/log_format.h"

namespace detnccl::records {

// The seed of the fold ("dnblock1").
inline constexpr std::uint64_t kBlockFoldSeed = 0x316b636f6c626e64ull;

// The fold of a side's per-peer block digests, in peer order: XXH3_64bits_withSeed of their bytes (u64s in the
// writer's byte order, 8 * size bytes), seed kBlockFoldSeed.
std::uint64_t fold_block_digests(std::span<const std::uint64_t> block_digests) noexcept;

// The shim's side: folds the record's non-empty block lists into input_blocks_digest / output_blocks_digest and sets
// kCallInputBlocksFolded / kCallOutputBlocksFolded for them; then drops the lists unless keep_lists
// (DETNCCL_TRACE=segments keeps them).
void fold_call_blocks(CallRecord& call, bool keep_lists) noexcept;

// The fold of a call's input (output) blocks, whichever way its record holds them: the folded digest, or the fold of
// the per-peer list (records written before the digests existed); nullopt when the record holds neither.
std::optional<std::uint64_t> input_blocks_fold(const CallRecord& call) noexcept;
std::optional<std::uint64_t> output_blocks_fold(const CallRecord& call) noexcept;

// Whether the record holds the fold of its input (output) blocks but not the per-peer list (DETNCCL_TRACE=hash):
// the blocks can be compared as a whole, but no single peer's block can be named.
constexpr bool input_blocks_folded_only(const CallRecord& call) noexcept {
  return (call.flags & kCallInputBlocksFolded) != 0 && call.input_blocks.empty();
}
constexpr bool output_blocks_folded_only(const CallRecord& call) noexcept {
  return (call.flags & kCallOutputBlocksFolded) != 0 && call.output_blocks.empty();
}

}  // namespace detnccl::records

#endif  // DETNCCL_RECORDS_BLOCK_DIGESTS_H
