// Shared by the hostnccl tests: run a rank body on N forked processes or N threads, collect each rank's failures,
// and check that no shared-memory segment is left behind.
//
// Forked ranks cannot report through GoogleTest (their process is not the test's), so a rank body reports through
// RankCheck, which prints each failure with the rank and makes the rank's exit code non-zero.
#ifndef DETNCCL_TESTS_TEST_HOSTNCCL_HARNESS_H
#define DETNCCL_TESTS_TEST_HOSTNCCL_HARNESS_H

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "abi/nccl_abi.h"

namespace hostnccl_test {

// Collects one rank's failures; thread-safe so that thread ranks may share stdout.
class RankCheck {
 public:
  explicit RankCheck(int rank) : rank_(rank) {}

  // Records a failure with a printf-style message when `condition` is false; returns `condition`.
  bool expect(bool condition, const char* format, ...) __attribute__((format(printf, 3, 4))) {
    if (condition) return true;
    char text[1024];
    va_list args;
    va_start(args, format);
    std::vsnprintf(text, sizeof text, format, args);
    va_end(args);
    static std::mutex print_mutex;
    std::lock_guard<std::mutex> lock(print_mutex);
    if (failures_.fetch_add(1) < 20) std::fprintf(stderr, "[rank %d] FAILED: %s\n", rank_, text);
    return false;
  }

  // Expects `result` to be ncclSuccess, naming the call and the library's last error otherwise.
  bool ok(ncclResult_t result, const char* what) {
    return expect(result == ncclSuccess, "%s returned %d (%s): %s", what, static_cast<int>(result),
                  ncclGetErrorString(result), ncclGetLastError(nullptr));
  }

  int failures() const { return failures_.load(); }
  int rank() const { return rank_; }

 private:
  int rank_;
  std::atomic<int> failures_{0};
};

// What a rank body receives.
struct Rank {
  int rank;
  int nranks;
  ncclComm_t comm;
  RankCheck& check;
};
using RankBody = std::function<void(Rank&)>;

// Sets environment variables for the scope (before forking or creating communicators), restoring them afterwards.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<const char*, const char*>> values) {
    for (const auto& [name, value] : values) {
      const char* old = std::getenv(name);
      saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
      if (value == nullptr) {
        unsetenv(name);
      } else {
        setenv(name, value, 1);
      }
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

// Memory shared by the test process and its forked ranks (results to compare across ranks, flags).
class SharedMemory {
 public:
  explicit SharedMemory(std::size_t bytes) : bytes_(bytes) {
    base_ = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (base_ == MAP_FAILED) std::abort();
    std::memset(base_, 0, bytes);
  }
  ~SharedMemory() { munmap(base_, bytes_); }
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(base_);
  }

 private:
  void* base_;
  std::size_t bytes_;
};

// The /dev/shm path of a communicator's segment, from the documented id layout (random bytes at offset 8..24, the
// job tag, if any, from offset 28, zero-padded to 32 bytes).
inline std::string segment_path(const ncclUniqueId& id) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string path = "/dev/shm/hostnccl-";
  const std::string tag(id.internal + 28, strnlen(id.internal + 28, 32));
  if (!tag.empty()) {
    path += tag;
    path += '-';
  }
  for (int i = 8; i < 24; ++i) {
    const auto byte = static_cast<unsigned char>(id.internal[i]);
    path += kHex[byte >> 4];
    path += kHex[byte & 15];
  }
  return path;
}

inline bool path_exists(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0;
}

// Exit status of a forked rank: its exit code, 128 + signal when killed, or -1 when the harness had to kill it.
struct ForkResult {
  std::vector<int> status;
  bool all_ok() const {
    for (int s : status) {
      if (s != 0) return false;
    }
    return true;
  }
};

// Forks `nranks` processes that each run body(rank, id) and exit with its return value; waits up to `timeout_s`,
// then kills whatever is left. Every child is reaped before this returns, and dies with the test process.
inline ForkResult fork_ranks(int nranks, const std::function<int(int, const ncclUniqueId&)>& body,
                             double timeout_s = 60, ncclUniqueId* id_out = nullptr) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) std::abort();
  if (id_out != nullptr) *id_out = id;
  std::fflush(nullptr);
  const pid_t parent = getpid();
  std::vector<pid_t> pids;
  for (int r = 0; r < nranks; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(99);  // the test died before the prctl took effect
      const int code = body(r, id);
      std::fflush(nullptr);
      _exit(code);
    }
    pids.push_back(pid);
  }
  ForkResult result;
  result.status.assign(static_cast<std::size_t>(nranks), -1);
  std::vector<bool> reaped(static_cast<std::size_t>(nranks), false);
  int remaining = nranks;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (remaining > 0 && std::chrono::steady_clock::now() < deadline) {
    for (int r = 0; r < nranks; ++r) {
      const auto i = static_cast<std::size_t>(r);
      if (reaped[i]) continue;
      int status = 0;
      if (waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        reaped[i] = true;
        --remaining;
        result.status[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
    }
    if (remaining > 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (int r = 0; r < nranks; ++r) {  // leftovers: kill and reap, so no test process outlives the test
    const auto i = static_cast<std::size_t>(r);
    if (reaped[i]) continue;
    kill(pids[i], SIGKILL);
    waitpid(pids[i], nullptr, 0);
    ADD_FAILURE() << "rank " << r << " did not finish within " << timeout_s << " s and was killed";
  }
  EXPECT_FALSE(path_exists(segment_path(id))) << segment_path(id) << " was left behind";
  return result;
}

// Runs `body` on `nranks` forked ranks, each with its own communicator from ncclCommInitRank.
inline ForkResult run_forked(int nranks, const RankBody& body, double timeout_s = 60) {
  return fork_ranks(
      nranks,
      [&](int rank, const ncclUniqueId& id) {
        RankCheck check(rank);
        ncclComm_t comm = nullptr;
        if (!check.ok(ncclCommInitRank(&comm, nranks, id, rank), "ncclCommInitRank")) return 1;
        Rank context{rank, nranks, comm, check};
        body(context);
        check.ok(ncclCommDestroy(comm), "ncclCommDestroy");
        return check.failures() == 0 ? 0 : 1;
      },
      timeout_s);
}

enum class ThreadInit { kInitRank, kInitAll };

// Runs `body` on `nranks` threads of this process: each thread creates its communicator with ncclCommInitRank, or
// this thread creates them all with ncclCommInitAll first. Returns the total number of failures.
inline int run_threads(int nranks, ThreadInit init, const RankBody& body) {
  std::vector<ncclComm_t> comms(static_cast<std::size_t>(nranks), nullptr);
  std::vector<std::unique_ptr<RankCheck>> checks;
  for (int r = 0; r < nranks; ++r) checks.push_back(std::make_unique<RankCheck>(r));
  ncclUniqueId id;
  if (init == ThreadInit::kInitAll) {
    if (!checks[0]->ok(ncclCommInitAll(comms.data(), nranks, nullptr), "ncclCommInitAll")) return 1;
  } else {
    if (!checks[0]->ok(ncclGetUniqueId(&id), "ncclGetUniqueId")) return 1;
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      const auto i = static_cast<std::size_t>(r);
      RankCheck& check = *checks[i];
      if (init == ThreadInit::kInitRank && !check.ok(ncclCommInitRank(&comms[i], nranks, id, r), "ncclCommInitRank")) {
        return;
      }
      Rank context{r, nranks, comms[i], check};
      body(context);
      check.ok(ncclCommDestroy(comms[i]), "ncclCommDestroy");
    });
  }
  for (auto& thread : threads) thread.join();
  int failures = 0;
  for (const auto& check : checks) failures += check->failures();
  if (init == ThreadInit::kInitRank) {
    EXPECT_FALSE(path_exists(segment_path(id))) << segment_path(id) << " was left";
  }
  return failures;
}

}  // namespace hostnccl_test

#endif  // DETNCCL_TESTS_TEST_HOSTNCCL_HARNESS_H
