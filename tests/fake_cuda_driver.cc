// A stand-in for the CUDA driver (built as libcuda.so.1). It answers:
// - cuPointerGetAttribute, with the status FAKE_CUDA_POINTER_STATUS names (default 201, CUDA_ERROR_INVALID_CONTEXT).
//   Preloaded beside the shim, it is the driver the shim's buffer lookup finds (interpose/buffer_location.cc looks
//   libcuda.so.1 up, never loads it), so tests can make the driver fail to say where a buffer lives
//   (tests/test_shim_process.cc).
// - the context calls of cuda/context_scope.h (cuCtxGetCurrent/SetCurrent/GetDevice, cuDeviceGet,
//   cuDevicePrimaryCtxRetain/Release_v2) over kDevices devices, with a current context per thread, and records which
//   primary contexts were ever created or made current (fake_cuda_* below; tests/test_device_scope.cc).
// - pinned host memory: ranges registered with fake_cuda_register_host are host memory the driver knows
//   (cuPointerGetAttribute succeeds there), and fake_cuda_enqueue_fill puts a pending write to such memory on a
//   stream, standing for a kernel still running: it lands when that stream's work before a copy is done (a copy on
//   the stream, cuStreamSynchronize), never earlier (tests/test_hostnccl_staging.cc).
// - cuDriverGetVersion, with the version FAKE_CUDA_DRIVER_VERSION names (default 13000, CUDA 13.0), and cuFuncLoad,
//   which counts the functions loaded into each device's context: the one current on the calling thread
//   (fake_cuda_function_loads; tests/test_device_scope.cc).
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

namespace {

constexpr int kDevices = 4;
constexpr int kSuccess = 0;
constexpr int kInvalidValue = 1;
constexpr int kInvalidDevice = 101;
constexpr int kInvalidContext = 201;

struct FakeContext {
  int device;
};
FakeContext g_primary[kDevices] = {{0}, {1}, {2}, {3}};
std::atomic<int> g_retained[kDevices];       // the primary context's reference count
std::atomic<bool> g_created[kDevices];       // ever retained (the real driver creates it then)
std::atomic<bool> g_ever_current[kDevices];  // ever made current on any thread
thread_local FakeContext* t_current = nullptr;
thread_local std::vector<FakeContext*> t_pushed;  // cuCtxPushCurrent's stack below t_current

struct Range {
  unsigned long long begin, end;
};
struct Fill {
  void* stream;
  unsigned char* data;
  std::size_t bytes;
  unsigned char value;
};
std::mutex g_mutex;
std::vector<Range> g_host_ranges;
std::vector<Fill> g_pending;
std::atomic<int> g_stream_copies{0};

bool registered(unsigned long long address) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  for (const Range& range : g_host_ranges) {
    if (address >= range.begin && address < range.end) return true;
  }
  return false;
}

// The stream's work so far completes: its pending fills land.
void complete_stream(void* stream) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<Fill> kept;
  for (const Fill& fill : g_pending) {
    if (fill.stream == stream) {
      std::memset(fill.data, fill.value, fill.bytes);
    } else {
      kept.push_back(fill);
    }
  }
  g_pending.swap(kept);
}

}  // namespace

#define FAKE_CUDA_EXPORT extern "C" __attribute__((visibility("default")))

FAKE_CUDA_EXPORT int cuPointerGetAttribute(void* value, int attribute, unsigned long long pointer) {
  if (registered(pointer)) {
    if (attribute == 1) *static_cast<void**>(value) = nullptr;  // CU_POINTER_ATTRIBUTE_CONTEXT: none of its own
    if (attribute == 2) *static_cast<unsigned*>(value) = 1;     // CU_MEMORYTYPE_HOST
    if (attribute == 9) *static_cast<int*>(value) = 0;          // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    return kSuccess;
  }
  if (!g_host_ranges.empty()) return kInvalidValue;  // a test of pinned memory: everything else is plain host memory
  const char* text = std::getenv("FAKE_CUDA_POINTER_STATUS");
  const int status = text != nullptr ? std::atoi(text) : 201;
  if (status == 0) *static_cast<unsigned*>(value) = 2;  // CU_MEMORYTYPE_DEVICE
  return status;
}

FAKE_CUDA_EXPORT int cuCtxGetCurrent(void** context) {
  if (context == nullptr) return kInvalidValue;
  *context = t_current;
  return kSuccess;
}

FAKE_CUDA_EXPORT int cuCtxSetCurrent(void* context) {
  auto* fake = static_cast<FakeContext*>(context);
  if (fake != nullptr) {
    if (fake < g_primary || fake >= g_primary + kDevices || g_retained[fake->device] <= 0) return kInvalidContext;
    g_ever_current[fake->device] = true;
  }
  t_current = fake;
  return kSuccess;
}

FAKE_CUDA_EXPORT int cuCtxGetDevice(int* device) {
  if (t_current == nullptr) return kInvalidContext;
  *device = t_current->device;
  return kSuccess;
}

FAKE_CUDA_EXPORT int cuDeviceGet(int* device, int ordinal) {
  if (ordinal < 0 || ordinal >= kDevices) return kInvalidDevice;
  *device = ordinal;
  return kSuccess;
}

FAKE_CUDA_EXPORT int cuDevicePrimaryCtxRetain(void** context, int device) {
  if (device < 0 || device >= kDevices) return kInvalidDevice;
  ++g_retained[device];
  g_created[device] = true;
  *context = &g_primary[device];
  return kSuccess;
}

FAKE_CUDA_EXPORT int cuDevicePrimaryCtxRelease_v2(int device) {
  if (device < 0 || device >= kDevices) return kInvalidDevice;
  if (g_retained[device] <= 0) return kInvalidContext;
  --g_retained[device];
  return kSuccess;
}

// What tests read: whether `device`'s primary context was ever created / made current, and its reference count.
FAKE_CUDA_EXPORT bool fake_cuda_primary_created(int device) { return g_created[device]; }
FAKE_CUDA_EXPORT bool fake_cuda_ever_current(int device) { return g_ever_current[device]; }
FAKE_CUDA_EXPORT int fake_cuda_primary_references(int device) { return g_retained[device]; }

FAKE_CUDA_EXPORT int cuCtxPushCurrent_v2(void* context) {
  if (context == nullptr) return kInvalidContext;
  t_pushed.push_back(t_current);
  return cuCtxSetCurrent(context);
}

FAKE_CUDA_EXPORT int cuCtxPopCurrent_v2(void** context) {
  if (t_pushed.empty()) return kInvalidContext;
  if (context != nullptr) *context = t_current;
  t_current = t_pushed.back();
  t_pushed.pop_back();
  return kSuccess;
}

// Copies run in stream order: the stream's earlier work (pending fills) lands first.
FAKE_CUDA_EXPORT int cuMemcpyAsync(unsigned long long destination, unsigned long long source, std::size_t bytes,
                                   void* stream) {
  if (t_current == nullptr) return kInvalidContext;
  complete_stream(stream);
  std::memcpy(reinterpret_cast<void*>(destination), reinterpret_cast<const void*>(source), bytes);
  ++g_stream_copies;
  return kSuccess;
}

FAKE_CUDA_EXPORT int cuMemcpyDtoHAsync_v2(void* destination, unsigned long long source, std::size_t bytes,
                                          void* stream) {
  return cuMemcpyAsync(reinterpret_cast<unsigned long long>(destination), source, bytes, stream);
}

FAKE_CUDA_EXPORT int cuMemcpyHtoDAsync_v2(unsigned long long destination, const void* source, std::size_t bytes,
                                          void* stream) {
  return cuMemcpyAsync(destination, reinterpret_cast<unsigned long long>(source), bytes, stream);
}

FAKE_CUDA_EXPORT int cuStreamSynchronize(void* stream) {
  complete_stream(stream);
  return kSuccess;
}

FAKE_CUDA_EXPORT int cuGetErrorName(int status, const char** text) {
  *text = status == kSuccess ? "CUDA_SUCCESS" : "FAKE_CUDA_ERROR";
  return kSuccess;
}

FAKE_CUDA_EXPORT int cuDriverGetVersion(int* version) {
  if (version == nullptr) return kInvalidValue;
  const char* text = std::getenv("FAKE_CUDA_DRIVER_VERSION");
  *version = text != nullptr ? std::atoi(text) : 13000;
  return kSuccess;
}

namespace {
struct FunctionLoad {
  int device;
  void* function;
};
std::vector<FunctionLoad> g_function_loads;  // guarded by g_mutex
}  // namespace

FAKE_CUDA_EXPORT int cuFuncLoad(void* function) {
  if (t_current == nullptr) return kInvalidContext;
  if (function == nullptr) return kInvalidValue;
  const std::lock_guard<std::mutex> lock(g_mutex);
  g_function_loads.push_back({t_current->device, function});
  return kSuccess;
}

// How many times cuFuncLoad loaded `function` (any function when null) into `device`'s context.
FAKE_CUDA_EXPORT int fake_cuda_function_loads(int device, void* function) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  int count = 0;
  for (const FunctionLoad& load : g_function_loads) {
    if (load.device == device && (function == nullptr || load.function == function)) ++count;
  }
  return count;
}

// Test controls: register `bytes` at `data` as pinned host memory; put a write of `value` over them on `stream`.
FAKE_CUDA_EXPORT void fake_cuda_register_host(void* data, std::size_t bytes) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  const auto begin = reinterpret_cast<unsigned long long>(data);
  g_host_ranges.push_back({begin, begin + bytes});
}
FAKE_CUDA_EXPORT void fake_cuda_enqueue_fill(void* stream, void* data, std::size_t bytes, unsigned char value) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  g_pending.push_back({stream, static_cast<unsigned char*>(data), bytes, value});
}
// How many stream-ordered copies were made.
FAKE_CUDA_EXPORT int fake_cuda_stream_copies() { return g_stream_copies; }
