// detnccl command: the report of a diff (text, or JSON with --json) and its exit status, shared by `detnccl diff`
// and `detnccl merge` (which prints what one diff process over every rank prints).
#ifndef DETNCCL_CLI_DIFF_REPORT_H
#define DETNCCL_CLI_DIFF_REPORT_H

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/analysis/divergence_magnitude.h"
#include "cli/analysis/run_diff.h"
#include "cli/commands.h"

namespace detnccl::cli {

// The magnitudes of divergences measured from capture files (diff only), by rank: each rank's first divergence.
using DiffMagnitudes = std::map<std::uint32_t, analysis::MagnitudeOutcome>;

// Measures, from the runs' capture files (options.run_a, run_b), the first divergence and with options.verbose each
// rank's first. False (after printing "detnccl COMMAND: unusable input: damaged capture file PATH: ..." on stderr)
// when a capture file is damaged: exit 2.
bool measure_magnitudes(const DiffCommandOptions& options, const analysis::RunDiff& diff, const char* command,
                        DiffMagnitudes* magnitudes);

// What diff's text says of a magnitude after "magnitude ": the sentence of analysis::magnitude_sentence (with the
// reordering verdict), or "not captured (why)".
std::string magnitude_text(const analysis::MagnitudeOutcome& m);

// Prints the diff as `detnccl diff` does with these options (run_a, run_b, from_step, to_step, json, verbose) and
// returns its exit status; messages on stderr start with "detnccl COMMAND: ". `magnitudes`: what the capture files
// say of the divergences' sizes (null: nothing to say, as for merge).
int print_diff_report(const DiffCommandOptions& options, const analysis::RunDiff& diff, const char* command,
                      const DiffMagnitudes* magnitudes = nullptr);

// The document `detnccl diff --json` prints (docs/cli.md); `detnccl report` embeds it. `magnitudes` as for
// print_diff_report: a divergence measured there gets its `magnitude` object.
nlohmann::json diff_json(const DiffCommandOptions& options, const analysis::RunDiff& diff,
                         const DiffMagnitudes* magnitudes = nullptr);

// The verdict as the text output says it: "IDENTICAL", "IDENTICAL METADATA", "DIVERGED", "UNDECIDED", "UNUSABLE".
std::string diff_verdict_text(const analysis::RunDiff& diff);

// diff's exit status: 0 identical, 1 diverged, 2 unusable or undecided.
int diff_exit_status(const analysis::RunDiff& diff);

}  // namespace detnccl::cli

#endif  // DETNCCL_CLI_DIFF_REPORT_H
