// detnccl: the offline command. After a loss spike or a failed reproducibility check it answers from the per-rank
// logs where two runs first diverged (diff), whether one run is consistent across its ranks (check), what the logs
// hold (dump, stats); `detnccl fingerprint` runs detnccl-fingerprint. Exit status: 0 identical / consistent,
// 1 diverged / inconsistent, 2 unusable input or bad arguments.
#include <limits.h>
#include <poll.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "cli/commands.h"
#include "detnccl_version.h"

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

// A step number: decimal digits that fit in 64 bits. RATIONALE: CLI11 converts "-1" to an unsigned by wrapping it to
// 2^64-1 and saturates numbers too large for 64 bits, which silently turns a typo into "compare nothing".
const CLI::Validator kStepNumber(
    [](std::string& text) -> std::string {
      std::uint64_t value = 0;
      const char* end = text.data() + text.size();
      const auto [stop, error] = std::from_chars(text.data(), end, value);
      if (text.empty() || stop != end || error != std::errc()) {
        std::string message = "a step must be a whole number from 0 to ";
        message += std::to_string(std::numeric_limits<std::uint64_t>::max());
        message += ", not '";
        message += text;
        message += "'";
        return message;
      }
      return {};
    },
    "STEP");

// After a command: standard output must have been written in full (a full disk, a closed file). Returns the
// command's status, or kExitUnusable with a message when the output was lost. RATIONALE: a reader that went away
// (EPIPE: `detnccl dump RUN | head` with SIGPIPE ignored) is not an error worth a message; with SIGPIPE at its
// default the process ends at the first such write anyway, as every filter does.
// Whether standard output is a pipe or socket whose reader has gone (poll reports POLLERR for it).
bool output_reader_gone() {
  pollfd output{STDOUT_FILENO, POLLOUT, 0};
  return poll(&output, 1, 0) == 1 && (output.revents & POLLERR) != 0;
}

int finish_output(const char* command, int status) {
  errno = 0;
  std::cout.flush();
  const bool flushed = std::fflush(stdout) == 0;
  const int error = errno;
  if (flushed && std::cout.good() && std::ferror(stdout) == 0) return status;
  if (error == EPIPE || output_reader_gone()) return kExitUnusable;
  std::cerr << "detnccl " << command << ": cannot write the output";
  if (error != 0) std::cerr << ": " << std::strerror(error);
  std::cerr << "\n";
  return kExitUnusable;
}

// With --json on the command line, a tool reads standard output: bad arguments are said there too, as the JSON
// document of unusable input, besides the message on stderr.
void report_bad_arguments_as_json(int argc, char** argv, const std::string& message) {
  if (std::find_if(argv + 1, argv + argc, [](const char* arg) { return std::strcmp(arg, "--json") == 0; }) ==
      argv + argc) {
    return;
  }
  std::cout << nlohmann::json({{"verdict", "unusable"}, {"error", "bad arguments: " + message}})
                   .dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
            << "\n";
}

// The subcommands, for a clear message about an unknown one.
constexpr std::string_view kSubcommands[] = {"dump", "diff", "check", "stats", "fingerprint"};

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "fingerprint") == 0) return forward_to_fingerprint(argc, argv);
  if (argc >= 2 && argv[1][0] != '-' &&
      std::find(std::begin(kSubcommands), std::end(kSubcommands), std::string_view(argv[1])) ==
          std::end(kSubcommands)) {
    std::cerr << "detnccl: unknown subcommand '" << argv[1] << "' (dump, diff, check, stats or fingerprint)\n"
              << "Run with --help for more information.\n";
    return kExitUnusable;
  }

  CLI::App app{
      "detnccl: read the per-rank logs of detnccl runs. Exit status: 0 identical or consistent, 1 diverged or "
      "inconsistent, 2 unusable input (the message names the file and why) or bad arguments.",
      "detnccl"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "detnccl " DETNCCL_VERSION_TEXT);

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
  diff_app
      ->add_option("--from-step", diff.from_step,
                   "Compare only calls of steps >= K, aligned from the first call of that range (a run resumed "
                   "from a checkpoint at step K against the run that never stopped)")
      ->check(kStepNumber);
  diff_app->add_option("--to-step", diff.to_step, "Compare only calls of steps <= K")->check(kStepNumber);
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
    report_bad_arguments_as_json(argc, argv, e.what());
    return kExitUnusable;
  }
  try {
    if (dump_app->parsed()) return finish_output("dump", dump_command(dump));
    if (diff_app->parsed()) {
      if (diff.from_step && diff.to_step && *diff.from_step > *diff.to_step) {
        const std::string message =
            "--from-step " + std::to_string(*diff.from_step) + " is after --to-step " + std::to_string(*diff.to_step);
        std::cerr << "detnccl diff: " << message << "\n";
        report_bad_arguments_as_json(argc, argv, message);
        return finish_output("diff", kExitUnusable);
      }
      return finish_output("diff", diff_command(diff));
    }
    if (check_app->parsed()) return finish_output("check", check_command(check));
    if (stats_app->parsed()) return finish_output("stats", stats_command(stats));
  } catch (const std::exception& e) {
    std::cerr << "detnccl: " << e.what() << "\n";
    return kExitUnusable;
  }
  return kExitUnusable;
}
