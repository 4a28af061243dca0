// detnccl command: the report of a diff (text, or JSON with --json) and its exit status, shared by `detnccl diff`
// and `detnccl merge` (which prints what one diff process over every rank prints).
#ifndef DETNCCL_CLI_DIFF_REPORT_H
#define DETNCCL_CLI_DIFF_REPORT_H

#include <nlohmann/json.hpp>
#include <string>

#include "cli/analysis/run_diff.h"
#include "cli/commands.h"

namespace detnccl::cli {

// Prints the diff as `detnccl diff` does with these options (run_a, run_b, from_step, to_step, json, verbose) and
// returns its exit status; messages on stderr start with "detnccl COMMAND: ".
int print_diff_report(const DiffCommandOptions& options, const analysis::RunDiff& diff, const char* command);

// The document `detnccl diff --json` prints (docs/cli.md); `detnccl report` embeds it.
nlohmann::json diff_json(const DiffCommandOptions& options, const analysis::RunDiff& diff);

// The verdict as the text output says it: "IDENTICAL", "IDENTICAL METADATA", "DIVERGED", "UNDECIDED", "UNUSABLE".
std::string diff_verdict_text(const analysis::RunDiff& diff);

// diff's exit status: 0 identical, 1 diverged, 2 unusable or undecided.
int diff_exit_status(const analysis::RunDiff& diff);

}  // namespace detnccl::cli

#endif  // DETNCCL_CLI_DIFF_REPORT_H
