// detnccl analysis: the pieces of `detnccl check` (run_check.h) shared by its files: run_check.cc compares the
// ranks' calls, configuration_check.cc their configurations.
#ifndef DETNCCL_CLI_ANALYSIS_CHECK_PARTS_H
#define DETNCCL_CLI_ANALYSIS_CHECK_PARTS_H

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cli/analysis/run_check.h"
#include "cli/analysis/run_logs.h"

namespace detnccl::analysis {

// "rank 3" or "ranks 3, 5".
std::string ranks_text(const std::vector<std::uint32_t>& ranks);

// Settings that differ between the ranks' log headers (their DETNCCL_* configuration and the versions that decide
// what records mean): findings for settings that can change results, notes for diagnostic ones
// (is_diagnostic_setting). streams[i] is run.logs[i]'s; at most findings_kept findings are kept in result.
void check_configurations(const std::vector<std::unique_ptr<RankLogStream>>& streams, const RunLogs& run,
                          CheckResult& result, std::size_t findings_kept);

}  // namespace detnccl::analysis

#endif  // DETNCCL_CLI_ANALYSIS_CHECK_PARTS_H
