// detnccl analysis: whether the logs of one run directory were written by one job (`detnccl check` and `diff` refuse
// a directory that mixes the ranks of two jobs).
//
// Two jobs started at once with the same DETNCCL_RUN can each win some of the rank files (each file is created
// exclusively, so neither job overwrites the other, but neither gets them all); so can a rerun with more ranks under
// the name of an earlier run (its new ranks' files are not taken yet). The headers cannot tell such logs apart; their
// communicators can. Communicator ids are derived from NCCL's unique ids, which are random per
// creation, so two logs that record one id belong to one job. And a communicator that spans the job's whole world
// (as many ranks as the headers' world size, one per log: not an ncclCommInitAll one) has every process of the job
// among its members, so every log of that job that lived long enough records it. Two groups of logs that share no
// communicator, each holding a world-spanning communicator the other lacks, therefore come from two jobs (each log's
// world is its own header's world size: the jobs may differ in it). A
// legitimate run cannot look like this: its logs all record its world communicators (a rank killed or truncated
// before one was created lacks it, but then it lacks the later ones too and holds none the others lack), and a job
// whose ranks never form a world communicator (disjoint halves) gives no group a world-spanning one.
#ifndef DETNCCL_CLI_ANALYSIS_RUN_JOBS_H
#define DETNCCL_CLI_ANALYSIS_RUN_JOBS_H

#include <cstdint>
#include <string>
#include <vector>

#include "records/log_format.h"

namespace detnccl::analysis {

// What one rank's log says about the job that wrote it.
struct RankJobEvidence {
  std::uint32_t rank = 0;                                  // global rank (from the file name)
  std::uint32_t world_size = 0;                            // the header's; 0 when unknown
  std::vector<records::CommunicatorRecord> communicators;  // every communicator record of the log
};

// The groups of ranks that belong together when the logs come from more than one job (each group sorted, groups
// ordered by their lowest rank), with one communicator that identifies each group; empty for the logs of one job.
struct JobGroups {
  std::vector<std::vector<std::uint32_t>> ranks;
  std::vector<records::CommunicatorRecord> world_communicators;  // one per group
  std::vector<std::uint32_t> unattributed;  // logs without a communicator record: no evidence either way
  bool mixed() const noexcept { return ranks.size() > 1; }
};

// Tells whether the logs come from different jobs (see the top of this file for why the test cannot fire on the logs
// of one job). Never throws except std::bad_alloc.
JobGroups group_logs_by_job(const std::vector<RankJobEvidence>& logs);

// One sentence for the user naming the groups: "the logs come from 2 different jobs ...: ranks 0, 1, 2 (...) and
// rank 3 (...)". Empty when the groups are not mixed.
std::string describe_job_groups(const JobGroups& groups);

}  // namespace detnccl::analysis

#endif  // DETNCCL_CLI_ANALYSIS_RUN_JOBS_H
