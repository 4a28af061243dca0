// detnccl command: the report of a check (text, or JSON with --json) and its exit status, shared by `detnccl check`
// and `detnccl merge` (which prints what one check process over every rank prints).
#ifndef DETNCCL_CLI_CHECK_REPORT_H
#define DETNCCL_CLI_CHECK_REPORT_H

#include <nlohmann/json.hpp>
#include <string>

#include "cli/analysis/run_check.h"
#include "cli/commands.h"

namespace detnccl::cli {

// Prints the check as `detnccl check` does with these options (run, json, verbose) and returns its exit status;
// messages on stderr start with "detnccl COMMAND: ".
int print_check_report(const CheckCommandOptions& options, const analysis::CheckResult& result, const char* command);

// The document `detnccl check --json` prints (docs/cli.md); `detnccl report` embeds it.
nlohmann::json check_json(const CheckCommandOptions& options, const analysis::CheckResult& result);

// The verdict as the text output says it: "CONSISTENT", "INCONSISTENT", "UNDECIDED", "UNUSABLE".
std::string check_verdict_text(const analysis::CheckResult& result);

// check's exit status: 0 consistent, 1 inconsistent, 2 unusable or undecided.
int check_exit_status(const analysis::CheckResult& result);

}  // namespace detnccl::cli

#endif  // DETNCCL_CLI_CHECK_REPORT_H
