#include "cli/analysis/call_members.h"

#include <map>
#include <memory>

#include "cli/analysis/run_logs.h"

namespace detnccl::analysis {

std::optional<std::vector<MemberCall>> find_member_calls(const std::string& run_path, std::uint64_t comm_id,
                                                         std::uint32_t nranks, std::uint64_t collective_index,
                                                         std::string* error) {
  const RunLogs run = list_run(run_path);
  if (!run.error.empty()) {
    *error = run.error;
    return std::nullopt;
  }
  // RATIONALE: keyed by rank rather than a vector of `nranks` slots: the size comes from a log, which may be damaged.
  std::map<std::uint32_t, MemberCall> members;
  for (const RankLogFile& file : run.logs) {
    std::string open_error;
    std::unique_ptr<RankLogStream> stream = RankLogStream::open(file, open_error);
    if (stream == nullptr) continue;  // an unusable log: its rank, if a member, is reported missing below
    CallInRun call;
    while (stream->next(call)) {
      if (!call.communicator.known || call.communicator.id != comm_id) continue;
      if (call.call.op == records::OpId::kSend || call.call.op == records::OpId::kRecv) continue;
      if (call.collective_index < collective_index) continue;
      if (call.collective_index == collective_index && call.communicator.rank < nranks) {
        members.insert_or_assign(
            call.communicator.rank,
            MemberCall{file.rank, call.communicator.rank, static_cast<const records::CallFields&>(call.call)});
      }
      break;  // this rank's calls of the communicator are past the index
    }
  }
  std::vector<MemberCall> found;
  for (const auto& [r, member] : members) {
    if (r != found.size()) break;
    found.push_back(member);
  }
  if (found.size() != nranks) {
    *error = "rank " + std::to_string(found.size()) + " of communicator " + std::to_string(comm_id) +
             " has no record of its collective number " + std::to_string(collective_index) + " in " + run_path;
    return std::nullopt;
  }
  return found;
}

}  // namespace detnccl::analysis
