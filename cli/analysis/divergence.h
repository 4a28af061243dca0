// detnccl analysis: the ranks' first divergences classified across ranks, the second half of `detnccl diff`
// (run_diff.h): a call whose output differs because another member's input (or the peer's Send) differs is a
// receiver; the earliest origin is the answer.
#ifndef DETNCCL_CLI_ANALYSIS_DIVERGENCE_H
#define DETNCCL_CLI_ANALYSIS_DIVERGENCE_H

#include "cli/analysis/run_diff.h"

namespace detnccl::analysis {

// Classifies each rank's first divergence (diff.ranks[i].first, from compare_rank_logs) against the other ranks'
// divergent calls: sets its kind, role, source and cause. Then sets diff.first to the earliest of them (by step,
// origins before undetermined before receivers, sequence number, rank), diff.stopped to the ranks whose missing
// call is at that step when it is a missing call, and diff.receivers (by step and rank).
void classify_divergences(RunDiff& diff);

}  // namespace detnccl::analysis

#endif  // DETNCCL_CLI_ANALYSIS_DIVERGENCE_H
