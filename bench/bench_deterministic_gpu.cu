// GPU check for deterministic mode: the CUDA backend's load / combine / finish kernels give the same bits as the CPU
// backend on the same inputs (every floating datatype, every operator, both accumulation modes, inputs with NaN
// payloads, infinities, signed zeros, subnormals and overflowing values; arrays aligned for their type, and arrays
// one byte off, which NCCL accepts and the kernels must read byte by byte), and the combine kernel's throughput
// against a device-to-device memcpy measured in the same run.
//
//   bench_deterministic_gpu            run on the GPU
//   bench_deterministic_gpu --dry-run  CPU side only (no GPU needed): builds every case and runs the CPU backend
//   bench_deterministic_gpu --lazy-load  issue #21 item 2, run under CUDA_MODULE_LOADING=LAZY in a process of its
//                                        own: the reduction kernels are loaded at "communicator creation"
//                                        (preload_device_kernels), a kernel then spins on a host flag, and the
//                                        first reduction kernel launch must return while it spins
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/backend.h"

namespace {

namespace dc = detnccl::collectives;

constexpr int kRadix = 5;                       // inputs per combine, as in a radix-5 step
constexpr std::size_t kCount = 1 << 16;         // elements per input in the bitwise check
constexpr std::size_t kSpeedBytes = 256 << 20;  // bytes per input in the throughput check

std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Raw random bits for every element: every encoding appears (NaN payloads, infinities, -0, subnormals, large
// values); for fp32/fp64, a quarter of the elements are small ordinary values so that sums do not all overflow.
std::vector<unsigned char> random_bytes(ncclDataType_t type, std::size_t count, std::uint64_t seed) {
  const std::size_t size = detnccl::arith::dtype_size(type);
  std::vector<unsigned char> bytes(count * size);
  for (std::size_t i = 0; i < count; ++i) {
    std::uint64_t bits = mix(seed * 1000003u + i);
    if (type == ncclFloat32 && (bits & 3) == 0) {
      const float x = static_cast<float>(static_cast<std::int64_t>(bits >> 40) - (1 << 23)) / 4096.0f;
      std::memcpy(&bits, &x, sizeof x);
    } else if (type == ncclFloat64 && (bits & 3) == 0) {
      const double x = static_cast<double>(static_cast<std::int64_t>(bits >> 20) - (std::int64_t{1} << 43)) / 65536.0;
      std::memcpy(&bits, &x, sizeof x);
    }
    std::memcpy(&bytes[i * size], &bits, size);
  }
  return bytes;
}

bool cuda_ok(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(status));
  return false;
}

// Runs load (each input) -> combine (radix 5, own input at index 2) -> finish on one backend, over buffers that the
// caller placed in host or device memory: inputs[kRadix] of T, accumulators[kRadix] of Acc, out of T.
bool run_steps(dc::Backend& backend, const std::vector<void*>& inputs, const std::vector<void*>& acc, void* out,
               std::size_t count) {
  for (int q = 0; q < kRadix; ++q) {
    if (backend.load(acc[static_cast<std::size_t>(q)], inputs[static_cast<std::size_t>(q)], count) != ncclSuccess) {
      return false;
    }
  }
  // acc[0], acc[1], acc[3], acc[4] are laid out consecutively (the slots); acc[2] is "own".
  if (backend.fold(acc[2], acc[0], count, kRadix, 2, acc[2], count) != ncclSuccess) return false;
  return backend.finish(out, acc[2], count) == ncclSuccess;
}

struct Case {
  ncclDataType_t type;
  dc::ReductionKind kind;
  bool float_accumulator;
  std::size_t shift;  // bytes every array starts past an aligned address: 0, or 1 (misaligned for types wider than 1)
};

constexpr std::size_t kSlack = 8;  // room for the shift in every allocation

const char* kind_name(dc::ReductionKind kind) {
  static const char* const kNames[] = {"sum", "prod", "min", "max", "avg", "premulsum"};
  return kNames[static_cast<int>(kind)];
}

// One case: 0 = bitwise equal, 1 = differs, 2 = could not run.
int check_case(const Case& c, bool dry_run) {
  dc::ElementSpec spec;
  spec.datatype = c.type;
  spec.kind = c.kind;
  spec.float_accumulator = c.float_accumulator;
  spec.nranks = 6;
  const std::size_t size = spec.type_size(), acc_size = spec.acc_size();
  std::vector<unsigned char> scalar = random_bytes(c.type, 1, 77);
  std::memcpy(&spec.scalar_bits, scalar.data(), size);

  // Host side. The slots must be consecutive: one allocation for inputs 0,1,3,4's accumulators. Every array starts
  // c.shift bytes into its allocation.
  std::vector<std::vector<unsigned char>> host_inputs;
  for (int q = 0; q < kRadix; ++q) {
    std::vector<unsigned char> input = random_bytes(c.type, kCount, 10 + static_cast<unsigned>(q));
    input.insert(input.begin(), c.shift, 0);
    host_inputs.push_back(std::move(input));
  }
  std::vector<unsigned char> host_slots((kRadix - 1) * kCount * acc_size + kSlack),
      host_own(kCount * acc_size + kSlack), host_out(kCount * size + kSlack);
  const auto layout = [&](unsigned char* slots, unsigned char* own) {
    std::vector<void*> acc(kRadix);
    for (int q = 0, slot = 0; q < kRadix; ++q)
      acc[static_cast<std::size_t>(q)] = q == 2 ? own : slots + (slot++) * kCount * acc_size;
    return acc;
  };
  std::vector<void*> host_input_pointers;
  for (auto& input : host_inputs) host_input_pointers.push_back(input.data() + c.shift);
  auto host_backend = dc::make_host_backend(spec);
  if (!run_steps(*host_backend, host_input_pointers, layout(host_slots.data() + c.shift, host_own.data() + c.shift),
                 host_out.data() + c.shift, kCount)) {
    return 2;
  }
  if (dry_run) return 0;

  // Device side, same inputs; the PreMulSum scalar is read from device memory by the kernels.
  std::vector<void*> device_inputs(kRadix, nullptr);
  void *slots = nullptr, *own = nullptr, *out = nullptr, *device_scalar = nullptr;
  bool ok = true;
  for (int q = 0; q < kRadix && ok; ++q) {
    ok = cuda_ok(cudaMalloc(&device_inputs[static_cast<std::size_t>(q)], kCount * size + kSlack), "cudaMalloc") &&
         cuda_ok(cudaMemcpy(device_inputs[static_cast<std::size_t>(q)], host_inputs[static_cast<std::size_t>(q)].data(),
                            kCount * size + c.shift, cudaMemcpyHostToDevice),
                 "cudaMemcpy");
  }
  const auto shifted = [&](void* base) -> unsigned char* { return static_cast<unsigned char*>(base) + c.shift; };
  ok = ok && cuda_ok(cudaMalloc(&slots, host_slots.size()), "cudaMalloc") &&
       cuda_ok(cudaMalloc(&own, host_own.size()), "cudaMalloc") &&
       cuda_ok(cudaMalloc(&out, host_out.size()), "cudaMalloc") &&
       cuda_ok(cudaMalloc(&device_scalar, 8), "cudaMalloc") &&
       cuda_ok(cudaMemcpy(device_scalar, scalar.data(), size, cudaMemcpyHostToDevice), "cudaMemcpy");
  int verdict = 2;
  if (ok) {
    dc::ElementSpec device_spec = spec;
    if (c.kind == dc::ReductionKind::kPreMulSum) {
      device_spec.scalar_bits = 0;
      device_spec.device_scalar = device_scalar;
    }
    std::string error;
    auto device_backend = dc::make_device_backend(device_spec, nullptr, -1, &error);
    std::vector<unsigned char> device_out(kCount * size);
    std::vector<void*> shifted_inputs;
    for (void* input : device_inputs) shifted_inputs.push_back(shifted(input));
    if (device_backend != nullptr &&
        run_steps(*device_backend, shifted_inputs, layout(shifted(slots), shifted(own)), shifted(out), kCount) &&
        cuda_ok(cudaDeviceSynchronize(), "kernels") &&
        cuda_ok(cudaMemcpy(device_out.data(), shifted(out), device_out.size(), cudaMemcpyDeviceToHost), "cudaMemcpy")) {
      verdict = 0;
      const unsigned char* want_out = host_out.data() + c.shift;
      for (std::size_t i = 0; i < kCount; ++i) {
        if (std::memcmp(&device_out[i * size], &want_out[i * size], size) != 0) {
          std::uint64_t got = 0, want = 0;
          std::memcpy(&got, &device_out[i * size], size);
          std::memcpy(&want, &want_out[i * size], size);
          std::printf("  type %d %s acc %s shift %zu: element %zu GPU 0x%llx, CPU 0x%llx\n", static_cast<int>(c.type),
                      kind_name(c.kind), c.float_accumulator ? "fp32" : "native", c.shift, i,
                      static_cast<unsigned long long>(got), static_cast<unsigned long long>(want));
          verdict = 1;
          break;
        }
      }
    } else if (!error.empty()) {
      std::fprintf(stderr, "%s\n", error.c_str());
    }
  }
  for (void* p : device_inputs) cudaFree(p);
  cudaFree(slots);
  cudaFree(own);
  cudaFree(out);
  cudaFree(device_scalar);
  return verdict;
}

// Throughput of one radix-2 combine over kSpeedBytes inputs (reads 2, writes 1) against cudaMemcpy D2D (reads 1,
// writes 1), in bytes moved per second.
// shift: bytes the arrays start past an aligned address (1: the byte-by-byte kernels).
void measure_throughput(ncclDataType_t type, bool float_accumulator, std::size_t shift) {
  dc::ElementSpec spec;
  spec.datatype = type;
  spec.float_accumulator = float_accumulator;
  const std::size_t count = kSpeedBytes / spec.acc_size();
  void *inputs = nullptr, *out = nullptr;
  if (!cuda_ok(cudaMalloc(&inputs, 2 * kSpeedBytes + kSlack), "cudaMalloc") ||
      !cuda_ok(cudaMalloc(&out, kSpeedBytes + kSlack), "cudaMalloc")) {
    return;
  }
  cudaMemset(inputs, 0, 2 * kSpeedBytes + kSlack);
  void* first = static_cast<unsigned char*>(inputs) + shift;
  void* dst = static_cast<unsigned char*>(out) + shift;
  std::string error;
  auto backend = dc::make_device_backend(spec, nullptr, -1, &error);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  constexpr int kIterations = 20;
  float fold_ms = 0, copy_ms = 0;
  backend->fold(dst, first, count, 2, -1, nullptr, count);  // warm-up
  cudaEventRecord(start);
  for (int i = 0; i < kIterations; ++i) backend->fold(dst, first, count, 2, -1, nullptr, count);
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  cudaEventElapsedTime(&fold_ms, start, stop);
  cudaEventRecord(start);
  for (int i = 0; i < kIterations; ++i) cudaMemcpyAsync(dst, first, kSpeedBytes, cudaMemcpyDeviceToDevice);
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  cudaEventElapsedTime(&copy_ms, start, stop);
  const double fold_gbs = 3.0 * kSpeedBytes * kIterations / (fold_ms * 1e-3) / 1e9;
  const double copy_gbs = 2.0 * kSpeedBytes * kIterations / (copy_ms * 1e-3) / 1e9;
  std::printf("%-6d %-7s %-5zu %12.1f %12.1f %8.1f%%\n", static_cast<int>(type), float_accumulator ? "fp32" : "native",
              shift, fold_gbs, copy_gbs, 100.0 * fold_gbs / copy_gbs);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(inputs);
  cudaFree(out);
}

// Spins until the host sets *flag (mapped pinned memory): a kernel in flight that waits for the host, as NCCL's
// kernels wait for peers.
__global__ void spin_until_set(const volatile int* flag) {
  while (*flag == 0) {
    __nanosleep(1000);
  }
}

// --lazy-load (see the header). Prints one line "lazy-load: ..." and returns 0 when the launch returned in time.
int run_lazy_load() {
  constexpr std::size_t kElements = 1 << 20;
  constexpr auto kPatience = std::chrono::seconds(10);
  if (!cuda_ok(cudaSetDevice(0), "cudaSetDevice") || !cuda_ok(cudaFree(nullptr), "context of GPU 0")) return 1;
  std::string error;
  const bool preloaded = dc::preload_device_kernels(0, &error);
  int* flag = nullptr;
  int* device_flag = nullptr;
  void *src = nullptr, *dst = nullptr;
  cudaStream_t spinning = nullptr, reducing = nullptr;
  if (!cuda_ok(cudaHostAlloc(reinterpret_cast<void**>(&flag), sizeof(int), cudaHostAllocMapped), "cudaHostAlloc") ||
      !cuda_ok(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_flag), flag, 0), "flag pointer") ||
      !cuda_ok(cudaMalloc(&src, kElements * sizeof(float)), "cudaMalloc") ||
      !cuda_ok(cudaMalloc(&dst, kElements * sizeof(float)), "cudaMalloc") ||
      !cuda_ok(cudaStreamCreateWithFlags(&spinning, cudaStreamNonBlocking), "cudaStreamCreate") ||
      !cuda_ok(cudaStreamCreateWithFlags(&reducing, cudaStreamNonBlocking), "cudaStreamCreate")) {
    return 1;
  }
  *flag = 0;
  spin_until_set<<<1, 1, 0, spinning>>>(device_flag);
  if (!cuda_ok(cudaGetLastError(), "launch of the spinning kernel")) return 1;
  std::atomic<bool> returned{false};
  ncclResult_t launched = ncclInternalError;
  double seconds = 0;
  const auto started = std::chrono::steady_clock::now();
  std::thread caller([&] {
    dc::ElementSpec spec;
    spec.datatype = ncclFloat32;
    std::string why;
    auto backend = dc::make_device_backend(spec, reducing, 0, &why);
    if (backend != nullptr) launched = backend->load(dst, src, kElements);
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    returned = true;
  });
  while (!returned && std::chrono::steady_clock::now() - started < kPatience) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const bool in_time = returned.load();
  __atomic_store_n(flag, 1, __ATOMIC_RELEASE);  // the spinning kernel ends (and a blocked launch with it)
  caller.join();
  const bool synchronized = cuda_ok(cudaDeviceSynchronize(), "synchronize");
  std::printf("lazy-load: kernels preloaded %s; first reduction launch %s after %.3f s (%s)\n",
              preloaded ? "yes" : ("NO: " + error).c_str(), in_time ? "returned while a kernel spun" : "BLOCKED",
              seconds, launched == ncclSuccess ? "launched" : "launch failed");
  cudaStreamDestroy(spinning);
  cudaStreamDestroy(reducing);
  cudaFree(src);
  cudaFree(dst);
  cudaFreeHost(flag);
  return preloaded && in_time && launched == ncclSuccess && synchronized ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--lazy-load") == 0) return run_lazy_load();
  const bool dry_run = argc > 1 && std::strcmp(argv[1], "--dry-run") == 0;
  std::printf("deterministic reduce kernels: CUDA backend vs CPU backend, bitwise%s\n",
              dry_run ? " (dry run: CPU side only)" : "");
  int devices = 0;
  if (!dry_run && cudaGetDeviceCount(&devices) != cudaSuccess) {
    std::printf("no usable GPU (%s); --dry-run checks the CPU side only\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  int failures = 0, cases = 0;
  for (ncclDataType_t type :
       {ncclFloat32, ncclFloat64, ncclFloat16, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2, ncclInt32, ncclUint8}) {
    for (dc::ReductionKind kind : {dc::ReductionKind::kSum, dc::ReductionKind::kProd, dc::ReductionKind::kMin,
                                   dc::ReductionKind::kMax, dc::ReductionKind::kAvg, dc::ReductionKind::kPreMulSum}) {
      for (bool float_accumulator : {false, true}) {
        if (!dc::uses_float_accumulator(type, kind,
                                        float_accumulator ? dc::Accumulate::kFloat32 : dc::Accumulate::kNative) &&
            float_accumulator) {
          continue;
        }
        for (std::size_t shift : {std::size_t{0}, std::size_t{1}}) {
          ++cases;
          const int verdict = check_case({type, kind, float_accumulator, shift}, dry_run);
          if (verdict != 0) ++failures;
          if (verdict == 2) {
            std::printf("  type %d %s shift %zu: could not run\n", static_cast<int>(type), kind_name(kind), shift);
          }
        }
      }
    }
  }
  std::printf("%d cases, %d differ or failed\n", cases, failures);
  if (!dry_run && failures == 0) {
    std::printf("\ncombine throughput (radix 2, 256 MiB per input), bytes moved per second vs memcpy D2D\n");
    std::printf("%-6s %-7s %-5s %12s %12s %9s\n", "type", "acc", "shift", "fold GB/s", "memcpy GB/s", "ratio");
    for (ncclDataType_t type : {ncclFloat32, ncclBfloat16, ncclFloat8e4m3}) measure_throughput(type, false, 0);
    measure_throughput(ncclBfloat16, true, 0);
    measure_throughput(ncclFloat32, false, 1);  // misaligned arrays: the byte-by-byte kernels
  }
  return failures == 0 ? 0 : 1;
}
