// Fault tests: what detnccl does when things go wrong around it, each through the real shim preloaded into a real
// job (tests/test_faults_job.cc over hostnccl), as docs/reliability.md promises:
//   - a rank killed with SIGKILL inside an AllReduce: the survivors' calls fail within the timeout, every log is
//     readable up to its last complete record, and `detnccl diff`/`check` say exactly what is missing;
//   - a full disk (a small tmpfs) and a file size limit (RLIMIT_FSIZE): the job completes, the log is marked
//     truncated, one warning;
//   - unusable, hostile or reused log locations: nothing is followed, overwritten or left world-readable;
//   - absurd environment values: accepted, or refused with a message naming the variable; never a crash;
//   - many threads calling NCCL at once: every call recorded intact;
//   - and the reader's memory stays bounded over a long log (what lets `check` hold a thousand logs open).
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "hash/fingerprint.h"
#include "records/log_reader.h"
#include "records/record_writer.h"
#include "tests/log_support.h"
#include "tests/test_support.h"

namespace {

namespace fs = std::filesystem;
using detnccl::records::CallRecord;
using detnccl::records::CommunicatorRecord;
using detnccl::records::LogEndKind;
using detnccl::records::LogReader;
using detnccl::records::LogRecord;
using detnccl::test::environment_with;
using detnccl::test::occurrences;
using detnccl::test::ProcessOutcome;
using detnccl::test::run_process;
using detnccl::test::TempDir;
using nlohmann::json;

constexpr std::chrono::seconds kDeadline{120};

using detnccl::test::Log;
using detnccl::test::rank_log;
using detnccl::test::read_log;

// The single-process job: RANKS threads, CALLS AllReduces of COUNT floats each, shim preloaded.
ProcessOutcome threads_job(const TempDir& scratch, const std::vector<std::string>& environment, int ranks, int calls,
                           int count, const std::function<void()>& in_child = {}) {
  std::vector<std::string> extra = {"LD_PRELOAD=" DETNCCL_SHIM_PATH};
  extra.insert(extra.end(), environment.begin(), environment.end());
  return run_process(
      {DETNCCL_FAULTS_JOB, "threads", std::to_string(ranks), std::to_string(calls), std::to_string(count)},
      environment_with(extra), scratch / "job-output.txt", kDeadline, in_child);
}

json cli_json(const TempDir& scratch, const std::vector<std::string>& arguments) {
  std::vector<std::string> argv = {DETNCCL_CLI};
  argv.insert(argv.end(), arguments.begin(), arguments.end());
  const ProcessOutcome outcome = run_process(argv, environment_with({"NO_COLOR=1"}), scratch / "cli.txt", kDeadline);
  // stderr shares the file: the JSON document is the part from the first '{'.
  const std::size_t start = outcome.output.find('{');
  return json::parse(start == std::string::npos ? "" : outcome.output.substr(start), nullptr, false);
}

bool is_printable_text(const std::string& text) {
  return std::all_of(text.begin(), text.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return (byte >= 0x20 && byte < 0x7f) || c == '\n' || c == '\t';
  });
}

// ---------------------------------------------------------------------------------------------------------------
// A rank killed inside an AllReduce

TEST(FaultKilledRank, SurvivorsFailWithinTheTimeoutAndTheLogsSayExactlyWhatIsMissing) {
  TempDir scratch("detnccl-faults");
  constexpr int kRanks = 3, kSteps = 4, kKillStep = 2, kTimeoutSeconds = 20;
  const auto run_job = [&](const std::string& run, int kill_step) {
    fs::create_directory(scratch / ("id-" + run));
    std::vector<detnccl::test::StartedProcess> ranks;
    for (int rank = 0; rank < kRanks; ++rank) {
      ranks.push_back(detnccl::test::start_process(
          {DETNCCL_FAULTS_JOB, "kill-in-allreduce", std::to_string(kSteps), std::to_string(kill_step)},
          environment_with({"LD_PRELOAD=" DETNCCL_SHIM_PATH, "RANK=" + std::to_string(rank),
                            "WORLD_SIZE=" + std::to_string(kRanks),
                            "HOSTNCCL_ID_FILE=" + scratch / ("id-" + run) + "/id",
                            "HOSTNCCL_TIMEOUT_S=" + std::to_string(kTimeoutSeconds), "HOSTNCCL_SLOT_BYTES=4096",
                            "DETNCCL_DIR=" + scratch.path(), "DETNCCL_RUN=" + run}),
          scratch / (run + "-rank" + std::to_string(rank) + ".txt")));
    }
    return detnccl::test::wait_for_all(ranks, kDeadline);
  };
  const std::vector<ProcessOutcome> full = run_job("full", -1);
  for (const ProcessOutcome& rank : full) ASSERT_EQ(rank.exit_code, 0) << rank.output;
  const std::vector<ProcessOutcome> killed = run_job("killed", kKillStep);

  // Rank 1 died inside the call; the survivors' call failed with an error, long before the timeout.
  EXPECT_EQ(killed[1].signal, SIGKILL) << killed[1].output;
  for (int rank : {0, 2}) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const ProcessOutcome& outcome = killed[static_cast<std::size_t>(rank)];
    EXPECT_FALSE(outcome.timed_out);
    EXPECT_EQ(outcome.exit_code, 3) << "3: the AllReduce failed; 4: it succeeded\n" << outcome.output;
    const std::string prefix = "rank " + std::to_string(rank) + " step 2: ncclAllReduce returned ";
    const std::size_t at = outcome.output.find(prefix);
    ASSERT_NE(at, std::string::npos) << outcome.output;
    long long elapsed_ms = -1;
    int result = -1;
    ASSERT_EQ(std::sscanf(outcome.output.c_str() + at + prefix.size(), "%d after %lld ms", &result, &elapsed_ms), 2)
        << outcome.output;
    EXPECT_NE(result, 0) << outcome.output;
    EXPECT_LT(elapsed_ms, kTimeoutSeconds * 1000) << "a dead peer is detected, not waited out";
  }

  // Every log is readable up to its last complete record.
  const std::string run_dir = scratch / "killed";
  const Log victim = read_log(rank_log(run_dir, 1));
  ASSERT_TRUE(victim.error.empty()) << victim.error;
  EXPECT_EQ(victim.end.kind, LogEndKind::kTornTail) << victim.end.message;
  ASSERT_EQ(victim.calls.size(), static_cast<std::size_t>(kKillStep)) << "the calls before the fatal one";
  for (std::size_t i = 0; i < victim.calls.size(); ++i) {
    EXPECT_EQ(victim.calls[i].seq, i);
    EXPECT_EQ(victim.calls[i].result, 0);
  }
  for (std::uint32_t rank : {0u, 2u}) {
    const Log survivor = read_log(rank_log(run_dir, rank));
    ASSERT_TRUE(survivor.error.empty()) << survivor.error;
    EXPECT_NE(survivor.end.kind, LogEndKind::kCorrupt) << survivor.end.message;
    ASSERT_EQ(survivor.calls.size(), static_cast<std::size_t>(kKillStep + 1));
    EXPECT_EQ(survivor.calls.back().step, static_cast<std::uint64_t>(kKillStep));
    EXPECT_NE(survivor.calls.back().result, 0) << "the failed call is recorded with NCCL's error";
  }

  // check: the AllReduce of step 2 was not joined by rank 1, and nothing else is wrong.
  const json check = cli_json(scratch, {"check", "--json", run_dir});
  ASSERT_FALSE(check.is_discarded());
  EXPECT_EQ(check["verdict"], "inconsistent") << check.dump(2);
  ASSERT_EQ(check["findings"].size(), 1u) << check.dump(2);
  const json& finding = check["findings"][0];
  EXPECT_EQ(finding["kind"], "not all ranks joined") << check.dump(2);
  EXPECT_EQ(finding["step"], kKillStep);
  EXPECT_EQ(finding["ranks"], json::array({1}));

  // diff: rank 1 stops at step 2 (2 calls missing), the survivors' step-3 call is missing too.
  const json diff = cli_json(scratch, {"diff", "--json", scratch / "full", run_dir});
  ASSERT_FALSE(diff.is_discarded());
  EXPECT_EQ(diff["verdict"], "diverged") << diff.dump(2);
  EXPECT_EQ(diff["first_divergence"]["step"], kKillStep) << diff.dump(2);
  EXPECT_EQ(diff["first_divergence"]["kind"], "missing") << diff.dump(2);
  EXPECT_EQ(diff["first_divergence"]["rank"], 1) << "the dead rank is the origin, not a survivor" << diff.dump(2);
  // The survivors' failed calls are consequences of rank 1's death, not divergences of their own.
  EXPECT_EQ(diff["receivers"], json::array({0, 2})) << diff.dump(2);
  const auto stopped = diff["stopped"].get<std::vector<int>>();
  EXPECT_NE(std::find(stopped.begin(), stopped.end(), 1), stopped.end()) << diff.dump(2);
  ASSERT_EQ(diff["ranks"].size(), static_cast<std::size_t>(kRanks));
  EXPECT_EQ(diff["ranks"][1]["first"]["kind"], "missing") << diff.dump(2);
  EXPECT_EQ(diff["ranks"][1]["missing_in_b"], kSteps - kKillStep);
  EXPECT_EQ(diff["ranks"][1]["end_b"], "torn tail");
  // The survivors' logs closed cleanly: diff compared their step digests and read their calls through step 2 only
  // (the last step at which a rank first differs); every call is counted with --all-records.
  const json all = cli_json(scratch, {"diff", "--json", "--all-records", scratch / "full", run_dir});
  ASSERT_FALSE(all.is_discarded());
  EXPECT_EQ(all["first_divergence"], diff["first_divergence"]);
  EXPECT_EQ(all["receivers"], diff["receivers"]);
  for (int rank : {0, 2}) {
    EXPECT_EQ(all["ranks"][rank]["missing_in_b"], kSteps - kKillStep - 1) << all.dump(2);
    EXPECT_EQ(all["ranks"][rank]["matching"], kKillStep) << all.dump(2);
    EXPECT_EQ(diff["ranks"][rank]["matching"], kKillStep) << "compared by their step digests" << diff.dump(2);
    EXPECT_EQ(diff["ranks"][rank]["calls_not_read"], kSteps - kKillStep - 1) << "run A's step-3 call" << diff.dump(2);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Full disk and file size limit

// Checks a job that ran out of space: it succeeded, its log holds intact records up to a truncation marker of the
// given reason, and the job printed exactly one warning about it.
void expect_truncated_but_completed(const ProcessOutcome& job, const std::string& run_dir,
                                    detnccl::records::TruncationReason reason, int calls) {
  EXPECT_EQ(job.exit_code, 0) << job.output;
  EXPECT_EQ(occurrences(job.output, "warning: tracing stopped"), 1u) << "one warning\n" << job.output;
  EXPECT_NE(job.output.find("marked truncated"), std::string::npos) << job.output;
  const Log log = read_log(rank_log(run_dir, 0));
  ASSERT_TRUE(log.error.empty()) << log.error;
  EXPECT_EQ(log.end.kind, LogEndKind::kTruncated) << log.end.message;
  EXPECT_EQ(log.end.truncation.reason, reason);
  EXPECT_GT(log.calls.size(), 1000u) << "the log took what fit";
  EXPECT_LT(log.calls.size(), static_cast<std::size_t>(2 * calls)) << "and no more";
  std::set<std::uint64_t> seqs;
  for (const CallRecord& call : log.calls) seqs.insert(call.seq);
  EXPECT_EQ(seqs.size(), log.calls.size()) << "no record twice";
}

TEST(FaultDiskFull, ASmallFileSystemFillsUpTheJobCompletesAndTheLogIsMarkedTruncated) {
  TempDir scratch("detnccl-faults");
  const std::string mount_point = scratch / "tmpfs";
  fs::create_directory(mount_point);
  // The log starts at 1 MiB (fallocate'd at once); 1152 KiB leaves it 128 KiB to grow into.
  if (geteuid() != 0 || mount("tmpfs", mount_point.c_str(), "tmpfs", 0, "size=1152k") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs (needs root): FaultDiskFull.FileSizeLimit covers the same path with EFBIG";
  }
  constexpr int kCalls = 6000;  // x 2 ranks x 128 bytes: more than 1152 KiB
  const ProcessOutcome job = threads_job(scratch, {"DETNCCL_DIR=" + mount_point, "DETNCCL_RUN=full"}, 2, kCalls, 64);
  expect_truncated_but_completed(job, mount_point + "/full", detnccl::records::TruncationReason::kDiskFull, kCalls);
  umount2(mount_point.c_str(), MNT_DETACH);
}

TEST(FaultDiskFull, AFileSizeLimitStopsTracingWithoutKillingTheJob) {
  // RLIMIT_FSIZE makes the kernel send SIGXFSZ, whose default action kills the process, to a write past the limit.
  // The job here does not ignore the signal: the writer must never grow the file past the limit.
  // (hostnccl sizes its shared-memory segment with ftruncate too: small staging slots and rings keep it under the
  // limit.)
  TempDir scratch("detnccl-faults");
  constexpr int kCalls = 6000;
  constexpr rlim_t kLimit = 1152 << 10;
  const ProcessOutcome job = threads_job(
      scratch,
      {"DETNCCL_DIR=" + scratch.path(), "DETNCCL_RUN=limited", "HOSTNCCL_SLOT_BYTES=4096", "HOSTNCCL_RING_BYTES=4096"},
      2, kCalls, 64, [] {
        signal(SIGXFSZ, SIG_DFL);
        const rlimit limit{kLimit, kLimit};
        setrlimit(RLIMIT_FSIZE, &limit);
      });
  EXPECT_EQ(job.signal, 0) << "killed by signal " << job.signal << " (" << strsignal(job.signal) << ")";
  expect_truncated_but_completed(job, scratch / "limited", detnccl::records::TruncationReason::kFileTooLarge, kCalls);
}

// ---------------------------------------------------------------------------------------------------------------
// Log locations: unwritable, symlinks, someone else's files, the same run twice

// Runs the small job with the log location given; returns its outcome.
ProcessOutcome small_job(const TempDir& scratch, const std::string& dir, const std::string& run,
                         const std::function<void()>& in_child = {}) {
  return threads_job(scratch, {"DETNCCL_DIR=" + dir, "DETNCCL_RUN=" + run}, 2, 4, 64, in_child);
}

void expect_completed_without_tracing(const ProcessOutcome& job, const std::string& why) {
  EXPECT_EQ(job.exit_code, 0) << job.output;
  EXPECT_EQ(occurrences(job.output, "tracing is off"), 1u) << "one warning\n" << job.output;
  EXPECT_NE(job.output.find(why), std::string::npos) << job.output;
}

TEST(FaultLogLocation, AnUnwritableDirectoryTurnsTracingOffWithOneWarning) {
  TempDir scratch("detnccl-faults");
  const std::string read_only = scratch / "read-only";
  fs::create_directory(read_only);
  // As root, permission bits do not stop a write: a read-only mount does.
  const bool mounted = geteuid() == 0 && mount("tmpfs", read_only.c_str(), "tmpfs", MS_RDONLY, "size=64k") == 0;
  if (!mounted) fs::permissions(read_only, fs::perms::owner_read | fs::perms::owner_exec);
  const ProcessOutcome job = small_job(scratch, read_only + "/logs", "r");
  expect_completed_without_tracing(job, read_only);
  EXPECT_FALSE(fs::exists(read_only + "/logs"));
  if (mounted) umount2(read_only.c_str(), MNT_DETACH);
}

TEST(FaultLogLocation, ASymlinkInPlaceOfTheRunDirectoryIsNotFollowed) {
  TempDir scratch("detnccl-faults");
  const std::string target = scratch / "elsewhere";
  fs::create_directory(target);
  fs::create_directory(scratch / "logs");
  fs::create_directory_symlink(target, scratch / "logs/r");
  const ProcessOutcome job = small_job(scratch, scratch / "logs", "r");
  expect_completed_without_tracing(job, "symlink");
  EXPECT_TRUE(fs::is_empty(target)) << "nothing was written through the symlink";
}

TEST(FaultLogLocation, ASymlinkInPlaceOfTheLogFileIsNotFollowed) {
  TempDir scratch("detnccl-faults");
  const std::string victim = scratch / "victim.txt";
  std::ofstream(victim) << "precious";
  fs::create_directories(scratch / "logs/r");
  fs::create_symlink(victim, rank_log(scratch / "logs/r", 0));
  const ProcessOutcome job = small_job(scratch, scratch / "logs", "r");
  expect_completed_without_tracing(job, "symlink");
  std::ifstream in(victim);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "precious");
}

TEST(FaultLogLocation, SomeoneElsesFilesAreNeitherOverwrittenNorUsed) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give files to another user";
  TempDir scratch("detnccl-faults");
  // A log file of another user in our run directory: left alone, and the job fails to trace, clearly.
  fs::create_directories(scratch / "logs/r");
  const std::string theirs = rank_log(scratch / "logs/r", 0);
  std::ofstream(theirs) << "their log";
  ASSERT_EQ(chown(theirs.c_str(), 65534, 65534), 0);
  const ProcessOutcome job = small_job(scratch, scratch / "logs", "r");
  expect_completed_without_tracing(job, "already exists");
  std::ifstream in(theirs);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "their log");
  struct stat file_stat {};
  ASSERT_EQ(stat(theirs.c_str(), &file_stat), 0);
  EXPECT_EQ(file_stat.st_uid, 65534u);

  // A run directory of another user: not used at all.
  fs::create_directories(scratch / "logs/other");
  ASSERT_EQ(chown((scratch / "logs/other").c_str(), 65534, 65534), 0);
  const ProcessOutcome other = small_job(scratch, scratch / "logs", "other");
  expect_completed_without_tracing(other, "another user");
  EXPECT_TRUE(fs::is_empty(scratch / "logs/other"));
}

TEST(FaultLogLocation, TheSameRunNameTwiceNeverOverwritesTheFirstRun) {
  TempDir scratch("detnccl-faults");
  ASSERT_EQ(small_job(scratch, scratch.path(), "same").exit_code, 0);
  const std::string first = rank_log(scratch / "same", 0);
  std::ifstream first_stream(first, std::ios::binary);
  const std::string before(std::istreambuf_iterator<char>(first_stream), {});
  ASSERT_FALSE(before.empty());
  const ProcessOutcome second = small_job(scratch, scratch.path(), "same");
  // Documented choice (docs/reliability.md): fail clearly, naming DETNCCL_RUN, and let the job go on untraced.
  expect_completed_without_tracing(second, "DETNCCL_RUN");
  std::ifstream after_stream(first, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(after_stream), {}), before);
}

TEST(FaultLogLocation, LogsAreOwnerOnlyWhateverTheUmask) {
  TempDir scratch("detnccl-faults");
  const ProcessOutcome job = small_job(scratch, scratch / "new/logs", "m", [] { umask(0); });
  ASSERT_EQ(job.exit_code, 0) << job.output;
  const auto mode = [](const std::string& path) {
    struct stat s {};
    stat(path.c_str(), &s);
    return s.st_mode & 07777;
  };
  EXPECT_EQ(mode(rank_log(scratch / "new/logs/m", 0)), 0600u);
  EXPECT_EQ(mode(scratch / "new/logs/m"), 0700u);
  EXPECT_EQ(mode(scratch / "new/logs"), 0700u);
  EXPECT_EQ(mode(scratch / "new"), 0700u);
}

// ---------------------------------------------------------------------------------------------------------------
// Absurd environment values

struct AbsurdValue {
  std::string what;
  std::vector<std::string> environment;  // besides DETNCCL_DIR (set to a scratch directory unless given here)
  bool accepted;                         // the job runs (exit 0); otherwise it stops with exit status 78
  std::string named;                     // the message names this (the variable, or its closest name)
};

std::vector<AbsurdValue> absurd_values() {
  std::string many_steps = "0";
  // ~100 KiB: a single environment string may not exceed 128 KiB (MAX_ARG_STRLEN), so no launcher passes more.
  for (int i = 1; i < 25000; ++i) many_steps.append(",").append(std::to_string(i % 1000));
  std::string long_path = "/tmp/";
  long_path.append(5000, 'x');
  return {
      {"huge segment size", {"DETNCCL_SEGMENT_BYTES=99999999999999999999999"}, false, "DETNCCL_SEGMENT_BYTES"},
      {"byte count overflowing with its suffix", {"DETNCCL_MIN_BYTES=17179869184G"}, false, "DETNCCL_MIN_BYTES"},
      {"rank past 2^64", {"DETNCCL_RANKS=18446744073709551616"}, false, "DETNCCL_RANKS"},
      {"widest rank range", {"DETNCCL_RANKS=0-4294967295"}, true, ""},
      {"rank past 2^32", {"DETNCCL_RANKS=4294967296"}, false, "a rank is at most 4294967295"},
      {"rank window outside the job", {"WORLD_SIZE=2", "DETNCCL_RANKS=2"}, false, "selects no rank of this job"},
      {"white space around a number", {"DETNCCL_SEGMENT_BYTES= 16K"}, false, "DETNCCL_SEGMENT_BYTES"},
      {"negative number", {"DETNCCL_STEPS=-5"}, false, "negative numbers are not accepted"},
      {"segment size at the default level", {"DETNCCL_SEGMENT_BYTES=64K"}, false, "DETNCCL_TRACE=segments"},
      {"algorithm without deterministic mode", {"DETNCCL_ALGO=one_shot"}, false, "DETNCCL_DETERMINISTIC=1"},
      {"mistyped prefix", {"DETNCL_DETERMINISTIC=1"}, false, "did you mean DETNCCL_DETERMINISTIC?"},
      {"prefix without its underscore", {"DETNCCLDIR=@/elsewhere"}, false, "did you mean DETNCCL_DIR?"},
      {"other libraries' variables",
       {"NCCL_DEBUG=WARN", "NCCL_ALGO=Ring", "CUDA_VISIBLE_DEVICES=0,1", "TORCH_NCCL_ASYNC_ERROR_HANDLING=1",
        "SLURM_JOB_NAME=train", "OMPI_MCA_btl=self", "PMI_FD=9", "HOSTNCCL_TIMEOUT_S=60"},
       true,
       ""},
      {"empty values mean unset", {"DETNCCL_SEGMENT_BYTES=", "DETNCCL_STEPS=", "DETNCCL_LOG_LEVEL="}, true, ""},
      {"very long step list", {"DETNCCL_STEPS=" + many_steps}, true, ""},
      {"list of empty entries", {"DETNCCL_OPS=,,,"}, false, "DETNCCL_OPS"},
      {"non-UTF-8 run name", {"DETNCCL_RUN=\xff\xfe\x1b[31m"}, false, "DETNCCL_RUN"},
      {"path longer than PATH_MAX", {"DETNCCL_DIR=" + long_path}, false, "DETNCCL_DIR"},
      {"non-UTF-8 path", {"DETNCCL_DIR=@/\xff\xfe-logs", "DETNCCL_RUN=bytes"}, true, ""},
      {"control characters printed back", {"DETNCCL_DIR=@/\x1b[2J", "DETNCCL_PRINT_CONFIG=1"}, true, ""},
      {"name in lower case", {"detnccl_trace=hash"}, false, "DETNCCL_TRACE"},
      {"misspelt name", {"DETNCCL_SEGMNT_BYTES=1M"}, false, "DETNCCL_SEGMENT_BYTES"},
      {"a name twice: the first wins", {"DETNCCL_TRACE=meta", "DETNCCL_TRACE=bogus"}, true, ""},
      {"absurd launcher variables", {"RANK=99999999999999999999", "WORLD_SIZE=-5", "SLURM_PROCID=\xff"}, true, ""},
      {"run id with a path in it", {"TORCHELASTIC_RUN_ID=../../escape", "DETNCCL_RUN="}, true, ""},
  };
}

class FaultEnvironment : public ::testing::TestWithParam<AbsurdValue> {};

TEST_P(FaultEnvironment, IsAcceptedOrRefusedByNameNeverACrash) {
  const AbsurdValue& value = GetParam();
  TempDir scratch("detnccl-faults");
  std::vector<std::string> environment = {"DETNCCL_DIR=" + scratch / "logs"};
  for (std::string entry : value.environment) {
    // "@" stands for the scratch directory.
    if (const std::size_t at = entry.find("=@"); at != std::string::npos) entry.replace(at + 1, 1, scratch.path());
    environment.push_back(entry);
  }
  // The first DETNCCL_DIR wins: drop the default when the case sets its own.
  if (std::count_if(environment.begin(), environment.end(),
                    [](const std::string& e) { return e.rfind("DETNCCL_DIR=", 0) == 0; }) > 1) {
    environment.erase(environment.begin());
  }
  const ProcessOutcome job = threads_job(scratch, environment, 2, 3, 64);
  EXPECT_EQ(job.signal, 0) << job.output;
  EXPECT_FALSE(job.timed_out);
  if (value.accepted) {
    EXPECT_EQ(job.exit_code, 0) << job.output;
  } else {
    EXPECT_EQ(job.exit_code, 78) << job.output;
    EXPECT_NE(job.output.find(value.named), std::string::npos) << job.output;
  }
  EXPECT_TRUE(is_printable_text(job.output)) << "hostile bytes are escaped in every message:\n" << job.output;
  // Wherever the logs went, they stayed inside the scratch directory.
  for (const auto& entry : fs::recursive_directory_iterator(scratch.path())) {
    if (entry.path().filename() == "rank-00000.dnc") {
      const Log log = read_log(entry.path().string());
      EXPECT_TRUE(log.error.empty()) << log.error;
      EXPECT_EQ(log.calls.size(), 6u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Values, FaultEnvironment, ::testing::ValuesIn(absurd_values()),
                         [](const ::testing::TestParamInfo<AbsurdValue>& param) {
                           std::string name;
                           for (char c : param.param.what)
                             name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });

// ---------------------------------------------------------------------------------------------------------------
// Settings that have no effect, and an unusable log file (docs/configuration.md)

TEST(FaultConfiguration, ASettingWithNoEffectStopsTheJobUnlessItsFeatureWasTurnedOffExplicitly) {
  TempDir scratch("detnccl-faults");
  // Never turned on: the job stops at start, naming the setting and the switch.
  for (const std::vector<std::string>& environment :
       {std::vector<std::string>{"DETNCCL_STEPS=3"}, std::vector<std::string>{"DETNCCL_RUN=foo"},
        std::vector<std::string>{"DETNCCL_SEGMENT_BYTES=64K"}, std::vector<std::string>{"DETNCCL_ALGO=one_shot"},
        std::vector<std::string>{"DETNCCL_ACCUMULATE=fp32"}}) {
    const ProcessOutcome job = threads_job(scratch, environment, 2, 2, 64);
    EXPECT_EQ(job.exit_code, 78) << environment[0] << ":\n" << job.output;
    EXPECT_NE(job.output.find(environment[0] + " has no effect"), std::string::npos) << job.output;
  }
  // Turned off explicitly: the job runs, with one warning line per leftover setting, at start.
  const ProcessOutcome tracing_off = threads_job(
      scratch, {"DETNCCL_DIR=" + scratch / "logs", "DETNCCL_TRACE=off", "DETNCCL_STEPS=3", "DETNCCL_RUN=foo"}, 2, 2,
      64);
  EXPECT_EQ(tracing_off.exit_code, 0) << tracing_off.output;
  EXPECT_EQ(occurrences(tracing_off.output, "DETNCCL_STEPS=3 has no effect: tracing is off (DETNCCL_TRACE=off)."), 1u)
      << tracing_off.output;
  EXPECT_EQ(occurrences(tracing_off.output, "DETNCCL_RUN=foo has no effect: tracing is off (DETNCCL_TRACE=off)."), 1u)
      << tracing_off.output;
  const ProcessOutcome deterministic_off =
      threads_job(scratch, {"DETNCCL_DETERMINISTIC=0", "DETNCCL_ACCUMULATE=fp32"}, 2, 2, 64);
  EXPECT_EQ(deterministic_off.exit_code, 0) << deterministic_off.output;
  EXPECT_EQ(occurrences(deterministic_off.output, "DETNCCL_ACCUMULATE=fp32 has no effect: deterministic mode is off."),
            1u)
      << deterministic_off.output;
  // The warnings follow DETNCCL_LOG_LEVEL like every other.
  const ProcessOutcome quiet =
      threads_job(scratch, {"DETNCCL_TRACE=off", "DETNCCL_STEPS=3", "DETNCCL_LOG_LEVEL=error"}, 2, 2, 64);
  EXPECT_EQ(quiet.exit_code, 0) << quiet.output;
  EXPECT_EQ(quiet.output.find("has no effect"), std::string::npos) << quiet.output;
}

TEST(FaultConfiguration, AnUnopenableLogFileKeepsTheRequestedLevel) {
  TempDir scratch("detnccl-faults");
  const std::string missing = scratch / "no/such/detnccl.log";
  // info: the info lines ("tracing to ...") reach standard error, after the one warning about the file.
  const ProcessOutcome info = threads_job(
      scratch,
      {"DETNCCL_DIR=" + scratch / "logs", "DETNCCL_RUN=info", "DETNCCL_LOG_LEVEL=info", "DETNCCL_LOG_FILE=" + missing},
      2, 2, 64);
  EXPECT_EQ(info.exit_code, 0) << info.output;
  EXPECT_EQ(occurrences(info.output, "cannot log to DETNCCL_LOG_FILE=" + missing), 1u) << info.output;
  EXPECT_NE(info.output.find("tracing to " + scratch / "logs/info/"), std::string::npos) << info.output;
  // off: nothing at all, not even the warning the job otherwise gets at exit (a step window, no step marked).
  const ProcessOutcome off = threads_job(scratch,
                                         {"DETNCCL_DIR=" + scratch / "logs", "DETNCCL_RUN=off", "DETNCCL_STEPS=2-3",
                                          "DETNCCL_LOG_LEVEL=off", "DETNCCL_LOG_FILE=" + missing},
                                         2, 2, 64);
  EXPECT_EQ(off.exit_code, 0) << off.output;
  EXPECT_EQ(off.output.find("[detnccl"), std::string::npos) << off.output;
  const ProcessOutcome warned = threads_job(
      scratch,
      {"DETNCCL_DIR=" + scratch / "logs", "DETNCCL_RUN=warn", "DETNCCL_STEPS=2-3", "DETNCCL_STEP_INFERENCE=off"}, 2, 2,
      64);
  EXPECT_NE(warned.output.find("DETNCCL_STEPS is set but every call was at step 0"), std::string::npos)
      << "the warning exists: " << warned.output;
  EXPECT_FALSE(fs::exists(scratch / "no")) << "no directory is created for the log file";
}

// ---------------------------------------------------------------------------------------------------------------
// Many threads at once

TEST(FaultThreads, SixteenThreadsCallingAtOnceAreAllRecordedIntact) {
  TempDir scratch("detnccl-faults");
  constexpr int kRanks = 16, kCalls = 40, kCount = 257;
  const ProcessOutcome job =
      threads_job(scratch, {"DETNCCL_DIR=" + scratch.path(), "DETNCCL_RUN=t"}, kRanks, kCalls, kCount);
  ASSERT_EQ(job.exit_code, 0) << job.output;
  const Log log = read_log(rank_log(scratch / "t", 0));
  ASSERT_TRUE(log.error.empty()) << log.error;
  EXPECT_EQ(log.end.kind, LogEndKind::kClosed) << log.end.message;
  ASSERT_EQ(log.communicators.size(), static_cast<std::size_t>(kRanks));
  ASSERT_EQ(log.calls.size(), static_cast<std::size_t>(kRanks * kCalls));
  std::map<std::uint64_t, std::uint32_t> rank_of_ordinal;
  for (const CommunicatorRecord& comm : log.communicators) rank_of_ordinal[comm.ordinal] = comm.rank;
  std::vector<CallRecord> calls = log.calls;
  std::sort(calls.begin(), calls.end(), [](const CallRecord& a, const CallRecord& b) { return a.seq < b.seq; });
  std::map<std::uint64_t, std::uint64_t> next_comm_seq;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const CallRecord& call = calls[i];
    ASSERT_EQ(call.seq, i) << "sequence numbers are unique and dense";
    const std::uint64_t c = next_comm_seq[call.comm_ordinal]++;
    ASSERT_EQ(call.comm_seq, c) << "per-communicator order is kept";
    const int r = static_cast<int>(rank_of_ordinal.at(call.comm_ordinal));
    std::vector<float> in(kCount), out(kCount);
    for (std::size_t e = 0; e < in.size(); ++e) {
      const auto value = [&](int rank) {
        return static_cast<float>((rank + 3 * static_cast<int>(c) + static_cast<int>(e)) % 97);
      };
      in[e] = value(r);
      out[e] = 0;
      for (int q = 0; q < kRanks; ++q) out[e] += value(q);
    }
    EXPECT_EQ(call.input_fingerprint, detnccl::hash::fingerprint(in.data(), in.size() * sizeof(float)));
    EXPECT_EQ(call.output_fingerprint, detnccl::hash::fingerprint(out.data(), out.size() * sizeof(float)));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The reader's memory over a long log

std::uint64_t resident_file_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("RssFile:", 0) == 0) return std::stoull(line.substr(8)) * 1024;
  }
  return 0;
}

TEST(FaultReaderMemory, ReadingALongLogKeepsBoundedMemory) {
  TempDir scratch("detnccl-faults");
  constexpr std::uint64_t kLogBytes = 48u << 20;
  std::vector<std::uint64_t> segments(8192);  // 64 KiB of digests per record
  {
    detnccl::records::LogHeader header;
    detnccl::records::CreatedWriter created = detnccl::records::RecordWriter::create(
        {scratch.path(), "long", detnccl::records::rank_log_file_name(0)}, header);
    ASSERT_TRUE(created.writer) << created.error;
    for (std::uint64_t i = 0; created.writer->bytes_used() < kLogBytes; ++i) {
      CallRecord call;
      call.seq = i;
      segments[0] = i;
      call.input_segments = segments;
      ASSERT_EQ(created.writer->append(call), detnccl::records::AppendStatus::kOk);
    }
  }
  const std::string path = rank_log(scratch / "long", 0);
  const std::uint64_t before = resident_file_bytes();
  auto opened = LogReader::open_file(path);
  ASSERT_TRUE(opened.reader) << opened.error;
  LogRecord record;
  std::uint64_t calls = 0, peak = 0;
  while (opened.reader->next(record)) {
    const auto& call = std::get<CallRecord>(record.record);
    ASSERT_EQ(call.input_segments[0], calls);
    ++calls;
    if (calls % 64 == 0) peak = std::max(peak, resident_file_bytes());
  }
  EXPECT_EQ(opened.reader->end().kind, LogEndKind::kClosed);
  EXPECT_GT(calls, 700u);
  // Without releasing consumed pages, the whole 48 MiB would stay resident.
  EXPECT_LT(peak - std::min(peak, before), 16u << 20) << "resident file bytes grew by " << (peak - before);
}

// ---------------------------------------------------------------------------------------------------------------
// A disk that is nearly full when the job starts

TEST(FaultDiskFull, LessFreeSpaceThanTheFirstReservationStillLeavesALogMarkedTruncated) {
  // The log starts at 1 MiB; with 256 KiB free, the writer takes what fits (header and marker reserve) and grows
  // until the disk is full, instead of leaving no log at all.
  TempDir scratch("detnccl-faults");
  const std::string mount_point = scratch / "tmpfs";
  fs::create_directory(mount_point);
  if (geteuid() != 0 || mount("tmpfs", mount_point.c_str(), "tmpfs", 0, "size=256k") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs (needs root): RecordWriter.ANearlyFullDiskStillGetsALogThatEndsTruncated "
                    "covers the writer with a seccomp filter";
  }
  constexpr int kCalls = 6000;  // x 2 ranks x 128 bytes: more than 256 KiB
  const ProcessOutcome job = threads_job(scratch, {"DETNCCL_DIR=" + mount_point, "DETNCCL_RUN=full"}, 2, kCalls, 64);
  EXPECT_EQ(job.output.find("cannot write the header"), std::string::npos) << job.output;
  expect_truncated_but_completed(job, mount_point + "/full", detnccl::records::TruncationReason::kDiskFull, kCalls);
  umount2(mount_point.c_str(), MNT_DETACH);
}

}  // namespace
