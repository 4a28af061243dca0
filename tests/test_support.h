// Helpers shared by the end-to-end tests: running a command through the shell (run_command), starting a program
// with an exact environment and a deadline (run_process and friends: bytes that no shell would pass through intact,
// duplicate names, setup in the child such as resource limits, output in a file, the process group killed at the
// deadline; popen() cannot do these), and a temporary directory that cleans up after itself.
#ifndef DETNCCL_TESTS_TEST_SUPPORT_H
#define DETNCCL_TESTS_TEST_SUPPORT_H

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace detnccl::test {

struct CommandResult {
  int exit_code = -1;  // the exit status, or 128 + signal
  std::string output;  // what the command wrote to stdout (add "2>&1" to the command for stderr too)
};

// Runs `command` through /bin/sh and waits for it.
inline CommandResult run_command(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer{};
  std::size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

// How a process ended.
struct ProcessOutcome {
  int exit_code = -1;  // when it exited
  int signal = 0;      // when a signal killed it
  bool timed_out = false;
  std::string output;  // stdout and stderr together
  double seconds = 0;
};

// A started process.
struct StartedProcess {
  pid_t pid = -1;
  std::string output_path;
  std::chrono::steady_clock::time_point started;
};

// This process's environment, minus the names in `without` and the LD_PRELOAD of the test itself, plus `extra`
// (given as "NAME=value", kept in order, duplicates included).
inline std::vector<std::string> environment_with(const std::vector<std::string>& extra,
                                                 const std::vector<std::string>& without = {}) {
  std::vector<std::string> result;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text = *entry;
    const std::string name = text.substr(0, text.find('='));
    bool dropped = name == "LD_PRELOAD" || name.rfind("DETNCCL_", 0) == 0;
    for (const std::string& w : without) dropped = dropped || name == w;
    for (const std::string& e : extra) dropped = dropped || e.substr(0, e.find('=')) == name;
    if (!dropped) result.push_back(text);
  }
  result.insert(result.end(), extra.begin(), extra.end());
  return result;
}

// Starts argv[0] (a path) in its own process group with exactly `environment`, output to output_path.
inline StartedProcess start_process(const std::vector<std::string>& argv, const std::vector<std::string>& environment,
                                    const std::string& output_path, const std::function<void()>& in_child = {}) {
  StartedProcess started;
  started.output_path = output_path;
  started.started = std::chrono::steady_clock::now();
  std::vector<char*> args, env;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const std::string& e : environment) env.push_back(const_cast<char*>(e.c_str()));
  env.push_back(nullptr);
  started.pid = fork();
  if (started.pid == 0) {
    setpgid(0, 0);
    const int out = open(output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) _exit(125);
    dup2(out, STDOUT_FILENO);
    dup2(out, STDERR_FILENO);
    if (in_child) in_child();
    execve(args[0], args.data(), env.data());
    _exit(127);
  }
  return started;
}

// Waits for started processes, reaping each as soon as it ends (a dead process that is not reaped stays a zombie,
// which a peer checking liveness with kill(pid, 0) would still see as alive). Past the deadline, kills the process
// groups of those still running and says so.
inline std::vector<ProcessOutcome> wait_for_all(const std::vector<StartedProcess>& processes,
                                                std::chrono::seconds deadline) {
  std::vector<ProcessOutcome> outcomes(processes.size());
  std::vector<bool> done(processes.size(), false);
  std::vector<int> statuses(processes.size(), 0);
  for (std::size_t remaining = processes.size(); remaining > 0;) {
    for (std::size_t i = 0; i < processes.size(); ++i) {
      if (done[i]) continue;
      const StartedProcess& process = processes[i];
      if (waitpid(process.pid, &statuses[i], WNOHANG) != process.pid) {
        if (std::chrono::steady_clock::now() - process.started <= deadline) continue;
        outcomes[i].timed_out = true;
        kill(-process.pid, SIGKILL);
        waitpid(process.pid, &statuses[i], 0);
      }
      done[i] = true;
      --remaining;
      outcomes[i].seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - process.started).count();
    }
    if (remaining > 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (std::size_t i = 0; i < processes.size(); ++i) {
    if (WIFEXITED(statuses[i])) outcomes[i].exit_code = WEXITSTATUS(statuses[i]);
    if (WIFSIGNALED(statuses[i])) outcomes[i].signal = WTERMSIG(statuses[i]);
    std::ifstream stream(processes[i].output_path, std::ios::binary);
    outcomes[i].output.assign(std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>());
  }
  return outcomes;
}

// Waits for one started process (wait_for_all of one).
inline ProcessOutcome wait_for(const StartedProcess& process, std::chrono::seconds deadline) {
  return wait_for_all({process}, deadline).front();
}

// start_process + wait_for.
inline ProcessOutcome run_process(const std::vector<std::string>& argv, const std::vector<std::string>& environment,
                                  const std::string& output_path, std::chrono::seconds deadline,
                                  const std::function<void()>& in_child = {}) {
  return wait_for(start_process(argv, environment, output_path, in_child), deadline);
}

// How many times `needle` occurs in `text`.
inline std::size_t occurrences(const std::string& text, const std::string& needle) {
  std::size_t count = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) {
    ++count;
  }
  return count;
}

// A fresh directory under the system's temporary directory, removed with everything in it at scope exit (also
// when a test took the owner's permissions away from it).
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "detnccl-test") {
    std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    if (path_.empty()) return;
    std::error_code ignored;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, std::filesystem::perm_options::add, ignored);
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // The path of an entry inside it: dir / "name".
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  // The path of a run directory inside it (the same as dir / name).
  std::string run(const std::string& name) const { return *this / name; }

 private:
  std::string path_;
};

}  // namespace detnccl::test

#endif  // DETNCCL_TESTS_TEST_SUPPORT_H
