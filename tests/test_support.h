// Helpers shared by the end-to-end tests: running a command and a temporary directory that cleans up after itself.
#ifndef DETNCCL_TESTS_TEST_SUPPORT_H
#define DETNCCL_TESTS_TEST_SUPPORT_H

#include <stdlib.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

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

// A fresh directory under the system's temporary directory, removed with everything in it at scope exit.
class TempDir {
 public:
  explicit TempDir(const char* prefix = "detnccl-test") {
    std::string pattern = (std::filesystem::temp_directory_path() / (std::string(prefix) + "-XXXXXX")).string();
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // The path of a run directory (or any entry) inside it.
  std::string run(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace detnccl::test

#endif  // DETNCCL_TESTS_TEST_SUPPORT_H
