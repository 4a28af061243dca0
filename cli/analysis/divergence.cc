// detnccl analysis: the ranks' first divergences classified across ranks (see divergence.h).
#include "cli/analysis/divergence.h"

#include <algorithm>
#include <tuple>
#include <unordered_map>

#include "cli/analysis/call_matching.h"
#include "cli/analysis/rank_comparison.h"

namespace detnccl::analysis {
namespace {

using records::LogEndKind;
using records::OpId;

SourceCall source_of(const DivergentCallBrief& brief) {
  return {brief.rank, brief.op, brief.step, brief.seq, brief.comm_seq};
}

class Classifier {
 public:
  explicit Classifier(std::vector<RankDiff>& ranks) : ranks_(ranks) {
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      const RankDiff& rank = ranks_[i];
      if (rank.divergent_capped) capped_ranks_.push_back(rank.rank);
      if (rank.read_through_step) read_through_.emplace_back(rank.rank, *rank.read_through_step);
      for (const auto& communicator : rank.communicators_a)
        global_rank_[{communicator.id, communicator.rank}] = rank.rank;
      for (const auto& communicator : rank.communicators_b) {
        global_rank_b_[{communicator.id, communicator.rank}] = rank.rank;
      }
      if (rank.first && rank.first->kind == DivergenceKind::kMissing) stopped_.push_back(&rank);
      for (const DivergentCallBrief& brief : rank.divergent) {
        if (!brief.input_differs) continue;
        if (brief.op == OpId::kSend) {
          sends_.emplace(pair_key(brief.comm_id, brief.op, brief.comm_rank, static_cast<std::uint32_t>(brief.peer),
                                  brief.pair_index),
                         &brief);
        } else if (!is_point_to_point(brief.op)) {
          collectives_[{brief.comm_id, brief.collective_index}].push_back(&brief);
        }
      }
    }
  }

  void classify(RankDiff& rank) const {
    if (!rank.first) return;
    CallDivergence& call = *rank.first;
    const CallSide& side = call.present_side();
    const std::string where = "rank " + std::to_string(rank.rank);
    switch (call.kind) {
      case DivergenceKind::kConfig:
        return;
      case DivergenceKind::kMetadata:
        if (failed_because_a_member_stopped(rank, call)) return;
        call.role = DivergenceRole::kOrigin;
        call.cause = "the two runs made different calls here on " + where + ": the control flow diverged";
        return;
      case DivergenceKind::kMissing: {
        call.role = DivergenceRole::kOrigin;
        const bool only_a = call.a.present;
        call.cause = missing_cause(rank, call, only_a, where);
        return;
      }
      case DivergenceKind::kInput:
      case DivergenceKind::kOutput:
        break;
    }
    if (call.input_differs) {
      call.kind = DivergenceKind::kInput;
      call.role = DivergenceRole::kOrigin;
      call.cause = "its input differs while every earlier call on " + where +
                   " matched: the computation on this rank before this call is where the runs part";
      if (rank.unverified > 0) {
        call.cause += " (some calls on this rank were compared without fingerprints)";
      }
      return;
    }
    // The output alone differs: did another rank feed it different data?
    if (side.fields.op == OpId::kRecv) {
      classify_receive(rank, call, side);
      return;
    }
    const auto members = collectives_.find({side.communicator.id, side.collective_index});
    std::vector<std::uint32_t> senders;
    const DivergentCallBrief* earliest = nullptr;
    if (members != collectives_.end()) {
      for (const DivergentCallBrief* member : members->second) {
        if (member->rank == rank.rank) continue;
        senders.push_back(member->rank);
        if (earliest == nullptr || member->rank < earliest->rank) earliest = member;
      }
    }
    std::sort(senders.begin(), senders.end());
    if (earliest != nullptr) {
      call.kind = DivergenceKind::kInput;
      call.role = DivergenceRole::kReceiver;
      call.source = source_of(*earliest);
      call.cause = "its own input matches, but the input of rank" + std::string(senders.size() > 1 ? "s " : " ") +
                   rank_list(senders) + " to this " + std::string(records::op_name(side.fields.op)) +
                   " differs: " + where + " receives the difference";
      return;
    }
    if (!capped_ranks_.empty()) {
      call.kind = DivergenceKind::kOutput;
      call.role = DivergenceRole::kUndetermined;
      call.cause = "the output differs with the same input on " + where +
                   "; the inputs of other members could not all be checked (ranks " + rank_list(capped_ranks_) +
                   " have too many divergent calls)";
      return;
    }
    if (const std::vector<std::uint32_t> unread = read_before(call.step()); !unread.empty()) {
      call.kind = DivergenceKind::kOutput;
      call.role = DivergenceRole::kUndetermined;
      call.cause = "the output differs with the same input on " + where +
                   "; the inputs of other members could not all be checked (the calls of rank" +
                   (unread.size() > 1 ? "s " : " ") + rank_list(unread) + " were read only up to an earlier step: " +
                   "--all-records reads them all)";
      return;
    }
    call.kind = DivergenceKind::kOutput;
    call.role = DivergenceRole::kOrigin;
    call.cause = "every member's input matches (where fingerprinted) but the output differs: the " +
                 std::string(records::op_name(side.fields.op)) +
                 " itself is nondeterministic; a deterministic reduction (DETNCCL_DETERMINISTIC) removes this";
  }

 private:
  // A call that succeeded in one run and failed in the other, nothing else different, while another member of its
  // communicator stopped (its log ends) by then in the failing run: the failure is the consequence of that rank
  // dying, not a divergence of its own. Marks the call a receiver of that stop and returns true.
  bool failed_because_a_member_stopped(const RankDiff& rank, CallDivergence& call) const {
    if (call.metadata_differences.size() != 1 || !call.metadata_differences.front().starts_with("result ")) {
      return false;
    }
    const bool failed_in_b = compared_result(call.a.fields.result) == 0 && compared_result(call.b.fields.result) != 0;
    const bool failed_in_a = compared_result(call.b.fields.result) == 0 && compared_result(call.a.fields.result) != 0;
    if (!failed_in_a && !failed_in_b) return false;
    // Communicator ids are run-local: look the members up in the run where both calls exist (the other one).
    const CallSide& reference = failed_in_b ? call.a : call.b;
    const auto& members = failed_in_b ? global_rank_ : global_rank_b_;
    for (const RankDiff* other : stopped_) {
      const CallDivergence& missing = *other->first;
      // The stopped rank's first missing call is in the failing run's gap: present only in the other run.
      if (other == &rank ||
          (failed_in_b ? !missing.a.present || missing.b.present : !missing.b.present || missing.a.present)) {
        continue;
      }
      if (missing.step() > call.step()) continue;
      // The members the logs name, not every rank below the communicator's size (a damaged log can state 2^31).
      bool member = false;
      for (auto found = members.lower_bound({reference.communicator.id, 0});
           found != members.end() && found->first.comm_id == reference.communicator.id &&
           found->first.rank < reference.communicator.nranks && !member;
           ++found) {
        member = found->second == other->rank;
      }
      if (!member) continue;
      const CallSide& failing = failed_in_b ? call.b : call.a;
      call.role = DivergenceRole::kReceiver;
      call.source = SourceCall{other->rank, missing.present_side().fields.op, missing.step(), missing.seq(),
                               missing.present_side().fields.comm_seq};
      call.cause = "the call failed in run " + std::string(failed_in_b ? "B" : "A") + " (" +
                   std::string(records::result_name(failing.fields.result)) + ") because rank " +
                   std::to_string(other->rank) + ", a member of its communicator, stopped before it (its log ends " +
                   "at step " + std::to_string(missing.step()) + "): a consequence, not a divergence of its own";
      return true;
    }
    return false;
  }

  void classify_receive(const RankDiff& rank, CallDivergence& call, const CallSide& side) const {
    const auto sender = static_cast<std::uint32_t>(side.fields.peer);
    const auto send =
        sends_.find(pair_key(side.communicator.id, side.fields.op, side.communicator.rank, sender, side.pair_index));
    const auto sender_rank = global_rank_.find({side.communicator.id, sender});
    const std::string sender_name = sender_rank != global_rank_.end() ? "rank " + std::to_string(sender_rank->second)
                                                                      : "peer " + std::to_string(sender);
    const std::string nth = "Send #" + std::to_string(side.pair_index);
    if (send != sends_.end()) {
      call.kind = DivergenceKind::kInput;
      call.role = DivergenceRole::kReceiver;
      call.source = source_of(*send->second);
      call.cause = "the data received differs because " + sender_name + "'s matching " + nth + " to it (step " +
                   std::to_string(send->second->step) + ", seq " + std::to_string(send->second->seq) +
                   ") sent different data";
      return;
    }
    const bool sender_checked =
        sender_rank != global_rank_.end() &&
        std::find(capped_ranks_.begin(), capped_ranks_.end(), sender_rank->second) == capped_ranks_.end() &&
        std::ranges::none_of(read_through_, [&](const auto& read) {
          return read.first == sender_rank->second && read.second < call.step();
        });
    if (sender_checked) {
      call.kind = DivergenceKind::kOutput;
      call.role = DivergenceRole::kOrigin;
      call.cause = "the data received on rank " + std::to_string(rank.rank) + " differs although " + sender_name +
                   "'s matching " + nth + " shows no difference: the data changed in transit";
    } else {
      call.kind = DivergenceKind::kInput;
      call.role = DivergenceRole::kUndetermined;
      call.cause = "the data received differs; " + sender_name + "'s matching " + nth + " could not be checked";
    }
  }

  // Why the other run lacks a call: no log, a log that stops (killed: torn tail), a log closed cleanly before the
  // call's step (the run made fewer calls), or a clean log that goes on past it (this call alone is absent).
  static std::string missing_cause(const RankDiff& rank, const CallDivergence& call, bool only_a,
                                   const std::string& where) {
    const char* run = only_a ? "B" : "A";
    const std::optional<std::uint64_t>& late_start = only_a ? rank.late_start_b : rank.late_start_a;
    if (late_start && call.step() < *late_start) {
      // The earliest missing call of this rank is the first of those before the other log's start.
      std::string text = "run ";
      text += run;
      text += call.step() + 1 == *late_start ? " has no calls at step " : " has no calls at steps ";
      text += std::to_string(call.step());
      if (call.step() + 1 != *late_start) {
        text += '-';
        text += std::to_string(*late_start - 1);
      }
      text += " on ";
      text += where;
      text += ": its log starts at step ";
      text += std::to_string(*late_start);
      text += " (a run resumed from a checkpoint?), after the compared range begins; --from-step ";
      text += std::to_string(*late_start);
      text += " compares the steps both runs have";
      return text;
    }
    std::string cause = "run ";
    cause += run;
    cause += " has no such call on ";
    cause += where;
    if (!(only_a ? rank.no_header_b : rank.no_header_a).empty()) {
      return cause +
             ": its log for this rank has no header (the writer was killed before writing it) and holds no "
             "records";
    }
    if (!(only_a ? rank.in_b : rank.in_a)) return cause + ": it has no log for this rank";
    const std::string& message = only_a ? rank.end_message_b : rank.end_message_a;
    if ((only_a ? rank.end_b : rank.end_a) != LogEndKind::kClosed) {
      return cause + ": it stops early (crash or hang); its log: " + message;
    }
    const std::optional<std::uint64_t>& last = only_a ? rank.last_step_b : rank.last_step_a;
    std::string text = "run ";
    text += run;
    if (!last) return text + "'s log holds no call on " + where + " (" + message + "): it made fewer calls";
    if (*last < call.step()) {
      text += "'s log ends (closed cleanly) after step ";
      text += std::to_string(*last);
      text += " on ";
      text += where;
      return text + ": it made fewer calls";
    }
    cause += ", although its log goes on to step ";
    cause += std::to_string(*last);
    return cause + " and was closed cleanly: this call is absent from the middle of the log";
  }

  std::vector<RankDiff>& ranks_;
  std::vector<std::uint32_t> capped_ranks_;
  // Ranks whose calls were read only through a step (the step-index shortcut: RankDiff::read_through_step).
  std::vector<std::pair<std::uint32_t, std::uint64_t>> read_through_;

  // The ranks whose calls at `step` were not read.
  std::vector<std::uint32_t> read_before(std::uint64_t step) const {
    std::vector<std::uint32_t> ranks;
    for (const auto& [rank, through] : read_through_) {
      if (through < step) ranks.push_back(rank);
    }
    return ranks;
  }
  GlobalRanks global_rank_;               // run A's (communicator id, rank in it) -> global rank
  GlobalRanks global_rank_b_;             // the same for run B
  std::vector<const RankDiff*> stopped_;  // ranks whose first divergence is a missing call
  std::unordered_map<PairKey, const DivergentCallBrief*, CallKeyHash> sends_;
  std::unordered_map<CollectiveKey, std::vector<const DivergentCallBrief*>, CallKeyHash> collectives_;
};

int role_order(DivergenceRole role) {
  switch (role) {
    case DivergenceRole::kOrigin:
      return 0;
    case DivergenceRole::kUndetermined:
      return 1;
    case DivergenceRole::kReceiver:
      return 2;
  }
  return 3;
}

}  // namespace

std::string_view divergence_kind_name(DivergenceKind kind) noexcept {
  switch (kind) {
    case DivergenceKind::kConfig:
      return "config";
    case DivergenceKind::kMetadata:
      return "metadata";
    case DivergenceKind::kInput:
      return "input";
    case DivergenceKind::kOutput:
      return "output";
    case DivergenceKind::kMissing:
      return "missing";
  }
  return "?";
}

std::string_view divergence_role_name(DivergenceRole role) noexcept {
  switch (role) {
    case DivergenceRole::kOrigin:
      return "origin";
    case DivergenceRole::kReceiver:
      return "receiver";
    case DivergenceRole::kUndetermined:
      return "undetermined";
  }
  return "?";
}

void classify_divergences(RunDiff& diff) {
  const Classifier classifier(diff.ranks);
  for (RankDiff& rank : diff.ranks) classifier.classify(rank);
  const RankDiff* first = nullptr;
  const auto order = [](const RankDiff& rank) {
    return std::make_tuple(rank.first->step(), role_order(rank.first->role), rank.first->seq(), rank.rank);
  };
  for (const RankDiff& rank : diff.ranks) {
    if (rank.first && (first == nullptr || order(rank) < order(*first))) first = &rank;
  }
  if (first != nullptr) {
    diff.first = *first->first;
    if (diff.first->kind == DivergenceKind::kMissing) {
      for (const RankDiff& rank : diff.ranks) {
        if (rank.first && rank.first->kind == DivergenceKind::kMissing && rank.first->step() == diff.first->step()) {
          diff.stopped.push_back(rank.rank);
        }
      }
    }
  }
  std::vector<const RankDiff*> receivers;
  for (const RankDiff& rank : diff.ranks) {
    if (rank.first && rank.first->role == DivergenceRole::kReceiver) receivers.push_back(&rank);
  }
  std::sort(receivers.begin(), receivers.end(), [](const RankDiff* x, const RankDiff* y) {
    return std::make_tuple(x->first->step(), x->rank) < std::make_tuple(y->first->step(), y->rank);
  });
  for (const RankDiff* rank : receivers) diff.receivers.push_back(rank->rank);
}

}  // namespace detnccl::analysis
