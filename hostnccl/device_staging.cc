// hostnccl: device buffers staged through host memory (see device_staging.h).
#include "hostnccl/device_staging.h"

#include <atomic>
#include <cstring>
#include <string>
#include <utility>

#ifdef HOSTNCCL_DEVICE_BUFFERS
#include <dlfcn.h>
#endif

namespace hostnccl {
namespace {

// Uninitialised host memory for a shadow (a vector would zero gigabytes for nothing).
using Shadow = std::unique_ptr<std::byte[]>;
Shadow new_shadow(std::size_t bytes) { return Shadow(bytes == 0 ? nullptr : new std::byte[bytes]); }

#ifdef HOSTNCCL_DEVICE_BUFFERS
// The driver API entry points used here, with the values they need (cuda.h; stable since CUDA 4). No CUDA header:
// the library links nothing of CUDA, and a driver-API call needs no runtime of a particular version.
constexpr int kCudaSuccess = 0;
constexpr int kCudaErrorInvalidValue = 1;
constexpr int kAttributeContext = 1;        // CU_POINTER_ATTRIBUTE_CONTEXT
constexpr int kAttributeMemoryType = 2;     // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr int kAttributeDeviceOrdinal = 9;  // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
constexpr unsigned kMemoryTypeHost = 1;     // CU_MEMORYTYPE_HOST

struct Driver {
  int (*get_attribute)(void* value, int attribute, unsigned long long pointer) = nullptr;
  int (*push_context)(void* context) = nullptr;
  int (*pop_context)(void** context) = nullptr;
  int (*get_device)(int* device, int ordinal) = nullptr;
  int (*retain_primary)(void** context, int device) = nullptr;
  int (*release_primary)(int device) = nullptr;
  int (*copy_to_host_async)(void* destination, unsigned long long source, std::size_t bytes, void* stream) = nullptr;
  int (*copy_to_device_async)(unsigned long long destination, const void* source, std::size_t bytes,
                              void* stream) = nullptr;
  int (*synchronize)(void* stream) = nullptr;
  int (*error_name)(int status, const char** text) = nullptr;
};

std::atomic<const Driver*> g_driver{nullptr};

template <typename Function>
bool find(void* library, const char* name, Function* function) {
  *function = reinterpret_cast<Function>(dlsym(library, name));
  return *function != nullptr;
}

std::string cuda_error(const char* what, int status) {
  const Driver* driver = g_driver.load(std::memory_order_acquire);
  const char* name = nullptr;
  if (driver == nullptr || driver->error_name(status, &name) != kCudaSuccess || name == nullptr) name = "?";
  return std::string("hostnccl: ") + what + " failed: CUDA driver error " + std::to_string(status) + " (" + name + ")";
}

// Makes the context that owns `pointer` current for the scope of a copy (the calling thread may have none current,
// e.g. a thread of ncclCommInitAll's caller). Memory without a context of its own (virtual memory management, as
// PyTorch's expandable segments) is reached through its device's primary context.
class PointerContext {
 public:
  PointerContext(const Driver& driver, const void* pointer) : driver_(driver) {
    const auto address = reinterpret_cast<unsigned long long>(pointer);
    void* context = nullptr;
    status_ = driver_.get_attribute(&context, kAttributeContext, address);
    if (status_ == kCudaSuccess && context == nullptr) {
      int ordinal = 0;
      status_ = driver_.get_attribute(&ordinal, kAttributeDeviceOrdinal, address);
      if (status_ == kCudaSuccess) status_ = driver_.get_device(&device_, ordinal);
      if (status_ == kCudaSuccess) status_ = driver_.retain_primary(&context, device_);
      retained_ = status_ == kCudaSuccess;
    }
    if (status_ == kCudaSuccess) status_ = driver_.push_context(context);
    pushed_ = status_ == kCudaSuccess;
  }
  ~PointerContext() {
    void* popped = nullptr;
    if (pushed_) driver_.pop_context(&popped);
    if (retained_) driver_.release_primary(device_);
  }
  PointerContext(const PointerContext&) = delete;
  PointerContext& operator=(const PointerContext&) = delete;
  int status() const { return status_; }

 private:
  const Driver& driver_;
  int status_ = kCudaSuccess;
  int device_ = 0;
  bool retained_ = false;
  bool pushed_ = false;
};

// One copy in the stream's order, then a wait for it (and so for everything enqueued before it).
ncclResult_t stream_copy(void* destination, const void* source, std::size_t bytes, cudaStream_t stream,
                         bool to_device) {
  const Driver* driver = g_driver.load(std::memory_order_acquire);
  const void* device_side = to_device ? destination : source;
  PointerContext context(*driver, device_side);
  if (context.status() != kCudaSuccess) {
    set_last_error(cuda_error("making the context of a device buffer current", context.status()));
    return ncclUnhandledCudaError;
  }
  const int status =
      to_device ? driver->copy_to_device_async(reinterpret_cast<unsigned long long>(destination), source, bytes, stream)
                : driver->copy_to_host_async(destination, reinterpret_cast<unsigned long long>(source), bytes, stream);
  if (status != kCudaSuccess) {
    set_last_error(cuda_error(
        to_device ? "copying a host shadow to its device buffer" : "copying a device buffer to its host shadow",
        status));
    return ncclUnhandledCudaError;
  }
  if (const int synced = driver->synchronize(stream); synced != kCudaSuccess) {
    set_last_error(cuda_error("cuStreamSynchronize after staging a device buffer", synced));
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}
#else
ncclResult_t stream_copy(void* destination, const void* source, std::size_t bytes, cudaStream_t, bool) {
  std::memcpy(destination, source, bytes);  // unreachable: no buffer is a device buffer without the driver
  return ncclSuccess;
}
#endif

// Stages in: a device input becomes a host shadow holding its bytes (read after the stream's earlier work).
ncclResult_t stage_input(const void* data, std::size_t bytes, cudaStream_t stream, Shadow* shadow) {
  *shadow = new_shadow(bytes);
  return stream_copy(shadow->get(), data, bytes, stream, false);
}

// The op over host shadows; when it completes, the output shadow goes back to the device buffer on the call's
// stream, so work enqueued after the call sees the result.
class StagedOp final : public Op {
 public:
  StagedOp(std::unique_ptr<Op> inner, Shadow input, Shadow output, void* device_output, std::size_t output_bytes,
           cudaStream_t stream)
      : Op(inner->comm()),
        inner_(std::move(inner)),
        input_(std::move(input)),
        output_(std::move(output)),
        device_output_(device_output),
        output_bytes_(output_bytes),
        stream_(stream) {}

  const char* name() const override { return inner_->name(); }
  void on_failure() override { inner_->on_failure(); }
  const Comm* waited_comm() const override { return inner_->waited_comm(); }
  int waited_rank() const override { return inner_->waited_rank(); }

  ncclResult_t advance(bool* progressed) override {
    if (const ncclResult_t result = inner_->advance(progressed); result != ncclSuccess) return result;
    if (!inner_->done()) return ncclSuccess;
    if (device_output_ != nullptr && output_bytes_ != 0) {
      if (const ncclResult_t result = stream_copy(device_output_, output_.get(), output_bytes_, stream_, true);
          result != ncclSuccess) {
        return result;
      }
    }
    input_.reset();
    output_.reset();
    done_ = true;
    *progressed = true;
    return ncclSuccess;
  }

 private:
  std::unique_ptr<Op> inner_;
  Shadow input_, output_;
  void* device_output_;
  std::size_t output_bytes_;
  cudaStream_t stream_;
};

}  // namespace

void refresh_device_driver() {
#ifdef HOSTNCCL_DEVICE_BUFFERS
  if (g_driver.load(std::memory_order_acquire) != nullptr) return;
  // RATIONALE: RTLD_NOLOAD: a process that never touched CUDA has no device buffers, and loading the driver here
  // would cost every CPU-only job its initialisation. The reference is kept: the driver never unloads while in use.
  void* library = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (library == nullptr) return;
  auto* driver = new Driver;
  const bool complete = find(library, "cuPointerGetAttribute", &driver->get_attribute) &&
                        find(library, "cuCtxPushCurrent_v2", &driver->push_context) &&
                        find(library, "cuCtxPopCurrent_v2", &driver->pop_context) &&
                        find(library, "cuDeviceGet", &driver->get_device) &&
                        find(library, "cuDevicePrimaryCtxRetain", &driver->retain_primary) &&
                        find(library, "cuDevicePrimaryCtxRelease_v2", &driver->release_primary) &&
                        find(library, "cuMemcpyDtoHAsync_v2", &driver->copy_to_host_async) &&
                        find(library, "cuMemcpyHtoDAsync_v2", &driver->copy_to_device_async) &&
                        find(library, "cuStreamSynchronize", &driver->synchronize) &&
                        find(library, "cuGetErrorName", &driver->error_name);
  const Driver* expected = nullptr;
  if (!complete || !g_driver.compare_exchange_strong(expected, driver)) delete driver;
#endif
}

bool is_device_buffer(const void* data) {
#ifdef HOSTNCCL_DEVICE_BUFFERS
  const Driver* driver = g_driver.load(std::memory_order_acquire);
  if (driver == nullptr || data == nullptr) return false;
  unsigned memory_type = 0;
  const int status =
      driver->get_attribute(&memory_type, kAttributeMemoryType, reinterpret_cast<unsigned long long>(data));
  // kCudaErrorInvalidValue: memory CUDA does not know, i.e. plain host memory.
  return status == kCudaSuccess && memory_type != kMemoryTypeHost;
#else
  (void)data;
  return false;
#endif
}

ncclResult_t copy_to_host(void* destination, const void* source, std::size_t bytes, cudaStream_t stream) {
  if (!is_device_buffer(source)) {
    std::memcpy(destination, source, bytes);
    return ncclSuccess;
  }
  return stream_copy(destination, source, bytes, stream, false);
}

ncclResult_t make_staged_coll_op(Comm* comm, const CollArgs& args, std::size_t send_bytes, std::size_t recv_bytes,
                                 cudaStream_t stream, std::unique_ptr<Op>* op) {
  const bool stage_send = send_bytes != 0 && is_device_buffer(args.send);
  const bool stage_recv = recv_bytes != 0 && is_device_buffer(args.recv);
  if (!stage_send && !stage_recv) {
    *op = make_coll_op(comm, args);
    return ncclSuccess;
  }
  // Separate shadows even for an in-place call: every operation gives the same result out of place, and each rank
  // that writes its output writes all of it.
  CollArgs staged = args;
  Shadow input, output;
  if (stage_send) {
    if (const ncclResult_t result = stage_input(args.send, send_bytes, stream, &input); result != ncclSuccess) {
      return result;
    }
    staged.send = input.get();
  }
  if (stage_recv) {
    output = new_shadow(recv_bytes);
    staged.recv = output.get();
  }
  *op = std::make_unique<StagedOp>(make_coll_op(comm, staged), std::move(input), std::move(output),
                                   stage_recv ? args.recv : nullptr, recv_bytes, stream);
  return ncclSuccess;
}

ncclResult_t make_staged_send_op(Comm* comm, const void* data, std::size_t bytes, int peer, cudaStream_t stream,
                                 std::unique_ptr<Op>* op) {
  if (!is_device_buffer(data)) {
    *op = make_send_op(comm, data, bytes, peer);
    return ncclSuccess;
  }
  Shadow input;
  if (const ncclResult_t result = stage_input(data, bytes, stream, &input); result != ncclSuccess) return result;
  const void* host = input.get();
  *op =
      std::make_unique<StagedOp>(make_send_op(comm, host, bytes, peer), std::move(input), nullptr, nullptr, 0, stream);
  return ncclSuccess;
}

ncclResult_t make_staged_recv_op(Comm* comm, void* data, std::size_t bytes, int peer, cudaStream_t stream,
                                 std::unique_ptr<Op>* op) {
  if (!is_device_buffer(data)) {
    *op = make_recv_op(comm, data, bytes, peer);
    return ncclSuccess;
  }
  Shadow output = new_shadow(bytes);
  void* host = output.get();
  *op = std::make_unique<StagedOp>(make_recv_op(comm, host, bytes, peer), nullptr, std::move(output), data, bytes,
                                   stream);
  return ncclSuccess;
}

}  // namespace hostnccl
