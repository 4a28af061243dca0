// detnccl shim: buffer location through the CUDA driver API, looked up at run time (see buffer_location.h).
#include "interpose/buffer_location.h"

#include <dlfcn.h>
#include <pthread.h>

#include <atomic>
#include <mutex>

namespace detnccl::interpose {
namespace {

// The few driver API values used here (cuda.h, stable since CUDA 4).
constexpr int kCudaSuccess = 0;
constexpr int kCudaErrorInvalidValue = 1;
constexpr int kCudaErrorNotInitialized = 3;
constexpr int kPointerAttributeMemoryType = 2;  // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
using PointerGetAttribute = int (*)(void* value, int attribute, unsigned long long pointer);

PointerGetAttribute g_get_attribute = nullptr;
std::once_flag g_looked_up;

// Whether this process is a fork()ed child. RATIONALE: in a child of a process that used CUDA the driver answers
// "not initialised" while the parent's device pointers are still around (unusable, and unmapped for the CPU): there
// that answer says nothing about where a buffer lives.
std::atomic<bool> g_forked{false};
[[maybe_unused]] const int g_fork_noted = pthread_atfork(nullptr, nullptr, [] { g_forked.store(true); });

void look_up_driver() noexcept {
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (driver == nullptr) return;
  g_get_attribute = reinterpret_cast<PointerGetAttribute>(dlsym(driver, "cuPointerGetAttribute"));
  // RATIONALE: keep the NOLOAD reference: the driver never unloads while CUDA is in use.
}

}  // namespace

BufferLocation locate_buffer(const void* data, int* driver_status) noexcept {
  std::call_once(g_looked_up, look_up_driver);
  if (g_get_attribute == nullptr) return BufferLocation::kHost;
  unsigned memory_type = 0;
  const int status =
      g_get_attribute(&memory_type, kPointerAttributeMemoryType, reinterpret_cast<unsigned long long>(data));
  if (status == kCudaErrorInvalidValue) return BufferLocation::kHost;  // not memory CUDA knows: plain host memory
  // The driver is loaded but nobody initialised it (cuInit): the process has no CUDA memory at all — unless it is a
  // fork()ed child, whose parent's may be about.
  if (status == kCudaErrorNotInitialized && !g_forked.load(std::memory_order_relaxed)) return BufferLocation::kHost;
  if (status != kCudaSuccess) {
    if (driver_status != nullptr) *driver_status = status;
    return BufferLocation::kUnknown;
  }
  // RATIONALE: pinned or registered host memory (CU_MEMORYTYPE_HOST) is read and written by NCCL's kernels,
  // asynchronously on the stream, like device memory: the CPU may read it only in stream order, so it takes the
  // device path (kernels reach it through unified addressing).
  (void)memory_type;
  return BufferLocation::kDevice;
}

}  // namespace detnccl::interpose
