/* hostnccl: how its shared-memory objects are named, shared by the library (libnccl.so.2) and hostnccl-run.
 * Header-only, so that the launcher needs no link dependency on the library.
 *
 * Every object hostnccl creates is /dev/shm/hostnccl-<32 hex digits> or, when a job tag is set,
 * /dev/shm/hostnccl-<tag>-<32 hex digits>. hostnccl-run gives each job a fresh tag (HOSTNCCL_JOB_TAG) and, once every
 * rank has exited, removes every object whose name starts with "hostnccl-<tag>-": what the ranks could not remove
 * themselves because they were all killed while a communicator was being created. A tag holds no '-', so the prefix
 * of one tag never matches the objects of another tag, nor the untagged names.
 */
#ifndef DETNCCL_HOSTNCCL_SHM_NAMES_H
#define DETNCCL_HOSTNCCL_SHM_NAMES_H

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>

namespace hostnccl {

// Where Linux (glibc's shm_open, hence Boost.Interprocess) keeps the POSIX shared-memory objects, one file each.
inline constexpr const char* kShmDirectory = "/dev/shm";

// The first characters of every shared-memory object name hostnccl creates.
inline constexpr std::string_view kShmNamePrefix = "hostnccl-";

// The job tag is HOSTNCCL_JOB_TAG (settings.h: kJobTagVariable). ncclGetUniqueId reads it and stores the tag in the
// id, so every rank of a communicator (and of its splits) derives the same names from the id alone.

// A job tag is 1 to kMaxJobTagLength characters from [0-9a-z].
inline constexpr std::size_t kMaxJobTagLength = 32;

/* Whether `tag` is a valid job tag (1 to 32 characters, each a digit or a lowercase ASCII letter). */
inline bool is_valid_job_tag(std::string_view tag) {
  return !tag.empty() && tag.size() <= kMaxJobTagLength &&
         std::all_of(tag.begin(), tag.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z'); });
}

/* The prefix shared by the names of every object of the job tagged `tag`, and by no other: "hostnccl-<tag>-". */
inline std::string job_shm_prefix(std::string_view tag) {
  std::string prefix(kShmNamePrefix);
  prefix += tag;
  prefix += '-';
  return prefix;
}

}  // namespace hostnccl

#endif  // DETNCCL_HOSTNCCL_SHM_NAMES_H
