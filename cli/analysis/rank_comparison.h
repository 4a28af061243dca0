// detnccl analysis: one rank's two logs compared call by call, the first half of `detnccl diff` (run_diff.h).
#ifndef DETNCCL_CLI_ANALYSIS_RANK_COMPARISON_H
#define DETNCCL_CLI_ANALYSIS_RANK_COMPARISON_H

#include <cstdint>

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

}  // namespace detnccl::analysis

#endif  // DETNCCL_CLI_ANALYSIS_RANK_COMPARISON_H
