// detnccl analysis: every member's record of one collective of a run, found by the communicator's run-wide id and
// the collective's index on it (the keys that match calls across ranks, run_logs.h's CallInRun). Replay and diff's
// reordering bound need every member's input of a reduction (issue #18).
#ifndef DETNCCL_CLI_ANALYSIS_CALL_MEMBERS_H
#define DETNCCL_CLI_ANALYSIS_CALL_MEMBERS_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "records/log_format.h"

namespace detnccl::analysis {

// One member's record of the collective.
struct MemberCall {
  std::uint32_t global_rank = 0;  // the log's rank
  std::uint32_t comm_rank = 0;    // its rank in the communicator
  records::CallFields fields;
};

/* Reads the logs of run `run_path` (a run directory) and returns the record of collective number
 * `collective_index` on the communicator with id `comm_id` of every rank that is a member of it, by communicator
 * rank (0 .. nranks-1). nullopt with *error set (naming the rank or the file) when the run cannot be read or a
 * member's record is missing (its log ends before, or it has no log). Logs are read to the call, no further. */
std::optional<std::vector<MemberCall>> find_member_calls(const std::string& run_path, std::uint64_t comm_id,
                                                         std::uint32_t nranks, std::uint64_t collective_index,
                                                         std::string* error);

}  // namespace detnccl::analysis

#endif  // DETNCCL_CLI_ANALYSIS_CALL_MEMBERS_H
