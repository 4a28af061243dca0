// detnccl merge: the partial results of one diff or one check (`detnccl diff|check ... --ranks A-B --partial`, one per
// rank range) merged into the answer of one process over every rank (cli/analysis/partial_diff.h), printed as that
// process prints it.
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/analysis/partial_diff.h"
#include "cli/check_report.h"
#include "cli/commands.h"
#include "cli/diff_report.h"

namespace detnccl::cli {
namespace {

// The parts cannot be merged: the message on stderr (and the JSON document of unusable input with --json).
int refuse(const MergeCommandOptions& options, const std::string& message) {
  std::cerr << "detnccl merge: " << message << "\n";
  if (options.json) {
    std::cout << nlohmann::json({{"verdict", "unusable"}, {"error", message}})
                     .dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
              << "\n";
  }
  return kExitUnusable;
}

// The parts of one check merged and printed as `detnccl check` prints them.
int merge_checks(const MergeCommandOptions& options, const std::vector<std::string>& texts) {
  std::vector<analysis::PartialCheck> parts(texts.size());
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (const std::string error = analysis::read_partial_check(texts[i], parts[i]); !error.empty()) {
      return refuse(options, options.parts[i] + ": " + error);
    }
  }
  analysis::MergedCheck merged = analysis::merge_partial_checks(std::move(parts), options.parts);
  if (!merged.refused.empty()) return refuse(options, merged.refused);
  CheckCommandOptions report;
  report.run = merged.identity.run;
  report.json = options.json;
  report.verbose = options.verbose;
  return print_check_report(report, merged.check, "merge");
}

}  // namespace

int merge_command(const MergeCommandOptions& options) {
  std::vector<std::string> texts(options.parts.size());
  // The command of the parts: that of the first part that names one (a part naming none is read as one of them, and
  // its reader says what is wrong with it).
  std::string command;
  std::size_t named_by = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const std::string& name = options.parts[i];
    std::ifstream file(name, std::ios::binary);
    if (!file) return refuse(options, "cannot read " + name + ": " + std::strerror(errno));
    texts[i].assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
    if (file.bad()) return refuse(options, "cannot read " + name + ": " + std::strerror(errno));
    const std::string part_command = analysis::partial_result_command(texts[i]);
    if (part_command != "diff" && part_command != "check") continue;
    if (command.empty()) {
      command = part_command;
      named_by = i;
    } else if (part_command != command) {
      return refuse(options, name + " is a part of " + part_command + ", " + options.parts[named_by] + " of " +
                                 command + ": merge the parts of one command");
    }
  }
  if (command == "check") return merge_checks(options, texts);
  std::vector<analysis::PartialDiff> parts(options.parts.size());
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (const std::string error = analysis::read_partial_diff(texts[i], parts[i]); !error.empty()) {
      return refuse(options, options.parts[i] + ": " + error);
    }
  }
  analysis::MergedDiff merged = analysis::merge_partial_diffs(std::move(parts), options.parts);
  if (!merged.refused.empty()) return refuse(options, merged.refused);
  DiffCommandOptions report;
  report.run_a = merged.identity.run_a;
  report.run_b = merged.identity.run_b;
  report.from_step = merged.identity.from_step;
  report.to_step = merged.identity.to_step;
  report.json = options.json;
  report.verbose = options.verbose;
  // The same answer as one diff process: the divergences measured from the runs' capture files too.
  DiffMagnitudes magnitudes;
  if (!measure_magnitudes(report, merged.diff, "merge", &magnitudes)) return kExitUnusable;
  return print_diff_report(report, merged.diff, "merge", &magnitudes);
}

}  // namespace detnccl::cli

namespace detnccl::cli {

CommandRun add_merge_arguments(CLI::App& app) {
  auto options = std::make_shared<MergeCommandOptions>();
  app.add_option("PART", options->parts,
                 "Partial results of one diff or one check, one per rank range (detnccl diff RUN_A RUN_B --ranks A-B "
                 "--partial, detnccl check RUN --ranks A-B --partial)")
      ->required();
  app.add_flag("--json", options->json,
               "Print the result as JSON for tools (the document of diff --json or check --json)");
  app.add_flag("-v,--verbose", options->verbose, "List every rank and receiver (diff), every finding (check)");
  return [options] { return merge_command(*options); };
}

}  // namespace detnccl::cli
