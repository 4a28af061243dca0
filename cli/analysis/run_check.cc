// detnccl analysis: cross-rank consistency of one run (see run_check.h).
#include "cli/analysis/run_check.h"

#include <algorithm>
#include <exception>
#include <functional>
#include <iterator>
#include <limits>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>

#include "cli/analysis/call_layout.h"
#include "cli/analysis/call_matching.h"
#include "cli/analysis/check_parts.h"
#include "cli/analysis/parallel.h"
#include "cli/analysis/run_jobs.h"
#include "hash/fingerprint.h"
#include "records/block_digests.h"

namespace detnccl::analysis {

std::string ranks_text(const std::vector<std::uint32_t>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  text += rank_list(ranks);
  return text;
}

namespace {

using records::CallFields;

// At most this many members of an incomplete collective that no log names are listed in its finding; the message
// counts the others.
constexpr std::uint64_t kListedUnknownMembers = 1024;

// "ranks 3, 5, 7" for the missing members of a collective, counting `unlisted` more beyond those listed.
std::string missing_text(const std::vector<std::uint32_t>& ranks, std::uint64_t unlisted) {
  if (unlisted == 0) return ranks_text(ranks);
  constexpr std::size_t kShown = 8;
  std::string text = "ranks ";
  for (std::size_t i = 0; i < ranks.size() && i < kShown; ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text + " and " + std::to_string(ranks.size() - std::min(ranks.size(), kShown) + unlisted) + " more";
}
using records::OpId;

// The entry of a map from a value to the ranks holding it that holds the most ranks, the first in value order on a
// tie: the majority that the other values' ranks are named against.
template <typename RanksByValue>
typename RanksByValue::const_iterator majority_of(const RanksByValue& ranks_by_value) {
  return std::max_element(ranks_by_value.begin(), ranks_by_value.end(),
                          [](const auto& a, const auto& b) { return a.second.size() < b.second.size(); });
}

// One rank's call in a group.
struct Member {
  std::uint32_t rank = 0;  // global
  CallInRun call;
  std::uint32_t comm_rank() const noexcept { return call.communicator.rank; }
  bool has_input() const noexcept { return (call.call.flags & records::kCallInputFingerprint) != 0; }
  bool has_output() const noexcept { return (call.call.flags & records::kCallOutputFingerprint) != 0; }
};

struct Group {
  std::uint32_t nranks = 0;
  std::vector<Member> members;
};

std::string where(const Member& first, std::uint64_t index) {
  return std::string(records::op_name(first.call.call.op)) + " #" + std::to_string(index) + " on communicator " +
         hash::format_digest(first.call.communicator.id) + " (step " + std::to_string(first.call.call.step) + ")";
}

class Checker {
 public:
  explicit Checker(const CheckOptions& options) : options_(options) {}

  // A member of a communicator: rank's log names it (a communicator record or a call).
  void note_member(std::uint64_t comm_id, std::uint32_t rank) {
    const auto [it, inserted] = lowest_member_.try_emplace(comm_id, rank);
    if (!inserted) it->second = std::min(it->second, rank);
  }

  // Whether the communicator has a member below `first`: a part of ranks from `first` on never owns it.
  bool has_member_below(std::uint64_t comm_id, std::uint32_t first) const {
    const auto found = lowest_member_.find(comm_id);
    return found != lowest_member_.end() && found->second < first;
  }

  void add(std::uint32_t rank, const CallInRun& call) {
    const std::uint64_t comm_id = call.communicator.id;
    note_member(comm_id, rank);
    const std::uint32_t comm_rank = call.communicator.rank;
    global_of_[{comm_id, comm_rank}] = rank;
    if (is_point_to_point(call.call.op)) {
      const PairKey key =
          pair_key(comm_id, call.call.op, comm_rank, static_cast<std::uint32_t>(call.call.peer), call.pair_index);
      const auto found = pairs_.find(key);
      if (found == pairs_.end()) {
        pairs_.emplace(key, Member{rank, call});
      } else {
        check_pair(found->second, Member{rank, call}, key);
        pairs_.erase(found);
      }
      return;
    }
    const CollectiveKey key{comm_id, call.collective_index};
    Group& group = groups_[key];
    if (group.members.empty()) group.nranks = call.communicator.nranks;
    group.members.push_back(Member{rank, call});
    if (group.nranks != 0 && group.members.size() >= group.nranks) {
      check_group(group, key);
      groups_.erase(key);
    }
  }

  // After the last call of a log: its communicators name its global rank in each, and a truncated log's missing
  // calls are not recorded rather than never made.
  void add_log(std::uint32_t rank, const RankLogStream& stream) {
    std::set<std::uint64_t> communicators;
    for (const records::CommunicatorRecord& communicator : stream.communicators()) {
      stated_sizes_[communicator.id][communicator.nranks].insert(rank);
      global_of_.try_emplace({communicator.id, communicator.rank}, rank);
      note_member(communicator.id, rank);
      communicators.insert(communicator.id);
    }
    if (stream.end().kind == records::LogEndKind::kTruncated) {
      truncated_.insert(rank);
      truncated_communicators_.push_back(std::move(communicators));
    }
  }

  // After the last call: whatever is still pending lacks members.
  void finish() {
    struct Incomplete {
      CollectiveKey key;
      OpId op;
      std::uint64_t step;
      std::vector<std::uint32_t> missing;
      std::uint64_t unlisted = 0;  // members missing beyond those in `missing` (a communicator too large to list)
    };
    std::vector<Incomplete> incomplete;
    const std::set<std::uint64_t> size_disagreements = report_size_disagreements();
    for (auto& [key, group] : groups_) {
      check_group(group, key);
      // Which members are missing depends on the size: the size mismatch finding stands for them.
      if (size_disagreements.count(key.comm_id) != 0) continue;
      std::set<std::uint32_t> present;
      for (const Member& member : group.members) present.insert(member.comm_rank());
      // RATIONALE: the work is bounded by the logs, not by the communicator's stated size (a damaged or forged log
      // can state 2^31 members): the members some log names are visited, the others only counted and the first
      // kListedUnknownMembers of them listed.
      std::vector<std::uint32_t> missing;
      std::uint64_t named = 0;  // members below the size some log names (those present included)
      bool truncated = false;
      for (auto it = global_of_.lower_bound({key.comm_id, 0});
           it != global_of_.end() && it->first.comm_id == key.comm_id && it->first.rank < group.nranks; ++it) {
        ++named;
        if (present.count(it->first.rank) != 0) continue;
        if (truncated_.count(it->second) != 0) {
          truncated = true;  // made after its log's truncation marker: not recorded
        } else {
          missing.push_back(it->second);
        }
      }
      // Members whose global rank no log names.
      const std::uint64_t unknown = std::uint64_t{group.nranks} - named;
      if (unknown > 0 && missing.empty() && unknown <= truncated_without(key.comm_id)) {
        // members whose truncated logs end before this communicator's record
        ++current_->not_checked;
        continue;
      }
      std::uint64_t unlisted = 0;
      if (unknown > 0) {
        auto known = global_of_.lower_bound({key.comm_id, 0});
        std::uint64_t listed = 0;
        for (std::uint32_t r = 0; r < group.nranks && listed < kListedUnknownMembers; ++r) {
          while (known != global_of_.end() && known->first.comm_id == key.comm_id && known->first.rank < r) ++known;
          if (known != global_of_.end() && known->first.comm_id == key.comm_id && known->first.rank == r) continue;
          missing.push_back(r);
          ++listed;
        }
        unlisted = unknown - listed;
      }
      if (missing.empty() && truncated) {
        ++current_->not_checked;
        continue;
      }
      std::sort(missing.begin(), missing.end());
      const Member& first = lowest(group);
      incomplete.push_back({key, first.call.call.op, first.call.call.step, std::move(missing), unlisted});
    }
    std::sort(incomplete.begin(), incomplete.end(), [](const Incomplete& x, const Incomplete& y) {
      return std::tie(x.key.comm_id, x.key.index) < std::tie(y.key.comm_id, y.key.index);
    });
    // RATIONALE: a rank that died leaves every later collective incomplete; one finding per run of collectives
    // with the same missing ranks says it once.
    for (std::size_t i = 0; i < incomplete.size();) {
      std::size_t j = i + 1;
      while (j < incomplete.size() && incomplete[j].key.comm_id == incomplete[i].key.comm_id &&
             incomplete[j].key.index == incomplete[j - 1].key.index + 1 &&
             incomplete[j].missing == incomplete[i].missing && incomplete[j].unlisted == incomplete[i].unlisted) {
        ++j;
      }
      const Incomplete& first = incomplete[i];
      CheckFinding finding;
      finding.kind = CheckFindingKind::kNotAllJoined;
      finding.comm_id = first.key.comm_id;
      finding.index = first.key.index;
      finding.count = j - i;
      finding.op = first.op;
      finding.step = first.step;
      finding.ranks = first.missing;
      finding.message = "not all ranks joined: " + missing_text(first.missing, first.unlisted) + " never made " +
                        std::string(records::op_name(first.op)) + " #" + std::to_string(first.key.index) +
                        " on communicator " + hash::format_digest(first.key.comm_id) + " (step " +
                        std::to_string(first.step) + ")" +
                        (j - i > 1 ? " nor the " + std::to_string(j - i - 1) + " collectives after it" : "");
      add_finding(std::move(finding));
      i = j;
    }
    for (auto& [key, member] : pairs_) {
      current_ = &tallies_[key.comm_id];
      const bool send = member.call.call.op == OpId::kSend;
      const auto other = global_of_.find({key.comm_id, send ? key.receiver : key.sender});
      if (other != global_of_.end() ? truncated_.count(other->second) != 0 : truncated_without(key.comm_id) > 0) {
        ++current_->not_checked;  // its partner was made after the partner's log was truncated
        continue;
      }
      const std::string other_name = other != global_of_.end()
                                         ? "rank " + std::to_string(other->second)
                                         : "communicator rank " + std::to_string(send ? key.receiver : key.sender);
      CheckFinding finding;
      finding.kind = CheckFindingKind::kUnmatchedPointToPoint;
      finding.comm_id = key.comm_id;
      finding.index = key.index;
      finding.op = member.call.call.op;
      finding.step = member.call.call.step;
      finding.ranks = {other != global_of_.end() ? other->second : member.rank};
      finding.message = "rank " + std::to_string(member.rank) + "'s " + (send ? "Send #" : "Recv #") +
                        std::to_string(key.index) + (send ? " to " : " from ") + other_name + " (step " +
                        std::to_string(finding.step) + ") has no matching " + (send ? "Recv" : "Send") + " on " +
                        other_name;
      add_finding(std::move(finding));
    }
  }

  // The tallies of the communicators whose lowest member (the lowest global rank whose log names it) is in `range`,
  // added up. After finish().
  CheckTally owned_by(const RankRange& range) const {
    CheckTally owned;
    for (const auto& [comm_id, tally] : tallies_) {
      const auto found = lowest_member_.find(comm_id);
      if (found != lowest_member_.end() && range.contains(found->second)) owned.add(tally, options_.findings_kept);
    }
    return owned;
  }

 private:
  static const Member& lowest(const Group& group) {
    return *std::min_element(group.members.begin(), group.members.end(),
                             [](const Member& x, const Member& y) { return x.comm_rank() < y.comm_rank(); });
  }

  void add_finding(CheckFinding finding) {
    CheckTally& tally = tallies_[finding.comm_id];
    ++tally.finding_counts[finding.kind];
    tally.findings.push_back(std::move(finding));
    // RATIONALE: the findings kept are the first in report order, whatever order they were found in (a split check
    // finds them in another order); trimming at twice the limit keeps memory bounded at a sort per `kept` findings.
    if (tally.findings.size() >= 2 * std::max<std::size_t>(options_.findings_kept, 1)) {
      std::sort(tally.findings.begin(), tally.findings.end(), check_finding_order);
      tally.findings.resize(options_.findings_kept);
    }
  }

  // Members whose value of a field differs from the most common one; empty when all agree.
  template <typename Value>
  std::vector<std::uint32_t> odd_ones(const Group& group, const std::function<Value(const Member&)>& value,
                                      std::string& description) {
    std::map<Value, std::vector<std::uint32_t>> by_value;
    for (const Member& member : group.members) by_value[value(member)].push_back(member.rank);
    if (by_value.size() <= 1) return {};
    const auto majority = majority_of(by_value);
    std::vector<std::uint32_t> odd;
    description.clear();
    for (auto& [v, ranks] : by_value) {
      std::sort(ranks.begin(), ranks.end());
      if (!description.empty()) description += "; ";
      description += ranks_text(ranks) + ": " + to_text(v);
      if (&ranks != &majority->second) odd.insert(odd.end(), ranks.begin(), ranks.end());
    }
    std::sort(odd.begin(), odd.end());
    return odd;
  }
  static std::string to_text(OpId op) { return std::string(records::op_name(op)); }
  static std::string to_text(std::uint64_t v) { return std::to_string(v); }
  static std::string to_text(std::int64_t v) { return std::to_string(v); }

  bool check_metadata(const Group& group, const CollectiveKey& key) {
    const Member& first = lowest(group);
    std::string description;
    const auto report = [&](CheckFindingKind kind, std::vector<std::uint32_t> odd, const std::string& what) {
      CheckFinding finding;
      finding.kind = kind;
      finding.comm_id = key.comm_id;
      finding.index = key.index;
      finding.op = first.call.call.op;
      finding.step = first.call.call.step;
      finding.ranks = std::move(odd);
      finding.message = std::string(check_finding_name(kind)) + " at collective #" + std::to_string(key.index) +
                        " on communicator " + hash::format_digest(key.comm_id) + " (step " +
                        std::to_string(finding.step) + "): " + what + " — the members' control flow diverged";
      add_finding(std::move(finding));
    };
    if (auto odd = odd_ones<OpId>(
            group, [](const Member& m) { return m.call.call.op; }, description);
        !odd.empty()) {
      report(CheckFindingKind::kTypeMismatch, std::move(odd), description);
      return false;
    }
    bool consistent = true;
    const auto field = [&](CheckFindingKind kind, const char* name, std::function<std::int64_t(const Member&)> value) {
      if (auto odd = odd_ones<std::int64_t>(group, value, description); !odd.empty()) {
        report(kind, std::move(odd), std::string(name) + " " + description);
        consistent = false;
      }
    };
    field(CheckFindingKind::kSizeMismatch, "count",
          [](const Member& m) { return static_cast<std::int64_t>(m.call.call.count); });
    field(CheckFindingKind::kDtypeMismatch, "datatype",
          [](const Member& m) { return std::int64_t{m.call.call.datatype}; });
    field(CheckFindingKind::kRedopMismatch, "reduction",
          [](const Member& m) { return std::int64_t{m.call.call.redop}; });
    if (is_rooted(first.call.call.op)) {
      field(CheckFindingKind::kRootMismatch, "root", [](const Member& m) { return std::int64_t{m.call.call.peer}; });
    }
    return consistent;
  }

  void content_failure(const Group& group, const CollectiveKey& key, std::vector<std::uint32_t> ranks,
                       const std::string& what) {
    const Member& first = lowest(group);
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    CheckFinding finding;
    finding.kind = CheckFindingKind::kContentMismatch;
    finding.comm_id = key.comm_id;
    finding.index = key.index;
    finding.op = first.call.call.op;
    finding.step = first.call.call.step;
    finding.ranks = std::move(ranks);
    finding.message = "content mismatch in " + where(first, key.index) + ": " + what +
                      ". Inside one run this means corrupted data or a broken collective";
    add_finding(std::move(finding));
  }

  // A holder's fold of per-peer blocks (records/block_digests.h) against the fold of the members' input (or output)
  // fingerprints in rank order: block r is member r's buffer, byte for byte, so the two folds are equal unless a
  // block differs. Which one cannot be told from folds: the finding names no rank. Needs every member's fingerprint.
  void check_folded_blocks(const Group& group, const CollectiveKey& key,
                           const std::map<std::uint32_t, const Member*>& by_comm_rank, std::uint64_t holder_fold,
                           bool members_input, const std::string& what) {
    if (by_comm_rank.size() != group.nranks) return;  // a member is missing: its own finding says so
    std::vector<std::uint64_t> fingerprints;
    fingerprints.reserve(group.nranks);
    for (const auto& [r, member] : by_comm_rank) {
      if (r != fingerprints.size() || !(members_input ? member->has_input() : member->has_output())) {
        ++current_->folded_blocks_unchecked;
        return;
      }
      fingerprints.push_back(members_input ? member->call.call.input_fingerprint
                                           : member->call.call.output_fingerprint);
    }
    ++current_->content_checks;
    if (records::fold_block_digests(fingerprints) == holder_fold) return;
    content_failure(group, key, {},
                    what +
                        " (the folds differ; the blocks were recorded folded, DETNCCL_TRACE=hash, so the member "
                        "at fault cannot be named: DETNCCL_TRACE=segments names it)");
  }

  void check_group(const Group& group, const CollectiveKey& key) {
    current_ = &tallies_[key.comm_id];
    ++current_->collectives;
    if (!check_metadata(group, key)) return;
    const Member& first = lowest(group);
    const OpId op = first.call.call.op;
    std::map<std::uint32_t, const Member*> by_comm_rank;
    for (const Member& member : group.members) by_comm_rank[member.comm_rank()] = &member;
    // RATIONALE: the block checks below index a member's blocks by communicator rank. A forged or damaged log may state
    // a rank outside its communicator's size (or a size of 0: no blocks at all); such a member has no block to check
    // (found by fuzz_diff: fuzz/regressions/diff/).
    const auto has_block = [](std::span<const std::uint64_t> blocks, std::uint32_t index) {
      return index < blocks.size();
    };

    // Outputs every member must share.
    if (op == OpId::kAllReduce || op == OpId::kBroadcast || op == OpId::kBcast || op == OpId::kAllGather) {
      std::map<std::uint64_t, std::vector<std::uint32_t>> outputs;
      for (const Member& member : group.members) {
        if (member.has_output()) {
          outputs[member.call.call.output_fingerprint].push_back(member.rank);
        } else {
          ++current_->content_unchecked;
        }
      }
      if (outputs.size() > 1) {
        ++current_->content_checks;
        auto majority = outputs.begin();
        for (auto it = outputs.begin(); it != outputs.end(); ++it) {
          if (it->second.size() > majority->second.size()) majority = it;
        }
        std::vector<std::uint32_t> odd;
        for (const auto& [fingerprint, ranks] : outputs) {
          if (fingerprint != majority->first) odd.insert(odd.end(), ranks.begin(), ranks.end());
        }
        std::sort(odd.begin(), odd.end());
        content_failure(group, key, odd,
                        "the outputs differ between members (" + ranks_text(odd) + " got a result different from " +
                            std::to_string(majority->second.size()) + " other member(s))");
        return;
      } else if (!outputs.empty()) {
        ++current_->content_checks;
      }
      const std::uint64_t shared = outputs.empty() ? 0 : outputs.begin()->first;
      if ((op == OpId::kBroadcast || op == OpId::kBcast) && !outputs.empty()) {
        const auto root = by_comm_rank.find(static_cast<std::uint32_t>(first.call.call.peer));
        if (root != by_comm_rank.end() && root->second->has_input()) {
          ++current_->content_checks;
          if (root->second->call.call.input_fingerprint != shared) {
            content_failure(group, key, {root->second->rank},
                            "every member's output differs from the root's (rank " +
                                std::to_string(root->second->rank) + ") input");
          }
        }
      }
      if (op == OpId::kAllGather && !outputs.empty()) {
        // Block r of the gathered output is member r's input.
        const Member* holder = nullptr;
        const Member* folded = nullptr;  // a member that recorded the blocks' fold only (DETNCCL_TRACE=hash)
        for (const Member& member : group.members) {
          if (!member.has_output()) continue;
          if (member.call.call.output_blocks.size() == group.nranks) holder = &member;
          if (records::output_blocks_folded_only(member.call.call)) folded = &member;
        }
        if (holder == nullptr && folded != nullptr) {
          check_folded_blocks(group, key, by_comm_rank, folded->call.call.output_blocks_digest, true,
                              "the gathered blocks differ from the members' inputs");
        } else if (holder != nullptr) {
          std::vector<std::uint32_t> odd;
          for (const auto& [r, member] : by_comm_rank) {
            if (!member->has_input() || !has_block(holder->call.call.output_blocks, r)) continue;
            ++current_->content_checks;
            if (holder->call.call.output_blocks[r] != member->call.call.input_fingerprint) odd.push_back(member->rank);
          }
          if (!odd.empty()) {
            content_failure(group, key, odd, "the gathered block of " + ranks_text(odd) + " differs from its input");
          }
        }
      }
      return;
    }
    if (op == OpId::kAlltoAll) {
      // Output block p of member r is input block r of member p: a relation between single blocks, which their folds
      // cannot show.
      if (std::any_of(group.members.begin(), group.members.end(), [](const Member& member) {
            return records::input_blocks_folded_only(member.call.call) ||
                   records::output_blocks_folded_only(member.call.call);
          })) {
        ++current_->folded_blocks_unchecked;
      }
      std::vector<std::uint32_t> odd;
      std::string example;
      for (const auto& [r, receiver] : by_comm_rank) {
        if (!receiver->has_output() || receiver->call.call.output_blocks.size() != group.nranks) continue;
        for (const auto& [p, sender] : by_comm_rank) {
          if (!sender->has_input() || sender->call.call.input_blocks.size() != group.nranks) continue;
          if (!has_block(receiver->call.call.output_blocks, p) || !has_block(sender->call.call.input_blocks, r))
            continue;
          ++current_->content_checks;
          if (receiver->call.call.output_blocks[p] != sender->call.call.input_blocks[r]) {
            odd.push_back(receiver->rank);
            if (example.empty()) {
              example = "rank " + std::to_string(receiver->rank) + "'s block from rank " +
                        std::to_string(sender->rank) + " differs from what rank " + std::to_string(sender->rank) +
                        " sent";
            }
          }
        }
      }
      if (!odd.empty()) content_failure(group, key, odd, example);
      return;
    }
    if (op == OpId::kGather || op == OpId::kScatter) {
      const auto root = by_comm_rank.find(static_cast<std::uint32_t>(first.call.call.peer));
      if (root == by_comm_rank.end()) return;
      const Member& holder = *root->second;
      const bool gather = op == OpId::kGather;
      const auto blocks = gather ? holder.call.call.output_blocks : holder.call.call.input_blocks;
      if (gather ? !holder.has_output() : !holder.has_input()) return;
      if (gather ? records::output_blocks_folded_only(holder.call.call)
                 : records::input_blocks_folded_only(holder.call.call)) {
        check_folded_blocks(group, key, by_comm_rank,
                            gather ? holder.call.call.output_blocks_digest : holder.call.call.input_blocks_digest,
                            gather,
                            gather ? "the root's gathered blocks differ from the members' inputs"
                                   : "the blocks the members received differ from the root's");
        return;
      }
      if (blocks.size() != group.nranks) return;
      std::vector<std::uint32_t> odd;
      for (const auto& [r, member] : by_comm_rank) {
        if (!(gather ? member->has_input() : member->has_output()) || !has_block(blocks, r)) continue;
        ++current_->content_checks;
        const std::uint64_t expected =
            gather ? member->call.call.input_fingerprint : member->call.call.output_fingerprint;
        if (blocks[r] != expected) odd.push_back(member->rank);
      }
      if (!odd.empty()) {
        content_failure(group, key, odd,
                        gather ? "the root's gathered block of " + ranks_text(odd) + " differs from that rank's input"
                               : ranks_text(odd) + " received a block that differs from the root's");
      }
    }
    // Reduce and ReduceScatter: no relation between recorded fingerprints to check.
  }

  void check_pair(const Member& x, const Member& y, const PairKey& key) {
    current_ = &tallies_[key.comm_id];
    ++current_->point_to_point_pairs;
    const Member& send = x.call.call.op == OpId::kSend ? x : y;
    const Member& recv = x.call.call.op == OpId::kSend ? y : x;
    const auto describe = [&] {
      return "rank " + std::to_string(send.rank) + "'s Send #" + std::to_string(key.index) + " to rank " +
             std::to_string(recv.rank) + " on communicator " + hash::format_digest(key.comm_id) + " (step " +
             std::to_string(send.call.call.step) + ")";
    };
    CheckFinding finding;
    finding.comm_id = key.comm_id;
    finding.index = key.index;
    finding.op = OpId::kSend;
    finding.step = send.call.call.step;
    if (send.call.call.count != recv.call.call.count || send.call.call.datatype != recv.call.call.datatype) {
      finding.kind = send.call.call.count != recv.call.call.count ? CheckFindingKind::kSizeMismatch
                                                                  : CheckFindingKind::kDtypeMismatch;
      finding.ranks = {send.rank, recv.rank};
      finding.message = std::string(check_finding_name(finding.kind)) + ": " + describe() + " sends " +
                        std::string(records::datatype_name(send.call.call.datatype)) + " x " +
                        std::to_string(send.call.call.count) + ", its Recv expects " +
                        std::string(records::datatype_name(recv.call.call.datatype)) + " x " +
                        std::to_string(recv.call.call.count);
      add_finding(std::move(finding));
      return;
    }
    if (!send.has_input() || !recv.has_output()) {
      ++current_->content_unchecked;
      return;
    }
    ++current_->content_checks;
    if (send.call.call.input_fingerprint != recv.call.call.output_fingerprint) {
      finding.kind = CheckFindingKind::kContentMismatch;
      finding.ranks = {recv.rank};
      finding.message = "content mismatch: " + describe() + " sent " +
                        hash::format_digest(send.call.call.input_fingerprint) + " but rank " +
                        std::to_string(recv.rank) + " received " +
                        hash::format_digest(recv.call.call.output_fingerprint) +
                        ". Inside one run this means corrupted data or a broken transfer";
      add_finding(std::move(finding));
    }
  }

  // One finding per communicator whose members' logs state different sizes for it (the odd ranks named against the
  // size most of them state); returns those communicators.
  std::set<std::uint64_t> report_size_disagreements() {
    std::set<std::uint64_t> disagreements;
    for (const auto& [comm_id, by_size] : stated_sizes_) {
      if (by_size.size() <= 1) continue;
      disagreements.insert(comm_id);
      const auto majority = majority_of(by_size);
      CheckFinding finding;
      finding.kind = CheckFindingKind::kCommSizeMismatch;
      finding.comm_id = comm_id;
      std::string sizes;
      for (const auto& [size, ranks] : by_size) {
        const std::vector<std::uint32_t> listed(ranks.begin(), ranks.end());
        if (!sizes.empty()) sizes += "; ";
        sizes += ranks_text(listed) + ": " + std::to_string(size) + (size == 1 ? " member" : " members");
        if (&ranks != &majority->second) finding.ranks.insert(finding.ranks.end(), listed.begin(), listed.end());
      }
      std::sort(finding.ranks.begin(), finding.ranks.end());
      finding.message = "communicator size mismatch on communicator " + hash::format_digest(comm_id) + " (" + sizes +
                        "): its members' logs disagree on its size (a damaged log, or two communicators sharing one "
                        "id), so its collectives are not checked for members that never joined";
      add_finding(std::move(finding));
    }
    return disagreements;
  }

  // Truncated logs that hold no record of the communicator: their process may be any member of it.
  std::size_t truncated_without(std::uint64_t comm_id) const {
    return static_cast<std::size_t>(
        std::count_if(truncated_communicators_.begin(), truncated_communicators_.end(),
                      [comm_id](const std::set<std::uint64_t>& ids) { return ids.count(comm_id) == 0; }));
  }

  const CheckOptions& options_;
  std::unordered_map<std::uint64_t, CheckTally> tallies_;         // per communicator id
  CheckTally* current_ = nullptr;                                 // the tally of the group or pair being checked
  std::set<std::uint32_t> truncated_;                             // global ranks of truncated logs
  std::vector<std::set<std::uint64_t>> truncated_communicators_;  // per truncated log: the communicators it records
  std::unordered_map<CollectiveKey, Group, CallKeyHash> groups_;
  std::unordered_map<PairKey, Member, CallKeyHash> pairs_;
  GlobalRanks global_of_;                                           // (communicator id, rank in it) -> global rank
  std::unordered_map<std::uint64_t, std::uint32_t> lowest_member_;  // communicator id -> lowest global rank naming it
  // communicator id -> size a communicator record states -> global ranks whose logs state it
  std::unordered_map<std::uint64_t, std::map<std::uint32_t, std::set<std::uint32_t>>> stated_sizes_;
};

}  // namespace

std::string_view check_finding_name(CheckFindingKind kind) noexcept {
  switch (kind) {
    case CheckFindingKind::kTypeMismatch:
      return "type mismatch";
    case CheckFindingKind::kSizeMismatch:
      return "size mismatch";
    case CheckFindingKind::kDtypeMismatch:
      return "dtype mismatch";
    case CheckFindingKind::kRedopMismatch:
      return "reduction mismatch";
    case CheckFindingKind::kRootMismatch:
      return "root mismatch";
    case CheckFindingKind::kNotAllJoined:
      return "not all ranks joined";
    case CheckFindingKind::kContentMismatch:
      return "content mismatch";
    case CheckFindingKind::kUnmatchedPointToPoint:
      return "unmatched send/recv";
    case CheckFindingKind::kConfigMismatch:
      return "configuration mismatch";
    case CheckFindingKind::kCommSizeMismatch:
      return "communicator size mismatch";
  }
  return "?";
}

bool check_finding_order(const CheckFinding& x, const CheckFinding& y) {
  return std::tie(x.step, x.comm_id, x.index, x.kind, x.ranks, x.message, x.count, x.op) <
         std::tie(y.step, y.comm_id, y.index, y.kind, y.ranks, y.message, y.count, y.op);
}

void CheckTally::add(CheckTally other, std::size_t findings_kept) {
  collectives += other.collectives;
  point_to_point_pairs += other.point_to_point_pairs;
  content_checks += other.content_checks;
  content_unchecked += other.content_unchecked;
  folded_blocks_unchecked += other.folded_blocks_unchecked;
  not_checked += other.not_checked;
  for (const auto& [kind, count] : other.finding_counts) finding_counts[kind] += count;
  if (other.findings.empty() && findings.size() <= findings_kept) return;
  findings.insert(findings.end(), std::make_move_iterator(other.findings.begin()),
                  std::make_move_iterator(other.findings.end()));
  std::sort(findings.begin(), findings.end(), check_finding_order);
  if (findings.size() > findings_kept) findings.resize(findings_kept);
}

RankRangeCheck check_rank_range(const RunLogs& run, const CheckOptions& options, const RankRange& range) {
  RankRangeCheck part;
  try {
    if (!run.error.empty()) {
      part.error = run.error;
      return part;
    }
    if (std::string refused = refuse_single_file(run, "check"); !refused.empty()) {
      part.error = std::move(refused);
      return part;
    }
    for (const RankLogFile& file : run.logs) part.run_ranks.push_back(file.rank);
    std::sort(part.run_ranks.begin(), part.run_ranks.end());
    // The logs with a header. A file without one (its writer was killed before writing it) holds no records: the
    // rank is checked as one without a log (its calls are missing), with a note naming the file.
    RunLogs readable = run;
    readable.logs.clear();
    std::vector<std::unique_ptr<RankLogStream>> streams;
    std::vector<CheckedRank> checked;  // every rank of the run, in run.logs order
    std::string first_no_header;
    for (const RankLogFile& file : run.logs) {
      std::string error;
      bool no_header = false;
      // Streamed (records::LogAccess): no log is mapped, each reader holds one window of its file; the calls that
      // wait for their matches keep their own arrays (below).
      std::unique_ptr<RankLogStream> stream =
          RankLogStream::open(file, error, &no_header, records::LogAccess::kStreamed);
      if (stream) stream->number_steps(options.step_numbering);
      if (!stream && !no_header) {
        part.error = error;
        return part;
      }
      CheckedRank& rank = checked.emplace_back();
      rank.rank = file.rank;
      if (!stream) {
        rank.has_header = false;
        rank.no_header = error;
        if (first_no_header.empty()) first_no_header = "rank " + std::to_string(file.rank) + ": " + error;
        continue;
      }
      streams.push_back(std::move(stream));
      readable.logs.push_back(file);
    }
    if (streams.empty()) {
      part.error = run.path + ": no log has a header (" + first_no_header +
                   "; checked as a rank without a log): nothing to check";
      return part;
    }
    const std::size_t n = streams.size();
    // RATIONALE: every rank's log is open at once, each reader with its window of the file (at most 256 KiB), so the
    // budget is shared: 256 MiB over all readers, between 64 KiB and 4 MiB each.
    constexpr std::uint64_t kResidentBudget = 256u << 20;
    std::uint64_t release = std::clamp<std::uint64_t>(kResidentBudget / n, 64u << 10, 4u << 20);
    if (options.read_window_bytes != 0) release = std::min(release, options.read_window_bytes);
    for (const auto& stream : streams) stream->set_page_release_bytes(release);
    part.configuration = range.contains(readable.logs.front().rank);
    if (part.configuration) {
      CheckResult configuration;
      check_configurations(streams, readable, configuration, std::numeric_limits<std::size_t>::max());
      part.config_notes = std::move(configuration.config_notes);
      part.tally.finding_counts = std::move(configuration.finding_counts);
      part.tally.findings = std::move(configuration.findings);
      std::sort(part.tally.findings.begin(), part.tally.findings.end(), check_finding_order);
      if (part.tally.findings.size() > options.findings_kept) part.tally.findings.resize(options.findings_kept);
    }
    Checker checker(options);
    std::vector<std::vector<CallInRun>> batches(n);
    std::vector<std::uint64_t> calls(n, 0);
    std::vector<std::size_t> communicators_noted(n, 0);  // per log: its communicator records noted so far
    std::vector<char> done(n, 0);
    const std::size_t per_round = std::max<std::size_t>(1, options.calls_per_round);
    for (bool any = true; any;) {
      // Reading and checksumming dominate: do it on every core, then match on one thread.
      parallel_for(n, options.threads, [&](std::size_t i) {
        batches[i].clear();
        if (done[i]) return;
        CallInRun call;
        while (batches[i].size() < per_round && streams[i]->next(call)) {
          batches[i].push_back(call);
          batches[i].back().keep_arrays();  // the reader's window moves on before the call is matched
        }
        if (batches[i].size() < per_round) done[i] = 1;
      });
      any = false;
      // RATIONALE: a communicator with a member below the range is another part's: its calls are not matched here
      // (their checks would be dropped). The logs' communicator records name members before their calls do.
      for (std::size_t i = 0; i < n && range.first > 0; ++i) {
        const auto& communicators = streams[i]->communicators();
        for (; communicators_noted[i] < communicators.size(); ++communicators_noted[i]) {
          checker.note_member(communicators[communicators_noted[i]].id, readable.logs[i].rank);
        }
      }
      for (std::size_t i = 0; i < n; ++i) {
        for (const CallInRun& call : batches[i]) {
          if (!checker.has_member_below(call.communicator.id, range.first)) checker.add(readable.logs[i].rank, call);
        }
        calls[i] += batches[i].size();
        if (options.calls_done != nullptr) options.calls_done->fetch_add(batches[i].size());
        any = any || !done[i];
      }
    }
    std::vector<RankJobEvidence> jobs(n);
    for (std::size_t i = 0; i < n; ++i) {
      if (log_end_is_unusable(streams[i]->end())) {
        part.error = streams[i]->path() + ": " + streams[i]->end().message;
        return part;
      }
      jobs[i] = {readable.logs[i].rank, streams[i]->header().world_size, streams[i]->communicators()};
    }
    if (const JobGroups groups = group_logs_by_job(jobs); groups.mixed()) {
      part.error = run.path + ": " + describe_job_groups(groups);
      return part;
    }
    for (std::size_t i = 0; i < n; ++i) checker.add_log(readable.logs[i].rank, *streams[i]);
    checker.finish();
    part.tally.add(checker.owned_by(range), options.findings_kept);
    for (std::size_t i = 0, s = 0; i < checked.size(); ++i) {
      CheckedRank& rank = checked[i];
      if (rank.has_header) {
        const RankLogStream& stream = *streams[s];
        rank.calls = calls[s];
        rank.unknown_records = stream.unknown_records_skipped();
        rank.step_digests = !stream.step_digests().empty();
        rank.end = stream.end().kind;
        rank.end_message = stream.end().message;
        ++s;
      }
      if (range.contains(rank.rank)) part.ranks.push_back(std::move(rank));
    }
    std::sort(part.ranks.begin(), part.ranks.end(),
              [](const CheckedRank& x, const CheckedRank& y) { return x.rank < y.rank; });
  } catch (const std::exception& e) {
    part.error = std::string("check failed: ") + e.what();
    part.ranks.clear();
  }
  return part;
}

CheckResult combine_rank_checks(std::vector<RankRangeCheck> parts, const CheckOptions& options) {
  CheckResult result;
  for (const RankRangeCheck& part : parts) {
    if (!part.error.empty()) {
      result.error = part.error;
      return result;
    }
  }
  std::vector<CheckedRank> ranks;
  CheckTally tally;
  for (RankRangeCheck& part : parts) {
    for (CheckedRank& rank : part.ranks) ranks.push_back(std::move(rank));
    if (part.configuration) {
      result.config_notes.insert(result.config_notes.end(), std::make_move_iterator(part.config_notes.begin()),
                                 std::make_move_iterator(part.config_notes.end()));
    }
    tally.add(std::move(part.tally), options.findings_kept);
  }
  result.collectives = tally.collectives;
  result.point_to_point_pairs = tally.point_to_point_pairs;
  result.content_checks = tally.content_checks;
  result.content_unchecked = tally.content_unchecked;
  result.folded_blocks_unchecked = tally.folded_blocks_unchecked;
  result.not_checked = tally.not_checked;
  result.finding_counts = std::move(tally.finding_counts);
  result.findings = std::move(tally.findings);
  std::vector<std::uint32_t> ranks_with_unknown_records;
  bool any_digests = false;
  for (const CheckedRank& rank : ranks) {
    if (!rank.has_header) {
      result.notes.push_back("rank " + std::to_string(rank.rank) + ": " + rank.no_header +
                             "; checked as a rank without a log");
      continue;
    }
    ++result.ranks;
    result.calls += rank.calls;
    result.unknown_records += rank.unknown_records;
    if (rank.unknown_records > 0) ranks_with_unknown_records.push_back(rank.rank);
    any_digests = any_digests || rank.step_digests;
  }
  if (result.unknown_records > 0) {
    // A newer detnccl of the same format version wrote record types this one does not know. Said before the notes
    // per rank, which can be many (only 10 notes are shown without --verbose).
    result.notes.push_back(
        std::to_string(result.unknown_records) + (result.unknown_records == 1 ? " record" : " records") +
        " of a type this detnccl does not know skipped (rank" + (ranks_with_unknown_records.size() == 1 ? " " : "s ") +
        rank_list(ranks_with_unknown_records) + "; written by a newer detnccl?): what they hold was not checked");
  }
  if (result.calls == 0 && any_digests) {
    result.digests_only = true;
    result.notes.push_back(
        "the logs hold step digests only (DETNCCL_TRACE=steps), no call records: check matches calls across ranks, "
        "so nothing was checked; compare two runs with detnccl diff, or trace with DETNCCL_TRACE=hash to check");
  }
  for (const CheckedRank& rank : ranks) {
    if (!rank.has_header) continue;
    if (rank.end != records::LogEndKind::kClosed) {
      result.notes.push_back("rank " + std::to_string(rank.rank) + ": " + rank.end_message);
    }
    if (rank.end == records::LogEndKind::kTruncated) result.truncated_ranks.push_back(rank.rank);
  }
  if (!result.truncated_ranks.empty()) {
    std::string& note = result.notes.emplace_back("the log");
    note += result.truncated_ranks.size() > 1 ? "s of ranks " : " of rank ";
    note += rank_list(result.truncated_ranks);
    note += result.truncated_ranks.size() > 1 ? " end" : " ends";
    note +=
        " with a truncation marker (tracing stopped early, e.g. disk full): their calls after it were made "
        "but not recorded; ";
    note += std::to_string(result.not_checked);
    note += " collectives and send/recv calls that expect them were not checked";
  }
  std::uint64_t total = 0;
  for (const auto& [kind, count] : result.finding_counts) total += count;
  if (total > result.findings.size()) {
    result.notes.push_back(std::to_string(total - result.findings.size()) + " more findings were counted but not kept");
  }
  if (result.folded_blocks_unchecked > 0) {
    result.notes.push_back(
        std::to_string(result.folded_blocks_unchecked) +
        (result.folded_blocks_unchecked == 1 ? " collective's" : " collectives'") +
        " per-peer blocks were recorded folded (DETNCCL_TRACE=hash) and could not be matched across ranks "
        "(AlltoAll's "
        "block-by-block relation, or a member without its fingerprint): DETNCCL_TRACE=segments records them peer "
        "by peer");
  }
  if (result.content_unchecked > 0) {
    result.notes.push_back(std::to_string(result.content_unchecked) +
                           (result.content_unchecked == 1 ? " call had no" : " calls had no") +
                           " fingerprint for their content checks (trace level, windows or device buffers): their "
                           "contents were not checked");
  }
  return result;
}

CheckResult check_run(const RunLogs& run, const CheckOptions& options) {
  try {
    std::vector<RankRangeCheck> parts;
    parts.push_back(check_rank_range(run, options, RankRange{}));
    return combine_rank_checks(std::move(parts), options);
  } catch (const std::exception& e) {
    CheckResult result;
    result.error = std::string("check failed: ") + e.what();
    return result;
  }
}

}  // namespace detnccl::analysis
