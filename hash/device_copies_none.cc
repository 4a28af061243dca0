// Copies of device buffers in a build without CUDA (see device_copies.h): every copy fails, saying why.
#include "hash/device_copies.h"

namespace detnccl::hash {

struct DeviceCopyTicket::InFlight {};

DeviceCopyTicket::DeviceCopyTicket(std::unique_ptr<InFlight> in_flight) noexcept : in_flight_(std::move(in_flight)) {}
DeviceCopyTicket::DeviceCopyTicket(State state, std::string failure) noexcept
    : state_(state), failure_(std::move(failure)) {}
DeviceCopyTicket::~DeviceCopyTicket() = default;

std::unique_ptr<DeviceCopyTicket> DeviceCopyTicket::captured() {
  return std::unique_ptr<DeviceCopyTicket>(new DeviceCopyTicket(kCaptured, {}));
}
std::unique_ptr<DeviceCopyTicket> DeviceCopyTicket::failed(std::string reason) {
  return std::unique_ptr<DeviceCopyTicket>(new DeviceCopyTicket(kFailed, std::move(reason)));
}

DeviceCopyTicket::State DeviceCopyTicket::poll() noexcept { return state_; }
std::span<const std::byte> DeviceCopyTicket::bytes() const noexcept { return {}; }
bool DeviceCopyTicket::pageable() const noexcept { return false; }

std::unique_ptr<DeviceCopyTicket> enqueue_device_copy(const DeviceCopyRequest&, CUstream_st*) noexcept {
  try {
    return DeviceCopyTicket::failed("this detnccl was built without CUDA: device buffers cannot be copied");
  } catch (...) {
    return nullptr;
  }
}

}  // namespace detnccl::hash
