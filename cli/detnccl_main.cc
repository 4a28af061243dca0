// detnccl: the offline command. After a loss spike or a failed reproducibility check it answers from the per-rank
// logs where two runs first diverged (diff), whether one run is consistent across its ranks (check), what the logs
// hold (dump, stats); `detnccl run` starts a job with the shim preloaded; `detnccl fingerprint` runs
// detnccl-fingerprint. Exit status: 0 identical / consistent, 1 diverged / inconsistent, 2 unusable input or bad
// arguments (`run`: the command's own status).
#include <limits.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "cli/command_line.h"

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

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "fingerprint") == 0) return forward_to_fingerprint(argc, argv);
  const ParsedCommandLine command = parse_command_line(argc, argv, std::cout, std::cerr);
  if (!command.run) return command.status;
  return finish_output(command.name, run_parsed_command(command, argc, argv, std::cout, std::cerr));
}
