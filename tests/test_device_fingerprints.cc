// The shim's device fingerprints (hash/device_fingerprints.h), the parts that run without a GPU: the plan of a
// request (validation, digest counts, kernel pipelines, scratch), the pools' size classes, and the behaviour when
// no CUDA driver is loaded. The kernels themselves are checked on a GPU by bench/gpu/shim_check.cu.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "hash/device_fingerprints.h"
#include "hash/fingerprint.h"
#if defined(DETNCCL_TEST_HAVE_CUDA)
#include "cuda/scopes.h"
#include "hash/fingerprint_cuda.h"
#endif

namespace detnccl::hash {
namespace {

constexpr std::uint64_t kLeaf = hash::kLeafBytes;
const int kSomeBuffer = 0;  // any non-null address: plans never dereference it
const void* const kData = &kSomeBuffer;

DeviceDigestRequest request(std::uint64_t bytes, std::uint64_t blocks = 0, std::uint64_t segment_bytes = 0) {
  return {kData, bytes, blocks, segment_bytes};
}

// Scratch of one fingerprint pipeline written from the tree's definition: the leaf digests, plus the next level's
// when that level still has more than one digest (the sealing pass writes to the result, not to scratch).
std::uint64_t fingerprint_scratch(std::uint64_t bytes) {
  const std::uint64_t leaves = bytes <= kLeaf ? 1 : (bytes + kLeaf - 1) / kLeaf;
  if (leaves == 1) return 0;
  const std::uint64_t next = (leaves + hash::kFanout - 1) / hash::kFanout;
  return 8 * (leaves + (next > 1 ? next : 0));
}

TEST(DeviceDigestPlan, RefusesInvalidRequests) {
  EXPECT_NE(plan_device_digests({nullptr, 1, 0, 0}).failure, "");
  EXPECT_NE(plan_device_digests(request(kLeaf, 0, kLeaf + 1)).failure, "");
  EXPECT_NE(plan_device_digests(request(kLeaf, 0, kLeaf / 2)).failure, "");
  EXPECT_NE(plan_device_digests(request(kLeaf, kMaxDeviceDigestsPerRequest)).failure, "");
  // Segments alone can be too many: 2^24 segments of one leaf.
  EXPECT_NE(plan_device_digests(request(kMaxDeviceDigestsPerRequest * kLeaf, 0, kLeaf)).failure, "");
  // An empty buffer may have no address.
  EXPECT_EQ(plan_device_digests({nullptr, 0, 0, 0}).failure, "");
  EXPECT_EQ(plan_device_digests({nullptr, 0, 4, kLeaf}).failure, "");
}

TEST(DeviceDigestPlan, CountsDigestsAndPipelines) {
  // Segments: ceil(bytes / segment_bytes), and none for an empty buffer.
  const DeviceDigestPlan segmented = plan_device_digests(request(5 * kLeaf + 1, 0, 2 * kLeaf));
  EXPECT_EQ(segmented.segments, 3u);
  EXPECT_EQ(segmented.result_digests, 4u);
  EXPECT_EQ(segmented.pipelines, 2u);
  EXPECT_EQ(plan_device_digests(request(0, 0, kLeaf)).segments, 0u);
  EXPECT_EQ(plan_device_digests(request(0, 0, kLeaf)).pipelines, 1u);

  // Leaf-aligned blocks: one segment-digest pipeline for all of them.
  const DeviceDigestPlan aligned = plan_device_digests(request(8 * kLeaf + 3, 4, kLeaf));
  EXPECT_EQ(aligned.block_bytes, 2 * kLeaf);
  EXPECT_TRUE(aligned.blocks_as_segments);
  EXPECT_EQ(aligned.segments, 9u);
  EXPECT_EQ(aligned.result_digests, 1u + 4u + 9u);
  EXPECT_EQ(aligned.pipelines, 3u);

  // Unaligned blocks: one pipeline each.
  const DeviceDigestPlan unaligned = plan_device_digests(request(3 * kLeaf + 7, 3));
  EXPECT_EQ(unaligned.block_bytes, kLeaf + 2);
  EXPECT_FALSE(unaligned.blocks_as_segments);
  EXPECT_EQ(unaligned.pipelines, 4u);

  // One block is the whole buffer; it is never treated as segments (that would be a segment of the whole).
  EXPECT_FALSE(plan_device_digests(request(2 * kLeaf, 1)).blocks_as_segments);

  // Empty blocks need no kernel.
  const DeviceDigestPlan empty_blocks = plan_device_digests(request(3, 8));
  EXPECT_EQ(empty_blocks.block_bytes, 0u);
  EXPECT_EQ(empty_blocks.pipelines, 1u);
  EXPECT_EQ(empty_blocks.result_digests, 9u);
}

// What blocks_as_segments relies on: the segment digests of the blocks' concatenation are the blocks' fingerprints.
TEST(DeviceDigestPlan, LeafAlignedBlocksAreTheSegmentsOfTheirConcatenation) {
  std::vector<std::uint8_t> data(6 * kLeaf + 1);  // the last byte is in no block
  std::mt19937_64 random(7);
  for (auto& byte : data) byte = static_cast<std::uint8_t>(random());
  for (std::uint64_t blocks : {2u, 3u, 6u}) {
    const DeviceDigestPlan plan = plan_device_digests({data.data(), data.size(), blocks, 0});
    ASSERT_TRUE(plan.blocks_as_segments) << blocks;
    const std::vector<std::uint64_t> segments =
        hash::segment_digests(data.data(), blocks * plan.block_bytes, plan.block_bytes);
    ASSERT_EQ(segments.size(), blocks);
    for (std::uint64_t b = 0; b < blocks; ++b) {
      EXPECT_EQ(segments[b], hash::fingerprint(data.data() + b * plan.block_bytes, plan.block_bytes)) << b;
    }
  }
}

TEST(DeviceDigestPlan, ScratchIsTheLargestPipelines) {
  EXPECT_EQ(plan_device_digests(request(0)).scratch_bytes, 0u);
  EXPECT_EQ(plan_device_digests(request(kLeaf)).scratch_bytes, 0u);
  EXPECT_EQ(plan_device_digests(request(kLeaf + 1)).scratch_bytes, 16u);
  EXPECT_EQ(plan_device_digests(request(3 * kLeaf)).scratch_bytes, 24u);
  EXPECT_EQ(plan_device_digests(request(hash::kFanout * kLeaf)).scratch_bytes, 8 * hash::kFanout);
  EXPECT_EQ(plan_device_digests(request((hash::kFanout + 1) * kLeaf)).scratch_bytes, 8 * (hash::kFanout + 1 + 2));
  for (std::uint64_t bytes : {kLeaf * 7 + 3, kLeaf * 5000, kLeaf * hash::kFanout * 3 + 1}) {
    EXPECT_EQ(plan_device_digests(request(bytes)).scratch_bytes, fingerprint_scratch(bytes)) << bytes;
    // Segments of one leaf need no scratch; blocks are smaller than the buffer: the whole buffer's pipeline wins.
    EXPECT_EQ(plan_device_digests(request(bytes, 4, kLeaf)).scratch_bytes, fingerprint_scratch(bytes)) << bytes;
  }
}

#if defined(DETNCCL_TEST_HAVE_CUDA)
// The plan must give the kernels the scratch they check for (hash/fingerprint_cuda.h's own sizing functions).
TEST(DeviceDigestPlan, ScratchMatchesTheCudaSizingFunctions) {
  namespace cuda = hash::cuda;
  for (std::uint64_t bytes :
       {std::uint64_t{0}, std::uint64_t{100}, kLeaf * 3 + 1, kLeaf * 4096 + 17, kLeaf * hash::kFanout * 5}) {
    for (std::uint64_t blocks : {0u, 1u, 3u, 4u, 64u}) {
      for (std::uint64_t segment_bytes : {std::uint64_t{0}, kLeaf, 3 * kLeaf, 1024 * kLeaf}) {
        const DeviceDigestPlan plan = plan_device_digests(request(bytes, blocks, segment_bytes));
        ASSERT_EQ(plan.failure, "");
        std::uint64_t needed = cuda::fingerprint_scratch_bytes(bytes);
        if (blocks > 0) {
          const std::uint64_t block_bytes = bytes / blocks;
          needed = std::max<std::uint64_t>(
              needed, plan.blocks_as_segments ? cuda::segment_digests_scratch_bytes(blocks * block_bytes, block_bytes)
                                              : (block_bytes > 0 ? cuda::fingerprint_scratch_bytes(block_bytes) : 0));
        }
        if (segment_bytes > 0) {
          needed = std::max<std::uint64_t>(needed, cuda::segment_digests_scratch_bytes(bytes, segment_bytes));
          EXPECT_EQ(plan.segments, cuda::segment_count(bytes, segment_bytes));
        }
        EXPECT_EQ(plan.scratch_bytes, needed) << bytes << " bytes, " << blocks << " blocks, " << segment_bytes;
      }
    }
  }
}
#endif

TEST(DevicePools, SizeClassesArePowersOfTwoWithAFloor) {
  EXPECT_EQ(result_slot_digests(0), kMinResultSlotDigests);
  EXPECT_EQ(result_slot_digests(1), kMinResultSlotDigests);
  EXPECT_EQ(result_slot_digests(8), 8u);
  EXPECT_EQ(result_slot_digests(9), 16u);
  EXPECT_EQ(result_slot_digests(1000), 1024u);
  EXPECT_EQ(result_slot_digests(1025), 2048u);
  EXPECT_EQ(scratch_block_bytes(0), 0u);
  EXPECT_EQ(scratch_block_bytes(16), kMinScratchBlockBytes);
  EXPECT_EQ(scratch_block_bytes(kMinScratchBlockBytes), kMinScratchBlockBytes);
  EXPECT_EQ(scratch_block_bytes(kMinScratchBlockBytes + 1), 2 * kMinScratchBlockBytes);
  EXPECT_EQ(scratch_block_bytes((std::uint64_t{3} << 20) - 5), std::uint64_t{4} << 20);
  // A class always holds what was asked for.
  for (std::uint64_t n = 1; n < 5000; n += 37) {
    EXPECT_GE(result_slot_digests(n), n);
    EXPECT_GE(scratch_block_bytes(n * 1000), n * 1000);
  }
}

TEST(DeviceDigestTicket, SettledTicketsStaySettled) {
  auto captured = DeviceDigestTicket::captured();
  EXPECT_EQ(captured->poll(), DeviceDigestTicket::kCaptured);
  EXPECT_EQ(captured->poll(), DeviceDigestTicket::kCaptured);
  EXPECT_EQ(captured->failure(), "");
  auto failed = DeviceDigestTicket::failed("because");
  EXPECT_EQ(failed->poll(), DeviceDigestTicket::kFailed);
  EXPECT_EQ(failed->failure(), "because");
  EXPECT_TRUE(failed->result().blocks.empty());
}

bool cuda_driver_loaded() { return dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD) != nullptr; }

// This test process never loads the CUDA driver itself (nothing in it calls the CUDA runtime first), so device
// fingerprints must be unavailable — and asking must not load the driver either.
TEST(DeviceFingerprints, UnavailableWithoutALoadedDriverAndLoadsNone) {
  if (cuda_driver_loaded()) GTEST_SKIP() << "the CUDA driver is already loaded in this process";
  EXPECT_FALSE(device_fingerprints_available());
  const std::string reason(device_fingerprints_unavailable_reason());
  EXPECT_NE(reason, "");
  std::vector<std::uint8_t> buffer(100);
  auto ticket = enqueue_device_digests({buffer.data(), buffer.size(), 2, 0}, nullptr);
  ASSERT_NE(ticket, nullptr);
  EXPECT_EQ(ticket->poll(), DeviceDigestTicket::kFailed);
  EXPECT_NE(std::string(ticket->failure()).find(reason), std::string::npos) << ticket->failure();
  EXPECT_TRUE(ticket->result().blocks.empty());
  EXPECT_FALSE(cuda_driver_loaded());
}

#if defined(DETNCCL_TEST_HAVE_CUDA)
// #21 item 6: a default stream (0, legacy, per-thread) runs on the communicator's device when it is known (NCCL
// makes it current in the call), not the thread's current one; any other stream is asked for its own device.
TEST(DeviceFingerprints, ADefaultStreamIsTheCommunicatorsDevice) {
  for (cudaStream_t stream : {cudaStream_t{nullptr}, cudaStreamLegacy, cudaStreamPerThread}) {
    EXPECT_TRUE(detnccl::cuda::is_default_stream(stream));
    int device = -1;
    ASSERT_EQ(detnccl::cuda::stream_device(stream, 3, &device), cudaSuccess);
    EXPECT_EQ(device, 3);
  }
  const auto other = reinterpret_cast<cudaStream_t>(0x5700);
  EXPECT_FALSE(detnccl::cuda::is_default_stream(other));  // asked for its own device (no driver here to ask)
}
#endif

}  // namespace
}  // namespace detnccl::hash
