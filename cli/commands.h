// detnccl command: the subcommands of `detnccl` (detnccl_main.cc parses the arguments; one file per command
// renders its analysis). Each returns the process exit status.
#ifndef DETNCCL_CLI_COMMANDS_H
#define DETNCCL_CLI_COMMANDS_H

#include <cstdint>
#include <optional>
#include <string>

namespace detnccl::cli {

// Exit statuses shared by every command.
inline constexpr int kExitSame = 0;      // identical / consistent / done
inline constexpr int kExitDiffers = 1;   // diverged / inconsistent
inline constexpr int kExitUnusable = 2;  // unusable input or bad arguments (the message names the file and why)

// `detnccl dump RUN [--rank R] [--format text|jsonl|csv]`: every record, one line each.
struct DumpOptions {
  std::string run;
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
  bool json = false;
  bool verbose = false;
  unsigned threads = 0;
};
int diff_command(const DiffCommandOptions& options);

// `detnccl check RUN`: the consistency of one run across its ranks.
struct CheckCommandOptions {
  std::string run;
  bool json = false;
  bool verbose = false;
  unsigned threads = 0;
};
int check_command(const CheckCommandOptions& options);

// `detnccl stats RUN`: calls and bytes per op, communicator and rank; steps; how logs end.
struct StatsCommandOptions {
  std::string run;
  bool json = false;
  bool verbose = false;
  unsigned threads = 0;
};
int stats_command(const StatsCommandOptions& options);

}  // namespace detnccl::cli

#endif  // DETNCCL_CLI_COMMANDS_H
