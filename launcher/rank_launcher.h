// hostnccl-run: starts the ranks of one single-machine job, relays their output, and stops them all together.
#ifndef DETNCCL_LAUNCHER_RANK_LAUNCHER_H
#define DETNCCL_LAUNCHER_RANK_LAUNCHER_H

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace detnccl::launcher {

// The launcher's own exit codes; any other non-zero code is a failing rank's (its exit code, or 128 + signal).
inline constexpr int kExitUsage = 2;      // bad arguments, program not found, or the job could not be started
inline constexpr int kExitTimeout = 124;  // the --timeout passed (the same code as timeout(1))

// What to run and how to supervise it.
struct LaunchOptions {
  int world_size = 1;                          // number of ranks (processes) to start
  std::string program_path;                    // the executable, already resolved (see find_program)
  std::vector<std::string> argv;               // argv of every rank, argv[0] included
  std::chrono::milliseconds timeout{0};        // wall-clock limit for the whole job; 0 means none
  std::chrono::milliseconds kill_grace{5000};  // time between SIGTERM and SIGKILL when stopping ranks
  bool prefix_output = true;                   // relay output as "[rank R] " lines (false: ranks inherit fds)
  // For tests only: called with the rank's index in each forked rank process before anything else, while the
  // launcher's signal handlers are still installed there, so that a test can act inside the fork-exec window.
  std::function<void(int rank)> in_forked_rank_for_test;
};

// Finds `name` the way execvp would (PATH search unless it contains a '/'). Returns the path of a regular,
// executable file, or an empty string (with the reason in *why) when there is none.
std::string find_program(const std::string& name, std::string* why);

// Starts options.world_size copies of the program, each with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT (unless already set), HOSTNCCL_ID_FILE (a file in a fresh private directory that
// is removed at the end) and HOSTNCCL_JOB_TAG (a fresh tag, see job_shm.h), each in its own process group and
// killed (SIGKILL) by the kernel if the launcher dies first. Relays output, forwards SIGINT/SIGTERM/SIGHUP/SIGQUIT,
// and stops every rank when one fails or the timeout passes. Once every rank has exited, removes the shared memory
// still carrying the job's tag (saying so on stderr). Returns the exit code the launcher should exit with: 0 when
// every rank exited 0, else the first failing rank's code (128 + signal if it was killed), 124 on timeout, 128 +
// signal when the launcher itself was interrupted, or 2 when the job could not be started. Call at most once per
// process, from its only thread: it installs signal handlers for SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT and ignores
// SIGPIPE.
int launch_ranks(const LaunchOptions& options);

}  // namespace detnccl::launcher

#endif  // DETNCCL_LAUNCHER_RANK_LAUNCHER_H
