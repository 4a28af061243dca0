// The CUDA fingerprint pipeline (hash/fingerprint_cuda.cu) run on the host: the same TreePlan, the same passes
// over the same chunks, the same warp-cooperative XXH3 (emulated by xxh3::hash_long_cooperatively_on_host), the
// same scratch layout. Tests compare it with libxxhash and the reference definition, so the kernel's logic is
// checked on machines without a GPU; the GPU check compares the real kernel with it.
#pragma once

#include <cstdint>
#include <vector>

#include "hash/tree_shape.h"
#include "hash/xxh3_portable.h"

namespace detnccl::hash::emulation {

// XXH3_64bits of one chunk, as one warp of the kernel computes it.
inline std::uint64_t warp_hash(const std::uint8_t* in, std::uint64_t len) {
  if (len <= xxh3::kMidsizeMax) return xxh3::hash_short(in, len, 0);
  return xxh3::hash_long_cooperatively_on_host<4>(in, len);
}

// Runs every pass of `plan` over `data` and writes one fingerprint per segment to `out` (plan.segments entries).
inline void run_plan(const TreePlan& plan, const std::uint8_t* data, std::uint64_t* out) {
  std::vector<std::uint64_t> scratch(scratch_digests(plan));
  std::uint64_t* regions[2] = {scratch.data(), scratch.data() + (plan.pass_count > 1 ? plan.passes[0].chunks : 0)};
  const std::uint8_t* input = data;
  for (unsigned p = 0; p < plan.pass_count; ++p) {
    const Pass& pass = plan.passes[p];
    std::uint64_t* output = pass.seals ? out : regions[p % 2];
    for (std::uint64_t index = 0; index < pass.chunks; ++index) {
      const Chunk chunk = chunk_of(pass, index);
      const std::uint64_t digest =
          chunk.pass_through ? xxh3::read_le64(input + chunk.offset) : warp_hash(input + chunk.offset, chunk.length);
      output[index] = pass.seals ? seal_root(digest, plan.segment_length(chunk.segment)) : digest;
    }
    input = reinterpret_cast<const std::uint8_t*>(output);
  }
}

// Fingerprint of a host buffer through the emulated device pipeline.
inline std::uint64_t fingerprint(const std::uint8_t* data, std::uint64_t bytes) {
  std::uint64_t result = 0;
  run_plan(plan_tree(bytes, 0), data, &result);
  return result;
}

// Segment digests (segment_bytes a positive multiple of kLeafBytes) through the emulated device pipeline.
inline std::vector<std::uint64_t> segment_digests(const std::uint8_t* data, std::uint64_t bytes,
                                                  std::uint64_t segment_bytes) {
  const TreePlan plan = plan_tree(bytes, segment_bytes);
  std::vector<std::uint64_t> digests(plan.segments);
  run_plan(plan, data, digests.data());
  return digests;
}

}  // namespace detnccl::hash::emulation
