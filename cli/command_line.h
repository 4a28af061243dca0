// detnccl command: the parser of `detnccl`'s command line, built from DETNCCL_CLI_SUBCOMMANDS (cli/commands.h).
// detnccl_main.cc parses with it and runs what it returns; fuzz/cli_args_fuzz.cc parses any argument vector with it,
// in memory. It never exits the process: help, a version and bad arguments come back as a status to return.
#ifndef DETNCCL_CLI_COMMAND_LINE_H
#define DETNCCL_CLI_COMMAND_LINE_H

#include <ostream>
#include <string>

#include "cli/commands.h"

namespace detnccl::cli {

// The outcome of parsing a command line.
struct ParsedCommandLine {
  // Empty: nothing to run (--help, --version, bad arguments, an unknown subcommand), `status` is the exit status.
  CommandRun run;
  const char* name = nullptr;  // the subcommand `run` belongs to
  int status = kExitUnusable;
};

// Parses argv[0..argc) (argv[0] the program's name). Help and the version go to `out`, messages about bad arguments
// to `err` (and, with --json among detnccl's own arguments, the JSON document of unusable input to `out`). Not for
// `detnccl fingerprint`, which main forwards before any parsing.
ParsedCommandLine parse_command_line(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

// Runs a parsed command: its status, or kExitUnusable with its message on `err` when it refuses its arguments
// (BadArguments, with the JSON document on `out` as above) or fails (any other exception).
int run_parsed_command(const ParsedCommandLine& command, int argc, const char* const* argv, std::ostream& out,
                       std::ostream& err);

}  // namespace detnccl::cli

#endif  // DETNCCL_CLI_COMMAND_LINE_H
