// The CUDA backend: the same ElementReducer as the CPU backend, in grid-stride kernels on the caller's stream.
// Nothing here synchronises with the host, so a deterministic call can be captured into a CUDA graph once its
// scratch exists. Compiled with --fmad=false (see element_reducer.h).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "collectives/backend.h"
#include "cuda/kernel_preload.h"
#include "cuda/scopes.h"

namespace detnccl::collectives {
namespace {

constexpr int kThreads = 256;
constexpr std::size_t kMaxBlocks = 4096;

unsigned grid_for(std::size_t count) {
  const std::size_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < kMaxBlocks ? (blocks == 0 ? 1 : blocks) : kMaxBlocks);
}

// RATIONALE: NCCL accepts buffers at any address, but a typed access to an element not aligned for its type is a
// misaligned-address fault, which ends the whole CUDA context (the job). The kernels come in two variants: typed
// accesses when every array of the launch is aligned (always, for the scratch), byte accesses otherwise. Both give
// the same bits; the byte variant is only slower.
template <bool kAligned, typename X>
__device__ inline X read_element(const X* base, std::size_t i) {
  if constexpr (kAligned) {
    return base[i];
  } else {
    unsigned char bytes[sizeof(X)];
    const unsigned char* from = reinterpret_cast<const unsigned char*>(base) + i * sizeof(X);
    for (std::size_t k = 0; k < sizeof(X); ++k) bytes[k] = from[k];
    X value;
    memcpy(&value, bytes, sizeof(X));
    return value;
  }
}
template <bool kAligned, typename X>
__device__ inline void write_element(X* base, std::size_t i, X value) {
  if constexpr (kAligned) {
    base[i] = value;
  } else {
    unsigned char bytes[sizeof(X)];
    memcpy(bytes, &value, sizeof(X));
    unsigned char* to = reinterpret_cast<unsigned char*>(base) + i * sizeof(X);
    for (std::size_t k = 0; k < sizeof(X); ++k) to[k] = bytes[k];
  }
}

template <typename X>
bool aligned_for(const void* pointer) {
  return reinterpret_cast<std::uintptr_t>(pointer) % alignof(X) == 0;
}

// A kPreMulSum scalar that lives in device memory is read by every kernel when it runs (stream order), as NCCL
// reads ncclScalarDevice scalars.
template <bool kAligned, typename T, typename Acc>
__device__ inline ElementReducer<T, Acc> with_scalar(ElementReducer<T, Acc> reducer, const T* device_scalar) {
  if (device_scalar != nullptr) reducer.scale = arith::Arith<T>::to_compute(read_element<kAligned>(device_scalar, 0));
  return reducer;
}

template <typename T, typename Acc, bool kAligned>
__global__ void load_kernel(Acc* dst, const T* src, std::size_t count, ElementReducer<T, Acc> reducer,
                            const T* device_scalar) {
  const ElementReducer<T, Acc> r = with_scalar<kAligned>(reducer, device_scalar);
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    write_element<kAligned>(dst, i, r.load(read_element<kAligned>(src, i)));
  }
}

template <typename T, typename Acc, bool kAligned>
__global__ void fold_kernel(Acc* dst, const Acc* first, std::size_t stride, int radix, int own_index, const Acc* own,
                            std::size_t count, ElementReducer<T, Acc> reducer) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    Acc partial = read_element<kAligned>(own_index == 0 ? own : first, i);
    for (int q = 1; q < radix; ++q) {
      const Acc* input =
          q == own_index ? own : first + static_cast<std::size_t>(own_index >= 0 && q > own_index ? q - 1 : q) * stride;
      partial = reducer.combine(partial, read_element<kAligned>(input, i));
    }
    write_element<kAligned>(dst, i, partial);
  }
}

template <typename T, typename Acc, bool kAligned>
__global__ void finish_kernel(T* dst, const Acc* src, std::size_t count, ElementReducer<T, Acc> reducer) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    write_element<kAligned>(dst, i, reducer.finish(read_element<kAligned>(src, i)));
  }
}

using detnccl::cuda::DeviceScope;
using detnccl::cuda::RelaxedCaptureMode;

template <typename T, typename Acc>
class DeviceBackend final : public Backend {
 public:
  // Makes the stream's device current for the backend's life (the call's scratch allocation and launches): a kernel
  // launch fails on a stream of another device, and NCCL itself switches to the communicator's device in every call,
  // so the job's current device may be another (one thread driving several GPUs).
  DeviceBackend(const ElementSpec& spec, cudaStream_t stream, int default_stream_device)
      : reducer_(make_reducer<T, Acc>(spec, scalar_from_bits<T>(spec.scalar_bits))),
        device_scalar_(static_cast<const T*>(spec.device_scalar)),
        stream_(stream) {
    device_.enter_device_of(stream, default_stream_device);
    // Normally done when the communicator was created (preload_device_kernels); a device seen first here is loaded
    // now rather than at the first launch.
    int device = -1;
    if (detnccl::cuda::stream_device(stream, default_stream_device, &device) == cudaSuccess) {
      preload_device_kernels(device, nullptr);
    }
    (void)cudaGetLastError();  // a failed query above must not be taken for a launch failure
  }
  DeviceBackend(const DeviceBackend&) = delete;
  DeviceBackend& operator=(const DeviceBackend&) = delete;

  ncclResult_t load(void* dst, const void* src, std::size_t count) override {
    if (count == 0) return ncclSuccess;
    clear_stale_error();
    const auto launch = [&](auto kernel) {
      kernel<<<grid_for(count), kThreads, 0, stream_>>>(static_cast<Acc*>(dst), static_cast<const T*>(src), count,
                                                        reducer_, device_scalar_);
    };
    if (aligned_for<Acc>(dst) && aligned_for<T>(src) && aligned_for<T>(device_scalar_)) {
      launch(load_kernel<T, Acc, true>);
    } else {
      launch(load_kernel<T, Acc, false>);
    }
    return launched("load");
  }

  ncclResult_t fold(void* dst, const void* first, std::size_t stride, int radix, int own_index, const void* own,
                    std::size_t count) override {
    if (count == 0) return ncclSuccess;
    clear_stale_error();
    const auto launch = [&](auto kernel) {
      kernel<<<grid_for(count), kThreads, 0, stream_>>>(static_cast<Acc*>(dst), static_cast<const Acc*>(first), stride,
                                                        radix, own_index, static_cast<const Acc*>(own), count,
                                                        reducer_);
    };
    // The strided inputs are `stride` whole elements apart: aligned when `first` is.
    if (aligned_for<Acc>(dst) && aligned_for<Acc>(first) && aligned_for<Acc>(own)) {
      launch(fold_kernel<T, Acc, true>);
    } else {
      launch(fold_kernel<T, Acc, false>);
    }
    return launched("fold");
  }

  ncclResult_t finish(void* dst, const void* src, std::size_t count) override {
    if (count == 0) return ncclSuccess;
    if (sizeof(T) < sizeof(Acc) && dst == src) {
      // RATIONALE: threads of different blocks would overwrite fp32 partials others have not read yet. The
      // algorithms always finish fp32 partials into another buffer, so this only guards against a new caller.
      error_ = "in-place narrowing finish is not supported on the device";
      return ncclInternalError;
    }
    clear_stale_error();
    const auto launch = [&](auto kernel) {
      kernel<<<grid_for(count), kThreads, 0, stream_>>>(static_cast<T*>(dst), static_cast<const Acc*>(src), count,
                                                        reducer_);
    };
    if (aligned_for<T>(dst) && aligned_for<Acc>(src)) {
      launch(finish_kernel<T, Acc, true>);
    } else {
      launch(finish_kernel<T, Acc, false>);
    }
    return launched("finish");
  }

  std::string last_error() const override { return error_; }

 private:
  // RATIONALE: cudaGetLastError after a launch reports the last error of any runtime call on this thread, and the
  // tracer's device fingerprints share this runtime: a failure of theirs (say, out of memory for their scratch,
  // which they survive) must not be taken for this launch's. A sticky error still shows at the next call.
  static void clear_stale_error() noexcept { (void)cudaGetLastError(); }

  ncclResult_t launched(const char* kernel) {
    const cudaError_t status = cudaGetLastError();
    if (status == cudaSuccess) return ncclSuccess;
    error_ = std::string("launching the ") + kernel + " kernel failed: " + cudaGetErrorString(status);
    return ncclUnhandledCudaError;
  }

  ElementReducer<T, Acc> reducer_;
  const T* device_scalar_;
  cudaStream_t stream_;
  std::string error_;
  DeviceScope device_;
};

// Every kernel of one type pair.
template <typename T, typename Acc>
void append_kernels(std::vector<const void*>& kernels) {
  for (const void* kernel : {reinterpret_cast<const void*>(load_kernel<T, Acc, true>),
                             reinterpret_cast<const void*>(load_kernel<T, Acc, false>),
                             reinterpret_cast<const void*>(fold_kernel<T, Acc, true>),
                             reinterpret_cast<const void*>(fold_kernel<T, Acc, false>),
                             reinterpret_cast<const void*>(finish_kernel<T, Acc, true>),
                             reinterpret_cast<const void*>(finish_kernel<T, Acc, false>)}) {
    kernels.push_back(kernel);
  }
}

// Every kernel a DeviceBackend may launch: each datatype, and the narrow floats also with float accumulators.
const std::vector<const void*>& all_kernels() {
  static const auto* const kernels = [] {
    auto* list = new std::vector<const void*>;  // never destroyed: used until the process ends
    for (int type = 0; type < static_cast<int>(ncclNumTypes); ++type) {
      arith::visit_dtype(static_cast<ncclDataType_t>(type), [&](auto tag) {
        using T = decltype(tag);
        append_kernels<T, T>(*list);
        if constexpr (kIsNarrowFloat<T>) append_kernels<T, float>(*list);
      });
    }
    return list;
  }();
  return *kernels;
}

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

bool preload_device_kernels(int device, std::string* error) {
  const RelaxedCaptureMode relaxed;
  const int status = preloads().preload(device, all_kernels(), resolve_kernel);
  (void)cudaGetLastError();  // a failure here must not be taken for a later launch's
  if (status == 0) return true;
  if (error != nullptr) {
    *error = "loading the reduction kernels on device " + std::to_string(device) +
             " failed: " + cudaGetErrorString(static_cast<cudaError_t>(status));
  }
  return false;
}

std::unique_ptr<Backend> make_device_backend(const ElementSpec& spec, cudaStream_t stream, int default_stream_device,
                                             std::string* error) {
  std::unique_ptr<Backend> backend;
  arith::visit_dtype(spec.datatype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (kIsNarrowFloat<T>) {
      if (spec.float_accumulator) {
        backend = std::make_unique<DeviceBackend<T, float>>(spec, stream, default_stream_device);
        return;
      }
    }
    backend = std::make_unique<DeviceBackend<T, T>>(spec, stream, default_stream_device);
  });
  if (backend == nullptr && error != nullptr) *error = "invalid datatype";
  return backend;
}

bool device_allocate(std::size_t bytes, void** pointer, std::string* error) {
  const RelaxedCaptureMode relaxed;
  const cudaError_t status = cudaMalloc(pointer, bytes);
  if (status == cudaSuccess) return true;
  if (error != nullptr)
    *error = "cudaMalloc of " + std::to_string(bytes) + " bytes of scratch failed: " + cudaGetErrorString(status);
  return false;
}

void device_free(void* pointer) {
  const RelaxedCaptureMode relaxed;
  cudaFree(pointer);
}

bool device_event_create(void** event, std::string* error) {
  const RelaxedCaptureMode relaxed;
  cudaEvent_t created = nullptr;
  const cudaError_t status = cudaEventCreateWithFlags(&created, cudaEventDisableTiming);
  *event = created;
  if (status == cudaSuccess) return true;
  if (error != nullptr) *error = std::string("cudaEventCreate failed: ") + cudaGetErrorString(status);
  return false;
}

void device_event_destroy(void* event) {
  const RelaxedCaptureMode relaxed;
  cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

bool device_event_record(void* event, cudaStream_t stream, std::string* error) {
  const cudaError_t status = cudaEventRecord(static_cast<cudaEvent_t>(event), stream);
  if (status == cudaSuccess) return true;
  if (error != nullptr) *error = std::string("cudaEventRecord failed: ") + cudaGetErrorString(status);
  return false;
}

bool device_stream_wait(cudaStream_t stream, void* event, std::string* error) {
  const cudaError_t status = cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(event), 0);
  if (status == cudaSuccess) return true;
  if (error != nullptr) *error = std::string("cudaStreamWaitEvent failed: ") + cudaGetErrorString(status);
  return false;
}

bool stream_is_capturing(cudaStream_t stream, bool* capturing, std::string* error) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t result = cudaStreamIsCapturing(stream, &status);
  if (result != cudaSuccess) {
    if (error != nullptr) *error = std::string("cudaStreamIsCapturing failed: ") + cudaGetErrorString(result);
    return false;
  }
  *capturing = status != cudaStreamCaptureStatusNone;
  return true;
}

}  // namespace detnccl::collectives
