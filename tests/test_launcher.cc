// Tests of hostnccl-run (run as a real binary on small shell jobs and, when hostnccl is built, on an NCCL job; its
// fork-exec window through launch_ranks' test hook), of its line prefixing, of its removal of the shared memory a job
// left, of the unique-id bootstrap helper, and of the scripts that drive the launcher's jobs (scripts/demo.sh,
// scripts/test.sh) on a fake checkout with fake cmake and ctest.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "abi/nccl_abi.h"
#include "launcher/bootstrap.h"
#include "launcher/job_shm.h"
#include "launcher/line_prefixer.h"
#include "launcher/rank_launcher.h"
#include "hostnccl/shm_names.h"
#include "hostnccl/timeout_setting.h"

extern char** environ;

// RATIONALE: this binary links detnccl_bootstrap but no NCCL, as a program may; it provides the two NCCL entry
// points the helper calls, returning a fixed pattern, so the publish/read round trip can be checked exactly.
namespace {
constexpr unsigned char kFakeIdSeed = 0x5a;
bool g_fail_get_unique_id = false;
}  // namespace

extern "C" ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  if (g_fail_get_unique_id) return ncclSystemError;
  for (std::size_t i = 0; i < sizeof(uniqueId->internal); ++i) {
    uniqueId->internal[i] = static_cast<char>(kFakeIdSeed ^ static_cast<unsigned char>(i * 7));
  }
  return ncclSuccess;
}

extern "C" const char* ncclGetErrorString(ncclResult_t result) {
  return result == ncclSystemError ? "fake system error" : "fake error";
}

namespace {

namespace fs = std::filesystem;
using detnccl::launcher::LinePrefixer;
using std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------------------------------
// Helpers

struct RunResult {
  int exit_code = -1;  // the exit status, or 128 + signal
  std::string out;
  std::string err;
  double seconds = 0;
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Splits "[rank R] rest" into R and rest; false when the line does not start with a rank prefix.
bool parse_rank_line(const std::string& line, int* rank, std::string* rest) {
  constexpr std::string_view kOpen = "[rank ";
  const std::size_t close = line.find("] ");
  if (line.rfind(kOpen, 0) != 0 || close == std::string::npos || close == kOpen.size()) return false;
  const std::string digits = line.substr(kOpen.size(), close - kOpen.size());
  if (digits.find_first_not_of("0123456789") != std::string::npos) return false;
  *rank = std::stoi(digits);
  *rest = line.substr(close + 2);
  return true;
}

bool process_gone(pid_t pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  // A zombie waiting for init to reap it is dead too.
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const std::size_t close_paren = stat.rfind(')');
  return close_paren != std::string::npos && close_paren + 2 < stat.size() && stat[close_paren + 2] == 'Z';
}

// The names of the entries of `directory` that start with `prefix`, sorted.
std::vector<std::string> entries_with_prefix(const fs::path& directory, const std::string& prefix) {
  std::vector<std::string> names;
  std::error_code error;
  for (fs::directory_iterator it(directory, error); !error && it != fs::directory_iterator(); it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with(prefix)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Empty files in /dev/shm that a test creates and always removes again (also when it fails half-way).
class ShmFiles {
 public:
  ShmFiles() = default;
  ShmFiles(const ShmFiles&) = delete;
  ShmFiles& operator=(const ShmFiles&) = delete;
  ~ShmFiles() {
    for (const std::string& name : names_) unlink(path(name).c_str());
  }
  bool create(const std::string& name) {
    const int fd = open(path(name).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return false;
    close(fd);
    names_.push_back(name);
    return true;
  }
  const std::vector<std::string>& names() const { return names_; }
  static std::string path(const std::string& name) { return std::string(hostnccl::kShmDirectory) + "/" + name; }

 private:
  std::vector<std::string> names_;
};

// Waits a little for processes killed by the launcher to disappear (their reaping by init is asynchronous).
bool process_gone_soon(pid_t pid) {
  const auto deadline = steady_clock::now() + std::chrono::seconds(5);
  while (!process_gone(pid)) {
    if (steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/test_launcher.XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr) << std::strerror(errno);
    dir_ = pattern;
    setenv("LAUNCHER_TEST_DIR", dir_.c_str(), 1);
  }

  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  // Runs hostnccl-run with `args`, stdout and stderr captured in files; kills it if it outlives a minute.
  RunResult run_launcher(const std::vector<std::string>& args, std::function<void(pid_t)> while_running = {}) {
    RunResult result;
    const fs::path out_path = dir_ / "launcher.out";
    const fs::path err_path = dir_ / "launcher.err";
    std::vector<std::string> argv_strings = {HOSTNCCL_RUN_PATH};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& arg : argv_strings) argv.push_back(arg.data());
    argv.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const auto start = steady_clock::now();
    pid_t pid = -1;
    const int spawn_error = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    EXPECT_EQ(spawn_error, 0) << std::strerror(spawn_error);
    if (spawn_error != 0) return result;
    if (while_running) while_running(pid);

    int status = 0;
    const auto deadline = start + std::chrono::seconds(60);
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (steady_clock::now() > deadline) {
        ADD_FAILURE() << "hostnccl-run did not finish within 60 s; killing it";
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    result.seconds = std::chrono::duration<double>(steady_clock::now() - start).count();
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    result.out = read_file(out_path);
    result.err = read_file(err_path);
    return result;
  }

  // Pids that ranks wrote into <dir>/<prefix>.<rank>.
  std::vector<pid_t> recorded_pids(const std::string& prefix, int world_size) {
    std::vector<pid_t> pids;
    for (int rank = 0; rank < world_size; ++rank) {
      const std::string text = read_file(dir_ / (prefix + "." + std::to_string(rank)));
      if (!text.empty()) pids.push_back(static_cast<pid_t>(std::stol(text)));
    }
    return pids;
  }

  // Waits until every rank has written <dir>/<prefix>.<rank>.
  bool wait_for_pid_files(const std::string& prefix, int world_size) {
    const auto deadline = steady_clock::now() + std::chrono::seconds(20);
    while (recorded_pids(prefix, world_size).size() != static_cast<std::size_t>(world_size)) {
      if (steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  }

  fs::path dir_;
};

std::string diagnostics(const RunResult& result) {
  return "exit code " + std::to_string(result.exit_code) + "\n--- stdout:\n" + result.out + "--- stderr:\n" +
         result.err;
}

// Waits up to a minute for the child `pid` and returns its wait status; kills it if it takes longer.
int wait_for_child(pid_t pid) {
  int status = 0;
  const auto deadline = steady_clock::now() + std::chrono::seconds(60);
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (steady_clock::now() > deadline) {
      ADD_FAILURE() << "process " << pid << " did not finish within 60 s; killing it";
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return status;
}

// Runs launch_ranks(options) in a child process of its own (it installs signal handlers: once per process), with
// TMPDIR = `dir` and its stdout and stderr in files there, as hostnccl-run's main would.
RunResult launch_in_child(const detnccl::launcher::LaunchOptions& options, const fs::path& dir) {
  const fs::path out_path = dir / "launch.out";
  const fs::path err_path = dir / "launch.err";
  const auto start = steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out < 0 || err < 0 || dup2(out, STDOUT_FILENO) < 0 || dup2(err, STDERR_FILENO) < 0) _exit(100);
    setenv("TMPDIR", dir.c_str(), 1);
    _exit(detnccl::launcher::launch_ranks(options));
  }
  RunResult result;
  if (pid < 0) {
    ADD_FAILURE() << "fork: " << std::strerror(errno);
    return result;
  }
  const int status = wait_for_child(pid);
  result.seconds = std::chrono::duration<double>(steady_clock::now() - start).count();
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = read_file(out_path);
  result.err = read_file(err_path);
  return result;
}

// The rank pids of `pids` that are still alive after a few seconds; kills them, so that a failing test leaves none.
std::vector<pid_t> survivors(const std::vector<pid_t>& pids) {
  std::vector<pid_t> alive;
  for (const pid_t pid : pids) {
    if (process_gone_soon(pid)) continue;
    alive.push_back(pid);
    kill(pid, SIGKILL);
  }
  return alive;
}

// ---------------------------------------------------------------------------------------------------------------
// LinePrefixer

TEST(LinePrefixer, PrefixesEachCompleteLineAndHoldsBackTheRest) {
  std::vector<std::string> emitted;
  LinePrefixer prefixer("[rank 2] ", [&](std::string_view text) { emitted.emplace_back(text); });
  prefixer.consume("alpha\nbe");
  ASSERT_EQ(emitted.size(), 1u);
  EXPECT_EQ(emitted[0], "[rank 2] alpha\n");
  EXPECT_EQ(prefixer.pending_bytes(), 2u);
  prefixer.consume("ta\ngamma\n\ndel");
  ASSERT_EQ(emitted.size(), 2u);  // every line completed by one read goes out in one piece
  EXPECT_EQ(emitted[1], "[rank 2] beta\n[rank 2] gamma\n[rank 2] \n");
  prefixer.finish();
  ASSERT_EQ(emitted.size(), 3u);
  EXPECT_EQ(emitted[2], "[rank 2] del\n");
  prefixer.finish();  // nothing left: no empty line is invented
  EXPECT_EQ(emitted.size(), 3u);
}

TEST(LinePrefixer, EmitsNothingForEmptyInput) {
  int calls = 0;
  LinePrefixer prefixer("[rank 0] ", [&](std::string_view) { ++calls; });
  prefixer.consume("");
  prefixer.finish();
  EXPECT_EQ(calls, 0);
}

TEST(LinePrefixer, FlushesAnOverlongPartialLine) {
  std::string all;
  LinePrefixer prefixer(
      "> ", [&](std::string_view text) { all += text; }, /*max_pending_bytes=*/8);
  prefixer.consume("0123456789abc");  // 13 bytes without a newline: more than 8 are held back, so out they go
  EXPECT_EQ(all, "> 0123456789abc\n");
  EXPECT_EQ(prefixer.pending_bytes(), 0u);
  prefixer.consume("short");
  EXPECT_EQ(prefixer.pending_bytes(), 5u);
}

// ---------------------------------------------------------------------------------------------------------------
// Job tags and the removal of a job's leftovers

TEST(JobShm, TagsAreValidDistinctAndStartWithThePid) {
  std::string first, second, error;
  ASSERT_TRUE(detnccl::launcher::make_job_tag(&first, &error)) << error;
  ASSERT_TRUE(detnccl::launcher::make_job_tag(&second, &error)) << error;
  const std::string pid_part = std::to_string(getpid()) + "x";
  for (const std::string& tag : {first, second}) {
    EXPECT_TRUE(hostnccl::is_valid_job_tag(tag)) << tag;
    EXPECT_EQ(tag.rfind(pid_part, 0), 0u) << tag;
    EXPECT_EQ(tag.size(), pid_part.size() + 16) << tag;
  }
  EXPECT_NE(first, second) << "64 random bits each";
}

TEST_F(LauncherTest, RemovesExactlyTheEntriesThatStartWithThePrefix) {
  const fs::path shm = dir_ / "shm";
  fs::create_directory(shm);
  const fs::path outside = dir_ / "outside";
  std::ofstream(outside) << "kept";
  std::ofstream(shm / "hostnccl-7x1-aaaa");                // empty, as after a kill between create and truncate
  std::ofstream(shm / "hostnccl-7x1-bbbb") << "sized";     // sized
  fs::create_symlink(outside, shm / "hostnccl-7x1-link");  // the link goes, not its target
  fs::create_directory(shm / "hostnccl-7x1-dir");          // never a directory
  const std::vector<std::string> others = {"hostnccl-7x1",      "hostnccl-7x10-cccc", "hostnccl-7x1-dir",
                                           "hostnccl-8x1-aaaa", "hostnccl-0123abcd",  "other",
                                           "xhostnccl-7x1-aaaa"};
  for (const std::string& name : others) {
    if (name != "hostnccl-7x1-dir") std::ofstream(shm / name);
  }

  EXPECT_TRUE(detnccl::launcher::remove_entries_with_prefix(shm.string(), "").empty());
  const std::vector<std::string> removed =
      detnccl::launcher::remove_entries_with_prefix(shm.string(), hostnccl::job_shm_prefix("7x1"));
  EXPECT_EQ(removed, (std::vector<std::string>{"hostnccl-7x1-aaaa", "hostnccl-7x1-bbbb", "hostnccl-7x1-link"}));
  std::vector<std::string> left = entries_with_prefix(shm, "");
  std::vector<std::string> expected_left = others;
  std::sort(expected_left.begin(), expected_left.end());
  EXPECT_EQ(left, expected_left);
  EXPECT_EQ(read_file(outside), "kept");
  EXPECT_TRUE(detnccl::launcher::remove_entries_with_prefix((dir_ / "missing").string(), "hostnccl-").empty());
}

// ---------------------------------------------------------------------------------------------------------------
// Bootstrap helper (with this file's fake ncclGetUniqueId)

class BootstrapTest : public LauncherTest {};

TEST_F(BootstrapTest, RankZeroPublishesAndOtherRanksReadTheSameBytes) {
  const std::string path = (dir_ / "unique-id").string();
  ncclUniqueId published{};
  std::string error;
  ASSERT_TRUE(detnccl::share_unique_id_through_file(path, 0, std::chrono::seconds(1), &published, &error)) << error;
  for (std::size_t i = 0; i < sizeof(published.internal); ++i) {
    ASSERT_EQ(static_cast<unsigned char>(published.internal[i]), kFakeIdSeed ^ static_cast<unsigned char>(i * 7));
  }
  struct stat info {};
  ASSERT_EQ(stat(path.c_str(), &info), 0);
  EXPECT_EQ(info.st_size, static_cast<off_t>(NCCL_UNIQUE_ID_BYTES));
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  // Only the id itself is left: the temporary file was renamed, not copied.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);

  for (int rank : {1, 5}) {
    ncclUniqueId read{};
    ASSERT_TRUE(detnccl::share_unique_id_through_file(path, rank, std::chrono::seconds(1), &read, &error)) << error;
    EXPECT_EQ(std::memcmp(read.internal, published.internal, sizeof(read.internal)), 0);
  }
}

TEST_F(BootstrapTest, ReaderWaitsForAnIdPublishedLater) {
  const std::string path = (dir_ / "unique-id").string();
  ncclUniqueId read{};
  std::string read_error;
  bool read_ok = false;
  std::thread reader(
      [&] { read_ok = detnccl::share_unique_id_through_file(path, 3, std::chrono::seconds(20), &read, &read_error); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ncclUniqueId published{};
  std::string error;
  ASSERT_TRUE(detnccl::share_unique_id_through_file(path, 0, std::chrono::seconds(1), &published, &error)) << error;
  reader.join();
  ASSERT_TRUE(read_ok) << read_error;
  EXPECT_EQ(std::memcmp(read.internal, published.internal, sizeof(read.internal)), 0);
}

TEST_F(BootstrapTest, ReaderGivesUpAtTheDeadline) {
  ncclUniqueId id{};
  std::string error;
  EXPECT_FALSE(
      detnccl::share_unique_id_through_file((dir_ / "never").string(), 1, std::chrono::milliseconds(100), &id, &error));
  EXPECT_NE(error.find("did not publish"), std::string::npos) << error;
}

TEST_F(BootstrapTest, RejectsAFileOfTheWrongSize) {
  const fs::path path = dir_ / "unique-id";
  std::ofstream(path) << "not an id";
  ncclUniqueId id{};
  std::string error;
  EXPECT_FALSE(detnccl::share_unique_id_through_file(path.string(), 1, std::chrono::seconds(1), &id, &error));
  EXPECT_NE(error.find("does not hold a unique id"), std::string::npos) << error;
}

TEST_F(BootstrapTest, ReportsAFailingGetUniqueId) {
  g_fail_get_unique_id = true;
  ncclUniqueId id{};
  std::string error;
  const bool ok =
      detnccl::share_unique_id_through_file((dir_ / "unique-id").string(), 0, std::chrono::seconds(1), &id, &error);
  g_fail_get_unique_id = false;
  EXPECT_FALSE(ok);
  EXPECT_NE(error.find("fake system error"), std::string::npos) << error;
  EXPECT_FALSE(fs::exists(dir_ / "unique-id"));
}

TEST_F(BootstrapTest, NeedsTheIdFileVariable) {
  unsetenv("HOSTNCCL_ID_FILE");
  ncclUniqueId id{};
  std::string error;
  EXPECT_FALSE(detnccl::share_unique_id(1, &id, &error));
  EXPECT_NE(error.find("HOSTNCCL_ID_FILE is not set"), std::string::npos) << error;
}

TEST_F(BootstrapTest, ReadsTheEnvironment) {
  const std::string path = (dir_ / "unique-id").string();
  setenv("HOSTNCCL_ID_FILE", path.c_str(), 1);
  setenv("HOSTNCCL_TIMEOUT_S", "soon", 1);
  ncclUniqueId id{};
  std::string error;
  EXPECT_FALSE(detnccl::share_unique_id(1, &id, &error));
  EXPECT_NE(error.find("HOSTNCCL_TIMEOUT_S='soon'"), std::string::npos) << error;

  setenv("HOSTNCCL_TIMEOUT_S", "0.1", 1);
  EXPECT_FALSE(detnccl::share_unique_id(1, &id, &error));  // nothing published yet: gives up after 0.1 s
  EXPECT_NE(error.find("did not publish"), std::string::npos) << error;
  ASSERT_TRUE(detnccl::share_unique_id(0, &id, &error)) << error;
  ncclUniqueId read{};
  ASSERT_TRUE(detnccl::share_unique_id(1, &read, &error)) << error;
  EXPECT_EQ(std::memcmp(read.internal, id.internal, sizeof(id.internal)), 0);
  unsetenv("HOSTNCCL_ID_FILE");
  unsetenv("HOSTNCCL_TIMEOUT_S");
}

// HOSTNCCL_TIMEOUT_S=0 means "wait forever" (docs/hostnccl.md), for the helper as for hostnccl itself.
TEST_F(BootstrapTest, ZeroTimeoutWaitsUntilTheIdIsPublished) {
  const std::string path = (dir_ / "unique-id").string();
  setenv("HOSTNCCL_ID_FILE", path.c_str(), 1);
  setenv("HOSTNCCL_TIMEOUT_S", "0", 1);
  ncclUniqueId read{};
  std::string read_error;
  bool read_ok = false;
  std::atomic<bool> reader_done{false};
  std::thread reader([&] {
    read_ok = detnccl::share_unique_id(1, &read, &read_error);
    reader_done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const bool gave_up_early = reader_done;
  ncclUniqueId published{};
  std::string error;
  const bool published_ok = detnccl::share_unique_id(0, &published, &error);
  reader.join();
  unsetenv("HOSTNCCL_ID_FILE");
  unsetenv("HOSTNCCL_TIMEOUT_S");
  ASSERT_TRUE(published_ok) << error;
  ASSERT_TRUE(read_ok) << read_error;
  EXPECT_FALSE(gave_up_early);
  EXPECT_EQ(std::memcmp(read.internal, published.internal, sizeof(read.internal)), 0);
}

// The one parser of HOSTNCCL_TIMEOUT_S, used by hostnccl's configuration and by the bootstrap helper.
TEST(TimeoutSetting, ReadsNonNegativeSecondsWithZeroForNoLimit) {
  const std::vector<std::pair<const char*, double>> valid = {{nullptr, hostnccl::kDefaultTimeoutSeconds},
                                                             {"", hostnccl::kDefaultTimeoutSeconds},
                                                             {"0", 0.0},
                                                             {"2.5", 2.5},
                                                             {"1e3", 1000.0},
                                                             {"1e12", hostnccl::kMaxTimeoutSeconds}};
  for (const auto& [text, expected] : valid) {
    if (text == nullptr) {
      unsetenv("HOSTNCCL_TIMEOUT_S");
    } else {
      setenv("HOSTNCCL_TIMEOUT_S", text, 1);
    }
    double seconds = -1;
    std::string error;
    EXPECT_TRUE(hostnccl::read_timeout_seconds(&seconds, &error)) << (text ? text : "(unset)") << ": " << error;
    EXPECT_EQ(seconds, expected) << (text ? text : "(unset)");
  }
  for (const std::string text : {"-1", "-0.5", "nan", "inf", "soon", "5s", " "}) {
    setenv("HOSTNCCL_TIMEOUT_S", text.c_str(), 1);
    double seconds = -1;
    std::string error;
    EXPECT_FALSE(hostnccl::read_timeout_seconds(&seconds, &error)) << text;
    EXPECT_EQ(seconds, -1) << text;
    EXPECT_NE(error.find("HOSTNCCL_TIMEOUT_S='" + text + "' is not valid"), std::string::npos) << error;
  }
  unsetenv("HOSTNCCL_TIMEOUT_S");
}

// ---------------------------------------------------------------------------------------------------------------
// hostnccl-run on shell jobs

TEST_F(LauncherTest, SetsTheTorchrunEnvironmentForEveryRank) {
  setenv("RANK", "99", 1);  // the launcher's own values must not leak into the ranks
  setenv("HOSTNCCL_JOB_TAG", "inherited", 1);
  setenv("LAUNCHER_TEST_KEPT", "kept-value", 1);
  pid_t launcher = -1;
  const RunResult result =
      run_launcher({"-n", "3", "sh", "-c",
                    "echo \"env $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $LAUNCHER_TEST_KEPT\"; "
                    "echo \"port $MASTER_PORT\"; echo \"idfile $HOSTNCCL_ID_FILE\"; echo \"tag $HOSTNCCL_JOB_TAG\"; "
                    "echo \"mode $(stat -c %a \"$(dirname \"$HOSTNCCL_ID_FILE\")\")\""},
                   [&](pid_t pid) { launcher = pid; });
  unsetenv("RANK");
  unsetenv("HOSTNCCL_JOB_TAG");
  unsetenv("LAUNCHER_TEST_KEPT");
  ASSERT_EQ(result.exit_code, 0) << diagnostics(result);

  std::map<int, std::map<std::string, std::string>> seen;  // rank -> first word -> rest of the line
  for (const std::string& line : split_lines(result.out)) {
    int rank = -1;
    std::string rest;
    ASSERT_TRUE(parse_rank_line(line, &rank, &rest)) << line;
    const std::size_t space = rest.find(' ');
    ASSERT_NE(space, std::string::npos) << line;
    seen[rank][rest.substr(0, space)] = rest.substr(space + 1);
  }
  ASSERT_EQ(seen.size(), 3u) << result.out;
  const std::string id_file = seen[0]["idfile"];
  for (int rank = 0; rank < 3; ++rank) {
    const std::string r = std::to_string(rank);
    EXPECT_EQ(seen[rank]["env"], r + " 3 " + r + " 3 127.0.0.1 kept-value");
    EXPECT_EQ(seen[rank]["idfile"], id_file) << "every rank must get the same id file";
    EXPECT_EQ(seen[rank]["port"], seen[0]["port"]);
    EXPECT_EQ(seen[rank]["tag"], seen[0]["tag"]) << "every rank must get the same job tag";
    EXPECT_EQ(seen[rank]["mode"], "700") << "the id directory must be private";
  }
  EXPECT_TRUE(hostnccl::is_valid_job_tag(seen[0]["tag"])) << seen[0]["tag"];
  EXPECT_EQ(seen[0]["tag"].rfind(std::to_string(launcher) + "x", 0), 0u) << seen[0]["tag"];
  EXPECT_TRUE(result.err.empty()) << "nothing to say on the normal path: " << result.err;
  const int port = std::stoi(seen[0]["port"]);
  EXPECT_GT(port, 0);
  EXPECT_LT(port, 65536);
  EXPECT_EQ(fs::path(id_file).filename(), "unique-id");
  EXPECT_FALSE(fs::exists(fs::path(id_file).parent_path())) << "the private directory must be removed at exit";
}

TEST_F(LauncherTest, KeepsAMasterPortTheUserSet) {
  setenv("MASTER_PORT", "29555", 1);
  const RunResult result = run_launcher({"-n", "2", "sh", "-c", "echo port=$MASTER_PORT"});
  unsetenv("MASTER_PORT");
  ASSERT_EQ(result.exit_code, 0) << diagnostics(result);
  EXPECT_NE(result.out.find("[rank 0] port=29555\n"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("[rank 1] port=29555\n"), std::string::npos) << result.out;
}

TEST_F(LauncherTest, RelaysStdoutAndStderrSeparatelyAndFlushesAPartialLine) {
  const RunResult result =
      run_launcher({"-n", "2", "--", "sh", "-c", "echo out-$RANK; echo err-$RANK >&2; printf tail-$RANK"});
  ASSERT_EQ(result.exit_code, 0) << diagnostics(result);
  for (const std::string rank : {"0", "1"}) {
    const std::string prefix = "[rank " + rank + "] ";
    EXPECT_NE(result.out.find(prefix + "out-" + rank + "\n"), std::string::npos) << result.out;
    EXPECT_NE(result.out.find(prefix + "tail-" + rank + "\n"), std::string::npos) << result.out;
    EXPECT_NE(result.err.find(prefix + "err-" + rank + "\n"), std::string::npos) << result.err;
  }
  EXPECT_EQ(result.out.find("err-"), std::string::npos) << result.out;
  EXPECT_EQ(result.err.find("out-"), std::string::npos) << result.err;
}

TEST_F(LauncherTest, NeverSplitsOrMixesLinesOfConcurrentRanks) {
  constexpr int kRanks = 4;
  constexpr int kLines = 300;
  // Each line is long enough that lines of different ranks would mix if the launcher passed bytes on unsplit.
  const std::string script = "i=0; pad=$(printf '%0200d' 0); while [ $i -lt " + std::to_string(kLines) +
                             " ]; do echo \"r$RANK-line-$i $pad\"; i=$((i+1)); done";
  const RunResult result = run_launcher({"-n", std::to_string(kRanks), "sh", "-c", script});
  ASSERT_EQ(result.exit_code, 0) << diagnostics(result);
  const std::string pad(200, '0');
  std::vector<int> next_line(kRanks, 0);
  for (const std::string& line : split_lines(result.out)) {
    int rank = -1;
    std::string rest;
    ASSERT_TRUE(parse_rank_line(line, &rank, &rest)) << "line without its prefix: " << line;
    ASSERT_TRUE(rank >= 0 && rank < kRanks) << line;
    // RATIONALE: built with += because GCC 12 at -O3 warns falsely (-Wrestrict) on "literal" + std::string.
    std::string expected = "r";
    expected += std::to_string(rank);
    expected += "-line-";
    expected += std::to_string(next_line[static_cast<std::size_t>(rank)]++);
    expected += " ";
    expected += pad;
    ASSERT_EQ(rest, expected) << "mixed, split or reordered line: " << line;
  }
  for (int rank = 0; rank < kRanks; ++rank) EXPECT_EQ(next_line[static_cast<std::size_t>(rank)], kLines);
}

TEST_F(LauncherTest, NoPrefixPassesOutputThrough) {
  const RunResult result = run_launcher({"-n", "2", "--no-prefix", "sh", "-c", "echo plain-$RANK"});
  ASSERT_EQ(result.exit_code, 0) << diagnostics(result);
  std::vector<std::string> lines = split_lines(result.out);
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, (std::vector<std::string>{"plain-0", "plain-1"}));
}

TEST_F(LauncherTest, PropagatesTheFailingRanksExitCodeAndStopsEveryOtherProcess) {
  // Every rank starts a background child and records both pids; rank 1 fails once the others are running.
  const std::string script =
      "d=$LAUNCHER_TEST_DIR; sleep 30 & echo $! > $d/child.$RANK; echo $$ > $d/pid.$RANK; "
      "if [ $RANK = 1 ]; then i=0; while [ $i -lt 1000 ] && { [ ! -s $d/pid.0 ] || [ ! -s $d/pid.2 ]; }; do "
      "sleep 0.01; i=$((i+1)); done; echo failing >&2; exit 7; fi; wait";
  const RunResult result = run_launcher({"-n", "3", "sh", "-c", script});
  EXPECT_EQ(result.exit_code, 7) << diagnostics(result);
  EXPECT_NE(result.err.find("[rank 1] failing\n"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("hostnccl-run: rank 1 exited with code 7; stopping the other 2 rank(s)"), std::string::npos)
      << result.err;
  // The ranks would sleep 30 s on their own; the launcher must not have waited for that.
  EXPECT_LT(result.seconds, 25) << diagnostics(result);
  std::vector<pid_t> pids = recorded_pids("pid", 3);
  const std::vector<pid_t> children = recorded_pids("child", 3);
  ASSERT_EQ(pids.size(), 3u);
  ASSERT_EQ(children.size(), 3u);
  pids.insert(pids.end(), children.begin(), children.end());
  for (const pid_t pid : pids) EXPECT_TRUE(process_gone_soon(pid)) << "process " << pid << " survived the job";
}

TEST_F(LauncherTest, ReportsARankKilledByASignalAs128PlusTheSignal) {
  const RunResult result = run_launcher({"-n", "2", "sh", "-c", "if [ $RANK = 1 ]; then kill -KILL $$; fi; sleep 30"});
  EXPECT_EQ(result.exit_code, 128 + SIGKILL) << diagnostics(result);
  EXPECT_NE(result.err.find("rank 1 was killed by signal 9"), std::string::npos) << result.err;
  EXPECT_LT(result.seconds, 25) << diagnostics(result);
}

TEST_F(LauncherTest, TimeoutStopsTheJobWithCode124) {
  const RunResult result = run_launcher({"-n", "2", "--timeout", "0.5", "sh", "-c", "echo started; sleep 30"});
  EXPECT_EQ(result.exit_code, 124) << diagnostics(result);
  EXPECT_NE(result.err.find("timeout"), std::string::npos) << result.err;
  EXPECT_NE(result.out.find("[rank 1] started\n"), std::string::npos) << result.out;
  EXPECT_LT(result.seconds, 25) << diagnostics(result);
}

TEST_F(LauncherTest, KillsRanksThatIgnoreSigtermAfterTheGracePeriod) {
  // `trap '' TERM` is inherited by sleep too: only SIGKILL ends these ranks.
  const std::string script = "trap '' TERM; echo $$ > $LAUNCHER_TEST_DIR/pid.$RANK; sleep 30";
  const RunResult result = run_launcher({"-n", "2", "--timeout", "0.5", "--grace", "0.5", "sh", "-c", script});
  EXPECT_EQ(result.exit_code, 124) << diagnostics(result);
  EXPECT_LT(result.seconds, 25) << diagnostics(result);
  for (const pid_t pid : recorded_pids("pid", 2)) EXPECT_TRUE(process_gone_soon(pid)) << pid;
}

TEST_F(LauncherTest, ForwardsSigtermToTheRanks) {
  const std::string script = "echo $$ > $LAUNCHER_TEST_DIR/pid.$RANK; sleep 30";
  const RunResult result = run_launcher({"-n", "2", "sh", "-c", script}, [&](pid_t launcher) {
    ASSERT_TRUE(wait_for_pid_files("pid", 2));
    kill(launcher, SIGTERM);
  });
  EXPECT_EQ(result.exit_code, 128 + SIGTERM) << diagnostics(result);
  EXPECT_NE(result.err.find("forwarding it to all ranks"), std::string::npos) << result.err;
  EXPECT_LT(result.seconds, 25) << diagnostics(result);
  for (const pid_t pid : recorded_pids("pid", 2)) EXPECT_TRUE(process_gone_soon(pid)) << pid;
}

// SIGQUIT (Ctrl-\\) is an interrupt like the others: forwarded, never the end of the launcher alone.
TEST_F(LauncherTest, ForwardsSigquitToTheRanks) {
  // No core files: neither from the ranks nor, were SIGQUIT not handled, from the launcher.
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_CORE, &saved), 0);
  rlimit no_core = saved;
  no_core.rlim_cur = 0;
  ASSERT_EQ(setrlimit(RLIMIT_CORE, &no_core), 0);
  const std::string script = "echo $$ > $LAUNCHER_TEST_DIR/pid.$RANK; exec sleep 30";
  const RunResult result = run_launcher({"-n", "2", "sh", "-c", script}, [&](pid_t launcher) {
    ASSERT_TRUE(wait_for_pid_files("pid", 2));
    kill(launcher, SIGQUIT);
  });
  setrlimit(RLIMIT_CORE, &saved);
  EXPECT_EQ(result.exit_code, 128 + SIGQUIT) << diagnostics(result);
  EXPECT_NE(result.err.find("hostnccl-run: received Quit; forwarding it to all ranks"), std::string::npos)
      << diagnostics(result);
  EXPECT_EQ(survivors(recorded_pids("pid", 2)), std::vector<pid_t>{}) << "ranks outlived the launcher";
}

TEST_F(LauncherTest, RanksDieWithALauncherKilledBySigkill) {
  // `exec`: the rank's main process is sleep itself (the death signal reaches a rank's main process only).
  const std::string script = "echo $$ > $LAUNCHER_TEST_DIR/pid.$RANK; exec sleep 30";
  const RunResult result = run_launcher({"-n", "3", "sh", "-c", script}, [&](pid_t launcher) {
    ASSERT_TRUE(wait_for_pid_files("pid", 3));
    kill(launcher, SIGKILL);
  });
  EXPECT_EQ(result.exit_code, 128 + SIGKILL) << diagnostics(result);
  const std::vector<pid_t> pids = recorded_pids("pid", 3);
  EXPECT_EQ(pids.size(), 3u);
  EXPECT_EQ(survivors(pids), std::vector<pid_t>{}) << "ranks outlived the launcher";
}

// The launcher forwards SIGTERM to every rank, also to one it has forked that has not reached exec yet (after another
// rank failed at once, say). There the launcher's handler was still installed: the rank wrote into the launcher's
// signal pipe, and the launcher took the signal for its own ("received Terminated"), so the user's first Ctrl-C then
// counted as the second. Raising SIGTERM in the rank right after fork hits that window every time.
TEST_F(LauncherTest, ASignalForwardedBeforeExecKillsTheRankAndIsNotTakenForTheLaunchers) {
  detnccl::launcher::LaunchOptions options;
  options.world_size = 2;
  options.program_path = "/bin/sh";
  options.argv = {"sh", "-c", "echo $$ > $LAUNCHER_TEST_DIR/pid.$RANK; exec sleep 30"};
  options.in_forked_rank_for_test = [](int rank) {
    if (rank == 1) raise(SIGTERM);
  };
  const RunResult result = launch_in_child(options, dir_);
  EXPECT_EQ(result.exit_code, 128 + SIGTERM) << diagnostics(result);
  EXPECT_NE(result.err.find("hostnccl-run: rank 1 was killed by signal 15"), std::string::npos) << diagnostics(result);
  EXPECT_EQ(result.err.find("received"), std::string::npos) << "the rank's signal was taken for the launcher's\n"
                                                            << diagnostics(result);
  EXPECT_FALSE(fs::exists(dir_ / "pid.1")) << "rank 1 ran the program although SIGTERM reached it first";
  EXPECT_EQ(survivors(recorded_pids("pid", 2)), std::vector<pid_t>{});
}

// The launcher dies after fork but before its rank has asked for the death signal: the kernel will never send it,
// so the rank must notice on its own and never run the program. A subreaper adopts the orphaned rank, so that its end
// can be observed; the rank's hook kills the launcher and waits to be adopted, which makes the window certain.
TEST_F(LauncherTest, ARankWhoseLauncherDiedBeforeExecNeverRunsTheProgram) {
  const pid_t subreaper = fork();
  if (subreaper == 0) {
    if (prctl(PR_SET_CHILD_SUBREAPER, 1UL) != 0) _exit(3);
    const pid_t launcher = fork();
    if (launcher == 0) {
      detnccl::launcher::LaunchOptions options;
      options.world_size = 1;
      options.program_path = "/bin/sh";
      options.argv = {"sh", "-c", "echo ran > $LAUNCHER_TEST_DIR/ran"};
      options.in_forked_rank_for_test = [](int) {
        const pid_t parent = getppid();
        kill(parent, SIGKILL);
        while (getppid() == parent) usleep(1000);
      };
      setenv("TMPDIR", std::getenv("LAUNCHER_TEST_DIR"), 1);
      _exit(detnccl::launcher::launch_ranks(options));
    }
    int status = 0;
    if (launcher < 0 || waitpid(launcher, &status, 0) != launcher) _exit(4);
    pid_t rank = -1;
    while ((rank = waitpid(-1, &status, 0)) < 0 && errno == EINTR) {
    }
    if (rank < 0) _exit(5);  // the rank was not adopted
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) _exit(0);
    _exit(WIFEXITED(status) ? 10 + WEXITSTATUS(status) : 6);
  }
  ASSERT_GT(subreaper, 0) << std::strerror(errno);
  const int status = wait_for_child(subreaper);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "0: the orphaned rank was killed; 10 + code: it exited with that code";
  EXPECT_FALSE(fs::exists(dir_ / "ran")) << "the orphaned rank ran the program";
}

TEST_F(LauncherTest, ReportsAProgramThatCannotBeExecuted) {
  // Executable by mode, but neither an ELF file nor a script: execve fails (ENOEXEC) in every rank.
  const fs::path bogus = dir_ / "not-a-program";
  std::ofstream(bogus) << '\x7f' << "ELF but not really";
  fs::permissions(bogus, fs::perms::owner_all);
  const RunResult result = run_launcher({"-n", "2", bogus.string()});
  EXPECT_EQ(result.exit_code, 127) << diagnostics(result);
  EXPECT_NE(result.err.find("cannot execute " + bogus.string()), std::string::npos) << result.err;
}

TEST_F(LauncherTest, RejectsBadArgumentsWithCode2) {
  const fs::path not_executable = dir_ / "data.txt";
  std::ofstream(not_executable) << "data";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"true"}, "--nproc is required"},
      {{"-n", "0", "true"}, "not in range"},
      {{"-n", "-3", "true"}, ""},
      {{"-n", "two", "true"}, ""},
      {{"-n", "2"}, "no PROGRAM given"},
      {{"-n", "2", "--"}, "no PROGRAM given"},
      {{"-n", "2", "--timeout", "-1", "true"}, ""},
      {{"-n", "2", "--bogus", "true"}, "unknown option --bogus"},
      {{"-n", "2", "surely-no-such-program-here"}, "'surely-no-such-program-here' was not found in PATH"},
      {{"-n", "2", not_executable.string()}, "is not an executable file"},
      {{"-n", "2", dir_.string()}, "is not an executable file"},
  };
  for (const auto& [args, message] : cases) {
    const RunResult result = run_launcher(args);
    std::string joined;
    for (const std::string& arg : args) joined += arg + " ";
    EXPECT_EQ(result.exit_code, 2) << joined << "\n" << diagnostics(result);
    EXPECT_FALSE(result.err.empty()) << joined;
    EXPECT_NE(result.err.find(message), std::string::npos) << joined << "\n" << result.err;
    EXPECT_TRUE(result.out.empty()) << joined << "\n" << result.out;
  }
}

// --timeout and --grace take a finite number of seconds >= 0: a negative, infinite or NaN value is refused with a
// short message (not the whole double range), and a positive timeout too short for a millisecond still limits the job.
TEST_F(LauncherTest, TimesMustBeNonNegativeFiniteSecondsAndTinyTimeoutsStillLimit) {
  for (const std::string option : {"--timeout", "--grace"}) {
    for (const std::string value : {"-1", "inf", "-inf", "nan", "1e400", "soon"}) {
      const RunResult result = run_launcher({"-n", "1", option, value, "sh", "-c", "sleep 0.2"});
      EXPECT_EQ(result.exit_code, 2) << option << " " << value << "\n" << diagnostics(result);
      EXPECT_NE(result.err.find("must be a non-negative number of seconds"), std::string::npos)
          << option << " " << value << "\n"
          << result.err;
      EXPECT_LT(result.err.size(), 200u) << result.err;
    }
  }
  const RunResult tiny = run_launcher({"-n", "1", "--timeout", "0.0004", "sh", "-c", "sleep 5"});
  EXPECT_EQ(tiny.exit_code, 124) << "0.0004 s is a limit, not 'no limit'\n" << diagnostics(tiny);
  EXPECT_LT(tiny.seconds, 4.0);
}

TEST_F(LauncherTest, HelpDescribesTheUsage) {
  const RunResult result = run_launcher({"--help"});
  EXPECT_EQ(result.exit_code, 0) << diagnostics(result);
  EXPECT_NE(result.out.find("hostnccl-run -n N"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("--timeout"), std::string::npos) << result.out;
}

#ifdef LAUNCHER_ALLREDUCE_JOB_PATH
// ---------------------------------------------------------------------------------------------------------------
// hostnccl-run on an NCCL job (the bootstrap helper + hostnccl)

class LauncherNcclJobTest : public LauncherTest, public ::testing::WithParamInterface<int> {};

TEST_P(LauncherNcclJobTest, EveryRankGetsTheSumOfAllRanksInputs) {
  const int world_size = GetParam();
  const RunResult result =
      run_launcher({"-n", std::to_string(world_size), "--timeout", "60", LAUNCHER_ALLREDUCE_JOB_PATH});
  ASSERT_EQ(result.exit_code, 0) << diagnostics(result);
  EXPECT_TRUE(result.err.empty()) << "nothing to say on the normal path: " << result.err;
  // The job sends (rank + 1) * 1000 + i at index i; the test sums that over the ranks on its own.
  long long first = 0;
  for (int rank = 0; rank < world_size; ++rank) first += (rank + 1) * 1000LL;
  const long long last = first + static_cast<long long>(world_size) * 1026;  // the job's count is 1027
  for (int rank = 0; rank < world_size; ++rank) {
    const std::string expected = "[rank " + std::to_string(rank) + "] allreduce ok: rank " + std::to_string(rank) +
                                 " of " + std::to_string(world_size) + ", first " + std::to_string(first) + ", last " +
                                 std::to_string(last) + "\n";
    EXPECT_NE(result.out.find(expected), std::string::npos) << expected << diagnostics(result);
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, LauncherNcclJobTest, ::testing::Values(1, 3, 4));

TEST_F(LauncherTest, StopsAnNcclJobWhenOneRankDiesBetweenCollectives) {
  // Rank 2 exits after the first allreduce: ranks 0 and 1 would wait for it in the second one; the launcher must
  // stop them.
  setenv("LAUNCHER_JOB_FAIL_RANK", "2", 1);
  const RunResult result = run_launcher({"-n", "3", "--timeout", "60", LAUNCHER_ALLREDUCE_JOB_PATH});
  unsetenv("LAUNCHER_JOB_FAIL_RANK");
  EXPECT_EQ(result.exit_code, 3) << diagnostics(result);
  EXPECT_NE(result.err.find("rank 2 exited with code 3"), std::string::npos) << result.err;
  EXPECT_LT(result.seconds, 50) << diagnostics(result);
}

TEST_F(LauncherTest, RunsAnNcclJobWithTimeoutZeroMeaningNoLimit) {
  setenv("HOSTNCCL_TIMEOUT_S", "0", 1);
  const RunResult result = run_launcher({"-n", "2", "--timeout", "60", LAUNCHER_ALLREDUCE_JOB_PATH});
  unsetenv("HOSTNCCL_TIMEOUT_S");
  ASSERT_EQ(result.exit_code, 0) << diagnostics(result);
  EXPECT_TRUE(result.err.empty()) << result.err;
  EXPECT_NE(result.out.find("[rank 1] allreduce ok: rank 1 of 2,"), std::string::npos) << result.out;
}

// A job whose ranks all die while their communicator is being created: rank 1 never joins, so rank 0 has created
// the segment and waits in ncclCommInitRank (rank 2 too, attached or about to), and no rank is left to remove it.
class LauncherStuckInitTest : public LauncherTest {
 protected:
  // Runs the job with 3 ranks under hostnccl-run `options`; once the job's segment exists, calls `stop` with the
  // launcher's pid and the ranks' pids. Sets tag_ to the job's tag, prefix_ to its name prefix and segments_ to its
  // entries seen in /dev/shm while it ran.
  RunResult run_stuck_job(const std::vector<std::string>& options,
                          const std::function<void(pid_t, const std::vector<pid_t>&)>& stop) {
    setenv("LAUNCHER_JOB_ABSENT_RANK", "1", 1);
    std::vector<std::string> args = {"-n", "3"};
    args.insert(args.end(), options.begin(), options.end());
    args.push_back(LAUNCHER_ALLREDUCE_JOB_PATH);
    const RunResult result = run_launcher(args, [&](pid_t launcher) {
      ASSERT_TRUE(wait_for_pid_files("pid", 3));
      tag_ = read_file(dir_ / "tag");  // written before pid.0, through a rename
      ASSERT_TRUE(hostnccl::is_valid_job_tag(tag_)) << "'" << tag_ << "'";
      prefix_ = hostnccl::job_shm_prefix(tag_);
      const auto deadline = steady_clock::now() + std::chrono::seconds(20);
      while ((segments_ = entries_with_prefix(hostnccl::kShmDirectory, prefix_)).empty() &&
             steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      ASSERT_FALSE(segments_.empty()) << "the job's segment never appeared";
      stop(launcher, recorded_pids("pid", 3));
    });
    unsetenv("LAUNCHER_JOB_ABSENT_RANK");
    return result;
  }

  // The one segment of the job was seen while it ran, and nothing of the job is left now.
  void expect_segment_seen_and_gone() {
    ASSERT_FALSE(prefix_.empty());
    ASSERT_EQ(segments_.size(), 1u);
    EXPECT_EQ(segments_[0].size(), prefix_.size() + 32) << segments_[0];
    EXPECT_EQ(entries_with_prefix(hostnccl::kShmDirectory, prefix_), std::vector<std::string>{})
        << "the job's shared memory was left in /dev/shm";
  }

  std::string tag_;
  std::string prefix_;
  std::vector<std::string> segments_;
};

TEST_F(LauncherStuckInitTest, RemovesTheSegmentWhenEveryRankIsKilledDuringInit) {
  ShmFiles decoys;  // other jobs' objects, named as close to this job's as possible: they must stay
  const RunResult result = run_stuck_job({"--timeout", "50"}, [&](pid_t, const std::vector<pid_t>& ranks) {
    const std::string unique = std::to_string(getpid());
    std::string untagged = "hostnccl-decoy";
    untagged += unique;
    untagged += "untagged";
    for (const std::string& name : {hostnccl::job_shm_prefix(tag_ + "0") + "longer-tag", "hostnccl-" + tag_,
                                    hostnccl::job_shm_prefix("decoy" + unique) + "other-job", untagged}) {
      EXPECT_TRUE(decoys.create(name)) << name << ": " << std::strerror(errno);
    }
    // RATIONALE: stop them all first, so that no rank can see another die and unlink the name itself.
    for (const pid_t pid : ranks) kill(pid, SIGSTOP);
    for (const pid_t pid : ranks) kill(pid, SIGKILL);
  });
  EXPECT_EQ(result.exit_code, 128 + SIGKILL) << diagnostics(result);
  expect_segment_seen_and_gone();
  ASSERT_EQ(segments_.size(), 1u);
  std::string message = "hostnccl-run: removed 1 shared-memory object(s) the job left in /dev/shm: ";
  message += segments_[0];
  message += '\n';
  EXPECT_NE(result.err.find(message), std::string::npos) << result.err;
  ASSERT_EQ(decoys.names().size(), 4u);
  for (const std::string& name : decoys.names()) {
    EXPECT_TRUE(fs::exists(ShmFiles::path(name))) << name << " belongs to no job of this launcher";
  }
}

TEST_F(LauncherStuckInitTest, RemovesTheSegmentAfterTheTimeout) {
  const RunResult result = run_stuck_job({"--timeout", "5"}, [](pid_t, const std::vector<pid_t>&) {});
  EXPECT_EQ(result.exit_code, 124) << diagnostics(result);
  expect_segment_seen_and_gone();
}

TEST_F(LauncherStuckInitTest, RemovesTheSegmentWhenTheLauncherIsInterrupted) {
  const RunResult result =
      run_stuck_job({"--timeout", "50"}, [](pid_t launcher, const std::vector<pid_t>&) { kill(launcher, SIGINT); });
  EXPECT_EQ(result.exit_code, 128 + SIGINT) << diagnostics(result);
  expect_segment_seen_and_gone();
}
#endif

// ---------------------------------------------------------------------------------------------------------------
// scripts/demo.sh and scripts/test.sh, copied into a fake checkout (with an install-deps.sh that does nothing) and run
// with fake cmake and ctest first on PATH, which only log their arguments to <dir>/commands.log.

class ScriptsTest : public LauncherTest {
 protected:
  void SetUp() override {
    LauncherTest::SetUp();
    checkout_ = dir_ / "checkout";
    fs::create_directories(checkout_ / "scripts");
    for (const char* name : {"demo.sh", "test.sh"}) {
      fs::copy_file(fs::path(DETNCCL_SOURCE_DIR) / "scripts" / name, checkout_ / "scripts" / name);
    }
    write_executable(checkout_ / "scripts" / "install-deps.sh", "#!/bin/sh\nexit 0\n");
    fake_bin_ = dir_ / "bin";
    fs::create_directory(fake_bin_);
    for (const std::string tool : {"cmake", "ctest"}) {
      write_executable(fake_bin_ / tool,
                       "#!/bin/sh\necho \"" + tool + " $*\" >> \"$LAUNCHER_TEST_DIR/commands.log\"\n");
    }
  }

  static void write_executable(const fs::path& path, const std::string& text) {
    std::ofstream(path) << text;
    fs::permissions(path, fs::perms::owner_all);
  }

  // Runs `command` (e.g. "bash <script> --help", assignments allowed first) from `cwd` with PRESET unset.
  RunResult run_script(const std::string& command, const fs::path& cwd) {
    const std::string line = "cd '" + cwd.string() + "' && env -u PRESET PATH='" + fake_bin_.string() + "':\"$PATH\" " +
                             command + " >'" + (dir_ / "script.out").string() + "' 2>'" +
                             (dir_ / "script.err").string() + "' </dev/null";
    const int status = std::system(line.c_str());
    RunResult result;
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    result.out = read_file(dir_ / "script.out");
    result.err = read_file(dir_ / "script.err");
    return result;
  }

  std::string script(const char* name) const { return (checkout_ / "scripts" / name).string(); }
  std::vector<std::string> commands() const { return split_lines(read_file(dir_ / "commands.log")); }

  fs::path checkout_;
  fs::path fake_bin_;
};

TEST_F(ScriptsTest, DemoHelpPrintsTheUsageAndNoCode) {
  const RunResult result = run_script("bash " + script("demo.sh") + " --help", dir_);
  EXPECT_EQ(result.exit_code, 0) << diagnostics(result);
  EXPECT_NE(result.out.find("scripts/demo.sh [--no-build] [--build-dir DIR] [--keep]"), std::string::npos)
      << result.out;
  EXPECT_NE(result.out.find("--build-dir DIR  build into DIR"), std::string::npos) << result.out;
  EXPECT_EQ(result.out.find("set -"), std::string::npos) << result.out;
  EXPECT_EQ(result.out.find("#"), std::string::npos) << result.out;
  EXPECT_EQ(commands(), std::vector<std::string>{}) << "--help built something";
}

TEST_F(ScriptsTest, DemoRefusesABuildDirWithoutADirectory) {
  for (const std::string args : {"--build-dir", "--no-build --build-dir", "--build-dir --no-build", "--build-dir ''"}) {
    const RunResult result = run_script("bash " + script("demo.sh") + " " + args, dir_);
    EXPECT_EQ(result.exit_code, 2) << args << "\n" << diagnostics(result);
    EXPECT_NE(result.err.find("demo.sh: --build-dir needs a directory"), std::string::npos) << args << "\n"
                                                                                            << result.err;
    EXPECT_EQ(result.err.find("unbound variable"), std::string::npos) << args << "\n" << result.err;
    EXPECT_EQ(commands(), std::vector<std::string>{}) << args << ": built something";
  }
}

TEST_F(ScriptsTest, DemoBuildsIntoTheBuildDirItIsGiven) {
  const std::string targets = " --target hostnccl-run train detnccl detnccl-cli";
  const auto starts_and_ends = [](const std::string& line, const std::string& start, const std::string& end) {
    return line.starts_with(start) && line.ends_with(end);
  };
  // A new directory, relative to where the script is started from: configured with the preset there, built there.
  const std::string fresh = fs::weakly_canonical(dir_ / "fresh").string();
  RunResult result = run_script("bash " + script("demo.sh") + " --build-dir fresh", dir_);
  std::vector<std::string> lines = commands();
  ASSERT_EQ(lines.size(), 2u) << read_file(dir_ / "commands.log");
  EXPECT_EQ(lines[0], "cmake --preset release -B " + fresh);
  EXPECT_TRUE(starts_and_ends(lines[1], "cmake --build " + fresh + " -j ", targets)) << lines[1];
  // The fake cmake built nothing, so the demo stops there, at the directory it was given.
  EXPECT_EQ(result.exit_code, 2) << diagnostics(result);
  EXPECT_NE(result.err.find("no build directory " + fresh), std::string::npos) << result.err;

  // An existing build tree: built as it is configured, never reconfigured with the preset.
  const fs::path configured = fs::weakly_canonical(dir_ / "configured");
  fs::create_directory(configured);
  std::ofstream(configured / "CMakeCache.txt") << "CMAKE_BUILD_TYPE:STRING=Debug\n";
  fs::remove(dir_ / "commands.log");
  result = run_script("bash " + script("demo.sh") + " --build-dir " + configured.string(), dir_);
  lines = commands();
  ASSERT_EQ(lines.size(), 1u) << read_file(dir_ / "commands.log");
  EXPECT_TRUE(starts_and_ends(lines[0], "cmake --build " + configured.string() + " -j ", targets)) << lines[0];
  EXPECT_EQ(result.exit_code, 2) << diagnostics(result);
  EXPECT_NE(result.err.find(configured.string() + "/hostnccl/bin/hostnccl-run is missing"), std::string::npos)
      << result.err;

  // No --build-dir (the README's command): the preset's own build directory, as before.
  fs::remove(dir_ / "commands.log");
  result = run_script("bash " + script("demo.sh"), dir_);
  lines = commands();
  ASSERT_EQ(lines.size(), 2u) << read_file(dir_ / "commands.log");
  EXPECT_EQ(lines[0], "cmake --preset release");
  EXPECT_TRUE(starts_and_ends(lines[1], "cmake --build --preset release -j ", targets)) << lines[1];
  EXPECT_NE(result.err.find("no build directory build/release"), std::string::npos) << result.err;
}

// test.sh kills the test processes the suite left running, but only this checkout's: a process of the same preset in
// another checkout (another engineer's suite, running at the same time) is left alone.
TEST_F(ScriptsTest, TestScriptKillsOnlyThisCheckoutsStrayProcesses) {
  const std::string preset = "launcher-test-" + std::to_string(getpid());
  std::string why;
  const std::string sleep_path = detnccl::launcher::find_program("sleep", &why);
  ASSERT_FALSE(sleep_path.empty()) << why;
  // Named as ctest names them: by the absolute (physical) path of the build tree.
  const fs::path ours = fs::canonical(checkout_) / "build" / preset / "tests" / "stray_test";
  const fs::path theirs = fs::canonical(dir_) / "other-checkout" / "build" / preset / "tests" / "stray_test";
  std::vector<pid_t> pids;
  for (const fs::path& path : {ours, theirs}) {
    fs::create_directories(path.parent_path());
    fs::create_symlink(sleep_path, path);
    std::string program = path.string();
    std::string seconds = "60";
    char* argv[] = {program.data(), seconds.data(), nullptr};
    pid_t pid = -1;
    ASSERT_EQ(posix_spawn(&pid, argv[0], nullptr, nullptr, argv, environ), 0);
    pids.push_back(pid);
  }
  const RunResult result = run_script("PRESET=" + preset + " bash " + script("test.sh"), dir_);
  const bool ours_gone = process_gone_soon(pids[0]);
  const bool theirs_alive = !process_gone(pids[1]);
  for (const pid_t pid : pids) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  EXPECT_EQ(result.exit_code, 1) << diagnostics(result);
  EXPECT_NE(result.err.find("FAIL: test processes still running after the suite: " + std::to_string(pids[0]) + "\n"),
            std::string::npos)
      << diagnostics(result);
  EXPECT_TRUE(ours_gone) << "this checkout's stray process was not killed\n" << diagnostics(result);
  EXPECT_TRUE(theirs_alive) << "another checkout's process was killed\n" << diagnostics(result);
  EXPECT_NE(read_file(dir_ / "commands.log").find("ctest --preset " + preset), std::string::npos);
}

}  // namespace
