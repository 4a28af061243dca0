// detnccl command: the subcommands of `detnccl`. One row of DETNCCL_CLI_SUBCOMMANDS per subcommand, and one file per
// command (cli/NAME_command.cc) that declares its arguments and renders its analysis; detnccl_main.cc builds the
// argument parser, the unknown-subcommand message and the dispatch from the table. Each command returns the process
// exit status.
#ifndef DETNCCL_CLI_COMMANDS_H
#define DETNCCL_CLI_COMMANDS_H

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace detnccl::cli {

// Exit statuses shared by every command.
inline constexpr int kExitSame = 0;      // identical / consistent / done
inline constexpr int kExitDiffers = 1;   // diverged / inconsistent
inline constexpr int kExitUnusable = 2;  // unusable input or bad arguments (the message names the file and why)

// The subcommands: X(name, description). `detnccl fingerprint` is not a row: it forwards to the detnccl-fingerprint
// program before any parsing (detnccl_main.cc). tests/test_cli.cc runs every subcommand `detnccl --help` lists
// (--help exits 0, an unknown option exits 2) and checks that docs/cli.md documents it.
#define DETNCCL_CLI_SUBCOMMANDS(X)                                                                                   \
  X(dump, "Print a run's records, one line per record")                                                              \
  X(diff, "Compare two runs call by call; report the first divergence, its kind, and each rank's first difference")  \
  X(merge, "Merge the partial results of one diff or check split by rank ranges (--ranks A-B --partial)")            \
  X(check, "Check one run across its ranks: same collectives on every member, consistent contents")                  \
  X(stats, "Calls and bytes per operation, communicator and rank; steps; truncated logs")                            \
  X(report, "Write one self-contained HTML page of a diff (two runs) or a check and stats (one run)")                \
  X(run, "Run a command (torchrun, srun, mpirun, hostnccl-run, a script) with the shim preloaded and DETNCCL_* set") \
  X(replay, "Recompute one captured reduction in rank, deterministic and arrival orders against an exact reference")

// What runs a subcommand once its arguments are parsed; returns the exit status.
using CommandRun = std::function<int()>;

// Arguments that parse but cannot be used together (say, --from-step after --to-step): thrown by a CommandRun
// before it reads anything; main reports it as bad arguments (exit 2, and the JSON document with --json).
struct BadArguments : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// add_NAME_arguments (defined in cli/NAME_command.cc): declares the subcommand's arguments on its CLI11 app and
// returns what runs it. A row without its function is a link error.
#define DETNCCL_CLI_DECLARE_ADD_ARGUMENTS(name, description) CommandRun add_##name##_arguments(CLI::App& app);
DETNCCL_CLI_SUBCOMMANDS(DETNCCL_CLI_DECLARE_ADD_ARGUMENTS)
#undef DETNCCL_CLI_DECLARE_ADD_ARGUMENTS

// The report options every analysis command has: --json, -v/--verbose (what it lists: verbose_help) and -j/--jobs.
template <class Options>
void add_report_options(CLI::App& app, Options& options, const char* verbose_help) {
  app.add_flag("--json", options.json, "Print the result as JSON for tools");
  app.add_flag("-v,--verbose", options.verbose, verbose_help);
  app.add_option("-j,--jobs", options.threads, "Threads (default: the cores available)");
}

// The step numbers of --from-step / --to-step: decimal digits that fit in 64 bits (see detnccl_main.cc).
extern const CLI::Validator kStepNumber;

// --infer-steps and --step-boundary as typed (cli/step_numbering_options.h declares and reads them).
struct StepNumberingArguments {
  bool infer_steps = false;
  std::optional<std::string> step_boundary;
};

// `detnccl dump RUN [--rank R] [--format text|jsonl|csv]`: every record, one line each.
struct DumpOptions {
  std::string run;
  StepNumberingArguments step_numbering;  // --infer-steps, --step-boundary (cli/step_numbering_options.h)
  std::optional<std::uint32_t> rank;
  std::string format = "text";
};
int dump_command(const DumpOptions& options);

// `detnccl diff RUN_A RUN_B`: the first divergence between two runs.
struct DiffCommandOptions {
  std::string run_a;
  std::string run_b;
  std::optional<std::uint64_t> from_step;
  std::optional<std::uint64_t> to_step;
  StepNumberingArguments step_numbering;  // --infer-steps, --step-boundary (cli/step_numbering_options.h)
  bool all_records = false;               // --all-records: no step-index shortcut
  std::optional<std::string> ranks;       // --ranks A-B (only with --partial): the ranks this process compares
  bool partial = false;                   // --partial: write this process's partial result (JSON) for `merge`
  bool json = false;
  bool verbose = false;
  unsigned threads = 0;
};
int diff_command(const DiffCommandOptions& options);

// `detnccl merge PART...`: the partial results of one diff or one check merged into the answer of one process.
struct MergeCommandOptions {
  std::vector<std::string> parts;
  bool json = false;
  bool verbose = false;
};
int merge_command(const MergeCommandOptions& options);

// `detnccl check RUN`: the consistency of one run across its ranks.
struct CheckCommandOptions {
  std::string run;
  StepNumberingArguments step_numbering;  // --infer-steps, --step-boundary (cli/step_numbering_options.h)
  std::optional<std::string> ranks;       // --ranks A-B (only with --partial): the ranks whose share this process keeps
  bool partial = false;                   // --partial: write this process's partial result (JSON) for `merge`
  bool json = false;
  bool verbose = false;
  unsigned threads = 0;
};
int check_command(const CheckCommandOptions& options);

// `detnccl stats RUN`: calls and bytes per op, communicator and rank; steps; how logs end.
struct StatsCommandOptions {
  std::string run;
  StepNumberingArguments step_numbering;  // --infer-steps, --step-boundary (cli/step_numbering_options.h)
  bool json = false;
  bool verbose = false;
  unsigned threads = 0;
};
int stats_command(const StatsCommandOptions& options);

// `detnccl report RUN_A [RUN_B] -o PAGE`: one HTML file (scripts, styles and data inline) of a diff of two runs, or of
// a check and the stats of one run; --json prints the data the page embeds.
struct ReportCommandOptions {
  std::string run_a;
  std::optional<std::string> run_b;   // absent: a check and stats report of run_a
  std::optional<std::string> output;  // -o: the page's path
  std::optional<std::uint64_t> from_step;
  std::optional<std::uint64_t> to_step;
  StepNumberingArguments step_numbering;  // --infer-steps, --step-boundary (cli/step_numbering_options.h)
  bool all_records = false;               // --all-records, as diff's
  bool no_stats = false;                  // --no-stats: no stats panel (stats reads every record)
  bool json = false;
  bool verbose = false;
  unsigned threads = 0;
};
int report_command(const ReportCommandOptions& options);

// `detnccl replay RUN --rank R --seq S`: one reduction recomputed from every member's captured input (issue #18,
// docs/cli.md "replay", docs/magnitudes.md).
struct ReplayCommandOptions {
  std::string run;
  std::uint32_t rank = 0;
  std::uint64_t seq = 0;
  int orders = 8;          // random arrival orders
  std::uint64_t seed = 1;  // their seed
  bool json = false;
};
int replay_command(const ReplayCommandOptions& options);

// `detnccl run [OPTIONS] -- COMMAND [ARGS...]`: execs COMMAND with the shim preloaded, the PyTorch step hook first on
// PYTHONPATH (unless no_python_steps) and DETNCCL_* set from the options (an option not given leaves the
// environment's value). Returns only when the shim is unusable (2) or the
// command cannot be run (127 not found, 126 otherwise).
struct RunCommandOptions {
  std::optional<std::string> dir;
  std::optional<std::string> run;
  std::optional<std::string> deterministic;
  std::optional<std::string> trace;
  std::optional<std::string> steps;
  std::optional<std::string> ranks;
  std::optional<std::string> shim;
  bool no_python_steps = false;
  bool print_config = false;
  std::vector<std::string> command;
};
int run_command(const RunCommandOptions& options);

}  // namespace detnccl::cli

#endif  // DETNCCL_CLI_COMMANDS_H
