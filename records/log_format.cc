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
  // RATIONALE: above 240 bytes XXH3 derives a 192-byte secret from the seed on every call, a third of a record's
  // checksum; a log's records have few distinct seeds (lengths, types), so each thread keeps the last few secrets.
  constexpr std::size_t kShortInput = 240;
  if (payload_bytes <= kShortInput) return hash::xxh3_64(payload, payload_bytes, seed);
  constexpr std::size_t kSlots = 16;
  thread_local std::array<hash::Xxh3SeedSecret, kSlots> secrets;
  thread_local std::array<bool, kSlots> filled{};
  const std::size_t slot = static_cast<std::size_t>((seed * 0x9E3779B97F4A7C15ull) >> 60);
  if (!filled[slot] || secrets[slot].seed != seed) {
    hash::xxh3_seed_secret(seed, secrets[slot]);
    filled[slot] = true;
  }
  return hash::xxh3_64(payload, payload_bytes, secrets[slot]);
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
