// detnccl analysis: comparison of two runs (see run_diff.h). Each rank's pair of logs is compared in
// rank_comparison.cc, the ranks' first divergences are classified in divergence.cc; this file pairs the ranks,
// compares the headers and writes the notes.
#include "cli/analysis/run_diff.h"

#include <algorithm>
#include <exception>
#include <map>
#include <tuple>
#include <utility>

#include "cli/analysis/call_matching.h"
#include "cli/analysis/divergence.h"
#include "cli/analysis/parallel.h"
#include "cli/analysis/rank_comparison.h"
#include "cli/analysis/run_jobs.h"

namespace detnccl::analysis {
namespace {

using records::LogEndKind;

// ---------------------------------------------------------------------------------------------------------------
// Headers

// "NAME=value\n" lines as a map from name to value.
std::map<std::string, std::string> parse_lines(std::string_view text) {
  std::map<std::string, std::string> values;
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(at, end - at);
    at = end + 1;
    if (line.empty()) continue;
    const std::size_t equals = line.find('=');
    values[std::string(line.substr(0, equals))] =
        equals == std::string_view::npos ? std::string() : std::string(line.substr(equals + 1));
  }
  return values;
}

void compare_lines(std::string_view a_text, std::string_view b_text, std::vector<ConfigDifference>& out) {
  const auto a = parse_lines(a_text);
  const auto b = parse_lines(b_text);
  // RATIONALE: the log directory and the run name always differ between two runs; they explain nothing.
  const auto ignored = [](const std::string& name) { return name == "DETNCCL_DIR" || name == "DETNCCL_RUN"; };
  for (const auto& [name, value] : a) {
    if (ignored(name)) continue;
    const auto other = b.find(name);
    if (other == b.end()) {
      out.push_back({name, value, "(unset)", 0, 1});
    } else if (other->second != value) {
      out.push_back({name, value, other->second, 0, 1});
    }
  }
  for (const auto& [name, value] : b) {
    if (!ignored(name) && a.find(name) == a.end()) out.push_back({name, "(unset)", value, 0, 1});
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Ranks

// Each rank's log in run A and in run B (either may be null), in rank order.
using RankFilePairs = std::vector<std::pair<const RankLogFile*, const RankLogFile*>>;

// Every rank either run has, with its file in each; sizes diff.ranks to match and sets their ranks.
RankFilePairs pair_rank_files(const RunLogs& a, const RunLogs& b, RunDiff& diff) {
  std::map<std::uint32_t, std::pair<const RankLogFile*, const RankLogFile*>> files;
  for (const RankLogFile& file : a.logs) files[file.rank].first = &file;
  for (const RankLogFile& file : b.logs) files[file.rank].second = &file;
  RankFilePairs pairs;
  diff.ranks.resize(files.size());
  for (const auto& [rank, pair] : files) {
    diff.ranks[pairs.size()].rank = rank;
    pairs.push_back(pair);
  }
  return pairs;
}

// How rank i's two headers differ (RankDiff::header_differences), when both runs have a log for it.
void compare_rank_header(const RankFilePairs& pairs, std::size_t i, RankDiff& rank) {
  if (!rank.in_a || !rank.in_b) return;  // no log, or one without a header
  std::string error;
  // Streamed: no mapping to set up and tear down for a header.
  const auto stream_a = RankLogStream::open(*pairs[i].first, error, nullptr, records::LogAccess::kStreamed);
  const auto stream_b = RankLogStream::open(*pairs[i].second, error, nullptr, records::LogAccess::kStreamed);
  if (!stream_a || !stream_b) {
    rank.header_error = error;
    return;
  }
  rank.header_differences = compare_headers(stream_a->header(), stream_b->header());
}

// Compares the pairs of logs of the ranks in `range`, ranks in parallel, and their headers. diff.ranks holds every
// rank on entry (pair_rank_files); the ranks outside the range are left as the first pass leaves them.
void compare_ranks(const RankFilePairs& pairs, const DiffOptions& options, RankRange range, RunDiff& diff) {
  // RATIONALE: two passes. The first reads only the logs' step indexes: each rank's first differing step, and every
  // rank whose logs are equal throughout is done. The second reads call records from each rank's first differing
  // step through the last step at which any rank first differs, so that the calls the cross-rank classification
  // looks for (another member's input at the same collective) are read on every rank (divergence.cc). The first
  // pass covers every rank, also outside the range: the step it stops at is the whole run's.
  std::vector<RankDigestPlan> plans(pairs.size());
  parallel_for(pairs.size(), options.threads, [&](std::size_t i) {
    try {
      plans[i] = plan_rank_digests(pairs[i].first, pairs[i].second, options, diff.ranks[i]);
    } catch (const std::exception&) {
      plans[i] = {};  // the second pass reads the rank's logs whole, and reports what is wrong with them
      const std::uint32_t rank = diff.ranks[i].rank;
      diff.ranks[i] = RankDiff();
      diff.ranks[i].rank = rank;
    }
  });
  std::optional<std::uint64_t> read_through;
  for (const RankDigestPlan& plan : plans) {
    if (plan.usable && plan.differs) read_through = std::max(read_through.value_or(plan.step), plan.step);
  }
  std::vector<std::size_t> in_range;
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    if (range.contains(diff.ranks[i].rank)) in_range.push_back(i);
  }
  parallel_for(
      in_range.size(), options.threads,
      [&](std::size_t k) {
        const std::size_t i = in_range[k];
        try {
          compare_rank_logs(pairs[i].first, pairs[i].second, options, plans[i], read_through, diff.ranks[i]);
        } catch (const std::exception& e) {
          diff.ranks[i].unusable =
              std::string("comparing rank ") + std::to_string(diff.ranks[i].rank) + ": " + e.what();
        }
        try {
          compare_rank_header(pairs, i, diff.ranks[i]);
        } catch (const std::exception& e) {
          diff.ranks[i].header_error = std::string("diff failed: ") + e.what();
        }
      },
      options.ranks_done);
}

// A run directory holding the ranks of two jobs cannot be compared with anything: the message that says so, empty
// when each run's logs belong to one job.
std::string mixed_jobs_error(const std::string& run_a, const std::string& run_b, const RunDiff& diff) {
  for (const bool in_a : {true, false}) {
    std::vector<RankJobEvidence> jobs;
    for (const RankDiff& rank : diff.ranks) {
      if (in_a ? rank.in_a : rank.in_b) {
        jobs.push_back({rank.rank, in_a ? rank.world_size_a : rank.world_size_b,
                        in_a ? rank.communicators_a : rank.communicators_b});
      }
    }
    if (const JobGroups groups = group_logs_by_job(jobs); groups.mixed()) {
      return (in_a ? run_a : run_b) + ": " + describe_job_groups(groups);
    }
  }
  return {};
}

// Reports each distinct header difference of the ranks (RankDiff::header_differences) once, in diff.config_notes
// (settings that only change what is logged) or diff.config_differences, with the first rank that has it and how
// many do.
void sum_header_differences(RunDiff& diff) {
  std::map<std::tuple<std::string, std::string, std::string>, ConfigDifference> config;
  for (const RankDiff& rank : diff.ranks) {
    for (const ConfigDifference& difference : rank.header_differences) {
      auto [entry, inserted] = config.try_emplace({difference.field, difference.a, difference.b}, difference);
      if (inserted) {
        entry->second.first_rank = rank.rank;
        entry->second.rank_count = 1;
      } else {
        ++entry->second.rank_count;
      }
    }
  }
  for (auto& [key, difference] : config) {
    (is_diagnostic_setting(difference.field) ? diff.config_notes : diff.config_differences)
        .push_back(std::move(difference));
  }
}

// "1000 to the end", "0 to 5", "3 to 3".
std::string step_range_text(const DiffOptions& options) {
  return (options.from_step ? std::to_string(*options.from_step) : "0") + " to " +
         (options.to_step ? std::to_string(*options.to_step) : "the end");
}

// "run A has steps 0-39", "run B has no calls".
std::string run_steps_text(const std::vector<RankDiff>& ranks, bool run_a) {
  std::optional<std::uint64_t> first, last;
  for (const RankDiff& rank : ranks) {
    const auto& f = run_a ? rank.first_step_a : rank.first_step_b;
    const auto& l = run_a ? rank.last_step_a : rank.last_step_b;
    if (f) first = std::min(first.value_or(*f), *f);
    if (l) last = std::max(last.value_or(*l), *l);
  }
  std::string text = run_a ? "run A " : "run B ";
  if (!first) return text + "has no calls";
  if (*first == *last) return text + "has step " + std::to_string(*first);
  return text + "has steps " + std::to_string(*first) + "-" + std::to_string(*last);
}

// ---------------------------------------------------------------------------------------------------------------
// Notes: what was not compared, and how the logs end

// Calls compared without fingerprints, and settings that differ but cannot change a call.
void note_unverified_and_diagnostics(RunDiff& diff) {
  std::uint64_t unverified = 0;
  for (const RankDiff& rank : diff.ranks) unverified += rank.unverified;
  if (unverified > 0) {
    diff.notes.push_back(std::to_string(unverified) +
                         " aligned calls had equal metadata but no fingerprint computed by both runs (trace level "
                         "meta, windows or device buffers): their contents were not compared");
  }
  for (const ConfigDifference& note : diff.config_notes) {
    std::string text = note.field;
    text += " differs (";
    text += note.a.empty() ? "empty" : note.a;
    text += " in A, ";
    text += note.b.empty() ? "empty" : note.b;
    text += " in B, on ";
    text += std::to_string(note.rank_count);
    text += note.rank_count == 1 ? " rank" : " ranks";
    text += "): it cannot change any call, only what is logged or fingerprinted";
    diff.notes.push_back(std::move(text));
  }
}

// Ranks whose log has no header (killed as it was created): compared as ranks without a log.
void note_logs_without_header(RunDiff& diff) {
  constexpr std::size_t kNoHeaderNotes = 8;
  std::size_t no_header = 0;
  for (const RankDiff& rank : diff.ranks) {
    for (const bool run_a : {true, false}) {
      const std::string& message = run_a ? rank.no_header_a : rank.no_header_b;
      if (message.empty() || ++no_header > kNoHeaderNotes) continue;
      std::string note = "rank " + std::to_string(rank.rank);
      note += run_a ? " of run A: " : " of run B: ";
      note += message;
      note += "; compared as a rank without a log";
      diff.notes.push_back(std::move(note));
    }
  }
  if (no_header > kNoHeaderNotes) {
    diff.notes.push_back(std::to_string(no_header - kNoHeaderNotes) +
                         " more logs have no header (their writers were killed before writing it)");
  }
}

// Logs that start after --from-step (resumed runs): the other run's calls before that step are missing.
void note_late_starts(RunDiff& diff, const DiffOptions& options) {
  std::map<std::pair<bool, std::uint64_t>, std::vector<std::uint32_t>> late_starts;  // (run B, step) -> ranks
  for (const RankDiff& rank : diff.ranks) {
    if (rank.late_start_a) late_starts[{false, *rank.late_start_a}].push_back(rank.rank);
    if (rank.late_start_b) late_starts[{true, *rank.late_start_b}].push_back(rank.rank);
  }
  for (const auto& [key, ranks] : late_starts) {
    std::string note = key.first ? "run B's log" : "run A's log";
    note += ranks.size() > 1 ? "s of ranks " : " of rank ";
    note += rank_list(ranks);
    note += ranks.size() > 1 ? " start" : " starts";
    note += " at step ";
    note += std::to_string(key.second);
    note += ", after --from-step ";
    note += std::to_string(options.from_step.value_or(0));
    note += ": run ";
    note += key.first ? "A" : "B";
    if (options.to_step && *options.to_step < key.second) {
      note += "'s calls in the compared range are all missing there (the range ends before that step)";
    } else {
      note += "'s calls before that step are missing there, and the calls from it on are aligned; --from-step ";
      note += std::to_string(key.second);
      note += " compares the steps both runs have";
    }
    diff.notes.push_back(std::move(note));
  }
}

// Ranks killed (or cut) in either run: the records before the tear are compared, the rest is missing. Logs
// truncated because tracing stopped: what follows was not compared, so "identical" becomes undecided.
void note_torn_and_truncated_logs(RunDiff& diff) {
  std::vector<std::string> torn;
  for (const RankDiff& rank : diff.ranks) {
    for (const bool run_a : {true, false}) {
      if ((run_a ? rank.end_a : rank.end_b) != LogEndKind::kTornTail) continue;
      std::string note = "rank " + std::to_string(rank.rank);
      note += run_a ? " of run A: " : " of run B: ";
      note += run_a ? rank.end_message_a : rank.end_message_b;
      torn.push_back(std::move(note));
    }
  }
  constexpr std::size_t kTornNotes = 8;
  for (std::size_t i = 0; i < torn.size() && i < kTornNotes; ++i) diff.notes.push_back(std::move(torn[i]));
  if (torn.size() > kTornNotes) {
    diff.notes.push_back(std::to_string(torn.size() - kTornNotes) +
                         " more logs end without an end marker (the writer was killed or crashed)");
  }
  std::uint64_t not_compared = 0;
  std::vector<std::uint32_t> truncated;
  for (const RankDiff& rank : diff.ranks) {
    not_compared += rank.not_compared;
    if (rank.end_a == LogEndKind::kTruncated || rank.end_b == LogEndKind::kTruncated) truncated.push_back(rank.rank);
  }
  if (!truncated.empty()) {
    diff.notes.push_back("the logs of rank" + std::string(truncated.size() > 1 ? "s " : " ") + rank_list(truncated) +
                         " were truncated (tracing stopped early, e.g. disk full); " + std::to_string(not_compared) +
                         " calls after the truncation were not compared");
    // RATIONALE: a configuration difference is a divergence found before the truncation, like a call's.
    if (diff.identical()) diff.undecided = true;
  }
}

// Records a newer detnccl wrote: skipped, so whatever they hold was not compared.
void note_unknown_records(RunDiff& diff) {
  for (const bool run_a : {true, false}) {
    std::uint64_t skipped = 0;
    std::vector<std::uint32_t> ranks;
    for (const RankDiff& rank : diff.ranks) {
      const std::uint64_t count = run_a ? rank.unknown_records_a : rank.unknown_records_b;
      skipped += count;
      if (count > 0) ranks.push_back(rank.rank);
    }
    if (skipped == 0) continue;
    diff.unknown_records += skipped;
    diff.notes.push_back(std::to_string(skipped) + (skipped == 1 ? " record" : " records") +
                         " of a type this detnccl does not know skipped in run " + (run_a ? "A" : "B") + " (rank" +
                         (ranks.size() == 1 ? " " : "s ") + rank_list(ranks) +
                         "; written by a newer detnccl?): what they hold was not compared");
  }
}

// The compared step range, steps numbered differently (a resumed run?), fingerprint versions that differ.
void note_range_and_versions(RunDiff& diff, const DiffOptions& options) {
  if (options.from_step || options.to_step) {
    diff.notes.push_back("compared steps " + step_range_text(options) +
                         "; calls are aligned per communicator from the first call of that range");
  }
  if (diff.first && diff.first->kind == DivergenceKind::kMetadata && diff.first->metadata_differences.size() == 1 &&
      diff.first->metadata_differences.front().starts_with("step ") && !options.from_step) {
    diff.notes.push_back("the runs number their steps differently from the first call (" +
                         diff.first->metadata_differences.front() +
                         "): if one run resumed from a checkpoint, compare with --from-step " +
                         std::to_string(std::max(diff.first->a.fields.step, diff.first->b.fields.step)));
  }
  for (const ConfigDifference& difference : diff.config_differences) {
    if (difference.field == "fingerprint_version") {
      diff.notes.push_back("the fingerprint versions differ: only metadata was compared");
      break;
    }
  }
}

// The step-index shortcut: how many calls were compared by their step digests, and how many not read at all.
void note_digest_shortcut(RunDiff& diff) {
  std::uint64_t by_digest = 0;
  std::uint64_t not_read = 0;
  std::optional<std::uint64_t> read_through;
  for (const RankDiff& rank : diff.ranks) {
    by_digest += rank.calls_matched_by_digest;
    not_read += rank.calls_not_read;
    if (rank.read_through_step) read_through = rank.read_through_step;
  }
  if (not_read == 0) return;
  diff.notes.push_back(std::to_string(by_digest) + " calls were compared by their step digests (equal in both runs), " +
                       "and reading stopped after step " + std::to_string(read_through.value_or(0)) +
                       " (the last step at which a rank first differs): " + std::to_string(not_read) +
                       " later calls were not compared one by one, so the counts of differing calls stop there "
                       "(--all-records compares every call)");
}

// Public: see run_diff.h.
}  // namespace

std::string rerun_settings(const RunDiff& diff) {
  if (!diff.first_step) return "";
  // As DETNCCL_RANKS reads them: consecutive ranks as one range ("0-3,8").
  std::string ranks;
  const std::vector<std::uint32_t>& list = diff.first_step_ranks;  // sorted: diff.ranks is
  for (std::size_t i = 0; i < list.size();) {
    std::size_t j = i;
    while (j + 1 < list.size() && list[j + 1] == list[j] + 1) ++j;
    if (!ranks.empty()) ranks += ',';
    ranks += std::to_string(list[i]);
    if (j > i) {
      ranks += j == i + 1 ? ',' : '-';
      ranks += std::to_string(list[j]);
    }
    i = j + 1;
  }
  return "DETNCCL_TRACE=hash DETNCCL_STEPS=" + std::to_string(diff.first_step->step) + " DETNCCL_RANKS=" + ranks;
}

namespace {

// "marked", "inferred and optimizer", "no numbered steps".
std::string step_sources_text(std::uint32_t sources) {
  const std::vector<std::string> names = step_source_names(sources);
  std::string text;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i != 0) text += i + 1 == names.size() ? " and " : ", ";
    text += names[i];
  }
  return text.empty() ? "no calls" : text;
}

// Where each run's steps came from. Steps from different sources (the job's marks against detnccl's inference, say)
// may number one iteration differently: calls were not compared by step (rank_comparison.cc), a note says so, and a
// step range, which would select different iterations in each run, is refused. Returns false (diff.error set) then.
bool check_step_sources(RunDiff& diff, const DiffOptions& options) {
  for (const RankDiff& rank : diff.ranks) {
    diff.step_sources_a |= rank.step_sources_a;
    diff.step_sources_b |= rank.step_sources_b;
  }
  diff.steps_comparable = step_sources_comparable(diff.step_sources_a, diff.step_sources_b);
  if (diff.steps_comparable) return true;
  const std::string sources = "run A's steps are " + step_sources_text(diff.step_sources_a) + ", run B's are " +
                              step_sources_text(diff.step_sources_b);
  if (options.from_step || options.to_step) {
    diff.error = "cannot compare by step: " + sources +
                 ", so one step number may name different iterations in the two runs; number both the same way "
                 "(--infer-steps numbers both from their calls) or compare without --from-step/--to-step";
    return false;
  }
  diff.notes.push_back(sources +
                       ": their step numbers may name different iterations, so calls were aligned and compared "
                       "without their steps (--infer-steps numbers both runs from their calls)");
  return true;
}

// The first differing step over all ranks from their step digests (DETNCCL_TRACE=steps), the ranks whose first
// difference is that step, and the settings that trace it in detail.
void summarize_step_digests(RunDiff& diff) {
  bool compared = false;
  for (const RankDiff& rank : diff.ranks) {
    compared = compared || rank.digests_compared;
    diff.steps_matching += rank.steps_matching;
    if (!rank.first_step) continue;
    // At the first step: a rank whose inputs differ first, then one missing the step, then one whose outputs differ.
    const auto order = [](const StepDivergence& d) {
      const int kind = d.input_differs ? 0 : (!d.in_a || !d.in_b) ? 1 : 2;
      return std::make_tuple(d.step, kind, d.rank);
    };
    if (!diff.first_step || order(*rank.first_step) < order(*diff.first_step)) diff.first_step = rank.first_step;
  }
  if (diff.first_step) {
    bool inputs_differ_somewhere = false;
    for (const RankDiff& rank : diff.ranks) {
      if (rank.first_step && rank.first_step->step == diff.first_step->step && rank.first_step->input_differs) {
        inputs_differ_somewhere = true;
      }
    }
    // RATIONALE: at step granularity the data path between ranks is not known; outputs that differ where no rank's
    // inputs differ can only come from the collectives (an origin), otherwise they may be received.
    const auto role_at_first_step = [&](const StepDivergence& d) {
      const bool outputs_only = d.in_a && d.in_b && !d.input_differs;
      return outputs_only && inputs_differ_somewhere ? DivergenceRole::kReceiver : DivergenceRole::kOrigin;
    };
    diff.first_step->role = role_at_first_step(*diff.first_step);
    // Each rank's own first differing step (the report's map): at the run's first step, by the same rule; at a later
    // step, a receiver when a member of one of its communicators first differed at an earlier step (the difference
    // could have reached it through that communicator), else an origin: a second, independent one.
    std::map<std::uint64_t, std::uint64_t> first_step_of_member;  // communicator id -> earliest first differing step
    for (const RankDiff& rank : diff.ranks) {
      if (!rank.first_step) continue;
      for (const auto* communicators : {&rank.communicators_a, &rank.communicators_b}) {
        for (const records::CommunicatorRecord& c : *communicators) {
          auto [it, fresh] = first_step_of_member.emplace(c.id, rank.first_step->step);
          if (!fresh) it->second = std::min(it->second, rank.first_step->step);
        }
      }
    }
    for (RankDiff& rank : diff.ranks) {
      if (!rank.first_step) continue;
      StepDivergence& d = *rank.first_step;
      if (d.step == diff.first_step->step) {
        d.role = role_at_first_step(d);
        continue;
      }
      bool reached = false;
      for (const auto* communicators : {&rank.communicators_a, &rank.communicators_b}) {
        for (const records::CommunicatorRecord& c : *communicators) {
          const auto it = first_step_of_member.find(c.id);
          reached = reached || (it != first_step_of_member.end() && it->second < d.step);
        }
      }
      d.role = reached ? DivergenceRole::kReceiver : DivergenceRole::kOrigin;
    }
  }
  if (!compared) return;
  if (!diff.first_step) {
    diff.notes.push_back(
        "the logs hold step digests (DETNCCL_TRACE=steps), not call records: " + std::to_string(diff.steps_matching) +
        " (rank, communicator, step) digests are equal in both runs, fingerprints included");
    return;
  }
  for (const RankDiff& rank : diff.ranks) {
    if (rank.first_step && rank.first_step->step == diff.first_step->step) diff.first_step_ranks.push_back(rank.rank);
  }
  diff.notes.push_back(
      "the logs hold step digests (DETNCCL_TRACE=steps), not call records: they say which step differs "
      "first, not which call; trace that step in detail with " +
      rerun_settings(diff) + " (and the same DETNCCL_RUN names as before)");
}

// The run-level half of the comparison with everything but the notes filled; returns false (diff.error set) when
// the runs cannot be compared.
bool combine_ranks(const std::string& run_a, const std::string& run_b, const DiffOptions& options, RunDiff& diff) {
  for (const RankDiff& rank : diff.ranks) {
    if (!rank.unusable.empty()) {
      diff.error = rank.unusable;
      return false;
    }
  }
  diff.error = mixed_jobs_error(run_a, run_b, diff);
  if (!diff.error.empty()) return false;
  for (const RankDiff& rank : diff.ranks) {
    if (!rank.header_error.empty()) {
      diff.error = rank.header_error;
      return false;
    }
  }
  sum_header_differences(diff);
  if (!check_step_sources(diff, options)) return false;
  // A step range that holds no call of either run compares nothing: say so rather than "identical".
  if (options.from_step || options.to_step) {
    bool any = false;
    for (const RankDiff& rank : diff.ranks) {
      any = any || rank.calls_a > 0 || rank.calls_b > 0 || rank.steps_matching > 0 || rank.first_step.has_value();
    }
    if (!any) {
      diff.nothing_in_range = true;
      diff.error = "nothing to compare: no call of either run is in steps " + step_range_text(options) + " (" +
                   run_steps_text(diff.ranks, /*run_a=*/true) + ", " + run_steps_text(diff.ranks, false) + ")";
      return false;
    }
  }
  classify_divergences(diff);
  summarize_step_digests(diff);
  return true;
}

}  // namespace

bool RunDiff::metadata_only() const noexcept {
  std::uint64_t matching = 0;
  std::uint64_t unverified = 0;
  for (const RankDiff& rank : ranks) {
    matching += rank.matching;
    unverified += rank.unverified;
  }
  return error.empty() && !undecided && identical() && matching == 0 && unverified > 0;
}

std::vector<ConfigDifference> compare_headers(const records::LogHeader& a, const records::LogHeader& b) {
  std::vector<ConfigDifference> out;
  const auto number = [&](const char* field, std::uint64_t x, std::uint64_t y) {
    if (x != y) out.push_back({field, std::to_string(x), std::to_string(y), 0, 1});
  };
  number("nccl_version", a.nccl_version, b.nccl_version);
  number("fingerprint_version", a.fingerprint_version, b.fingerprint_version);
  number("detnccl_version", a.detnccl_version, b.detnccl_version);
  number("world_size", a.world_size, b.world_size);
  number("format_version", a.format_version, b.format_version);
  compare_lines(a.config_text, b.config_text, out);
  compare_lines(a.nccl_environment, b.nccl_environment, out);
  return out;
}

RunDiff diff_runs(const RunLogs& a, const RunLogs& b, const DiffOptions& options) {
  RankRangeDiff ranks = compare_rank_range(a, b, options, RankRange{});
  if (!ranks.error.empty()) {
    RunDiff diff;
    diff.error = std::move(ranks.error);
    return diff;
  }
  return combine_rank_diffs(std::move(ranks.ranks), a.path, b.path, options);
}

RankRangeDiff compare_rank_range(const RunLogs& a, const RunLogs& b, const DiffOptions& options, RankRange range) {
  RankRangeDiff result;
  try {
    for (const RunLogs* run : {&a, &b}) {
      if (!run->error.empty()) {
        result.error = run->error;
        return result;
      }
    }
    for (const RunLogs* run : {&a, &b}) {
      if (std::string refused = refuse_single_file(*run, "diff"); !refused.empty()) {
        result.error = std::move(refused);
        return result;
      }
    }
    RunDiff diff;
    const RankFilePairs pairs = pair_rank_files(a, b, diff);
    compare_ranks(pairs, options, range, diff);
    for (RankDiff& rank : diff.ranks) {
      result.run_ranks.push_back(rank.rank);
      if (range.contains(rank.rank)) result.ranks.push_back(std::move(rank));
    }
  } catch (const std::exception& e) {
    result.error = std::string("diff failed: ") + e.what();
  }
  return result;
}

RunDiff combine_rank_diffs(std::vector<RankDiff> ranks, const std::string& run_a, const std::string& run_b,
                           const DiffOptions& options) {
  RunDiff diff;
  diff.ranks = std::move(ranks);
  try {
    if (!combine_ranks(run_a, run_b, options, diff)) return diff;
    note_unverified_and_diagnostics(diff);
    note_logs_without_header(diff);
    note_late_starts(diff, options);
    note_torn_and_truncated_logs(diff);
    note_unknown_records(diff);
    note_range_and_versions(diff, options);
    note_digest_shortcut(diff);
  } catch (const std::exception& e) {
    diff.error = std::string("diff failed: ") + e.what();
  }
  return diff;
}

}  // namespace detnccl::analysis
