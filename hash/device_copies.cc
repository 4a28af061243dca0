// Copies of device buffers on a stream (see device_copies.h), with the CUDA runtime.
#include "hash/device_copies.h"

#include <cuda_runtime_api.h>

#include <exception>
#include <utility>
#include <vector>

#include "cuda/scopes.h"
#include "hash/device_fingerprints.h"

namespace detnccl::hash {
namespace {

using detnccl::cuda::DeviceScope;
using detnccl::cuda::RelaxedCaptureMode;

std::string describe(const char* what, cudaError_t status) {
  return std::string(what) + " failed: " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")";
}

}  // namespace

struct DeviceCopyTicket::InFlight {
  int device = -1;
  cudaEvent_t event = nullptr;
  std::byte* pinned = nullptr;      // cudaHostAlloc'd, or null for the pageable fallback
  std::vector<std::byte> pageable;  // the fallback
  std::uint64_t bytes = 0;
};

DeviceCopyTicket::DeviceCopyTicket(std::unique_ptr<InFlight> in_flight) noexcept : in_flight_(std::move(in_flight)) {}
DeviceCopyTicket::DeviceCopyTicket(State state, std::string failure) noexcept
    : state_(state), failure_(std::move(failure)) {}

DeviceCopyTicket::~DeviceCopyTicket() {
  if (in_flight_ == nullptr) return;
  // RATIONALE: a copy still running owns its memory: it is left allocated (never freed under the device's feet, and
  // no wait here). This happens only for tickets abandoned at exit or in a fork()ed child.
  if (state_ == kPending) {
    (void)in_flight_.release();
    return;
  }
  DeviceScope device;
  if (in_flight_->device >= 0) device.enter(in_flight_->device);
  const RelaxedCaptureMode relaxed;
  if (in_flight_->event != nullptr) cudaEventDestroy(in_flight_->event);
  if (in_flight_->pinned != nullptr) cudaFreeHost(in_flight_->pinned);
}

std::unique_ptr<DeviceCopyTicket> DeviceCopyTicket::captured() {
  return std::unique_ptr<DeviceCopyTicket>(new DeviceCopyTicket(kCaptured, {}));
}
std::unique_ptr<DeviceCopyTicket> DeviceCopyTicket::failed(std::string reason) {
  return std::unique_ptr<DeviceCopyTicket>(new DeviceCopyTicket(kFailed, std::move(reason)));
}

DeviceCopyTicket::State DeviceCopyTicket::poll() noexcept {
  if (state_ != kPending || in_flight_ == nullptr) return state_;
  DeviceScope device;
  if (in_flight_->device >= 0) device.enter(in_flight_->device);
  const RelaxedCaptureMode relaxed;
  const cudaError_t status = cudaEventQuery(in_flight_->event);
  if (status == cudaErrorNotReady) return kPending;
  if (status != cudaSuccess) {
    try {
      failure_ = describe("the capture copy", status);
    } catch (const std::exception&) {
    }
    state_ = kFailed;
    return state_;
  }
  state_ = kReady;
  return state_;
}

std::span<const std::byte> DeviceCopyTicket::bytes() const noexcept {
  if (state_ != kReady || in_flight_ == nullptr) return {};
  const std::byte* data = in_flight_->pinned != nullptr ? in_flight_->pinned : in_flight_->pageable.data();
  return {data, static_cast<std::size_t>(in_flight_->bytes)};
}

bool DeviceCopyTicket::pageable() const noexcept { return in_flight_ != nullptr && in_flight_->pinned == nullptr; }

std::unique_ptr<DeviceCopyTicket> enqueue_device_copy(const DeviceCopyRequest& request, CUstream_st* stream) noexcept {
  try {
    if (!device_fingerprints_available()) {
      return DeviceCopyTicket::failed("device copies are unavailable: " +
                                      std::string(device_fingerprints_unavailable_reason()));
    }
    const RelaxedCaptureMode relaxed;
    DeviceScope scope;
    if (const cudaError_t status = scope.enter_device_of(stream, request.default_stream_device);
        status != cudaSuccess) {
      return DeviceCopyTicket::failed(describe("making the stream's device current", status));
    }
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    const cudaError_t capturing = cudaStreamIsCapturing(stream, &capture);
    if (capturing == cudaErrorStreamCaptureImplicit) return DeviceCopyTicket::captured();
    if (capturing != cudaSuccess) return DeviceCopyTicket::failed(describe("cudaStreamIsCapturing", capturing));
    if (capture != cudaStreamCaptureStatusNone) return DeviceCopyTicket::captured();

    auto in_flight = std::make_unique<DeviceCopyTicket::InFlight>();
    DeviceCopyTicket::InFlight& flight = *in_flight;
    flight.bytes = request.bytes;
    (void)cudaGetDevice(&flight.device);
    void* pinned = nullptr;
    if (cudaHostAlloc(&pinned, request.bytes, cudaHostAllocDefault) == cudaSuccess) {
      flight.pinned = static_cast<std::byte*>(pinned);
    } else {
      (void)cudaGetLastError();
      flight.pageable.resize(request.bytes);
    }
    std::byte* target = flight.pinned != nullptr ? flight.pinned : flight.pageable.data();
    auto ticket = std::make_unique<DeviceCopyTicket>(std::move(in_flight));
    if (const cudaError_t status = cudaEventCreateWithFlags(&flight.event, cudaEventDisableTiming);
        status != cudaSuccess) {
      flight.event = nullptr;
      return DeviceCopyTicket::failed(describe("cudaEventCreateWithFlags", status));
    }
    if (const cudaError_t status = cudaMemcpyAsync(target, request.data, request.bytes, cudaMemcpyDeviceToHost, stream);
        status != cudaSuccess) {
      return DeviceCopyTicket::failed(describe("cudaMemcpyAsync", status));
    }
    if (const cudaError_t status = cudaEventRecord(flight.event, stream); status != cudaSuccess) {
      // Without the event nothing says when the copy is done: its memory is left allocated, unused.
      (void)ticket.release();
      return DeviceCopyTicket::failed(describe("cudaEventRecord", status));
    }
    return ticket;
  } catch (const std::exception&) {
    try {
      return DeviceCopyTicket::failed("out of memory while enqueueing a capture copy");
    } catch (...) {
      return nullptr;
    }
  }
}

}  // namespace detnccl::hash
