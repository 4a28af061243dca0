// Scoped CUDA runtime state for detnccl's own CUDA calls (the shim's device fingerprints, deterministic mode's
// kernels): each guard restores the job's thread state when it ends. Header-only; the including target links the
// CUDA runtime.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/context_scope.h"

namespace detnccl::cuda {

// RATIONALE: while any thread captures a graph in cudaStreamCaptureModeGlobal, a thread in the default mode may not
// make "potentially unsafe" calls (cudaMalloc, cudaFree, cudaEventQuery, ...): the call fails and invalidates that
// capture. A job's capture must never break because of us, so our calls that are not part of a capture are made in
// relaxed mode, and the thread's own mode is restored afterwards.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() noexcept : swapped_(cudaThreadExchangeStreamCaptureMode(&mode_) == cudaSuccess) {}
  ~RelaxedCaptureMode() {
    if (swapped_) cudaThreadExchangeStreamCaptureMode(&mode_);
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
  bool swapped_;
};

// True for the legacy and per-thread default streams (0, cudaStreamLegacy, cudaStreamPerThread): a handle that means
// "the default stream of the current device", whichever device that is.
inline bool is_default_stream(cudaStream_t stream) noexcept {
  return stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread;
}

// The device work on `stream` runs on as NCCL runs it: NCCL makes the communicator's device (`default_device`, -1 if
// unknown) current in every call, so a default stream there is that device's, not the thread's current one (#21:
// one thread driving several GPUs).
inline cudaError_t stream_device(cudaStream_t stream, int default_device, int* device) noexcept {
  if (default_device >= 0 && is_default_stream(stream)) {
    *device = default_device;
    return cudaSuccess;
  }
  return cudaStreamGetDevice(stream, device);
}

// Makes a device current for the scope and restores the thread's previous context afterwards, none included
// (context_scope.h says why the previous device is not enough). Without the driver's context entry points it falls
// back to the runtime's current device.
class DeviceScope {
 public:
  DeviceScope() = default;
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  ~DeviceScope() {
    if (changed_) cudaSetDevice(previous_);
  }
  cudaError_t enter(int device) noexcept {
    if (ContextDriver::loaded().complete()) {
      const int status = context_.enter(device);
      // The driver's status codes and the runtime's agree for the errors these calls return.
      return static_cast<cudaError_t>(status);
    }
    const cudaError_t status = cudaGetDevice(&previous_);
    if (status != cudaSuccess || previous_ == device) return status;
    const cudaError_t set = cudaSetDevice(device);
    changed_ = set == cudaSuccess;
    return set;
  }
  // The device `stream` belongs to. A default stream (see is_default_stream) names no device of its own: work there
  // goes to the current device's, so `default_device` (the communicator's, >= 0) is made current for it; with -1,
  // the thread's current device stays.
  cudaError_t enter_device_of(cudaStream_t stream, int default_device = -1) noexcept {
    int device = -1;
    const cudaError_t status = stream_device(stream, default_device, &device);
    return status == cudaSuccess ? enter(device) : status;
  }

 private:
  ContextScope context_;  // declared before the fallback's state; it restores on its own
  int previous_ = 0;
  bool changed_ = false;
};

}  // namespace detnccl::cuda
