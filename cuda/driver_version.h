// Which CUDA driver the shim's device code needs, and which one the process has. Header-only and free of the CUDA
// headers (the driver is looked up through libcuda.so.1, never loaded), so that the shim can check it in every build
// and tests can check it against the stand-in driver.
//
// RATIONALE: the shim links the CUDA runtime of the toolkit it was built with, statically (one runtime inside the
// preload library, whatever libcudart the job loads). A CUDA runtime runs on a driver of its own major release or
// newer (NVIDIA's "CUDA Compatibility", minor version compatibility: CUDA 13.x needs driver 580 or newer, CUDA 12.x
// 525 or newer); on an older driver every runtime call fails with cudaErrorInsufficientDriver. docs/deterministic.md
// and the README say what the shim does then.
#pragma once

#include <dlfcn.h>

#include <string>

#ifndef DETNCCL_CUDA_DRIVER_NEEDED
#define DETNCCL_CUDA_DRIVER_NEEDED 0
#endif

namespace detnccl::cuda {

// The driver version (cuDriverGetVersion's 1000 * major + 10 * minor) the shim's device code needs: the first of its
// CUDA runtime's major release (13000 for CUDA 13.x); 0 in a build without device code.
inline constexpr int kDriverVersionNeeded = DETNCCL_CUDA_DRIVER_NEEDED;

// The version of the CUDA driver loaded in this process (cuDriverGetVersion), or -1 when none is loaded (or it does
// not answer). Looked up at each call until a driver answers, then remembered.
inline int loaded_driver_version() noexcept {
  static int remembered = -1;  // written once with a valid answer; a race writes the same value
  int cached = __atomic_load_n(&remembered, __ATOMIC_ACQUIRE);
  if (cached >= 0) return cached;
  void* library = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (library == nullptr) return -1;
  const auto get_version = reinterpret_cast<int (*)(int*)>(dlsym(library, "cuDriverGetVersion"));
  dlclose(library);  // the job holds its own reference; ours was only for the lookup
  int version = -1;
  if (get_version == nullptr || get_version(&version) != 0 || version < 0) return -1;
  __atomic_store_n(&remembered, version, __ATOMIC_RELEASE);
  return version;
}

// A driver version as people write it: 12040 -> "12.4".
inline std::string driver_version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

// Whether the shim's device code can run on a driver of `version` (-1: none loaded, which says nothing yet).
inline bool driver_too_old(int version, int needed = kDriverVersionNeeded) noexcept {
  return needed > 0 && version >= 0 && version < needed;
}

// The first driver branch of a CUDA major release (NVIDIA's minor version compatibility table): 580 for CUDA 13,
// 525 for CUDA 12; 0 when not known here.
inline constexpr int first_driver_branch(int cuda_major) noexcept {
  return cuda_major == 13 ? 580 : cuda_major == 12 ? 525 : cuda_major == 11 ? 450 : 0;
}

// One sentence naming the driver found and the one needed, for the warning and the refusal.
inline std::string driver_too_old_text(int version, int needed = kDriverVersionNeeded) {
  const int major = needed / 1000;
  std::string text = "the CUDA driver of this process is version " + driver_version_text(version) +
                     ", but detnccl's device code needs " + driver_version_text(needed) +
                     " or newer (it links the CUDA " + std::to_string(major) + " runtime";
  if (const int branch = first_driver_branch(major); branch > 0) {
    text += ": an NVIDIA driver of branch " + std::to_string(branch) + " or newer";
  }
  return text + ")";
}

}  // namespace detnccl::cuda
