// detnccl: the offline command. After a loss spike or a failed reproducibility check it answers from the per-rank
// logs where two runs first diverged (diff), whether one run is consistent across its ranks (check), what the logs
// hold (dump, stats); `detnccl fingerprint` runs detnccl-fingerprint. Exit status: 0 identical / consistent,
// 1 diverged / inconsistent, 2 unusable input or bad arguments.
#include <limits.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace {

using namespace detnccl::cli;

// Runs the detnccl-fingerprint program installed next to this one, with the arguments after "fingerprint".
int forward_to_fingerprint(int argc, char** argv) {
  std::string self(PATH_MAX, '\0');
  const ssize_t length = readlink("/proc/self/exe", self.data(), self.size());
  std::string program = "detnccl-fingerprint";
  if (length > 0) {
    self.resize(static_cast<std::size_t>(length));
    program = self.substr(0, self.rfind('/') + 1) + program;
  }
  std::vector<char*> arguments{program.data()};
  for (int i = 2; i < argc; ++i) arguments.push_back(argv[i]);
  arguments.push_back(nullptr);
  execv(program.c_str(), arguments.data());
  execvp("detnccl-fingerprint", arguments.data());
  std::cerr << "detnccl fingerprint: cannot run " << program << ": " << std::strerror(errno) << "\n";
  return kExitUnusable;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "fingerprint") == 0) return forward_to_fingerprint(argc, argv);

  CLI::App app{
      "detnccl: read the per-rank logs of detnccl runs. Exit status: 0 identical or consistent, 1 diverged or "
      "inconsistent, 2 unusable input (the message names the file and why) or bad arguments.",
      "detnccl"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "detnccl 0.1.0");

  DumpOptions dump;
  CLI::App* dump_app = app.add_subcommand("dump", "Print a run's records, one line per record");
  dump_app->add_option("RUN", dump.run, "Run directory (DETNCCL_DIR/RUN) or one rank-NNNNN.dnc file")->required();
  dump_app->add_option("--rank", dump.rank, "Only this rank's log");
  dump_app->add_option("--format", dump.format, "Output format")
      ->check(CLI::IsMember({"text", "jsonl", "csv"}))
      ->capture_default_str();

  DiffCommandOptions diff;
  CLI::App* diff_app = app.add_subcommand(
      "diff", "Compare two runs call by call; report the first divergence, its kind, and each rank's first difference");
  diff_app->add_option("RUN_A", diff.run_a, "First run directory")->required();
  diff_app->add_option("RUN_B", diff.run_b, "Second run directory")->required();
  diff_app->add_option("--from-step", diff.from_step,
                       "Compare only calls of steps >= K, aligned from the first call of that range (a run resumed "
                       "from a checkpoint at step K against the run that never stopped)");
  diff_app->add_option("--to-step", diff.to_step, "Compare only calls of steps <= K");
  diff_app->add_flag("--json", diff.json, "Print the result as JSON for tools");
  diff_app->add_flag("-v,--verbose", diff.verbose, "List every rank and receiver");
  diff_app->add_option("-j,--jobs", diff.threads, "Threads (default: the cores available)");

  CheckCommandOptions check;
  CLI::App* check_app = app.add_subcommand(
      "check", "Check one run across its ranks: same collectives on every member, consistent contents");
  check_app->add_option("RUN", check.run, "Run directory")->required();
  check_app->add_flag("--json", check.json, "Print the result as JSON for tools");
  check_app->add_flag("-v,--verbose", check.verbose, "List every finding");
  check_app->add_option("-j,--jobs", check.threads, "Threads (default: the cores available)");

  StatsCommandOptions stats;
  CLI::App* stats_app =
      app.add_subcommand("stats", "Calls and bytes per operation, communicator and rank; steps; truncated logs");
  stats_app->add_option("RUN", stats.run, "Run directory or one rank-NNNNN.dnc file")->required();
  stats_app->add_flag("--json", stats.json, "Print the result as JSON for tools");
  stats_app->add_flag("-v,--verbose", stats.verbose, "List every rank");
  stats_app->add_option("-j,--jobs", stats.threads, "Threads (default: the cores available)");

  app.add_subcommand("fingerprint", "Fingerprint files (runs detnccl-fingerprint; see its --help)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUnusable;
  }
  try {
    if (dump_app->parsed()) return dump_command(dump);
    if (diff_app->parsed()) {
      if (diff.from_step && diff.to_step && *diff.from_step > *diff.to_step) {
        std::cerr << "detnccl diff: --from-step " << *diff.from_step << " is after --to-step " << *diff.to_step << "\n";
        return kExitUnusable;
      }
      return diff_command(diff);
    }
    if (check_app->parsed()) return check_command(check);
    if (stats_app->parsed()) return stats_command(stats);
  } catch (const std::exception& e) {
    std::cerr << "detnccl: " << e.what() << "\n";
    return kExitUnusable;
  }
  return kExitUnusable;
}
