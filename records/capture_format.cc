// detnccl: the capture format's functions (see capture_format.h).
#include "records/capture_format.h"

#include <array>
#include <cstdio>

#include "hash/xxh3_host.h"

namespace detnccl::records {

std::uint64_t capture_data_checksum(const void* bytes, std::size_t count) noexcept {
  return hash::xxh3_64(bytes, count);
}

std::string capture_file_name(std::uint32_t rank) {
  std::array<char, 32> name{};
  const int length = std::snprintf(name.data(), name.size(), "rank-%05u.cap", static_cast<unsigned>(rank));
  return std::string(name.data(), static_cast<std::size_t>(length));
}

}  // namespace detnccl::records
