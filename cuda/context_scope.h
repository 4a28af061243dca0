// The thread's current CUDA context, saved and restored through the driver API (libcuda.so.1, looked up, never
// loaded). Header-only and free of the CUDA headers: it declares the few driver entry points it calls, so that it
// can be tested against a stand-in driver (tests/fake_cuda_driver.cc) without the CUDA runtime.
#pragma once

#include <dlfcn.h>

namespace detnccl::cuda {

// The driver entry points a ContextScope calls; all null when the driver is not loaded or lacks one of them.
struct ContextDriver {
  using Context = void*;  // CUcontext
  int (*get_current)(Context*) = nullptr;
  int (*set_current)(Context) = nullptr;
  int (*context_device)(int*) = nullptr;  // cuCtxGetDevice: the current context's device
  int (*device_get)(int*, int) = nullptr;
  int (*primary_retain)(Context*, int) = nullptr;
  int (*primary_release)(int) = nullptr;

  bool complete() const noexcept {
    return get_current != nullptr && set_current != nullptr && context_device != nullptr && device_get != nullptr &&
           primary_retain != nullptr && primary_release != nullptr;
  }

  // The process's driver, looked up once (RTLD_NOLOAD: a process that does not use CUDA does not get it from us).
  static const ContextDriver& loaded() noexcept {
    static const ContextDriver driver = [] {
      ContextDriver found;
      void* library = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
      if (library == nullptr) return found;
      found.get_current = reinterpret_cast<int (*)(Context*)>(dlsym(library, "cuCtxGetCurrent"));
      found.set_current = reinterpret_cast<int (*)(Context)>(dlsym(library, "cuCtxSetCurrent"));
      found.context_device = reinterpret_cast<int (*)(int*)>(dlsym(library, "cuCtxGetDevice"));
      found.device_get = reinterpret_cast<int (*)(int*, int)>(dlsym(library, "cuDeviceGet"));
      found.primary_retain = reinterpret_cast<int (*)(Context*, int)>(dlsym(library, "cuDevicePrimaryCtxRetain"));
      found.primary_release = reinterpret_cast<int (*)(int)>(dlsym(library, "cuDevicePrimaryCtxRelease_v2"));
      return found.complete() ? found : ContextDriver{};
    }();
    return driver;
  }
};

// Makes a device's primary context current for the scope and restores exactly the context the thread had before,
// none included.
//
// RATIONALE: restoring "the previous device" with cudaSetDevice is wrong on a thread with no current context:
// cudaGetDevice says 0 there, and cudaSetDevice(0) creates GPU 0's primary context (about 0.5 GiB on GPU 0 for every
// rank of a node). The driver's current context, null allowed, is what the thread really had.
class ContextScope {
 public:
  ContextScope() = default;
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;
  ~ContextScope() {
    if (!changed_) return;
    driver_->set_current(previous_);
    driver_->primary_release(device_handle_);
  }

  // Makes `device` current (its primary context, retained for the scope) unless the current context is already on
  // it. Returns the driver's status (0: success); the thread's context is unchanged on failure.
  int enter(int device, const ContextDriver& driver = ContextDriver::loaded()) noexcept {
    if (!driver.complete()) return kNotInitialized;
    int status = driver.get_current(&previous_);
    if (status != 0) return status;
    if (previous_ != nullptr) {
      int current = -1;
      if (driver.context_device(&current) == 0 && current == device) return 0;
    }
    int handle = 0;
    if ((status = driver.device_get(&handle, device)) != 0) return status;
    ContextDriver::Context primary = nullptr;
    if ((status = driver.primary_retain(&primary, handle)) != 0) return status;
    if ((status = driver.set_current(primary)) != 0) {
      driver.primary_release(handle);
      return status;
    }
    driver_ = &driver;
    device_handle_ = handle;
    changed_ = true;
    return 0;
  }

  // CUDA_ERROR_NOT_INITIALIZED: what enter returns when the driver (or one of its entry points) is missing.
  static constexpr int kNotInitialized = 3;

 private:
  const ContextDriver* driver_ = nullptr;
  ContextDriver::Context previous_ = nullptr;
  int device_handle_ = 0;
  bool changed_ = false;
};

}  // namespace detnccl::cuda
