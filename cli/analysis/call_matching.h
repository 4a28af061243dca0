// detnccl analysis: the keys that match one call across the ranks of a run. A collective is matched by its
// communicator and its index among the collectives on it (CallInRun::collective_index); a Send and its Recv by
// their communicator, sender, receiver and per-pair order (CallInRun::pair_index). Communicator ids are run-local,
// so these keys never cross from one run to another. Used by `detnccl check` (run_check.cc) and by the
// cross-rank classification of `detnccl diff` (run_diff.cc).
#ifndef DETNCCL_CLI_ANALYSIS_CALL_MATCHING_H
#define DETNCCL_CLI_ANALYSIS_CALL_MATCHING_H

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "records/log_format.h"

namespace detnccl::analysis {

// One collective of a run: its communicator and how many collectives came before it on that communicator.
struct CollectiveKey {
  std::uint64_t comm_id;
  std::uint64_t index;
  friend bool operator==(const CollectiveKey&, const CollectiveKey&) = default;
};

// One Send/Recv pair of a run: its communicator, the sender's and receiver's ranks in it, and how many calls of
// the same direction between the two came before it.
struct PairKey {
  std::uint64_t comm_id;
  std::uint32_t sender;
  std::uint32_t receiver;
  std::uint64_t index;
  friend bool operator==(const PairKey&, const PairKey&) = default;
};

// Hash of either key, for unordered maps.
struct CallKeyHash {
  std::size_t operator()(const CollectiveKey& key) const noexcept {
    return std::hash<std::uint64_t>()(key.comm_id ^ (key.index * 0x9E3779B97F4A7C15ull));
  }
  std::size_t operator()(const PairKey& key) const noexcept {
    return std::hash<std::uint64_t>()(key.comm_id ^ (key.index * 0x9E3779B97F4A7C15ull) ^
                                      (std::uint64_t{key.sender} << 32 | key.receiver));
  }
};

// The pair key of a Send or Recv made by comm_rank to or from peer (both ranks in the communicator): the Send and
// the Recv of one transfer get the same key.
inline PairKey pair_key(std::uint64_t comm_id, records::OpId op, std::uint32_t comm_rank, std::uint32_t peer,
                        std::uint64_t pair_index) noexcept {
  const bool send = op == records::OpId::kSend;
  return {comm_id, send ? comm_rank : peer, send ? peer : comm_rank, pair_index};
}

// A member of a communicator: its id and a rank in it. Ordered, to key maps to the member's global rank.
struct CommunicatorMember {
  std::uint64_t comm_id;
  std::uint32_t rank;
  friend bool operator<(const CommunicatorMember& x, const CommunicatorMember& y) {
    return std::tie(x.comm_id, x.rank) < std::tie(y.comm_id, y.rank);
  }
};

// Global ranks by communicator member, as the logs' communicator records give them.
using GlobalRanks = std::map<CommunicatorMember, std::uint32_t>;

// "3, 5, 7" for a list of ranks; beyond the first `shown`, " and N more".
std::string rank_list(const std::vector<std::uint32_t>& ranks, std::size_t shown = 8);

}  // namespace detnccl::analysis

#endif  // DETNCCL_CLI_ANALYSIS_CALL_MATCHING_H
