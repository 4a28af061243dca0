// detnccl: the log format's functions (see log_format.h).
#include "records/log_format.h"

#include <array>
#include <cstdio>

#include "abi/nccl_datatypes.h"
#include "hash/xxh3_host.h"

namespace detnccl::records {

std::string rank_log_file_name(std::uint32_t rank) {
  std::array<char, 32> name{};
  const int length = std::snprintf(name.data(), name.size(), "rank-%05u.dnc", static_cast<unsigned>(rank));
  return std::string(name.data(), static_cast<std::size_t>(length));
}

std::uint64_t header_checksum(const void* bytes, std::size_t count) noexcept { return hash::xxh3_64(bytes, count); }

std::uint64_t record_checksum(std::uint32_t length, std::uint16_t type, std::uint16_t fixed_bytes, const void* payload,
                              std::size_t payload_bytes) noexcept {
  const std::uint64_t seed = std::uint64_t{length} | std::uint64_t{type} << 32 | std::uint64_t{fixed_bytes} << 48;
  return hash::xxh3_64(payload, payload_bytes, seed);
}

std::string_view datatype_name(std::uint16_t datatype) noexcept { return abi::datatype_name(datatype); }

std::string_view redop_name(std::int32_t redop) noexcept { return abi::redop_name(redop); }

std::string_view result_name(std::int32_t result) noexcept {
  static constexpr std::array<std::string_view, 8> kNames = {
      "ncclSuccess",         "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
      "ncclInvalidArgument", "ncclInvalidUsage",       "ncclRemoteError", "ncclInProgress"};
  return result >= 0 && static_cast<std::size_t>(result) < kNames.size() ? kNames[static_cast<std::size_t>(result)]
                                                                         : std::string_view("?");
}

}  // namespace detnccl::records
