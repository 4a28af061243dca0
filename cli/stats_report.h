// detnccl command: the JSON document of `detnccl stats`, shared by `detnccl stats --json` and `detnccl report`.
#ifndef DETNCCL_CLI_STATS_REPORT_H
#define DETNCCL_CLI_STATS_REPORT_H

#include <nlohmann/json.hpp>
#include <string>

#include "cli/analysis/run_stats.h"

namespace detnccl::cli {

// The document `detnccl stats --json` prints for a usable run (docs/cli.md). every_rank false keeps in "per_rank"
// only the ranks whose logs did not close cleanly (the report's panel: its size then grows with those, not the run).
nlohmann::json stats_json(const std::string& run, const analysis::RunStats& stats, bool every_rank);

}  // namespace detnccl::cli

#endif  // DETNCCL_CLI_STATS_REPORT_H
