// Loading the shim's kernels into a device's context before their first launch, once per device. Header-only and
// free of the CUDA headers (like context_scope.h), so that it can be tested against the stand-in driver.
//
// RATIONALE: with lazy loading (the default since CUDA 12.2, CUDA_MODULE_LOADING=LAZY) a kernel is loaded into a
// context at its first launch there, and loading may wait for the device's queued work: NCCL kernels that wait for
// this rank's peers, who wait for this rank's next call — a deadlock. Modules and functions are loaded per context,
// so a kernel loaded on one device is still lazy on the next. The shim loads every kernel it launches on a device
// when a communicator of that device is created (interpose/device_code.h), and again, as a fallback, before its
// first launch there.
#pragma once

#include <dlfcn.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "cuda/context_scope.h"

namespace detnccl::cuda {

// The driver entry point that finishes loading a function (cuFuncLoad, CUDA 12.4 and later); null when the driver
// is not loaded or older.
struct KernelLoadDriver {
  int (*func_load)(void*) = nullptr;  // cuFuncLoad(CUfunction)

  // The process's driver, looked up once (never loaded by us).
  static const KernelLoadDriver& loaded() noexcept {
    static const KernelLoadDriver driver = [] {
      KernelLoadDriver found;
      void* library = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
      if (library != nullptr) found.func_load = reinterpret_cast<int (*)(void*)>(dlsym(library, "cuFuncLoad"));
      return found;
    }();
    return driver;
  }
};

// The function (CUfunction) of `kernel` (a __global__ function's host address) in the current context, which this
// call loads there if needed; returns the status (0: success). The CUDA code passes cudaGetFuncBySymbol.
using ResolveKernel = int (*)(void** function, const void* kernel);

// The devices on which one set of kernels is loaded. One instance per set of kernels (a translation unit's).
class KernelPreloads {
 public:
  // Loads every one of `kernels` into `device`'s primary context unless that was done before: makes the context
  // current for the call (the thread's own context is restored, none included), resolves each kernel there and
  // finishes loading it with cuFuncLoad. Returns 0, or the first failing status (nothing is marked done then, so a
  // later call tries again). Thread-safe; cheap once the device is done.
  int preload(int device, std::span<const void* const> kernels, ResolveKernel resolve,
              const ContextDriver& context = ContextDriver::loaded(),
              const KernelLoadDriver& load = KernelLoadDriver::loaded()) noexcept {
    if (device < 0) return kInvalidDevice;
    if (loaded_on(device)) return 0;
    const std::lock_guard<std::mutex> lock(mutex_);
    if (loaded_on(device)) return 0;
    ContextScope scope;
    if (const int status = scope.enter(device, context); status != 0) return status;
    for (const void* kernel : kernels) {
      void* function = nullptr;
      int status = resolve(&function, kernel);
      if (status == 0 && load.func_load != nullptr) status = load.func_load(function);
      if (status != 0) return status;
    }
    mark_loaded(device);
    return 0;
  }

  // Whether preload succeeded on `device`.
  bool loaded_on(int device) const noexcept {
    if (device < 0) return false;
    if (device < 64) return (small_.load(std::memory_order_acquire) >> device) & 1U;
    const std::lock_guard<std::mutex> lock(large_mutex_);
    return static_cast<std::size_t>(device - 64) < large_.size() && large_[static_cast<std::size_t>(device - 64)];
  }

  // CUDA_ERROR_INVALID_DEVICE: what preload returns for a negative device.
  static constexpr int kInvalidDevice = 101;

 private:
  void mark_loaded(int device) noexcept {
    if (device < 64) {
      small_.fetch_or(std::uint64_t{1} << device, std::memory_order_release);
      return;
    }
    try {
      const std::lock_guard<std::mutex> lock(large_mutex_);
      const auto index = static_cast<std::size_t>(device - 64);
      if (large_.size() <= index) large_.resize(index + 1, false);
      large_[index] = true;
    } catch (...) {
      // Out of host memory: the device is loaded again at its next use, which is harmless.
    }
  }

  std::mutex mutex_;                     // one preload at a time: two threads must not load the same device twice
  std::atomic<std::uint64_t> small_{0};  // devices 0..63: bit d set once device d is done
  mutable std::mutex large_mutex_;
  std::vector<bool> large_;  // devices 64 and above
};

}  // namespace detnccl::cuda
