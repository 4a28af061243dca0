// Device fingerprints in a build without CUDA (device_fingerprints.h): never available, every
// request fails with the reason, so the tracer records device buffers without fingerprints.
#include <utility>

#include "hash/device_fingerprints.h"

namespace detnccl::hash {
namespace {

constexpr std::string_view kNoCuda = "this build of detnccl has no CUDA support (rebuild with the CUDA toolkit)";

}  // namespace

struct DeviceDigestTicket::InFlight {};

DeviceDigestTicket::DeviceDigestTicket(std::unique_ptr<InFlight> in_flight) noexcept
    : in_flight_(std::move(in_flight)) {}
DeviceDigestTicket::DeviceDigestTicket(State state, std::string failure) noexcept
    : state_(state), failure_(std::move(failure)) {}
DeviceDigestTicket::~DeviceDigestTicket() = default;

std::unique_ptr<DeviceDigestTicket> DeviceDigestTicket::captured() {
  return std::unique_ptr<DeviceDigestTicket>(new DeviceDigestTicket(kCaptured, {}));
}

std::unique_ptr<DeviceDigestTicket> DeviceDigestTicket::failed(std::string reason) {
  return std::unique_ptr<DeviceDigestTicket>(new DeviceDigestTicket(kFailed, std::move(reason)));
}

// Without CUDA no ticket is ever pending: nothing changes.
DeviceDigestTicket::State DeviceDigestTicket::poll() noexcept { return state_; }

bool device_fingerprints_available() noexcept { return false; }

bool prepare_device_fingerprints(int /*device*/) noexcept { return false; }

std::string_view device_fingerprints_unavailable_reason() noexcept { return kNoCuda; }

std::unique_ptr<DeviceDigestTicket> enqueue_device_digests(const DeviceDigestRequest& /*request*/,
                                                           CUstream_st* /*stream*/) noexcept {
  try {
    return DeviceDigestTicket::failed(std::string(kNoCuda));
  } catch (...) {
    return nullptr;
  }
}

}  // namespace detnccl::hash
