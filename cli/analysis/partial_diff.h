// detnccl analysis: a diff or a check split across processes (`detnccl diff|check --ranks A-B --partial`, `detnccl
// merge`): the partial results, written, read and merged.
//
// Each process compares the ranks of one range (compare_rank_range) and writes what it found as a partial result:
// every field of its ranks' RankDiff, before the cross-rank classification, and what identifies the comparison (the
// runs as named, the options that change the answer, every rank either run has). Merging the parts of every range
// rebuilds the per-rank half of the one-process diff and runs its run-level half (combine_rank_diffs): the answer is
// the one-process answer, field by field.
//
// A partial result is a JSON document (nlohmann::json) with a format version, `partial_version`; a part is untrusted
// input: the reader checks every type and range and says what is wrong with the file, never crashes on it.
#ifndef DETNCCL_CLI_ANALYSIS_PARTIAL_DIFF_H
#define DETNCCL_CLI_ANALYSIS_PARTIAL_DIFF_H

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/analysis/run_check.h"
#include "cli/analysis/run_diff.h"

namespace detnccl::analysis {

// The partial-result format this detnccl writes and reads; a part of another version is refused.
inline constexpr std::uint32_t kPartialDiffVersion = 2;  // 2: RankDiff's digest step ranges

// One process's share of a diff.
struct PartialDiff {
  // What identifies the comparison: the parts of one diff agree on all of it.
  std::string run_a;  // as named on the command line (RunLogs::path)
  std::string run_b;
  std::optional<std::uint64_t> from_step;
  std::optional<std::uint64_t> to_step;
  bool infer_steps = false;                  // --infer-steps or --step-boundary
  std::optional<std::string> step_boundary;  // --step-boundary as typed
  bool use_step_index = true;                // false: --all-records
  std::uint64_t divergent_calls_kept = 256;  // DiffOptions::divergent_calls_kept
  // The ranks this part compared, and what it found.
  RankRange range;
  RankRangeDiff result;
};

// The part as a JSON document (one line of text).
std::string write_partial_diff(const PartialDiff& part);

// Reads a part written by write_partial_diff; returns what is wrong with the text (empty: `part` is filled), e.g. a
// parse error, a field of the wrong type, another format version.
std::string read_partial_diff(std::string_view text, PartialDiff& part);

// The parts merged.
struct MergedDiff {
  std::string refused;   // non-empty: the parts do not make up one diff (names the files and why); exit status 2
  PartialDiff identity;  // the runs and options the parts share (range and result empty)
  RunDiff diff;          // the one-process answer
};

// Merges the parts of one diff (names[i] is parts[i]'s file, for the messages). Refuses parts of different
// comparisons (runs, options, or run directories that list other ranks), ranges that overlap, and ranks of the runs
// that no part covers (named). Never throws except std::bad_alloc.
MergedDiff merge_partial_diffs(std::vector<PartialDiff> parts, const std::vector<std::string>& names);

// --- check ------------------------------------------------------------------------------------------------------
//
// Each part of a check (check_rank_range, run_check.h) holds its ranks' counts and log ends, the checks of the
// communicators whose lowest member is in its range, and, in the part of the lowest rank with a log, the
// configuration comparison. Merging adds them up with check's own run-level half (combine_rank_checks).

// The check partial-result format this detnccl writes and reads (`"command": "check"`); another version is refused.
inline constexpr std::uint32_t kPartialCheckVersion = 1;

// One process's share of a check.
struct PartialCheck {
  // What identifies the check: the parts of one check agree on all of it.
  std::string run;                           // as named on the command line (RunLogs::path)
  bool infer_steps = false;                  // --infer-steps or --step-boundary
  std::optional<std::string> step_boundary;  // --step-boundary as typed
  std::uint64_t findings_kept = 1000;        // CheckOptions::findings_kept
  // The ranks this part holds, and what it found.
  RankRange range;
  RankRangeCheck result;
};

// The part as a JSON document (one line of text).
std::string write_partial_check(const PartialCheck& part);

// Reads a part written by write_partial_check; returns what is wrong with the text (empty: `part` is filled).
std::string read_partial_check(std::string_view text, PartialCheck& part);

// The parts merged.
struct MergedCheck {
  std::string refused;    // non-empty: the parts do not make up one check (names the files and why); exit status 2
  PartialCheck identity;  // the run and options the parts share (range and result empty)
  CheckResult check;      // the one-process answer
};

// Merges the parts of one check (names[i] is parts[i]'s file). Refuses parts of different checks, ranges that
// overlap, ranks of the run that no part covers, and parts that disagree on which holds the configuration. Never
// throws except std::bad_alloc.
MergedCheck merge_partial_checks(std::vector<PartialCheck> parts, const std::vector<std::string>& names);

// The command a partial result says it is a part of ("diff", "check"): its top-level "command" string, read up to
// there (what follows is the reader's to judge); empty when the text does not say (not a JSON object, no "command"
// string before the first syntax error): then the reader of either says what is wrong with it.
std::string partial_result_command(std::string_view text);

}  // namespace detnccl::analysis

#endif  // DETNCCL_CLI_ANALYSIS_PARTIAL_DIFF_H
