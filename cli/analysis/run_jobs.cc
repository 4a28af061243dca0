// detnccl analysis: which job wrote each log of a run directory (see run_jobs.h).
#include "cli/analysis/run_jobs.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "cli/analysis/call_matching.h"
#include "hash/fingerprint.h"

namespace detnccl::analysis {
namespace {

// Union-find over log indices.
class Groups {
 public:
  explicit Groups(std::size_t n) : parent_(n) { std::iota(parent_.begin(), parent_.end(), std::size_t{0}); }
  std::size_t find(std::size_t i) {
    while (parent_[i] != i) i = parent_[i] = parent_[parent_[i]];
    return i;
  }
  void join(std::size_t i, std::size_t j) {
    i = find(i);
    j = find(j);
    if (i != j) parent_[std::max(i, j)] = std::min(i, j);
  }

 private:
  std::vector<std::size_t> parent_;
};

}  // namespace

JobGroups group_logs_by_job(const std::vector<RankJobEvidence>& logs) {
  JobGroups result;
  if (logs.size() < 2) return result;
  // RATIONALE: a communicator spans a log's world only when that log's header knows the world size and the rank is
  // inside it; otherwise nothing can be concluded. Headers may disagree on the world size: the logs of one job never
  // do (one launcher), so such logs are compared each against its own world (a rerun with more ranks under the name
  // of an earlier run: the new ranks' logs beside the old ones).
  for (const RankJobEvidence& log : logs) {
    if (log.world_size == 0 || log.rank >= log.world_size) return result;
  }
  Groups groups(logs.size());
  std::map<std::uint64_t, std::size_t> first_holder;  // communicator id -> first log recording it
  for (std::size_t i = 0; i < logs.size(); ++i) {
    for (const records::CommunicatorRecord& communicator : logs[i].communicators) {
      if (communicator.id == 0) continue;
      const auto [holder, inserted] = first_holder.try_emplace(communicator.id, i);
      if (!inserted) groups.join(i, holder->second);
    }
  }
  // Each group's world-spanning communicator, if it has one.
  std::map<std::size_t, const records::CommunicatorRecord*> world_of;
  for (std::size_t i = 0; i < logs.size(); ++i) {
    std::map<std::uint64_t, int> times;  // a communicator recorded twice in one log: one process, several ranks
    for (const records::CommunicatorRecord& communicator : logs[i].communicators) ++times[communicator.id];
    for (const records::CommunicatorRecord& communicator : logs[i].communicators) {
      if (communicator.id == 0 || communicator.nranks != logs[i].world_size ||
          communicator.origin == records::CommOrigin::kInitAll || times[communicator.id] != 1) {
        continue;
      }
      world_of.try_emplace(groups.find(i), &communicator);
    }
  }
  if (world_of.size() < 2) return result;
  std::map<std::size_t, std::vector<std::uint32_t>> members;
  for (std::size_t i = 0; i < logs.size(); ++i) {
    if (logs[i].communicators.empty()) {
      result.unattributed.push_back(logs[i].rank);
    } else if (world_of.count(groups.find(i)) != 0) {
      members[groups.find(i)].push_back(logs[i].rank);
    } else {
      result.unattributed.push_back(logs[i].rank);
    }
  }
  for (auto& [root, ranks] : members) {
    std::sort(ranks.begin(), ranks.end());
    result.ranks.push_back(std::move(ranks));
    result.world_communicators.push_back(*world_of.at(root));
  }
  std::sort(result.unattributed.begin(), result.unattributed.end());
  return result;
}

std::string describe_job_groups(const JobGroups& groups) {
  if (!groups.mixed()) return {};
  std::string text = "these logs come from ";
  text += std::to_string(groups.ranks.size());
  text += " different jobs that wrote to the same run directory (started with the same DETNCCL_RUN?): ";
  for (std::size_t g = 0; g < groups.ranks.size(); ++g) {
    if (g > 0) text += g + 1 == groups.ranks.size() ? " and " : ", ";
    text += groups.ranks[g].size() == 1 ? "rank " : "ranks ";
    text += rank_list(groups.ranks[g], 16);
    text += " (world communicator ";
    text += hash::format_digest(groups.world_communicators[g].id);
    text += ')';
  }
  text += " share no communicator";
  if (!groups.unattributed.empty()) {
    text += groups.unattributed.size() == 1 ? "; rank " : "; ranks ";
    text += rank_list(groups.unattributed, 16);
    text += " cannot be told apart";
  }
  text += ". Each job's trace is incomplete; rerun each job with its own DETNCCL_RUN";
  return text;
}

}  // namespace detnccl::analysis
