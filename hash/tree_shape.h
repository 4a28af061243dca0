// The fingerprint definition's constants, and the shape of its tree as a list of passes over chunks: the form a
// GPU computes it in (one kernel launch per pass), usable from host and device code. See docs/fingerprint.md.
//
// A pass hashes "chunks" of at most kLeafBytes: the leaves of the buffer first, then groups of kFanout digests,
// until each segment has one digest, which the last pass also seeds with the segment's length. The whole-buffer
// fingerprint is the case of a single segment covering the buffer.
#pragma once

#include <cstddef>
#include <cstdint>

#include "hash/xxh3_portable.h"

namespace detnccl::hash {

// Version of the fingerprint definition written in docs/fingerprint.md; records carry it. Bump on any change.
inline constexpr std::uint32_t kFingerprintVersion = 1;
// Bytes per leaf; the last leaf of a buffer or segment is shorter; an empty buffer is one empty leaf.
inline constexpr std::size_t kLeafBytes = 16384;
// Digests per group at every level above the leaves (kFanout little-endian u64 = kLeafBytes).
inline constexpr std::size_t kFanout = kLeafBytes / sizeof(std::uint64_t);
// Most passes any buffer can need: the leaf pass plus ceil(50 / 11) digest passes for 2^64 bytes, rounded up.
inline constexpr unsigned kMaxPasses = 8;

// Number of leaves of a buffer of `bytes` bytes (an empty buffer still has one, empty, leaf).
DETNCCL_HOST_DEVICE inline std::uint64_t leaf_count(std::uint64_t bytes) {
  return bytes == 0 ? 1 : (bytes + kLeafBytes - 1) / kLeafBytes;
}

// XXH3_64bits_withSeed of one digest written as 8 little-endian bytes, seeded with the byte count it covers: the
// last step of every fingerprint.
DETNCCL_HOST_DEVICE inline std::uint64_t seal_root(std::uint64_t root_digest, std::uint64_t bytes) {
  std::uint8_t le[8];
  xxh3::write_le64(le, root_digest);
  return xxh3::hash_short(le, sizeof le, bytes);
}

// One pass: its input (the buffer, or the previous pass's digests) is cut into segments of `segment_bytes`
// (the last may be shorter), each segment into chunks of at most kLeafBytes; every chunk yields one digest.
struct Pass {
  std::uint64_t input_bytes;
  std::uint64_t segment_bytes;
  std::uint64_t chunks_per_segment;  // of a full segment
  std::uint64_t chunks;              // in the whole pass (= digests it writes)
  bool leaves;                       // the first pass, over the buffer itself
  bool seals;                        // the last pass: its digests are the segments' fingerprints
};

// One chunk of a pass.
struct Chunk {
  std::uint64_t offset;   // in the pass's input, bytes
  std::uint64_t length;   // bytes, at most kLeafBytes
  std::uint64_t segment;  // index of the segment it belongs to
  bool pass_through;      // a segment already reduced to one digest: copied, not hashed again
};

// Chunk `index` (< pass.chunks) of `pass`.
DETNCCL_HOST_DEVICE inline Chunk chunk_of(const Pass& pass, std::uint64_t index) {
  const std::uint64_t segment = index / pass.chunks_per_segment;
  const std::uint64_t segment_start = segment * pass.segment_bytes;
  std::uint64_t segment_end = segment_start + pass.segment_bytes;
  if (segment_end > pass.input_bytes) segment_end = pass.input_bytes;
  const std::uint64_t offset = segment_start + (index % pass.chunks_per_segment) * kLeafBytes;
  std::uint64_t end = offset + kLeafBytes;
  if (end > segment_end) end = segment_end;
  const bool alone = !pass.leaves && segment_end - segment_start == sizeof(std::uint64_t);
  return {offset, end - offset, segment, alone};
}

// Every pass needed to reduce a buffer to its segment fingerprints.
struct TreePlan {
  std::uint64_t buffer_bytes;
  std::uint64_t segment_bytes;  // of the buffer; the last segment may be shorter
  std::uint64_t segments;       // 0 only for segment digests of an empty buffer
  unsigned pass_count;
  Pass passes[kMaxPasses];

  // Bytes the segment `segment` covers in the buffer: the seed of its fingerprint.
  DETNCCL_HOST_DEVICE std::uint64_t segment_length(std::uint64_t segment) const {
    const std::uint64_t start = segment * segment_bytes;
    const std::uint64_t rest = buffer_bytes - start;
    return rest < segment_bytes ? rest : segment_bytes;
  }
};

// The passes for segments of `segment_bytes` of a `buffer_bytes` buffer; segment_bytes = 0 means one segment
// covering the whole buffer (the fingerprint, defined for an empty buffer too). Otherwise segment_bytes must be a
// positive multiple of kLeafBytes (the caller checks) and an empty buffer has no segments and no passes.
DETNCCL_HOST_DEVICE inline TreePlan plan_tree(std::uint64_t buffer_bytes, std::uint64_t segment_bytes) {
  TreePlan plan{};
  plan.buffer_bytes = buffer_bytes;
  if (segment_bytes == 0) {
    plan.segment_bytes = buffer_bytes;
    plan.segments = 1;
  } else {
    plan.segment_bytes = segment_bytes;
    plan.segments = (buffer_bytes + segment_bytes - 1) / segment_bytes;
  }
  if (plan.segments == 0) return plan;

  Pass pass{};
  pass.input_bytes = buffer_bytes;
  pass.segment_bytes = plan.segment_bytes;
  pass.chunks_per_segment = leaf_count(plan.segment_bytes);
  pass.chunks = leaf_count(buffer_bytes);
  pass.leaves = true;
  for (;;) {
    pass.seals = pass.chunks_per_segment == 1;
    plan.passes[plan.pass_count++] = pass;
    if (pass.seals) break;
    // The next pass reads this pass's digests: a full segment now has chunks_per_segment of them.
    Pass next{};
    next.input_bytes = pass.chunks * sizeof(std::uint64_t);
    next.segment_bytes = pass.chunks_per_segment * sizeof(std::uint64_t);
    next.chunks_per_segment = leaf_count(next.segment_bytes);
    const std::uint64_t full_segments = plan.segments - 1;
    const std::uint64_t last_segment_bytes = next.input_bytes - full_segments * next.segment_bytes;
    next.chunks = full_segments * next.chunks_per_segment + leaf_count(last_segment_bytes);
    next.leaves = false;
    pass = next;
  }
  return plan;
}

// Digests of scratch a plan needs: every pass but the sealing one writes its digests to scratch, alternating
// between two regions, the first sized for the leaf digests (the largest level), the second for the next level.
DETNCCL_HOST_DEVICE inline std::uint64_t scratch_digests(const TreePlan& plan) {
  if (plan.pass_count <= 1) return 0;
  std::uint64_t total = plan.passes[0].chunks;
  if (plan.pass_count > 2) total += plan.passes[1].chunks;
  return total;
}

}  // namespace detnccl::hash
