// detnccl: the offline command. After a loss spike or a failed reproducibility check it answers from the per-rank
// logs where two runs first diverged (diff), whether one run is consistent across its ranks (check), what the logs
// hold (dump, stats); `detnccl run` starts a job with the shim preloaded; `detnccl fingerprint` runs
// detnccl-fingerprint. Exit status: 0 identical / consistent, 1 diverged / inconsistent, 2 unusable input or bad
// arguments (`run`: the command's own status).
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
// Only detnccl's own arguments count: what follows `--` (`detnccl run -- tool --json`) is another program's.
void report_bad_arguments_as_json(int argc, char** argv, const std::string& message) {
  char** const own_end =
      std::find_if(argv + 1, argv + argc, [](const char* arg) { return std::strcmp(arg, "--") == 0; });
  if (std::find_if(argv + 1, own_end, [](const char* arg) { return std::strcmp(arg, "--json") == 0; }) == own_end) {
    return;
  }
  std::cout << nlohmann::json({{"verdict", "unusable"}, {"error", "bad arguments: " + message}})
                   .dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
            << "\n";
}

// The subcommands' names, for a clear message about an unknown one.
#define DETNCCL_CLI_SUBCOMMAND_NAME(name, description) #name,
constexpr std::string_view kSubcommands[] = {DETNCCL_CLI_SUBCOMMANDS(DETNCCL_CLI_SUBCOMMAND_NAME) "fingerprint"};
#undef DETNCCL_CLI_SUBCOMMAND_NAME

// "dump, diff, check, stats or fingerprint".
std::string subcommand_list() {
  std::string list;
  for (std::size_t i = 0; i < std::size(kSubcommands); ++i) {
    if (i > 0) list += i + 1 == std::size(kSubcommands) ? " or " : ", ";
    list += kSubcommands[i];
  }
  return list;
}

}  // namespace

namespace detnccl::cli {

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

}  // namespace detnccl::cli

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "fingerprint") == 0) return forward_to_fingerprint(argc, argv);
  if (argc >= 2 && argv[1][0] != '-' &&
      std::find(std::begin(kSubcommands), std::end(kSubcommands), std::string_view(argv[1])) ==
          std::end(kSubcommands)) {
    std::cerr << "detnccl: unknown subcommand '" << argv[1] << "' (" << subcommand_list() << ")\n"
              << "Run with --help for more information.\n";
    return kExitUnusable;
  }

  CLI::App app{
      "detnccl: run a job under the shim (run) and read the per-rank logs of detnccl runs. Exit status: 0 identical or "
      "consistent, 1 diverged or inconsistent, 2 unusable input (the message names the file and why) or bad "
      "arguments; run exits with the command's status.",
      "detnccl"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "detnccl " DETNCCL_VERSION_TEXT);

  struct Subcommand {
    const char* name;
    CLI::App* app;
    CommandRun run;
  };
  std::vector<Subcommand> subcommands;
#define DETNCCL_CLI_ADD_SUBCOMMAND(name, description)                  \
  {                                                                    \
    CLI::App* sub = app.add_subcommand(#name, description);            \
    subcommands.push_back({#name, sub, add_##name##_arguments(*sub)}); \
  }
  DETNCCL_CLI_SUBCOMMANDS(DETNCCL_CLI_ADD_SUBCOMMAND)
#undef DETNCCL_CLI_ADD_SUBCOMMAND
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
  for (const Subcommand& subcommand : subcommands) {
    if (!subcommand.app->parsed()) continue;
    try {
      return finish_output(subcommand.name, subcommand.run());
    } catch (const BadArguments& e) {
      std::cerr << "detnccl " << subcommand.name << ": " << e.what() << "\n";
      report_bad_arguments_as_json(argc, argv, e.what());
      return finish_output(subcommand.name, kExitUnusable);
    } catch (const std::exception& e) {
      std::cerr << "detnccl: " << e.what() << "\n";
      return kExitUnusable;
    }
  }
  return kExitUnusable;
}
