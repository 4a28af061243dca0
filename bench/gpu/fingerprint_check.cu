// GPU fingerprint check: device fingerprints and segment digests (hash/fingerprint_cuda.h) must equal the CPU
// reference bit for bit on random buffers of many sizes and alignments, also when captured in a CUDA graph and
// when written to mapped host memory; then GPU fingerprint throughput against a device-to-device copy of the same
// size, measured in the same run.
//
// Self-contained on purpose: the GPU machine has no libxxhash, so the CPU reference is the literal definition
// (hash/reference_fingerprint.h) over the portable XXH3 (hash/xxh3_portable.h), which the CPU test suite checks
// against libxxhash. --dry-run does everything except launching kernels (no GPU needed): it checks the host
// emulation of the kernel pipeline (hash/device_emulation.h) against the same reference instead.
//
// Prints a table "check | result | figure"; exits 1 if any check fails.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/gpu/check_table.h"
#include "hash/device_emulation.h"
#include "hash/fingerprint_cuda.h"
#include "hash/reference_fingerprint.h"
#include "hash/tree_shape.h"
#include "hash/xxh3_portable.h"

namespace {

namespace hash = detnccl::hash;
using namespace detnccl::gpu_check;
using hash::kLeafBytes;

struct Options {
  bool dry_run = false;
  std::size_t max_bytes = std::size_t{1} << 30;  // largest throughput size
  int repetitions = 20;
};

std::string hex(std::uint64_t v) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(v));
  return text;
}

// Sizes that exercise every path: the XXH3 short ranges, block and leaf boundaries, one and two tree levels.
std::vector<std::size_t> correctness_sizes(std::size_t cap) {
  std::vector<std::size_t> sizes = {0,
                                    1,
                                    3,
                                    4,
                                    8,
                                    9,
                                    16,
                                    17,
                                    128,
                                    129,
                                    240,
                                    241,
                                    1000,
                                    1024,
                                    1025,
                                    4095,
                                    kLeafBytes - 1,
                                    kLeafBytes,
                                    kLeafBytes + 1,
                                    3 * kLeafBytes + 5,
                                    (std::size_t{1} << 20) - 1,
                                    hash::kFanout * kLeafBytes,
                                    (hash::kFanout + 1) * kLeafBytes,
                                    (hash::kFanout + 2) * kLeafBytes - 3,
                                    (std::size_t{100} << 20) + 13};
  std::mt19937_64 rng(42);
  for (int i = 0; i < 24; ++i) sizes.push_back(rng() % (std::size_t{8} << 20));
  sizes.erase(std::remove_if(sizes.begin(), sizes.end(), [&](std::size_t s) { return s > cap; }), sizes.end());
  return sizes;
}

constexpr std::size_t kAlignments[] = {0, 1, 2, 3, 4, 6, 7, 8, 100, 256};

struct Segmenting {
  std::size_t bytes;
  std::size_t segment_bytes;
};

std::vector<Segmenting> segment_cases() {
  return {{5 * kLeafBytes + 1, kLeafBytes},
          {5 * kLeafBytes + 1, 2 * kLeafBytes},
          {(hash::kFanout + 2) * kLeafBytes - 3, (hash::kFanout + 1) * kLeafBytes},  // lone last leaf passes through
          {(std::size_t{64} << 20) + 99, std::size_t{1} << 20},
          {3 * kLeafBytes, 64 * kLeafBytes}};
}

void run_dry(const std::vector<std::uint8_t>& host, const Options& options) {
  // The kernel pipeline emulated on the host; cap sizes so the dry run stays quick in CI.
  const auto sizes = correctness_sizes(std::min<std::size_t>(options.max_bytes, std::size_t{40} << 20));
  int cases = 0;
  int bad = 0;
  for (std::size_t bytes : sizes) {
    for (std::size_t align : {std::size_t{0}, std::size_t{3}}) {
      const std::uint8_t* p = host.data() + align;
      ++cases;
      if (hash::emulation::fingerprint(p, bytes) != hash::reference::fingerprint(p, bytes, portable_xxh3)) {
        ++bad;
        std::printf("  mismatch: %zu bytes at +%zu\n", bytes, align);
      }
    }
  }
  row("dry run: emulated kernel pipeline == reference (fingerprints)", bad == 0,
      std::to_string(cases - bad) + "/" + std::to_string(cases) + " cases");
  cases = bad = 0;
  for (const Segmenting& s : segment_cases()) {
    if (s.bytes > (std::size_t{40} << 20)) continue;
    ++cases;
    if (hash::emulation::segment_digests(host.data(), s.bytes, s.segment_bytes) !=
        hash::reference::segment_digests(host.data(), s.bytes, s.segment_bytes, portable_xxh3)) {
      ++bad;
    }
  }
  row("dry run: emulated kernel pipeline == reference (segments)", bad == 0,
      std::to_string(cases - bad) + "/" + std::to_string(cases) + " cases");
  // The API's sizing functions run on the host and need no GPU.
  const std::size_t scratch = hash::cuda::fingerprint_scratch_bytes((hash::kFanout + 1) * kLeafBytes);
  row("dry run: scratch for 2049 leaves = (2049 + 2) digests", scratch == (2049 + 2) * 8,
      std::to_string(scratch) + " B");
}

void run_device(const std::vector<std::uint8_t>& host, const Options& options) {
  print_device_row();

  const std::size_t buffer_bytes = host.size();
  std::uint8_t* d_data = nullptr;
  std::uint8_t* d_copy = nullptr;
  std::uint64_t* d_out = nullptr;
  void* d_scratch = nullptr;
  const std::size_t max_segments = 1 << 16;
  const std::size_t scratch_bytes = hash::cuda::fingerprint_scratch_bytes(buffer_bytes) + 16 * 8 + 8 * max_segments;
  cudaStream_t stream = nullptr;
  cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cuda_check(cudaMalloc(&d_data, buffer_bytes), "cudaMalloc data");
  cuda_check(cudaMalloc(&d_copy, buffer_bytes), "cudaMalloc copy");
  cuda_check(cudaMalloc(&d_out, 8 * max_segments), "cudaMalloc out");
  cuda_check(cudaMalloc(&d_scratch, scratch_bytes), "cudaMalloc scratch");
  cuda_check(cudaMemcpy(d_data, host.data(), buffer_bytes, cudaMemcpyHostToDevice), "copy buffer to device");

  auto device_fingerprint = [&](std::size_t offset, std::size_t bytes) {
    std::uint64_t result = 0;
    cuda_check(hash::cuda::enqueue_fingerprint(d_data + offset, bytes, d_out, d_scratch, scratch_bytes, stream),
               "enqueue_fingerprint");
    cuda_check(cudaMemcpyAsync(&result, d_out, 8, cudaMemcpyDeviceToHost, stream), "read result");
    cuda_check(cudaStreamSynchronize(stream), "synchronize");
    return result;
  };

  // 1. Fingerprints at every size and alignment.
  const auto sizes = correctness_sizes(buffer_bytes - 256);
  int cases = 0;
  int bad = 0;
  for (std::size_t bytes : sizes) {
    for (std::size_t align : kAlignments) {
      if (bytes > (std::size_t{8} << 20) && align != 0 && align != 3) continue;  // keep the big ones quick
      ++cases;
      const std::uint64_t expected = hash::reference::fingerprint(host.data() + align, bytes, portable_xxh3);
      const std::uint64_t got = device_fingerprint(align, bytes);
      if (got != expected) {
        ++bad;
        std::printf("  mismatch: %zu bytes at +%zu: gpu %s cpu %s\n", bytes, align, hex(got).c_str(),
                    hex(expected).c_str());
      }
    }
  }
  row("GPU fingerprint == CPU reference (sizes x alignments)", bad == 0,
      std::to_string(cases - bad) + "/" + std::to_string(cases) + " cases");

  // 2. Segment digests.
  cases = bad = 0;
  for (const Segmenting& s : segment_cases()) {
    if (s.bytes + 256 > buffer_bytes) continue;
    for (std::size_t align : {std::size_t{0}, std::size_t{5}}) {
      ++cases;
      const std::size_t count = hash::cuda::segment_count(s.bytes, s.segment_bytes);
      std::vector<std::uint64_t> got(count);
      cuda_check(hash::cuda::enqueue_segment_digests(d_data + align, s.bytes, s.segment_bytes, d_out, d_scratch,
                                                     scratch_bytes, stream),
                 "enqueue_segment_digests");
      cuda_check(cudaMemcpyAsync(got.data(), d_out, 8 * count, cudaMemcpyDeviceToHost, stream), "read segments");
      cuda_check(cudaStreamSynchronize(stream), "synchronize");
      if (got != hash::reference::segment_digests(host.data() + align, s.bytes, s.segment_bytes, portable_xxh3)) ++bad;
    }
  }
  row("GPU segment digests == CPU reference", bad == 0,
      std::to_string(cases - bad) + "/" + std::to_string(cases) + " cases");

  // 3. Captured in a CUDA graph, result written to mapped host memory.
  {
    const std::size_t bytes = 3 * kLeafBytes * hash::kFanout + 17;
    std::uint64_t* mapped = nullptr;
    cuda_check(cudaHostAlloc(&mapped, 8, cudaHostAllocMapped), "cudaHostAlloc mapped");
    std::uint64_t* mapped_device = nullptr;
    cuda_check(cudaHostGetDevicePointer(&mapped_device, mapped, 0), "cudaHostGetDevicePointer");
    *mapped = 0;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    cuda_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "begin capture");
    const cudaError_t enqueued =
        hash::cuda::enqueue_fingerprint(d_data + 1, bytes, mapped_device, d_scratch, scratch_bytes, stream);
    cuda_check(cudaStreamEndCapture(stream, &graph), "end capture");
    cuda_check(enqueued, "enqueue_fingerprint while capturing");
    cuda_check(cudaGraphInstantiate(&exec, graph, 0), "instantiate graph");
    cuda_check(cudaGraphLaunch(exec, stream), "launch graph");
    cuda_check(cudaStreamSynchronize(stream), "synchronize");
    const std::uint64_t expected = hash::reference::fingerprint(host.data() + 1, bytes, portable_xxh3);
    row("captured in a CUDA graph, written to mapped host memory", *mapped == expected, hex(*mapped));
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaFreeHost(mapped);
  }

  // 4. Throughput: fingerprint vs device-to-device copy of the same bytes, same run.
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  cuda_check(cudaEventCreate(&start), "event");
  cuda_check(cudaEventCreate(&stop), "event");
  auto time_ms = [&](auto enqueue) {
    enqueue();  // warm-up
    cuda_check(cudaEventRecord(start, stream), "record");
    for (int i = 0; i < options.repetitions; ++i) enqueue();
    cuda_check(cudaEventRecord(stop, stream), "record");
    cuda_check(cudaEventSynchronize(stop), "synchronize");
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    return static_cast<double>(ms) / options.repetitions;
  };
  for (std::size_t bytes : {std::size_t{1} << 20, std::size_t{16} << 20, std::size_t{64} << 20, std::size_t{256} << 20,
                            std::size_t{1} << 30}) {
    if (bytes > options.max_bytes || bytes + 256 > buffer_bytes) continue;
    const double fp_ms = time_ms([&] {
      cuda_check(hash::cuda::enqueue_fingerprint(d_data, bytes, d_out, d_scratch, scratch_bytes, stream), "enqueue");
    });
    const double copy_ms = time_ms(
        [&] { cuda_check(cudaMemcpyAsync(d_copy, d_data, bytes, cudaMemcpyDeviceToDevice, stream), "d2d copy"); });
    char figure[160];
    std::snprintf(figure, sizeof figure, "fingerprint %7.1f GB/s, d2d copy %7.1f GB/s, fingerprint/copy %5.2fx",
                  bytes / fp_ms / 1e6, bytes / copy_ms / 1e6, copy_ms / fp_ms);
    info("throughput " + std::to_string(bytes >> 20) + " MiB (buffer bytes per second)", figure);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(d_scratch);
  cudaFree(d_out);
  cudaFree(d_copy);
  cudaFree(d_data);
  cudaStreamDestroy(stream);
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--dry-run") {
      options.dry_run = true;
    } else if (arg == "--max-bytes" && i + 1 < argc) {
      options.max_bytes = std::strtoull(argv[++i], nullptr, 0);
    } else if (arg == "--repetitions" && i + 1 < argc) {
      options.repetitions = std::max(1, std::atoi(argv[++i]));
    } else {
      std::printf("usage: %s [--dry-run] [--max-bytes N] [--repetitions N]\n", argv[0]);
      return arg == "--help" ? 0 : 2;
    }
  }
  std::printf("detnccl GPU fingerprint check, definition v%u, leaf %zu bytes%s\n", hash::kFingerprintVersion,
              kLeafBytes, options.dry_run ? " (dry run: no kernels)" : "");
  print_table_header();
  // One random buffer serves every case (offsets into it give the alignments).
  const std::size_t needed = std::max(options.max_bytes, (std::size_t{100} << 20) + 13) + 512;
  std::vector<std::uint8_t> host(options.dry_run ? (std::size_t{40} << 20) + 512 : needed);
  fill_pseudo_random(host);
  if (options.dry_run) {
    run_dry(host, options);
  } else {
    run_device(host, options);
  }
  return finish_table();
}
