// detnccl analysis: the rank x step map, communicators, timelines and next command of `detnccl report`, from diff's
// and check's results (run_map.h).
#include "cli/analysis/run_map.h"

#include <algorithm>
#include <cstdint>
#include <map>

#include "hash/fingerprint.h"

namespace detnccl::analysis {
namespace {

struct StepRange {
  std::uint64_t first = 0;
  std::uint64_t last = 0;
  bool contains(std::uint64_t step) const noexcept { return first <= step && step <= last; }
};

// [first, last] clamped to [from, to]; nullopt when either end is unknown or nothing is left.
std::optional<StepRange> clamped(std::optional<std::uint64_t> first, std::optional<std::uint64_t> last,
                                 std::optional<std::uint64_t> from, std::optional<std::uint64_t> to) {
  if (!first || !last) return std::nullopt;
  StepRange range{std::max(*first, from.value_or(0)), std::min(*last, to.value_or(*last))};
  if (range.first > range.last) return std::nullopt;
  return range;
}

// The steps a run's log of this rank covers: its calls', or its step digests' (DETNCCL_TRACE=steps logs).
std::optional<StepRange> run_steps(bool present, std::optional<std::uint64_t> first_call,
                                   std::optional<std::uint64_t> last_call, std::optional<std::uint64_t> first_digest,
                                   std::optional<std::uint64_t> last_digest, std::optional<std::uint64_t> from,
                                   std::optional<std::uint64_t> to) {
  if (!present) return std::nullopt;
  if (first_call) return clamped(first_call, last_call, from, to);
  return clamped(first_digest, last_digest, from, to);
}

CellStatus role_status(DivergenceRole role) {
  switch (role) {
    case DivergenceRole::kOrigin:
      return CellStatus::kOrigin;
    case DivergenceRole::kReceiver:
      return CellStatus::kReceiver;
    case DivergenceRole::kUndetermined:
      return CellStatus::kUndetermined;
  }
  return CellStatus::kUndetermined;
}

// Run-length encodes one rank's cells.
std::vector<CellRun> runs_of(const std::vector<CellStatus>& cells) {
  std::vector<CellRun> runs;
  for (const CellStatus status : cells) {
    if (!runs.empty() && runs.back().status == status) {
      ++runs.back().steps;
    } else {
      runs.push_back({status, 1});
    }
  }
  return runs;
}

// The map's columns: the hull of every rank's ranges.
void widen(StepMap& map, const std::optional<StepRange>& range) {
  if (!range) return;
  map.first_step = std::min(map.first_step.value_or(range->first), range->first);
  map.last_step = std::max(map.last_step.value_or(range->last), range->last);
}

std::string run_text(const std::string& path) { return path.find(' ') == std::string::npos ? path : "'" + path + "'"; }

// The reductions `detnccl replay` recomputes.
bool replayable(records::OpId op) {
  return op == records::OpId::kAllReduce || op == records::OpId::kReduceScatter || op == records::OpId::kReduce;
}

}  // namespace

std::string_view cell_status_name(CellStatus status) noexcept {
  switch (status) {
    case CellStatus::kNotTraced:
      return "not_traced";
    case CellStatus::kIdentical:
      return "identical";
    case CellStatus::kUnverified:
      return "unverified";
    case CellStatus::kOrigin:
      return "origin";
    case CellStatus::kReceiver:
      return "receiver";
    case CellStatus::kUndetermined:
      return "undetermined";
    case CellStatus::kDiverged:
      return "diverged";
    case CellStatus::kMissing:
      return "missing";
    case CellStatus::kNotCompared:
      return "not_compared";
  }
  return "unknown";
}

CellStatus StepMap::at(std::uint32_t rank, std::uint64_t step) const {
  if (!first_step || step < *first_step || step > *last_step) return CellStatus::kNotTraced;
  const auto row = std::find_if(ranks.begin(), ranks.end(), [&](const RankCells& r) { return r.rank == rank; });
  if (row == ranks.end()) return CellStatus::kNotTraced;
  std::uint64_t offset = step - *first_step;
  for (const CellRun& run : row->runs) {
    if (offset < run.steps) return run.status;
    offset -= run.steps;
  }
  return CellStatus::kNotTraced;
}

StepMap diff_step_map(const RunDiff& diff, std::optional<std::uint64_t> from_step,
                      std::optional<std::uint64_t> to_step) {
  struct Row {
    std::optional<StepRange> a, b;
  };
  StepMap map;
  std::vector<Row> rows;
  for (const RankDiff& rank : diff.ranks) {
    Row row{run_steps(rank.in_a, rank.first_step_a, rank.last_step_a, rank.first_digest_step_a, rank.last_digest_step_a,
                      from_step, to_step),
            run_steps(rank.in_b, rank.first_step_b, rank.last_step_b, rank.first_digest_step_b, rank.last_digest_step_b,
                      from_step, to_step)};
    widen(map, row.a);
    widen(map, row.b);
    rows.push_back(row);
  }
  if (!map.first_step) {
    for (const RankDiff& rank : diff.ranks) map.ranks.push_back({rank.rank, {}});
    return map;
  }
  const std::uint64_t width = *map.last_step - *map.first_step + 1;
  std::vector<CellStatus> cells;
  for (std::size_t i = 0; i < diff.ranks.size(); ++i) {
    const RankDiff& rank = diff.ranks[i];
    const auto& [a, b] = rows[i];
    // The rank's first divergence: a call, or a (communicator, step) of step digests.
    std::optional<std::uint64_t> first;
    CellStatus first_status = CellStatus::kOrigin;
    if (rank.first) {
      first = rank.first->step();
      first_status =
          rank.first->kind == DivergenceKind::kMissing ? CellStatus::kMissing : role_status(rank.first->role);
    } else if (rank.first_step) {
      first = rank.first_step->step;
      first_status =
          !rank.first_step->in_a || !rank.first_step->in_b ? CellStatus::kMissing : role_status(rank.first_step->role);
    }
    const bool unverified_only = rank.matching == 0 && rank.unverified > 0;
    // After the first divergence: the steps of the divergent calls diff kept (every one, up to its cap), and how far
    // that list is complete: to the last call kept when the cap was reached, to read_through_step when diff stopped
    // reading there, nowhere for step digests (diff compares each communicator's digests up to the first that differs).
    std::vector<std::uint64_t> divergent_steps;
    for (const DivergentCallBrief& call : rank.divergent) divergent_steps.push_back(call.step);
    std::sort(divergent_steps.begin(), divergent_steps.end());
    std::optional<std::uint64_t> known_through;  // nullopt: every later step is known
    if (rank.divergent_capped && !rank.divergent.empty()) known_through = rank.divergent.back().step;
    if (rank.read_through_step) known_through = std::min(known_through.value_or(UINT64_MAX), *rank.read_through_step);
    if (!rank.first && rank.first_step) known_through = rank.first_step->step;
    const auto after_first = [&](std::uint64_t step) {
      if (std::binary_search(divergent_steps.begin(), divergent_steps.end(), step)) return CellStatus::kDiverged;
      if (known_through && step > *known_through) return CellStatus::kNotCompared;
      return unverified_only ? CellStatus::kUnverified : CellStatus::kIdentical;
    };
    cells.assign(width, CellStatus::kNotTraced);
    for (std::uint64_t column = 0; column < width; ++column) {
      const std::uint64_t step = *map.first_step + column;
      const bool has_a = a && a->contains(step);
      const bool has_b = b && b->contains(step);
      CellStatus& cell = cells[column];
      if (!has_a && !has_b) continue;
      if (first && step == *first) {
        cell = first_status;
      } else if (first && step > *first) {
        cell = has_a && has_b ? after_first(step) : CellStatus::kMissing;
      } else if (has_a != has_b) {
        // RATIONALE: calls after the other run's truncation marker were made but not recorded: unknown, not missing
        // (RankDiff::not_compared).
        const records::LogEndKind lacking_end = has_a ? rank.end_b : rank.end_a;
        cell = lacking_end == records::LogEndKind::kTruncated ? CellStatus::kNotCompared : CellStatus::kMissing;
      } else if ((rank.late_start_a && step < *rank.late_start_a) || (rank.late_start_b && step < *rank.late_start_b)) {
        cell = CellStatus::kMissing;
      } else if (rank.read_through_step && step > *rank.read_through_step) {
        cell = CellStatus::kNotCompared;
      } else {
        cell = unverified_only ? CellStatus::kUnverified : CellStatus::kIdentical;
      }
    }
    map.ranks.push_back({rank.rank, runs_of(cells)});
  }
  return map;
}

StepMap check_step_map(const CheckResult& check, const RunStats& stats) {
  StepMap map;
  for (const RankStats& rank : stats.ranks) widen(map, clamped(rank.first_step, rank.last_step, {}, {}));
  if (!map.first_step) {
    for (const RankStats& rank : stats.ranks) map.ranks.push_back({rank.rank, {}});
    return map;
  }
  const std::uint64_t width = *map.last_step - *map.first_step + 1;
  // (rank, step) cells the findings name: a rank at fault, or one that did not join.
  std::map<std::pair<std::uint32_t, std::uint64_t>, CellStatus> named;
  for (const CheckFinding& finding : check.findings) {
    if (finding.step < *map.first_step || finding.step > *map.last_step) continue;
    const CellStatus status =
        finding.kind == CheckFindingKind::kNotAllJoined ? CellStatus::kMissing : CellStatus::kOrigin;
    for (const std::uint32_t rank : finding.ranks) {
      auto [it, inserted] = named.emplace(std::pair{rank, finding.step}, status);
      // RATIONALE: a rank that did not join is also named by the Sends and Recvs left without it: its absence is
      // the story of that step.
      if (!inserted && status == CellStatus::kMissing) it->second = status;
    }
  }
  std::vector<CellStatus> cells;
  for (const RankStats& rank : stats.ranks) {
    cells.assign(width, CellStatus::kNotTraced);
    const auto range = clamped(rank.first_step, rank.last_step, {}, {});
    for (std::uint64_t column = 0; column < width; ++column) {
      const std::uint64_t step = *map.first_step + column;
      if (range && range->contains(step)) cells[column] = CellStatus::kIdentical;
    }
    for (auto it = named.lower_bound({rank.rank, 0}); it != named.end() && it->first.first == rank.rank; ++it) {
      cells[it->first.second - *map.first_step] = it->second;
    }
    map.ranks.push_back({rank.rank, runs_of(cells)});
  }
  return map;
}

std::vector<CommunicatorMembers> communicator_members(
    const std::vector<std::pair<std::uint32_t, const std::vector<records::CommunicatorRecord>*>>& ranks) {
  std::map<std::uint64_t, CommunicatorMembers> by_id;
  for (const auto& [rank, communicators] : ranks) {
    if (communicators == nullptr) continue;
    for (const records::CommunicatorRecord& record : *communicators) {
      CommunicatorMembers& entry = by_id[record.id];
      if (entry.members.empty()) {
        entry.id = record.id;
        entry.nranks = record.nranks;
        // RATIONALE: a corrupt record could claim 2^32 members; no communicator has more ranks than the run's logs.
        entry.members.assign(std::min<std::size_t>(record.nranks, ranks.size()), CommunicatorMembers::kUnknownMember);
      }
      if (record.rank < entry.members.size()) entry.members[record.rank] = rank;
    }
  }
  std::vector<CommunicatorMembers> out;
  for (auto& [id, entry] : by_id) out.push_back(std::move(entry));
  return out;
}

std::vector<CommunicatorTimeline> rank_timelines(const RankDiff& rank, std::size_t before, std::size_t after) {
  std::vector<CommunicatorTimeline> out;
  if (rank.divergent.empty()) return out;
  // The rank's divergent calls per communicator, in the order of their first divergent call.
  std::vector<std::uint64_t> order;
  std::map<std::uint64_t, std::vector<const DivergentCallBrief*>> by_communicator;
  for (const DivergentCallBrief& call : rank.divergent) {
    auto& calls = by_communicator[call.comm_id];
    if (calls.empty()) order.push_back(call.comm_id);
    calls.push_back(&call);
  }
  // RATIONALE: past the last divergent call kept, diff may have stopped keeping them (the cap) or reading (the
  // step-index shortcut): what those calls hold is not known.
  const bool tail_unknown = rank.divergent_capped || rank.read_through_step.has_value();
  for (const std::uint64_t comm_id : order) {
    auto& calls = by_communicator[comm_id];
    std::sort(calls.begin(), calls.end(), [](auto* x, auto* y) { return x->comm_seq < y->comm_seq; });
    const std::uint64_t first = calls.front()->comm_seq;
    CommunicatorTimeline timeline;
    timeline.comm_id = comm_id;
    timeline.first_comm_seq = first - std::min<std::uint64_t>(first, before);
    const std::size_t width = static_cast<std::size_t>(first - timeline.first_comm_seq) + after;
    timeline.verdicts.assign(width, '=');
    timeline.steps.assign(width, 0);
    const std::uint64_t last_kept = calls.back()->comm_seq;
    for (std::size_t slot = 0; slot < width; ++slot) {
      if (tail_unknown && timeline.first_comm_seq + slot > last_kept) timeline.verdicts[slot] = '?';
    }
    for (const DivergentCallBrief* call : calls) {
      if (call->comm_seq < timeline.first_comm_seq || call->comm_seq - timeline.first_comm_seq >= width) continue;
      const std::size_t slot = static_cast<std::size_t>(call->comm_seq - timeline.first_comm_seq);
      timeline.verdicts[slot] = call->input_differs && call->output_differs ? 'b'
                                : call->input_differs                       ? 'i'
                                : call->output_differs                      ? 'o'
                                                                            : 'm';
      timeline.steps[slot] = call->step;
    }
    out.push_back(std::move(timeline));
  }
  return out;
}

NextCommand next_command(const RunDiff& diff, const std::string& run_a, const std::string& run_b,
                         const MagnitudeOutcome* first_magnitude) {
  if (!diff.error.empty() || diff.identical()) return {};
  if (diff.first) {
    const CallDivergence& d = *diff.first;
    const std::string rank = std::to_string(d.rank);
    const std::string step = std::to_string(d.step());
    switch (d.kind) {
      case DivergenceKind::kMetadata:
        return {"diff <(detnccl dump " + run_text(run_a) + " --rank " + rank + ") <(detnccl dump " + run_text(run_b) +
                    " --rank " + rank + ")",
                "the two jobs called NCCL differently here: compare their control flow before step " + step +
                    " on rank " + rank};
      case DivergenceKind::kInput:
        if (d.role == DivergenceRole::kReceiver && d.source) {
          return {"detnccl run --trace segments --steps " + std::to_string(d.source->step) + " --ranks " +
                      std::to_string(d.source->rank) + " -- JOB",
                  "the data came from rank " + std::to_string(d.source->rank) +
                      ": trace its call in detail in both runs and diff them"};
        }
        return {"detnccl run --trace segments --steps " + step + " --ranks " + rank + " -- JOB",
                "rank " + rank + "'s own computation before step " + step +
                    " differs: trace that step and rank with segment digests in both runs (the differing bytes), "
                    "then make that computation deterministic"};
      case DivergenceKind::kOutput:
        // RATIONALE: replay recomputes a reduction from its members' captured inputs, so it answers an output
        // divergence (same inputs, different results) and nothing else; an input divergence's cause is the compute
        // before the call, which only the narrow re-trace shows. The reordering verdict exists only when every
        // member's input of run A was found, which is exactly what replay of run A needs.
        if (first_magnitude != nullptr && first_magnitude->measured && first_magnitude->magnitude.reordering &&
            replayable(d.a.fields.op)) {
          const bool within = first_magnitude->magnitude.reordering->within_reordering_bound;
          return {"detnccl replay " + run_text(run_a) + " --rank " + rank + " --seq " + std::to_string(d.a.fields.seq),
                  std::string("same inputs, different outputs, ") +
                      (within ? "within the reordering bound (summation order, not corruption)"
                              : "beyond the reordering bound (not summation order)") +
                      ": replay recomputes the call from run A's captured inputs in rank, deterministic and arrival "
                      "orders and says which of them gives run A's recorded output (replay run B the same way)"};
        }
        return {"detnccl run --deterministic -- JOB",
                "same inputs, different outputs: the collective itself is nondeterministic; rerun both jobs with "
                "deterministic mode"};
      case DivergenceKind::kMissing: {
        const std::string& lacking = d.a.present ? run_b : run_a;
        return {"detnccl stats " + run_text(lacking) + " -v",
                "rank " + rank + "'s log in " + lacking + " stops or lacks the call: see how each log ends"};
      }
      case DivergenceKind::kConfig:
        break;
    }
  }
  if (diff.first_step) {
    return {rerun_settings(diff) + " JOB",
            "the step digests name the step, not the call: trace that step on those ranks in detail in both runs, "
            "then diff the new logs"};
  }
  if (!diff.config_differences.empty()) {
    const ConfigDifference& c = diff.config_differences.front();
    return {"detnccl diff " + run_text(run_a) + " " + run_text(run_b) + " -v",
            "the runs' configurations differ (" + c.field + ": " + c.a + " vs " + c.b +
                "): rerun one side with the other's settings"};
  }
  return {};
}

}  // namespace detnccl::analysis
