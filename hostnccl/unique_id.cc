#include "hostnccl/unique_id.h"

#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#define XXH_INLINE_ALL  // header-only use: libnccl.so.2 must not gain a runtime dependency for one hash
#include <xxhash.h>

namespace hostnccl {

ncclResult_t make_unique_id(ncclUniqueId* id) {
  std::memset(id, 0, sizeof *id);
  std::uint8_t random[16];
  std::size_t filled = 0;
  while (filled < sizeof random) {
    const ssize_t got = getrandom(random + filled, sizeof random - filled, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return ncclSystemError;
    }
    filled += static_cast<std::size_t>(got);
  }
  const std::uint32_t magic = kUniqueIdMagic, version = kUniqueIdVersion;
  const std::int32_t pid = static_cast<std::int32_t>(getpid());
  std::memcpy(id->internal + 0, &magic, 4);
  std::memcpy(id->internal + 4, &version, 4);
  std::memcpy(id->internal + 8, random, 16);
  std::memcpy(id->internal + 24, &pid, 4);
  return ncclSuccess;
}

bool parse_unique_id(const ncclUniqueId& id, IdFields* fields) {
  std::uint32_t magic = 0, version = 0;
  std::memcpy(&magic, id.internal + 0, 4);
  std::memcpy(&version, id.internal + 4, 4);
  if (magic != kUniqueIdMagic || version != kUniqueIdVersion) return false;
  std::memcpy(fields->random.data(), id.internal + 8, 16);
  std::memcpy(&fields->creator_pid, id.internal + 24, 4);
  return true;
}

IdFields derive_split_id(const IdFields& parent, std::uint32_t split_index, int color) {
  std::uint8_t input[24];
  std::memcpy(input, parent.random.data(), 16);
  std::memcpy(input + 16, &split_index, 4);
  std::memcpy(input + 20, &color, 4);
  const XXH128_hash_t hash = XXH3_128bits(input, sizeof input);
  IdFields child;
  std::memcpy(child.random.data(), &hash.low64, 8);
  std::memcpy(child.random.data() + 8, &hash.high64, 8);
  child.creator_pid = parent.creator_pid;
  return child;
}

std::string segment_name(const IdFields& fields) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string name = "hostnccl-";
  for (std::uint8_t byte : fields.random) {
    name += kHex[byte >> 4];
    name += kHex[byte & 15];
  }
  return name;
}

}  // namespace hostnccl
