// What a device digest request becomes (device_fingerprints.h), in every build. The arithmetic of
// hash/tree_shape.h is the one hash/fingerprint_cuda.cu sizes its scratch with, so the plan and the kernels agree
// (tests/test_device_fingerprints.cc checks it against the CUDA sizing functions when CUDA is built).
#include <algorithm>
#include <bit>

#include "hash/device_fingerprints.h"
#include "hash/tree_shape.h"

namespace detnccl::hash {
namespace {

std::uint64_t scratch_for(std::uint64_t bytes, std::uint64_t segment_bytes) {
  return hash::scratch_digests(hash::plan_tree(bytes, segment_bytes)) * sizeof(std::uint64_t);
}

std::uint64_t ceil_power_of_two(std::uint64_t value, std::uint64_t at_least) {
  if (value <= at_least) return at_least;
  // Values above 2^63 have no power of two above them; saturate (no request is that large once validated).
  if (value > (std::uint64_t{1} << 63)) return std::uint64_t{1} << 63;
  return std::bit_ceil(value);
}

}  // namespace

DeviceDigestPlan plan_device_digests(const DeviceDigestRequest& request) noexcept {
  DeviceDigestPlan plan;
  if (request.data == nullptr && request.bytes > 0) {
    plan.failure = "the buffer address is null";
    return plan;
  }
  if (request.segment_bytes % hash::kLeafBytes != 0) {
    plan.failure = "the segment size is not a multiple of the 16 KiB leaf";
    return plan;
  }
  if (request.blocks >= kMaxDeviceDigestsPerRequest) {
    plan.failure = "too many digests asked for one buffer";
    return plan;
  }
  if (request.segment_bytes > 0) {
    plan.segments = request.bytes / request.segment_bytes + (request.bytes % request.segment_bytes != 0 ? 1 : 0);
  }
  plan.result_digests = 1 + request.blocks + plan.segments;
  if (plan.segments >= kMaxDeviceDigestsPerRequest || plan.result_digests > kMaxDeviceDigestsPerRequest) {
    plan.failure = "too many digests asked for one buffer";
    return plan;
  }

  plan.pipelines = 1;
  plan.scratch_bytes = scratch_for(request.bytes, 0);
  if (request.blocks > 0) {
    plan.block_bytes = request.bytes / request.blocks;
    // RATIONALE: a segment digest is by definition the fingerprint of its slice, so leaf-aligned blocks are the
    // segments of their concatenation: one pipeline of a few kernels rather than `blocks` pipelines (an
    // AllGather over 1024 ranks would otherwise launch thousands of kernels per call).
    plan.blocks_as_segments = request.blocks > 1 && plan.block_bytes > 0 && plan.block_bytes % hash::kLeafBytes == 0;
    if (plan.blocks_as_segments) {
      plan.pipelines += 1;
      plan.scratch_bytes =
          std::max(plan.scratch_bytes, scratch_for(request.blocks * plan.block_bytes, plan.block_bytes));
    } else if (plan.block_bytes > 0) {
      plan.pipelines += request.blocks;
      plan.scratch_bytes = std::max(plan.scratch_bytes, scratch_for(plan.block_bytes, 0));
    }
    // Empty blocks (bytes < blocks) need no kernel: every one is the fingerprint of an empty buffer.
  }
  if (plan.segments > 0) {
    plan.pipelines += 1;
    plan.scratch_bytes = std::max(plan.scratch_bytes, scratch_for(request.bytes, request.segment_bytes));
  }
  return plan;
}

std::uint64_t result_slot_digests(std::uint64_t digests) noexcept {
  return ceil_power_of_two(digests, kMinResultSlotDigests);
}

std::uint64_t scratch_block_bytes(std::uint64_t bytes) noexcept {
  return bytes == 0 ? 0 : ceil_power_of_two(bytes, kMinScratchBlockBytes);
}

}  // namespace detnccl::hash
