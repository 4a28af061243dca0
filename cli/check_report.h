// detnccl command: the report of a check (text, or JSON with --json) and its exit status, shared by `detnccl check`
// and `detnccl merge` (which prints what one check process over every rank prints).
#ifndef DETNCCL_CLI_CHECK_REPORT_H
#define DETNCCL_CLI_CHECK_REPORT_H

#include "cli/analysis/run_check.h"
#include "cli/commands.h"

namespace detnccl::cli {

// Prints the check as `detnccl check` does with these options (run, json, verbose) and returns its exit status;
// messages on stderr start with "detnccl COMMAND: ".
int print_check_report(const CheckCommandOptions& options, const analysis::CheckResult& result, const char* command);

}  // namespace detnccl::cli

#endif  // DETNCCL_CLI_CHECK_REPORT_H
