// detnccl analysis: where two runs first diverge, on which rank and step, and whether it is the communication or
// the compute before it (`detnccl diff`).
//
// Calls are aligned per rank by (communicator ordinal, sequence number on that communicator) — relative to the
// first call of the compared step range, so that a run resumed from a checkpoint at step K aligns with the run that
// never stopped. When --from-step is before the step a log starts at (the resumed run compared from an earlier
// step), the other run's calls before that step are missing in it, and alignment starts at that step.
//
// Each rank is compared by streaming its two logs (bounded memory), ranks in parallel. Then the ranks' first
// divergent calls are classified across ranks: a call whose output differs because another member's input (or the
// peer's Send) differs is a receiver; the earliest origin is the answer.
#ifndef DETNCCL_CLI_ANALYSIS_RUN_DIFF_H
#define DETNCCL_CLI_ANALYSIS_RUN_DIFF_H

#include <atomic>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/analysis/call_layout.h"
#include "cli/analysis/run_logs.h"

namespace detnccl::analysis {

// What differs first.
enum class DivergenceKind : std::uint8_t {
  kConfig,    // detnccl or NCCL configuration or version differ between the runs
  kMetadata,  // different op, count, datatype, reduction, root or peer: the control flow diverged
  kInput,     // the inputs already differ: compute before the call, or data received from a peer
  kOutput,    // same inputs, different outputs: the collective (or transfer) itself is nondeterministic
  kMissing,   // one run has the call and the other does not: it stopped early (crash or hang), made fewer calls,
              // has no log for the rank, or (with --from-step) its log starts at a later step (a resumed run)
};

// "config", "metadata", "input", "output", "missing".
std::string_view divergence_kind_name(DivergenceKind kind) noexcept;

// Whether a rank's first divergent call is where the difference starts or where it arrives.
enum class DivergenceRole : std::uint8_t {
  kOrigin,        // the difference starts here (or the run stops here)
  kReceiver,      // it received different data from another rank (source names that rank's call)
  kUndetermined,  // the records do not allow telling (another rank's call could not be checked)
};

// "origin", "receiver", "undetermined".
std::string_view divergence_role_name(DivergenceRole role) noexcept;

// One run's record of an aligned call.
struct CallSide {
  bool present = false;
  records::CallFields fields;  // the array counts say how many digests the record held
  CommunicatorInfo communicator;
  std::uint64_t collective_index = 0;
  std::uint64_t pair_index = 0;
};

// A call on another rank that a receiver got its data from.
struct SourceCall {
  std::uint32_t rank = 0;  // global rank
  records::OpId op = records::OpId::kUnknown;
  std::uint64_t step = 0;
  std::uint64_t seq = 0;
  std::uint64_t comm_seq = 0;
};

// One divergent call of one rank.
struct CallDivergence {
  DivergenceKind kind = DivergenceKind::kMetadata;
  DivergenceRole role = DivergenceRole::kOrigin;
  std::uint32_t rank = 0;
  CallSide a;
  CallSide b;
  std::vector<std::string> metadata_differences;  // "count 1031 vs 1030"
  bool input_differs = false;
  bool output_differs = false;
  std::vector<DifferingRange> input_ranges;  // from segment digests, when both runs recorded them
  std::vector<DifferingRange> output_ranges;
  std::vector<std::uint32_t> input_blocks;  // per-peer blocks that differ (both runs recorded the per-peer lists)
  std::vector<std::uint32_t> output_blocks;
  // The side differs and a run recorded only the fold of its per-peer blocks (DETNCCL_TRACE=hash,
  // records/block_digests.h): which peers' blocks differ cannot be named; DETNCCL_TRACE=segments names them.
  bool input_blocks_folded = false;
  bool output_blocks_folded = false;
  std::string cause;                 // one sentence, filled by the cross-rank classification
  std::optional<SourceCall> source;  // receivers: the call whose data differs
  // The order of divergences within a rank and across ranks: step, then sequence number.
  std::uint64_t step() const noexcept { return a.present ? a.fields.step : b.fields.step; }
  std::uint64_t seq() const noexcept { return a.present ? a.fields.seq : b.fields.seq; }
  const CallSide& present_side() const noexcept { return a.present ? a : b; }
};

// A divergent call in brief, kept (up to DiffOptions::divergent_calls_kept per rank) to classify other ranks' calls.
struct DivergentCallBrief {
  std::uint32_t rank = 0;
  std::uint64_t comm_id = 0;
  std::uint32_t comm_rank = 0;
  std::uint64_t collective_index = 0;
  std::uint64_t pair_index = 0;
  records::OpId op = records::OpId::kUnknown;
  std::int32_t peer = -1;
  std::uint64_t step = 0;
  std::uint64_t seq = 0;
  std::uint64_t comm_seq = 0;
  bool input_differs = false;
  bool output_differs = false;
};

// The first (communicator, step) whose digests differ between the runs on one rank (DETNCCL_TRACE=steps logs,
// which hold digests instead of call records).
struct StepDivergence {
  std::uint32_t rank = 0;
  std::uint64_t step = 0;
  std::uint64_t comm_ordinal = 0;
  std::uint64_t comm_id = 0;  // from run A's communicator record (B's when A has none); 0 when unknown
  bool in_a = false;          // run A has a digest for it (else its log ends before: a torn or shorter run)
  bool in_b = false;
  records::StepDigestRecord a;  // each run's digest record (when in_a / in_b; zeros otherwise)
  records::StepDigestRecord b;
  // What differs when both runs have the step: the calls' metadata or inputs (the compute before them, or data from
  // another rank), or only their results and outputs (the collectives themselves).
  bool input_differs = false;
  bool output_differs = false;
  // RunDiff::first_step's: over the run (see there). A rank's: at the run's first differing step by the same rule; at
  // a later step a receiver when a member of one of its communicators first differed earlier, else an origin.
  DivergenceRole role = DivergenceRole::kOrigin;
};

// A header difference between the runs, reported once for all ranks that share it.
struct ConfigDifference {
  std::string field;  // "nccl_version", "DETNCCL_TRACE", "NCCL_ALGO", ...
  std::string a;      // value in run A ("(unset)" when absent)
  std::string b;
  std::uint32_t first_rank = 0;
  std::uint32_t rank_count = 0;  // ranks whose headers differ this way
};

// The comparison of one rank's two logs.
struct RankDiff {
  std::uint32_t rank = 0;
  bool in_a = false;  // run A has a log for this rank
  bool in_b = false;
  std::uint64_t calls_a = 0;  // calls in the compared step range
  std::uint64_t calls_b = 0;
  std::uint64_t matching = 0;      // metadata equal and every fingerprint both runs computed equal (at least one)
  std::uint64_t differing = 0;     // metadata or a fingerprint differs
  std::uint64_t unverified = 0;    // metadata equal, but no fingerprint computed by both runs: content not compared
  std::uint64_t missing_in_a = 0;  // calls only run B has
  std::uint64_t missing_in_b = 0;
  std::uint64_t not_compared = 0;  // calls after the other run's truncation marker (tracing stopped there)
  // The steps of every call in each log, whatever the compared range (nullopt: the log holds no call).
  std::optional<std::uint64_t> first_step_a, last_step_a;
  std::optional<std::uint64_t> first_step_b, last_step_b;
  // Where the steps of each log's calls came from (step_source_bit of each source seen, whatever the range).
  std::uint32_t step_sources_a = 0;
  std::uint32_t step_sources_b = 0;
  std::optional<CallDivergence> first;
  // Step digests, compared when a log holds digests but no call records (DETNCCL_TRACE=steps): the (communicator,
  // step) pairs whose digests match, and the first that does not.
  bool digests_compared = false;
  std::uint64_t steps_matching = 0;
  std::optional<StepDivergence> first_step;
  // With digests_compared: the steps each log's digests cover within the compared range (nullopt: none), the step
  // range of a DETNCCL_TRACE=steps log, which has no call to take first_step_a and last_step_a from.
  std::optional<std::uint64_t> first_digest_step_a, last_digest_step_a;
  std::optional<std::uint64_t> first_digest_step_b, last_digest_step_b;
  // The step-index shortcut (DiffOptions::use_step_index: both logs closed cleanly with a step index): the groups of
  // calls before the first one whose step digests differ were compared by their digests (calls_matched_by_digest,
  // counted in matching and unverified), the calls from there on one by one, and reading stopped after
  // read_through_step (the last step at which any rank first differs) once a divergence was found: calls_not_read
  // calls of both logs after it were not compared one by one.
  bool digest_shortcut = false;
  std::uint64_t calls_matched_by_digest = 0;
  std::uint64_t calls_not_read = 0;
  std::optional<std::uint64_t> read_through_step;  // set when reading stopped there
  std::uint64_t calls_read = 0;                    // call records read, both logs
  std::vector<DivergentCallBrief> divergent;       // earliest divergent calls, capped
  bool divergent_capped = false;
  std::vector<records::CommunicatorRecord> communicators_a;  // every communicator record of run A's log
  std::vector<records::CommunicatorRecord> communicators_b;
  std::uint32_t world_size_a = 0;  // the headers' world sizes
  std::uint32_t world_size_b = 0;
  records::LogEndKind end_a = records::LogEndKind::kNotReached;
  records::LogEndKind end_b = records::LogEndKind::kNotReached;
  std::string end_message_a;
  std::string end_message_b;
  // Records of types this detnccl does not know, skipped (a newer detnccl of the same format version wrote them):
  // whatever they hold was not compared.
  std::uint64_t unknown_records_a = 0;
  std::uint64_t unknown_records_b = 0;
  std::string unusable;  // non-empty: a log of this rank is unusable (the message names the file and why)
  // Non-empty: run A's (B's) file for this rank holds no header (empty or zeros: its writer was killed before
  // writing it; records::OpenedLog::no_header): the reader's message, naming the file. The rank is compared as if
  // that run had no log for it (in_a / in_b false).
  std::string no_header_a;
  std::string no_header_b;
  // Set when run A's (B's) log for this rank starts at this step, after --from-step and after the other run's log
  // starts, and the other run has calls in the range before it (run B resumed from a checkpoint at this step, say):
  // those calls are missing in it (its log starts later), and the calls from this step on are aligned.
  std::optional<std::uint64_t> late_start_a;
  std::optional<std::uint64_t> late_start_b;
  // How the rank's two headers differ (compare_headers; first_rank and rank_count not yet summed over the ranks),
  // when both runs have a log for it; header_error: the reason a header could not be reread (names the file).
  std::vector<ConfigDifference> header_differences;
  std::string header_error;
  // A member added here must also be written and read by the partial-result format (partial_diff.cc), or a merged
  // diff would lose it.
};

// What to compare and how.
struct DiffOptions {
  std::optional<std::uint64_t> from_step;          // compare only calls of steps >= from_step
  std::optional<std::uint64_t> to_step;            // ... and <= to_step
  unsigned threads = 0;                            // 0: default_thread_count()
  std::size_t divergent_calls_kept = 256;          // per rank, for the cross-rank classification
  std::atomic<std::size_t>* ranks_done = nullptr;  // progress: incremented as each rank is compared
  StepNumbering step_numbering;                    // --infer-steps, --step-boundary
  // Whether logs with a step index are compared by their step digests first, reading call records only from each
  // rank's first differing step (RankDiff::digest_shortcut); false is --all-records. Not with a step range or
  // --infer-steps (the digests are of the steps as written).
  bool use_step_index = true;
  // How much of each log a reader reads at a time (records::LogReader::set_page_release_bytes); 0: its default. Calls
  // read earlier must not depend on what the reader reads next: the tests compare with a window of one page.
  std::uint64_t read_window_bytes = 0;
};

// The whole comparison.
struct RunDiff {
  std::string error;  // non-empty: unusable input (exit status 2); names the file and why
  std::vector<ConfigDifference> config_differences;
  // Header differences in settings that cannot change any call (detnccl's and NCCL's own logging, what is
  // fingerprinted: is_diagnostic_setting()): shown as notes, never a divergence.
  std::vector<ConfigDifference> config_notes;
  std::vector<RankDiff> ranks;           // sorted by rank: every rank either run has
  std::optional<CallDivergence> first;   // the first divergence over all ranks (copy of one rank's first)
  std::vector<std::uint32_t> receivers;  // ranks whose first divergent call is a receiver, by (step, rank)
  std::vector<std::uint32_t> stopped;    // for a first divergence of kind missing: every rank whose first divergence
                                         // is a missing call at that step
  std::vector<std::string> notes;        // things the reader must know (calls not compared, truncated logs...)
  std::uint64_t unknown_records = 0;     // records of unknown types skipped, both runs (RankDiff::unknown_records_a)
  // Where each run's steps came from (every rank's step_sources_a / _b), and whether they number the same
  // iterations (step_sources_comparable). When they do not, calls are not compared by step (a note says why) and a
  // step range is refused (error, exit 2).
  std::uint32_t step_sources_a = 0;
  std::uint32_t step_sources_b = 0;
  bool steps_comparable = true;
  // From step digests (DETNCCL_TRACE=steps): the first (communicator, step) that differs over all ranks, and every
  // rank whose first differing step is that one: the ranks to trace in detail (rerun_settings). Among those ranks the
  // first is one whose inputs differ (an origin: the compute before the step's calls, or their metadata) if any, else
  // one that is missing the step, else one whose outputs alone differ (an origin when no rank's inputs differ at that
  // step: the collectives themselves; else a receiver).
  std::optional<StepDivergence> first_step;
  std::vector<std::uint32_t> first_step_ranks;
  std::uint64_t steps_matching = 0;  // (rank, communicator, step) digests equal in both runs
  bool undecided = false;  // no divergence found, but a truncated log hides part of a run: no verdict (exit 2)
  // --from-step/--to-step select no call of either run: nothing was compared (exit 2, like a bad argument); error
  // says so and names the steps each run has.
  bool nothing_in_range = false;

  // Whether the runs are identical over the compared range (no divergence of any kind).
  bool identical() const noexcept {
    return config_differences.empty() && !first.has_value() && !first_step.has_value();
  }
  // Identical, but no compared call had a fingerprint in both runs: only metadata was compared ("IDENTICAL
  // METADATA"; JSON verdict "identical_metadata").
  bool metadata_only() const noexcept;
};

// The settings that trace the first differing step of step-digest logs in detail: "DETNCCL_TRACE=hash
// DETNCCL_STEPS=S DETNCCL_RANKS=r1,r2" (the ranks whose first difference is that step); empty without one.
std::string rerun_settings(const RunDiff& diff);

// Compares two runs. Never throws; an unusable run or log is reported in RunDiff::error, and so is a run directory
// holding the logs of two different jobs (run_jobs.h). It is compare_rank_range over every rank, then
// combine_rank_diffs.
RunDiff diff_runs(const RunLogs& a, const RunLogs& b, const DiffOptions& options);

// A range of global ranks, both ends included.
struct RankRange {
  std::uint32_t first = 0;
  std::uint32_t last = std::numeric_limits<std::uint32_t>::max();
  bool contains(std::uint32_t rank) const noexcept { return first <= rank && rank <= last; }
};

// The per-rank half of a diff, for the ranks in a range: what one process of a split comparison computes
// (`detnccl diff --ranks A-B --partial`, then `detnccl merge`).
struct RankRangeDiff {
  std::string error;                     // non-empty: the runs cannot be compared at all (names the path and why)
  std::vector<std::uint32_t> run_ranks;  // every rank either run has, sorted
  std::vector<RankDiff> ranks;           // those of run_ranks in the range, compared but not classified across ranks
};

// Compares the ranks in `range`. RATIONALE: the step indexes of every rank are read (cheap), so that each rank's
// call records are read through the same step as in one process over all ranks; only the ranks in the range are then
// compared call by call, and their headers. Never throws.
RankRangeDiff compare_rank_range(const RunLogs& a, const RunLogs& b, const DiffOptions& options, RankRange range);

// The run-level half of a diff: takes every rank's comparison (compare_rank_range's ranks, over all ranks, sorted
// by rank) and the runs' paths as named, and does what needs all of them: unusable logs, mixed jobs, the header
// differences summed over ranks, step sources, the step range, the cross-rank classification, the step digests and
// the notes. Never throws.
RunDiff combine_rank_diffs(std::vector<RankDiff> ranks, const std::string& run_a, const std::string& run_b,
                           const DiffOptions& options);

// Compares the headers of one rank's two logs (fields the runs are expected to share; the run name and
// DETNCCL_DIR/DETNCCL_RUN are ignored) and returns the differences as (field, a, b).
std::vector<ConfigDifference> compare_headers(const records::LogHeader& a, const records::LogHeader& b);

}  // namespace detnccl::analysis

#endif  // DETNCCL_CLI_ANALYSIS_RUN_DIFF_H
