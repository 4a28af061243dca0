// detnccl command: the command line's parser (see command_line.h).
#include "cli/command_line.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <exception>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "detnccl_version.h"

namespace detnccl::cli {
namespace {

// With --json on the command line, a tool reads standard output: bad arguments are said there too, as the JSON
// document of unusable input, besides the message on stderr.
// Only detnccl's own arguments count: what follows `--` (`detnccl run -- tool --json`) is another program's.
void report_bad_arguments_as_json(int argc, const char* const* argv, const std::string& message, std::ostream& out) {
  const char* const* const own_end =
      std::find_if(argv + 1, argv + argc, [](const char* arg) { return std::strcmp(arg, "--") == 0; });
  if (std::find_if(argv + 1, own_end, [](const char* arg) { return std::strcmp(arg, "--json") == 0; }) == own_end) {
    return;
  }
  out << nlohmann::json({{"verdict", "unusable"}, {"error", "bad arguments: " + message}})
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

ParsedCommandLine parse_command_line(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  ParsedCommandLine parsed;
  if (argc >= 2 && argv[1][0] != '-' &&
      std::find(std::begin(kSubcommands), std::end(kSubcommands), std::string_view(argv[1])) ==
          std::end(kSubcommands)) {
    err << "detnccl: unknown subcommand '" << argv[1] << "' (" << subcommand_list() << ")\n"
        << "Run with --help for more information.\n";
    return parsed;
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
  // With a subcommand first, only that one is declared. RATIONALE: CLI11 never leaves the first subcommand for
  // another (require_subcommand(1) allows one), so the others' options cannot change the outcome, and declaring
  // every option of every subcommand is most of the parser's work (the cli_args fuzz target parses once per input).
  // Anything else first (--help, --version, a bad option, nothing) gets them all, for the help's list.
  const std::string_view first = argc >= 2 && argv[1][0] != '-' ? std::string_view(argv[1]) : std::string_view();
#define DETNCCL_CLI_ADD_SUBCOMMAND(name, description)                  \
  if (first.empty() || first == #name) {                               \
    CLI::App* sub = app.add_subcommand(#name, description);            \
    subcommands.push_back({#name, sub, add_##name##_arguments(*sub)}); \
  }
  DETNCCL_CLI_SUBCOMMANDS(DETNCCL_CLI_ADD_SUBCOMMAND)
#undef DETNCCL_CLI_ADD_SUBCOMMAND
  if (first.empty() || first == "fingerprint") {
    app.add_subcommand("fingerprint", "Fingerprint files (runs detnccl-fingerprint; see its --help)");
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    parsed.status = app.exit(e, out, err);
    return parsed;
  } catch (const CLI::ParseError& e) {
    app.exit(e, out, err);
    report_bad_arguments_as_json(argc, argv, e.what(), out);
    return parsed;
  }
  for (Subcommand& subcommand : subcommands) {
    if (!subcommand.app->parsed()) continue;
    parsed.run = std::move(subcommand.run);
    parsed.name = subcommand.name;
    return parsed;
  }
  // `fingerprint` not first: main forwards only `detnccl fingerprint ...`.
  err << "detnccl: fingerprint must be the first argument (detnccl fingerprint [OPTIONS] FILE...)\n";
  return parsed;
}

int run_parsed_command(const ParsedCommandLine& command, int argc, const char* const* argv, std::ostream& out,
                       std::ostream& err) {
  try {
    return command.run();
  } catch (const BadArguments& e) {
    err << "detnccl " << command.name << ": " << e.what() << "\n";
    report_bad_arguments_as_json(argc, argv, e.what(), out);
    return kExitUnusable;
  } catch (const std::exception& e) {
    err << "detnccl: " << e.what() << "\n";
    return kExitUnusable;
  }
}

}  // namespace detnccl::cli
