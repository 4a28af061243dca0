// hostnccl-run: torchrun-style launcher for single-machine NCCL (or hostnccl) jobs. See docs/launcher.md.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <iostream>
#include <string>
#include <system_error>
#include <vector>

#include "launcher/rank_launcher.h"

namespace {

// The most ranks one machine is asked to run; each rank costs the launcher two pipes (four file descriptors).
constexpr int kMaxRanks = 1024;

// The longest --timeout or --grace honoured (about 31 years); a longer one waits this long.
constexpr double kMaxSeconds = 1e9;

// Whole milliseconds, rounded up: a positive time never becomes 0, which would mean "no limit" for --timeout.
std::chrono::milliseconds to_milliseconds(double seconds) {
  return std::chrono::milliseconds(static_cast<long long>(std::ceil(std::min(seconds, kMaxSeconds) * 1000.0)));
}

// A number of seconds >= 0 (finite; not NaN). RATIONALE: CLI11's NonNegativeNumber accepts "nan" and prints the
// whole double range (300 digits) for "-1" and "inf".
const CLI::Validator kSeconds(
    [](std::string& text) -> std::string {
      double value = 0;
      const char* end = text.data() + text.size();
      const auto [stop, error] = std::from_chars(text.data(), end, value);
      if (text.empty() || stop != end || error != std::errc() || !std::isfinite(value) || value < 0) {
        return "must be a non-negative number of seconds, not '" + text + "'";
      }
      return {};
    },
    "SECONDS");

}  // namespace

int main(int argc, char** argv) {
  using detnccl::launcher::kExitUsage;
  CLI::App app{
      "Starts N copies of PROGRAM as the ranks of one job on this machine (the way torchrun does), with RANK, "
      "WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, HOSTNCCL_ID_FILE and HOSTNCCL_JOB_TAG "
      "set. Output lines are prefixed with '[rank R] '. If a rank fails or the timeout passes, the other ranks are "
      "stopped and the launcher exits non-zero. Once all ranks are gone, hostnccl shared memory the job left in "
      "/dev/shm is removed.",
      "hostnccl-run"};
  app.footer(
      "Usage: hostnccl-run -n N [--timeout SECONDS] [--grace SECONDS] [--no-prefix] [--] PROGRAM ARGS...\n"
      "Exit codes: 0 all ranks succeeded; the first failing rank's exit code, or 128+signal if it was killed; "
      "124 timeout; 128+signal if the launcher was interrupted; 2 bad arguments or the job could not start.");
  int world_size = 0;
  double timeout_seconds = 0;
  double grace_seconds = 5;
  bool no_prefix = false;
  app.add_option("-n,--nproc", world_size, "Number of ranks (processes) to start")
      ->required()
      ->check(CLI::Range(1, kMaxRanks));
  app.add_option("--timeout", timeout_seconds, "Stop all ranks and exit 124 after this many seconds (0: never)")
      ->check(kSeconds);
  app.add_option("--grace", grace_seconds, "Seconds between SIGTERM and SIGKILL when ranks are stopped")
      ->check(kSeconds);
  app.add_flag("--no-prefix", no_prefix, "Let ranks write straight to the launcher's stdout and stderr");
  // Everything from PROGRAM on belongs to the program, options included (hostnccl-run -n 2 sh -c 'echo hi').
  app.prefix_command();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    const int code = app.exit(error);
    return code == 0 ? 0 : kExitUsage;
  }

  std::vector<std::string> command = app.remaining();
  if (!command.empty() && command.front() == "--") {
    command.erase(command.begin());
  } else if (!command.empty() && command.front().starts_with("-")) {
    std::cerr << "hostnccl-run: unknown option " << command.front() << " (put -- before a program whose name "
              << "starts with '-')\nRun with --help for more information.\n";
    return kExitUsage;
  }
  if (command.empty()) {
    std::cerr << "hostnccl-run: no PROGRAM given\nRun with --help for more information.\n";
    return kExitUsage;
  }

  std::string why;
  detnccl::launcher::LaunchOptions options;
  options.program_path = detnccl::launcher::find_program(command.front(), &why);
  if (options.program_path.empty()) {
    std::cerr << "hostnccl-run: cannot run the program: " << why << "\n";
    return kExitUsage;
  }
  options.world_size = world_size;
  options.argv = command;
  options.timeout = to_milliseconds(timeout_seconds);
  options.kill_grace = to_milliseconds(grace_seconds);
  options.prefix_output = !no_prefix;
  return detnccl::launcher::launch_ranks(options);
}
