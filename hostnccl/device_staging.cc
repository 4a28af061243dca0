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
  // Between any two addresses of unified addressing (pinned host memory is not a device address for the two above).
  int (*copy_async)(unsigned long long destination, unsigned long long source, std::size_t bytes,
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
  unsigned memory_type = 0;
  const bool host_side = driver->get_attribute(&memory_type, kAttributeMemoryType,
                                               reinterpret_cast<unsigned long long>(device_side)) == kCudaSuccess &&
                         memory_type == kMemoryTypeHost;
  const auto to = reinterpret_cast<unsigned long long>(destination);
  const auto from = reinterpret_cast<unsigned long long>(source);
  const int status = host_side   ? driver->copy_async(to, from, bytes, stream)
                     : to_device ? driver->copy_to_device_async(to, source, bytes, stream)
                                 : driver->copy_to_host_async(destination, from, bytes, stream);
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

// The op over host shadows. Its input shadow is filled at launch (Op::launch: the call, or the outermost
// ncclGroupEnd, where NCCL would enqueue its kernel), in the stream's order; when the op completes, the output
// shadow goes back to the CUDA buffer on the call's stream, so work enqueued after the call sees the result.
class StagedOp final : public Op {
 public:
  StagedOp(std::unique_ptr<Op> inner, const void* cuda_input, Shadow input, std::size_t input_bytes, Shadow output,
           void* cuda_output, std::size_t output_bytes, cudaStream_t stream)
      : Op(inner->comm()),
        inner_(std::move(inner)),
        cuda_input_(cuda_input),
        input_bytes_(input_bytes),
        input_(std::move(input)),
        output_(std::move(output)),
        device_output_(cuda_output),
        output_bytes_(output_bytes),
        stream_(stream) {}

  ncclResult_t launch() override {
    if (cuda_input_ == nullptr || input_bytes_ == 0) return ncclSuccess;
    return stream_copy(input_.get(), cuda_input_, input_bytes_, stream_, false);
  }

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
  const void* cuda_input_;
  std::size_t input_bytes_;
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
                        find(library, "cuMemcpyAsync", &driver->copy_async) &&
                        find(library, "cuStreamSynchronize", &driver->synchronize) &&
                        find(library, "cuGetErrorName", &driver->error_name);
  const Driver* expected = nullptr;
  if (!complete || !g_driver.compare_exchange_strong(expected, driver)) delete driver;
#endif
}

bool is_cuda_buffer(const void* data) {
#ifdef HOSTNCCL_DEVICE_BUFFERS
  const Driver* driver = g_driver.load(std::memory_order_acquire);
  if (driver == nullptr || data == nullptr) return false;
  unsigned memory_type = 0;
  const int status =
      driver->get_attribute(&memory_type, kAttributeMemoryType, reinterpret_cast<unsigned long long>(data));
  // kCudaErrorInvalidValue: memory CUDA does not know, i.e. plain host memory. Pinned or registered host memory
  // (kMemoryTypeHost) is CUDA's too: NCCL reads and writes it on the stream, after the work enqueued before.
  return status == kCudaSuccess && memory_type != 0;
#else
  (void)data;
  return false;
#endif
}

ncclResult_t copy_to_host(void* destination, const void* source, std::size_t bytes, cudaStream_t stream) {
  if (!is_cuda_buffer(source)) {
    std::memcpy(destination, source, bytes);
    return ncclSuccess;
  }
  return stream_copy(destination, source, bytes, stream, false);
}

ncclResult_t make_staged_coll_op(Comm* comm, const CollArgs& args, std::size_t send_bytes, std::size_t recv_bytes,
                                 cudaStream_t stream, std::unique_ptr<Op>* op) {
  const bool stage_send = send_bytes != 0 && is_cuda_buffer(args.send);
  const bool stage_recv = recv_bytes != 0 && is_cuda_buffer(args.recv);
  if (!stage_send && !stage_recv) {
    *op = make_coll_op(comm, args);
    return ncclSuccess;
  }
  // Separate shadows even for an in-place call: every operation gives the same result out of place, and each rank
  // that writes its output writes all of it.
  CollArgs staged = args;
  Shadow input, output;
  if (stage_send) {
    input = new_shadow(send_bytes);
    staged.send = input.get();
  }
  if (stage_recv) {
    output = new_shadow(recv_bytes);
    staged.recv = output.get();
  }
  *op = std::make_unique<StagedOp>(make_coll_op(comm, staged), stage_send ? args.send : nullptr, std::move(input),
                                   send_bytes, std::move(output), stage_recv ? args.recv : nullptr, recv_bytes, stream);
  return ncclSuccess;
}

ncclResult_t make_staged_send_op(Comm* comm, const void* data, std::size_t bytes, int peer, cudaStream_t stream,
                                 std::unique_ptr<Op>* op) {
  if (!is_cuda_buffer(data)) {
    *op = make_send_op(comm, data, bytes, peer);
    return ncclSuccess;
  }
  Shadow input = new_shadow(bytes);
  const void* host = input.get();
  *op = std::make_unique<StagedOp>(make_send_op(comm, host, bytes, peer), data, std::move(input), bytes, nullptr,
                                   nullptr, 0, stream);
  return ncclSuccess;
}

ncclResult_t make_staged_recv_op(Comm* comm, void* data, std::size_t bytes, int peer, cudaStream_t stream,
                                 std::unique_ptr<Op>* op) {
  if (!is_cuda_buffer(data)) {
    *op = make_recv_op(comm, data, bytes, peer);
    return ncclSuccess;
  }
  Shadow output = new_shadow(bytes);
  void* host = output.get();
  *op = std::make_unique<StagedOp>(make_recv_op(comm, host, bytes, peer), nullptr, nullptr, 0, std::move(output), data,
                                   bytes, stream);
  return ncclSuccess;
}

}  // namespace hostnccl
