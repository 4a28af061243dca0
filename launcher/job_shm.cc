#include "launcher/job_shm.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "posix/io.h"

namespace detnccl::launcher {

bool make_job_tag(std::string* tag, std::string* error) {
  std::uint8_t random[8];
  if (const int failure = posix::fill_random(random, sizeof random); failure != 0) {
    *error = std::string("getrandom failed: ") + std::strerror(failure);
    return false;
  }
  static constexpr char kHex[] = "0123456789abcdef";
  *tag = std::to_string(getpid());
  *tag += 'x';
  for (const std::uint8_t byte : random) {
    *tag += kHex[byte >> 4];
    *tag += kHex[byte & 15];
  }
  return true;
}

std::vector<std::string> remove_entries_with_prefix(const std::string& directory, std::string_view prefix) {
  std::vector<std::string> removed;
  if (prefix.empty()) return removed;  // never "everything"
  DIR* listing = opendir(directory.c_str());
  if (listing == nullptr) return removed;
  const int directory_fd = dirfd(listing);
  std::vector<std::string> matching;
  while (const dirent* entry = readdir(listing)) {
    const std::string_view name(entry->d_name);
    if (name.starts_with(prefix)) matching.emplace_back(name);
  }
  // RATIONALE: unlink after the listing is complete; removing entries while readdir walks them may skip others.
  for (const std::string& name : matching) {
    if (unlinkat(directory_fd, name.c_str(), 0) == 0) removed.push_back(name);
  }
  closedir(listing);
  std::sort(removed.begin(), removed.end());
  return removed;
}

}  // namespace detnccl::launcher
