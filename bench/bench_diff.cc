// bench_diff: how fast `detnccl diff` and `detnccl check` read runs, on two synthetic runs (tests/
// test_cli_synthetic_run.h) of a chosen size written to a temporary directory. The baseline, measured in the same
// run on the same files and threads, is a bare read of every record with records::LogReader, streamed as diff reads
// (header and checksum validation, nothing else): the ratio says what aligning and comparing cost on top of reading.
// diff is measured reading every record (--all-records) and with its step-index shortcut (identical runs: the indexes
// alone). Each analysis runs in a forked child so that its peak RSS is its own. The time for two runs of 1,024 ranks x
// 100,000 calls is extrapolated from the measured rate (records per second), and printed as such.
//   bench_diff [--ranks N] [--calls N] [--threads N] [--dir PATH]
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "cli/analysis/parallel.h"
#include "cli/analysis/run_check.h"
#include "cli/analysis/run_diff.h"
#include "records/log_reader.h"
#include "tests/test_cli_synthetic_run.h"

namespace {

namespace fs = std::filesystem;

struct Measurement {
  double seconds = 0;
  double peak_rss_mib = 0;
  int status = -1;
};

// Runs work() in a forked child and returns its wall time and peak resident memory.
template <typename Work>
Measurement in_child(Work work) {
  Measurement measurement;
  const auto start = std::chrono::steady_clock::now();
  const pid_t child = fork();
  if (child == 0) _exit(work());
  int status = 0;
  struct rusage usage {};
  if (child < 0 || wait4(child, &status, 0, &usage) != child) return measurement;
  measurement.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  measurement.peak_rss_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;
  measurement.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return measurement;
}

// Reads every record of both runs and nothing more: the baseline.
int read_everything(const detnccl::analysis::RunLogs& a, const detnccl::analysis::RunLogs& b, unsigned threads) {
  std::atomic<std::uint64_t> records{0};
  for (const auto* run : {&a, &b}) {
    detnccl::analysis::parallel_for(run->logs.size(), threads, [&](std::size_t i) {
      auto opened = detnccl::records::LogReader::open_file(run->logs[i].path, detnccl::records::LogAccess::kStreamed);
      if (!opened.reader) return;
      detnccl::records::LogRecord record;
      std::uint64_t n = 0;
      while (opened.reader->next(record)) ++n;
      records += n;
    });
  }
  return records.load() > 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  unsigned ranks = 32;
  std::uint64_t calls = 10000;
  unsigned threads = 0;
  std::string base = fs::temp_directory_path().string();
  CLI::App app{"Throughput of detnccl diff and check on synthetic runs (records per second, peak RSS)"};
  app.add_option("--ranks", ranks, "Ranks per run")->capture_default_str();
  app.add_option("--calls", calls, "Calls per rank")->capture_default_str();
  app.add_option("--threads", threads, "Threads (0: the cores available)")->capture_default_str();
  app.add_option("--dir", base, "Where the temporary runs go")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (threads == 0) threads = detnccl::analysis::default_thread_count();

  std::string pattern = base + "/detnccl-bench-diff-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string dir = pattern;
  detnccl::test::SyntheticRunSpec spec;
  spec.ranks = ranks;
  spec.calls_per_step = 100;
  spec.steps = (calls + spec.calls_per_step - 1) / spec.calls_per_step;
  spec.count = 1 << 20;
  const auto generate_start = std::chrono::steady_clock::now();
  for (const char* run : {"a", "b"}) {
    if (const std::string error = detnccl::test::write_synthetic_run(dir, run, spec); !error.empty()) {
      std::fprintf(stderr, "cannot write the runs: %s\n", error.c_str());
      fs::remove_all(dir);
      return 1;
    }
  }
  const double generate_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - generate_start).count();
  const auto a = detnccl::analysis::list_run(dir + "/a");
  const auto b = detnccl::analysis::list_run(dir + "/b");
  std::uint64_t bytes = 0;
  for (const auto* run : {&a, &b}) {
    for (const auto& log : run->logs) bytes += fs::file_size(log.path);
  }
  const double records = 2.0 * ranks * static_cast<double>(spec.steps * spec.calls_per_step);

  const Measurement baseline = in_child([&] { return read_everything(a, b, threads); });
  const auto diff_with = [&](bool step_index) {
    return in_child([&] {
      detnccl::analysis::DiffOptions options;
      options.threads = threads;
      options.use_step_index = step_index;
      const auto result = detnccl::analysis::diff_runs(a, b, options);
      return result.error.empty() && result.identical() ? 0 : 1;
    });
  };
  const Measurement diff = diff_with(false);
  const Measurement indexed = diff_with(true);
  const Measurement check = in_child([&] {
    detnccl::analysis::CheckOptions options;
    options.threads = threads;
    const auto result = detnccl::analysis::check_run(a, options);
    return result.error.empty() && result.clean() ? 0 : 1;
  });
  fs::remove_all(dir);

  std::printf("bench_diff: 2 runs x %u ranks x %llu calls = %.0f records, %.1f MiB of logs, %u threads\n", ranks,
              static_cast<unsigned long long>(spec.steps * spec.calls_per_step), records,
              static_cast<double>(bytes) / (1 << 20), threads);
  std::printf("generation (RecordWriter)  %8.2f s  %10.0f records/s\n", generate_seconds, records / generate_seconds);
  std::printf("%-26s %8s  %14s  %10s  %12s  %s\n", "analysis", "time", "records/s", "peak RSS", "vs baseline", "exit");
  const auto line = [&](const char* name, const Measurement& m, double n) {
    std::printf("%-26s %7.2fs  %14.0f  %7.1f MiB  %11.2fx  %d\n", name, m.seconds, n / m.seconds, m.peak_rss_mib,
                m.seconds / baseline.seconds, m.status);
  };
  line("read only (baseline)", baseline, records);
  line("diff --all-records", diff, records);
  line("diff (step index)", indexed, records);
  line("check (run A)", check, records / 2);
  const double target_records = 2.0 * 1024 * 100000;
  std::printf(
      "extrapolated, not measured: diff of 2 runs x 1024 ranks x 100000 calls (%.0f records) at the rate "
      "above: %.0f s (%.1f min)\n",
      target_records, target_records / (records / diff.seconds), target_records / (records / diff.seconds) / 60);
  return diff.status == 0 && indexed.status == 0 && check.status == 0 && baseline.status == 0 ? 0 : 1;
}
