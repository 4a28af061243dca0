// Copies of device buffers into host memory, enqueued on a stream: the "copy on a stream" companion of the "hash on a
// stream" service (device_fingerprints.h), for the shim's capture of whole buffers (DETNCCL_CAPTURE). It knows no
// NCCL.
//
// A copy is a cudaMemcpyAsync on the call's own stream into pinned host memory, followed by an event: stream order
// makes it see the buffer exactly when the fingerprint kernels enqueued at the same point do, and the job is never
// synchronised with; the tracer's background thread polls the ticket. When pinned memory cannot be had the copy
// goes to pageable memory (the CUDA runtime then copies synchronously: the job waits for it), and the ticket says
// so, for the tracer's one warning. Under CUDA stream capture nothing is enqueued (kCaptured).
//
// In a build without CUDA (device_copies_none.cc) the same API exists and every copy fails with the reason.
#ifndef DETNCCL_HASH_DEVICE_COPIES_H
#define DETNCCL_HASH_DEVICE_COPIES_H

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

struct CUstream_st;  // cudaStream_t is `CUstream_st*`

namespace detnccl::hash {

// One buffer to copy.
struct DeviceCopyRequest {
  const void* data = nullptr;  // device (or device-accessible) address
  std::uint64_t bytes = 0;
  int default_stream_device = -1;  // as DeviceDigestRequest::default_stream_device
};

// The host copy of one request, collected later. Used by one thread at a time (any thread).
class DeviceCopyTicket {
 public:
  enum State {
    kPending,   // copy enqueued, not complete yet
    kReady,     // bytes() holds the copy
    kCaptured,  // the stream was capturing a CUDA graph: nothing was enqueued
    kFailed,    // no copy; failure() says why
  };
  struct InFlight;  // the CUDA resources (defined by the implementation)

  static std::unique_ptr<DeviceCopyTicket> captured();
  static std::unique_ptr<DeviceCopyTicket> failed(std::string reason);
  explicit DeviceCopyTicket(std::unique_ptr<InFlight> in_flight) noexcept;
  ~DeviceCopyTicket();
  DeviceCopyTicket(const DeviceCopyTicket&) = delete;
  DeviceCopyTicket& operator=(const DeviceCopyTicket&) = delete;

  // The current state; never blocks (one cudaEventQuery while pending).
  State poll() noexcept;
  // The copy, once poll() returned kReady; it lives as long as the ticket.
  std::span<const std::byte> bytes() const noexcept;
  // Why the ticket is kFailed (empty otherwise).
  std::string_view failure() const noexcept { return failure_; }
  // Whether the copy went to pageable memory because pinned memory could not be had (the job waited for it).
  bool pageable() const noexcept;

 private:
  DeviceCopyTicket(State state, std::string failure) noexcept;
  State state_ = kPending;
  std::string failure_;
  std::unique_ptr<InFlight> in_flight_;
};

// Enqueues the copy of `request` on `stream` and returns its ticket (kFailed with the reason on any failure,
// kCaptured under stream capture). Thread-safe; never throws (nullptr only if even a ticket cannot be allocated).
std::unique_ptr<DeviceCopyTicket> enqueue_device_copy(const DeviceCopyRequest& request, CUstream_st* stream) noexcept;

}  // namespace detnccl::hash

#endif  // DETNCCL_HASH_DEVICE_COPIES_H
