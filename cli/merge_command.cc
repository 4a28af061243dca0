// detnccl merge: the partial results of one diff (`detnccl diff --ranks A-B --partial`, one per rank range) merged
// into the answer of one diff process over every rank (cli/analysis/partial_diff.h), printed as that process prints it.
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

}  // namespace

int merge_command(const MergeCommandOptions& options) {
  std::vector<analysis::PartialDiff> parts(options.parts.size());
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::string& name = options.parts[i];
    std::ifstream file(name, std::ios::binary);
    if (!file) return refuse(options, "cannot read " + name + ": " + std::strerror(errno));
    const std::string text{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
    if (file.bad()) return refuse(options, "cannot read " + name + ": " + std::strerror(errno));
    if (const std::string error = analysis::read_partial_diff(text, parts[i]); !error.empty()) {
      return refuse(options, name + ": " + error);
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
  return print_diff_report(report, merged.diff, "merge");
}

}  // namespace detnccl::cli

namespace detnccl::cli {

CommandRun add_merge_arguments(CLI::App& app) {
  auto options = std::make_shared<MergeCommandOptions>();
  app.add_option("PART", options->parts,
                 "Partial results of one diff, one per rank range (detnccl diff RUN_A RUN_B --ranks A-B --partial)")
      ->required();
  app.add_flag("--json", options->json, "Print the result as JSON for tools (the document of diff --json)");
  app.add_flag("-v,--verbose", options->verbose, "List every rank and receiver");
  return [options] { return merge_command(*options); };
}

}  // namespace detnccl::cli
