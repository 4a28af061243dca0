// detnccl: run-local communicator ids (see communicator_id.h).
#include "records/communicator_id.h"

#include <array>

#include "hash/xxh3_host.h"

namespace detnccl::records {
namespace {

// RATIONALE: 0 means "no parent" in a communicator record, so no id may be 0.
std::uint64_t nonzero(std::uint64_t id) noexcept { return id == 0 ? 1 : id; }

}  // namespace

std::uint64_t communicator_id_from_unique_id(std::span<const std::byte> unique_id_bytes) noexcept {
  return nonzero(hash::xxh3_64(unique_id_bytes.data(), unique_id_bytes.size()));
}

std::uint64_t communicator_id_from_parent(std::uint64_t parent_id, std::uint64_t derivation,
                                          std::int64_t color) noexcept {
  std::array<std::uint64_t, 3> words = {parent_id, derivation, static_cast<std::uint64_t>(color)};
  // A fixed seed keeps derived ids apart from unique-id ones of the same bytes.
  return nonzero(hash::xxh3_64(words.data(), sizeof(words), 0x6465726976656421ull));
}

}  // namespace detnccl::records
