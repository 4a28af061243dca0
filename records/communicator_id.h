// detnccl: run-local communicator ids, equal on every member of a communicator and computed without communicating.
//
// CommunicatorRecord::id is the key that matches one communicator across the ranks of a run (the ordinal matches
// it across runs). Every member computes the same id from what all members share: the unique id for communicators
// made by ncclCommInitRank*, the parent's id plus what the split or shrink call shares for derived ones.
#ifndef DETNCCL_RECORDS_COMMUNICATOR_ID_H
#define DETNCCL_RECORDS_COMMUNICATOR_ID_H

#include <cstdint>
#include <span>

namespace detnccl::records {

// The id of a communicator made from an ncclUniqueId (pass its 128 bytes): every member holds the same bytes. Never 0.
std::uint64_t communicator_id_from_unique_id(std::span<const std::byte> unique_id_bytes) noexcept;

// The id of a communicator derived from a parent (ncclCommSplit, ncclCommShrink). derivation is the parent's count
// of earlier derivations (equal on all its members, since splits are collective), so that splitting one parent
// twice with the same color gives two ids; color is the split color (for a shrink, any value all survivors share,
// such as a hash of the excluded ranks). Never 0.
std::uint64_t communicator_id_from_parent(std::uint64_t parent_id, std::uint64_t derivation,
                                          std::int64_t color) noexcept;

}  // namespace detnccl::records

#endif  // DETNCCL_RECORDS_COMMUNICATOR_ID_H
