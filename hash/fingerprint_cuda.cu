#include <cuda_runtime.h>

#include "cuda/kernel_preload.h"
#include "hash/fingerprint_cuda.h"
#include "hash/tree_shape.h"
#include "hash/xxh3_portable.h"

namespace detnccl::hash::cuda {
namespace {

constexpr unsigned kWarpSize = 32;
constexpr unsigned kWarpsPerBlock = 8;
constexpr unsigned kFullMask = 0xffffffffU;
// RATIONALE: the kernel is bound by memory latency; capping registers at 64 per thread (4 blocks, 32 warps per SM)
// keeps enough loads in flight without spilling (ptxas -v: 0 bytes spill).
constexpr unsigned kMinBlocksPerSm = 4;
// RATIONALE: a grid-stride loop covers any chunk count; 65536 blocks of 8 warps is far beyond what one GPU keeps
// resident, so the cap never starves the device.
constexpr std::uint64_t kMaxBlocks = 65536;

using Thread = xxh3::CooperativeThread<kWarpSize / xxh3::kLanes>;

// The warp's total for this thread's lane: its products plus its partner lane's data words, summed over the 4
// threads (groups) that share the lane. Lane = rank % 8 and group = rank / 8, so xor 1 reaches the partner lane of
// the same group and xor 8, xor 16 reach the other groups of the same lane.
__device__ std::uint64_t warp_block_addend(xxh3::LanePartial part) {
  const std::uint64_t partner_data = __shfl_xor_sync(kFullMask, part.data_sum, 1);
  std::uint64_t total = xxh3::block_addend(part.product_sum, partner_data);
  total += __shfl_xor_sync(kFullMask, total, 8);
  total += __shfl_xor_sync(kFullMask, total, 16);
  return total;
}

// XXH3_64bits of `len` bytes at `in`, computed by the whole warp; every thread returns the hash.
// Mirrored on the host by xxh3::hash_long_cooperatively_on_host (tests/test_hash_portable.cc).
__device__ std::uint64_t warp_hash(const std::uint8_t* in, std::uint64_t len) {
  const unsigned rank = threadIdx.x % kWarpSize;
  if (len <= xxh3::kMidsizeMax) {
    std::uint64_t h = 0;
    if (rank == 0) h = xxh3::hash_short(in, len, 0);
    return __shfl_sync(kFullMask, h, 0);
  }
  const Thread me(rank);
  const xxh3::LongInputShape shape = xxh3::long_input_shape(len);
  std::uint64_t acc = xxh3::initial_accumulator(me.lane);
  for (std::size_t block = 0; block < shape.full_blocks; ++block) {
    const xxh3::LanePartial part = me.accumulate_block(in + block * xxh3::kBlockBytes, xxh3::kStripesPerBlock);
    acc = xxh3::scramble(acc + warp_block_addend(part), me.scramble_key);
  }
  acc +=
      warp_block_addend(me.accumulate_block(in + shape.full_blocks * xxh3::kBlockBytes, shape.stripes_in_last_block));
  acc += me.last_stripe_addend(in + len - xxh3::kStripeBytes);
  std::uint64_t all[xxh3::kLanes];
  for (unsigned lane = 0; lane < xxh3::kLanes; ++lane) all[lane] = __shfl_sync(kFullMask, acc, lane);
  return xxh3::merge_accumulators(all, xxh3::default_secret(), len);
}

// One pass of a TreePlan: a warp per chunk.
__global__ void __launch_bounds__(kWarpSize* kWarpsPerBlock, kMinBlocksPerSm)
    hash_pass(Pass pass, std::uint64_t buffer_bytes, std::uint64_t segment_bytes, const std::uint8_t* input,
              std::uint64_t* output) {
  const std::uint64_t first = static_cast<std::uint64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * kWarpsPerBlock;
  for (std::uint64_t index = first; index < pass.chunks; index += stride) {
    const Chunk chunk = chunk_of(pass, index);
    const std::uint64_t digest =
        chunk.pass_through ? xxh3::read_le64(input + chunk.offset) : warp_hash(input + chunk.offset, chunk.length);
    if (threadIdx.x % kWarpSize == 0) {
      if (pass.seals) {
        const std::uint64_t start = chunk.segment * segment_bytes;
        const std::uint64_t rest = buffer_bytes - start;
        output[index] = seal_root(digest, rest < segment_bytes ? rest : segment_bytes);
      } else {
        output[index] = digest;
      }
    }
  }
}

cudaError_t enqueue_plan(const TreePlan& plan, const void* data, std::uint64_t* out, void* scratch,
                         std::size_t scratch_bytes, cudaStream_t stream) {
  if (out == nullptr || (data == nullptr && plan.buffer_bytes > 0)) return cudaErrorInvalidValue;
  const std::uint64_t needed = scratch_digests(plan) * sizeof(std::uint64_t);
  if (needed > scratch_bytes || (needed > 0 && (scratch == nullptr || reinterpret_cast<std::uintptr_t>(scratch) % 8))) {
    return cudaErrorInvalidValue;
  }
  auto* regions = static_cast<std::uint64_t*>(scratch);
  std::uint64_t* outputs[2] = {regions, plan.pass_count > 1 ? regions + plan.passes[0].chunks : nullptr};
  const auto* input = static_cast<const std::uint8_t*>(data);
  for (unsigned p = 0; p < plan.pass_count; ++p) {
    const Pass& pass = plan.passes[p];
    std::uint64_t* output = pass.seals ? out : outputs[p % 2];
    std::uint64_t blocks = (pass.chunks + kWarpsPerBlock - 1) / kWarpsPerBlock;
    if (blocks > kMaxBlocks) blocks = kMaxBlocks;
    hash_pass<<<static_cast<unsigned>(blocks), kWarpSize * kWarpsPerBlock, 0, stream>>>(
        pass, plan.buffer_bytes, plan.segment_bytes, input, output);
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
    input = reinterpret_cast<const std::uint8_t*>(output);
  }
  return cudaSuccess;
}

bool valid_segment_bytes(std::size_t segment_bytes) { return segment_bytes > 0 && segment_bytes % kLeafBytes == 0; }

// The function of a kernel in the current context, loaded there (cudaFuncGetAttributes forces a lazy load too).
int resolve_kernel(void** function, const void* kernel) {
  cudaFunction_t found = nullptr;
  cudaError_t status = cudaGetFuncBySymbol(&found, kernel);
  cudaFuncAttributes attributes{};
  if (status == cudaSuccess) status = cudaFuncGetAttributes(&attributes, kernel);
  *function = found;
  return static_cast<int>(status);
}

detnccl::cuda::KernelPreloads& preloads() {
  static auto* const instance = new detnccl::cuda::KernelPreloads;  // never destroyed: used until the process ends
  return *instance;
}

}  // namespace

cudaError_t preload_kernels(int device) {
  static const void* const kernels[] = {reinterpret_cast<const void*>(hash_pass)};
  const int status = preloads().preload(device, kernels, resolve_kernel);
  (void)cudaGetLastError();  // a failure here must not be taken for a later launch's
  return static_cast<cudaError_t>(status);
}

std::size_t fingerprint_scratch_bytes(std::size_t bytes) {
  return scratch_digests(plan_tree(bytes, 0)) * sizeof(std::uint64_t);
}

std::size_t segment_digests_scratch_bytes(std::size_t bytes, std::size_t segment_bytes) {
  if (!valid_segment_bytes(segment_bytes)) return 0;
  return scratch_digests(plan_tree(bytes, segment_bytes)) * sizeof(std::uint64_t);
}

std::size_t segment_count(std::size_t bytes, std::size_t segment_bytes) {
  return valid_segment_bytes(segment_bytes) ? (bytes + segment_bytes - 1) / segment_bytes : 0;
}

cudaError_t enqueue_fingerprint(const void* data, std::size_t bytes, std::uint64_t* out, void* scratch,
                                std::size_t scratch_bytes, cudaStream_t stream) {
  return enqueue_plan(plan_tree(bytes, 0), data, out, scratch, scratch_bytes, stream);
}

cudaError_t enqueue_segment_digests(const void* data, std::size_t bytes, std::size_t segment_bytes, std::uint64_t* out,
                                    void* scratch, std::size_t scratch_bytes, cudaStream_t stream) {
  if (!valid_segment_bytes(segment_bytes)) return cudaErrorInvalidValue;
  if (bytes == 0) return cudaSuccess;  // no segments, nothing to write
  return enqueue_plan(plan_tree(bytes, segment_bytes), data, out, scratch, scratch_bytes, stream);
}

}  // namespace detnccl::hash::cuda
