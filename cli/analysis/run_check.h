// detnccl analysis: the consistency of one run across its ranks (`detnccl check`).
//
// Every communicator's members must issue the same sequence of collectives (op, count, datatype, reduction, root),
// with verdicts in the spirit of PyTorch's Flight Recorder analyzer: type, size, dtype, reduction and root
// mismatches, and "not all ranks joined" naming the ranks that did not. Where the records hold fingerprints, the
// contents must agree too: AllReduce, AllGather and Broadcast outputs identical on every member; each Send's
// input equal to its matching Recv's output; AllGather, AlltoAll, Gather and Scatter blocks equal to the data each
// peer sent. A content failure inside one run means corrupted data or a broken collective. Per-peer blocks recorded
// folded (DETNCCL_TRACE=hash, records/block_digests.h) are checked as a whole where the relation allows it (AllGather,
// Gather, Scatter: the holder's fold against the fold of the members' fingerprints), without naming the member at
// fault; AlltoAll's block-by-block relation needs the per-peer lists (DETNCCL_TRACE=segments).
//
// The ranks' headers must agree too: the same DETNCCL_* configuration, detnccl, NCCL and fingerprint versions. So must
// the sizes the members' communicator records state for one communicator.
//
// A log that ends with a truncation marker holds every call up to it; the calls after it were made but not recorded.
// The other members' calls that have no partner because of it are counted as not checked, not as findings. Logs of
// two different jobs in one run directory (run_jobs.h) make the run unusable.
//
// Collectives are matched across ranks by (communicator id, index among the collectives on that communicator),
// Send/Recv by (communicator id, sender, receiver, per-pair order). The logs are streamed together, a bounded
// number of calls per rank at a time, so memory stays bounded when the ranks made the same calls.
#ifndef DETNCCL_CLI_ANALYSIS_RUN_CHECK_H
#define DETNCCL_CLI_ANALYSIS_RUN_CHECK_H

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "cli/analysis/run_diff.h"
#include "cli/analysis/run_logs.h"

namespace detnccl::analysis {

// What a finding is about.
enum class CheckFindingKind : std::uint8_t {
  kTypeMismatch,           // members called different operations
  kSizeMismatch,           // different counts
  kDtypeMismatch,          // different datatypes
  kRedopMismatch,          // different reduction operations
  kRootMismatch,           // different roots
  kNotAllJoined,           // some members never made the call (named)
  kContentMismatch,        // fingerprints that must be equal are not: corrupted data or a broken collective
  kUnmatchedPointToPoint,  // a Send without its Recv or the other way round
  kConfigMismatch,         // ranks ran with different DETNCCL_* settings or versions (e.g. one rank without
                           // deterministic mode): the ranks did not choose identically
  kCommSizeMismatch,       // members' logs state different sizes for one communicator (a damaged log, or two
                           // communicators sharing an id): its collectives are not checked for missing members
};

// "type mismatch", "size mismatch", ...
std::string_view check_finding_name(CheckFindingKind kind) noexcept;

// One verdict.
struct CheckFinding {
  CheckFindingKind kind = CheckFindingKind::kTypeMismatch;
  std::uint64_t comm_id = 0;
  std::uint64_t index = 0;  // collective index on the communicator, or the per-pair index of a Send/Recv
  std::uint64_t count = 1;  // consecutive collectives this finding covers (not-all-joined runs are merged)
  records::OpId op = records::OpId::kUnknown;
  std::uint64_t step = 0;
  std::vector<std::uint32_t> ranks;  // global ranks at fault (the odd ones out, the missing ones)
  std::string message;               // one or two sentences for the user
};

// Limits and progress.
struct CheckOptions {
  unsigned threads = 0;                            // 0: default_thread_count()
  std::size_t calls_per_round = 64;                // calls read per rank before matching (bounds memory)
  std::size_t findings_kept = 1000;                // findings beyond this are counted, not kept
  std::atomic<std::size_t>* calls_done = nullptr;  // progress: calls read so far
  StepNumbering step_numbering;                    // --infer-steps, --step-boundary
  // How much of each log a reader reads at a time, at most (the share of check's budget otherwise); 0: that share.
  // Calls waiting for their matches must not depend on what the readers read next: the tests check with one page.
  std::uint64_t read_window_bytes = 0;
};

// The whole check.
struct CheckResult {
  std::string error;  // non-empty: unusable input (exit status 2)
  std::uint32_t ranks = 0;
  std::uint64_t calls = 0;
  std::uint64_t collectives = 0;           // collective calls matched across members (complete or not)
  std::uint64_t point_to_point_pairs = 0;  // Send/Recv pairs matched
  std::uint64_t content_checks = 0;        // fingerprint relations checked
  std::uint64_t content_unchecked = 0;     // calls matched without the fingerprints a content check needs
  // Collectives whose per-peer blocks were recorded folded (DETNCCL_TRACE=hash) where the fold cannot be checked:
  // AlltoAll (its relation is between single blocks), or a member lacking the fingerprint the fold is checked against.
  std::uint64_t folded_blocks_unchecked = 0;
  std::vector<CheckFinding> findings;  // the first findings_kept in report order (check_finding_order)
  std::map<CheckFindingKind, std::uint64_t> finding_counts;
  std::vector<std::string> notes;  // logs that end early, findings not kept...
  // Settings that differ between ranks but cannot change any call (is_diagnostic_setting(): a per-rank
  // DETNCCL_LOG_FILE, a fingerprinting window): one sentence each, never a finding.
  std::vector<std::string> config_notes;
  // Ranks whose log ends with a truncation marker (tracing stopped early, e.g. disk full): their calls after it were
  // made but not recorded, so the other members' calls that expect them are not checked (never "not joined").
  std::vector<std::uint32_t> truncated_ranks;
  std::uint64_t not_checked = 0;  // collectives and Send/Recv calls left incomplete only by a truncated log
  // Records of types this detnccl does not know, skipped (a newer detnccl of the same format version wrote them):
  // whatever they hold was not checked. A note names the ranks.
  std::uint64_t unknown_records = 0;
  // The logs hold step digests but no call record (DETNCCL_TRACE=steps): there is nothing to match across ranks.
  bool digests_only = false;

  // Whether the run passed every check.
  bool clean() const noexcept { return finding_counts.empty(); }
  // No finding in what the ranks recorded, but a truncated log hides the rest, or nothing could be checked (logs of
  // step digests only): no verdict (exit status 2).
  bool undecided() const noexcept { return clean() && (!truncated_ranks.empty() || digests_only); }
};

// Checks one run. Never throws. The same as combine_rank_checks({check_rank_range(run, options, {})}, options).
CheckResult check_run(const RunLogs& run, const CheckOptions& options);

// The order findings are reported in: by step, communicator, index, then kind, ranks and message (a total order, so
// that the findings kept, the first CheckOptions::findings_kept of them, do not depend on the order they were found).
bool check_finding_order(const CheckFinding& x, const CheckFinding& y);

// --- A check split by rank range (`detnccl check --ranks A-B --partial`, `detnccl merge`) ---------------------------
//
// Matching needs every member's calls, so each part reads every rank's log, as one process does, and keeps what
// belongs to its range: the counts, log ends and notes of its ranks, and the checks of the communicators whose lowest
// member (the lowest global rank whose log names the communicator) is in the range, with their findings; it skips the
// calls of a communicator once a log names a member below the range. The configuration comparison (against the value
// most ranks share) belongs to the range of the lowest rank with a log. combine_rank_checks adds the parts up and
// writes the run-level notes: the one-process answer, field by field.

// One rank's share: what the run-level notes and counts need of its log.
struct CheckedRank {
  std::uint32_t rank = 0;
  bool has_header = true;   // false: the file has no header (its writer was killed first): a rank without a log
  std::string no_header;    // has_header false: why (the reader's message)
  std::uint64_t calls = 0;  // call records read
  std::uint64_t unknown_records = 0;
  bool step_digests = false;  // the log holds step digests
  records::LogEndKind end = records::LogEndKind::kClosed;
  std::string end_message;
};

// What the checks of some communicators (or of the configuration) found.
struct CheckTally {
  std::uint64_t collectives = 0;
  std::uint64_t point_to_point_pairs = 0;
  std::uint64_t content_checks = 0;
  std::uint64_t content_unchecked = 0;
  std::uint64_t folded_blocks_unchecked = 0;
  std::uint64_t not_checked = 0;
  std::map<CheckFindingKind, std::uint64_t> finding_counts;
  std::vector<CheckFinding> findings;  // the first CheckOptions::findings_kept in check_finding_order

  // Adds `other` in; keeps the first `findings_kept` findings in check_finding_order.
  void add(CheckTally other, std::size_t findings_kept);
};

// One rank range's share of a check.
struct RankRangeCheck {
  std::string error;                      // non-empty: the run cannot be checked at all (names the path and why)
  std::vector<std::uint32_t> run_ranks;   // every rank the run directory lists, sorted
  std::vector<CheckedRank> ranks;         // those of run_ranks in the range
  bool configuration = false;             // the range holds the lowest rank with a log: the configuration is its share
  std::vector<std::string> config_notes;  // configuration: CheckResult::config_notes
  CheckTally tally;  // the communicators whose lowest member is in the range, and the configuration's findings
};

// Checks the run, keeping the share of the ranks in `range` (RankRange{}: every rank). Never throws.
RankRangeCheck check_rank_range(const RunLogs& run, const CheckOptions& options, const RankRange& range);

// The run-level half: the shares of ranges that cover every rank of the run once, in rank order, added up into the
// answer of one check (counts, findings kept, notes in their order). A share with an error makes that the answer.
CheckResult combine_rank_checks(std::vector<RankRangeCheck> parts, const CheckOptions& options);

}  // namespace detnccl::analysis

#endif  // DETNCCL_CLI_ANALYSIS_RUN_CHECK_H
