// detnccl analysis: one rank's two logs compared call by call, the first half of `detnccl diff` (run_diff.h).
#ifndef DETNCCL_CLI_ANALYSIS_RANK_COMPARISON_H
#define DETNCCL_CLI_ANALYSIS_RANK_COMPARISON_H

#include <cstddef>
#include <cstdint>
#include <optional>

#include "abi/nccl_abi.h"
#include "cli/analysis/run_diff.h"

namespace detnccl::analysis {

// A call's result as the comparison sees it. RATIONALE: on a non-blocking communicator NCCL may return
// ncclInProgress or ncclSuccess for the same call from one run to the next (it depends on how fast the enqueue
// finished), and a record without output fingerprints keeps what the call returned: neither is a failure.
inline std::int32_t compared_result(std::int32_t result) { return result == ncclInProgress ? ncclSuccess : result; }

// Compares the logs of rank `result.rank` in run A (`a`) and run B (`b`; either may be null: the run has no log for
// the rank) within the options' step range, streaming both (bounded memory). Fills `result`: the counts, each log's
// steps and end, the divergent calls (up to options.divergent_calls_kept) and the first divergence, not yet
// classified across ranks (divergence.h); a log that cannot be read sets result.unusable. May throw (a log that
// cannot be allocated for); diff_runs catches it.
void compare_rank_logs(const RankLogFile* a, const RankLogFile* b, const DiffOptions& options, RankDiff& result);

// What the step indexes of a rank's two logs say before any call record is read: whether the digest shortcut
// applies (both logs closed cleanly with a step index, no step range or renumbering, the same fingerprint version and
// communicators), and which group of calls differs first.
struct RankDigestPlan {
  bool usable = false;
  bool differs = false;     // a group differs, or one log has groups the other lacks
  std::size_t entry_a = 0;  // that group's first entry in each log's index (the index's size: past its end)
  std::size_t entry_b = 0;
  std::uint64_t step = 0;  // that group's step
};

// The first half of the shortcut: reads both logs' step indexes. When they are usable and equal throughout, fills
// `result` completely (nothing more to read: compare_rank_logs then does nothing).
RankDigestPlan plan_rank_digests(const RankLogFile* a, const RankLogFile* b, const DiffOptions& options,
                                 RankDiff& result);

// compare_rank_logs with a plan: a usable plan's logs are read from their first differing group, through step
// `read_through` once a divergence is found (and until one is).
void compare_rank_logs(const RankLogFile* a, const RankLogFile* b, const DiffOptions& options,
                       const RankDigestPlan& plan, std::optional<std::uint64_t> read_through, RankDiff& result);

}  // namespace detnccl::analysis

#endif  // DETNCCL_CLI_ANALYSIS_RANK_COMPARISON_H
