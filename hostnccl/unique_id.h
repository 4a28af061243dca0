/* hostnccl: what a hostnccl ncclUniqueId holds, and the shared-memory segment name derived from it.
 *
 * Layout of the 128 bytes (all other bytes zero):
 *   [0, 4)   magic 0x434E4E48 ("HNNC" little-endian), so an id from another NCCL is rejected
 *   [4, 8)   layout version (2)
 *   [8, 24)  16 random bytes from getrandom(): the communicator's identity
 *   [24, 28) pid of the process that created the id
 *   [28, 60) the job tag (HOSTNCCL_JOB_TAG when the id was made, see shm_names.h), padded with zeros; all zeros
 *            when there is none
 * The segment of the communicator is "/hostnccl-" (then the tag and '-' when there is one) followed by the 32
 * lowercase hex digits of the random bytes.
 */
#ifndef DETNCCL_HOSTNCCL_UNIQUE_ID_H
#define DETNCCL_HOSTNCCL_UNIQUE_ID_H

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "abi/nccl_abi.h"

namespace hostnccl {

inline constexpr std::uint32_t kUniqueIdMagic = 0x434E4E48u;
inline constexpr std::uint32_t kUniqueIdVersion = 2;
inline constexpr std::size_t kJobTagOffset = 28;

struct IdFields {
  std::array<std::uint8_t, 16> random{};
  std::int32_t creator_pid = 0;
  std::string job_tag;  // empty when the id has none
};

/* Fills *id with a fresh id: random bytes from getrandom, and the job tag from HOSTNCCL_JOB_TAG. Returns
 * ncclInvalidArgument when the variable holds an invalid tag, ncclSystemError when no randomness is available, with
 * a message in *error. */
ncclResult_t make_unique_id(ncclUniqueId* id, std::string* error);

/* Decodes *id; returns false when it is not a hostnccl id of a known layout (a malformed job tag included). */
bool parse_unique_id(const ncclUniqueId& id, IdFields* fields);

/* The id of the communicator that split number `split_index` of the parent creates for `color`: a hash of the
 * parent's random bytes, the split index and the color, so every member derives the same id without talking. The
 * child keeps the parent's job tag. */
IdFields derive_split_id(const IdFields& parent, std::uint32_t split_index, int color);

/* The shared-memory object name (without the leading slash) for a communicator id: "hostnccl-<32 hex>", or
 * "hostnccl-<tag>-<32 hex>" when the id has a job tag. */
std::string segment_name(const IdFields& fields);

}  // namespace hostnccl

#endif  // DETNCCL_HOSTNCCL_UNIQUE_ID_H
