#include "hostnccl/unique_id.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

#define XXH_INLINE_ALL  // header-only use: libnccl.so.2 must not gain a runtime dependency for one hash
#include <xxhash.h>

#include "hostnccl/settings.h"
#include "hostnccl/shm_names.h"
#include "posix/io.h"

namespace hostnccl {

ncclResult_t make_unique_id(ncclUniqueId* id, std::string* error) {
  std::memset(id, 0, sizeof *id);
  std::string_view tag;
  if (!read_setting<Setting::kJobTag>(&tag, error)) {
    error->insert(0, "hostnccl: ");
    return ncclInvalidArgument;
  }
  std::uint8_t random[16];
  if (const int failure = detnccl::posix::fill_random(random, sizeof random); failure != 0) {
    *error = std::string("hostnccl: getrandom failed: ") + std::strerror(failure);
    return ncclSystemError;
  }
  const std::uint32_t magic = kUniqueIdMagic, version = kUniqueIdVersion;
  const std::int32_t pid = static_cast<std::int32_t>(getpid());
  std::memcpy(id->internal + 0, &magic, 4);
  std::memcpy(id->internal + 4, &version, 4);
  std::memcpy(id->internal + 8, random, 16);
  std::memcpy(id->internal + 24, &pid, 4);
  if (!tag.empty()) std::memcpy(id->internal + kJobTagOffset, tag.data(), tag.size());  // data() may be null
  return ncclSuccess;
}

bool parse_unique_id(const ncclUniqueId& id, IdFields* fields) {
  std::uint32_t magic = 0, version = 0;
  std::memcpy(&magic, id.internal + 0, 4);
  std::memcpy(&version, id.internal + 4, 4);
  if (magic != kUniqueIdMagic || version != kUniqueIdVersion) return false;
  std::memcpy(fields->random.data(), id.internal + 8, 16);
  std::memcpy(&fields->creator_pid, id.internal + 24, 4);
  // The tag becomes part of a file name: accept exactly what make_unique_id writes, zeros after it included.
  const char* tag = id.internal + kJobTagOffset;
  const std::size_t length = strnlen(tag, kMaxJobTagLength);
  if (length > 0 && !is_valid_job_tag(std::string_view(tag, length))) return false;
  for (std::size_t i = kJobTagOffset + length; i < sizeof id.internal; ++i) {
    if (id.internal[i] != 0) return false;
  }
  fields->job_tag.assign(tag, length);
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
  child.job_tag = parent.job_tag;
  return child;
}

std::string segment_name(const IdFields& fields) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string name = fields.job_tag.empty() ? std::string(kShmNamePrefix) : job_shm_prefix(fields.job_tag);
  for (std::uint8_t byte : fields.random) {
    name += kHex[byte >> 4];
    name += kHex[byte & 15];
  }
  return name;
}

}  // namespace hostnccl
