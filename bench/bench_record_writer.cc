// bench_record_writer: the cost of RecordWriter::append per meta-sized call record (a CallRecord without arrays,
// 128 bytes: what the shim writes at DETNCCL_TRACE=meta), with pages populated ahead of the write position in
// windows of several sizes (WriterOptions::populate_ahead_bytes) against no populating (0, every new page mapped by
// a page fault at its first store), all measured in the same run.
//
// Each measurement writes a fresh log of --records records in --dir (the shim's logs live on an ordinary file
// system: the default /tmp is one here), with the writer's default growth, and reports the append loop's wall time,
// its user and system CPU time, its minor page faults (getrusage ru_minflt, which counts the pages the kernel maps
// for madvise too) and its page-fault traps (the perf software counter, which counts only faults the CPU raised;
// shown as -1 where perf events are not allowed), then closes and removes the log. The window
// sizes run in alternation, round after round, and each figure is the median over the rounds, so that load from
// other processes hits every size alike.
#include <linux/perf_event.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "records/record_writer.h"

namespace {

namespace records = detnccl::records;
using Clock = std::chrono::steady_clock;

struct Sample {
  double ns_per_record = 0;
  double user_ns_per_record = 0;
  double system_ns_per_record = 0;
  double minor_faults_per_million = 0;
  double traps_per_million = -1;
  double rss_kib = 0;  // VmRSS after the last append, before close
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

double seconds_of(const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; }

long resident_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

// A counter of this thread's page-fault traps, or -1 when perf events are not allowed.
int open_trap_counter() {
  perf_event_attr attr{};
  attr.size = sizeof(attr);
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_PAGE_FAULTS;
  attr.exclude_kernel = 1;
  attr.exclude_hv = 1;
  return static_cast<int>(syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0));
}

std::int64_t read_counter(int counter) {
  std::uint64_t value = 0;
  if (counter < 0 || read(counter, &value, sizeof(value)) != sizeof(value)) return -1;
  return static_cast<std::int64_t>(value);
}

records::LogHeader bench_header() {
  records::LogHeader header;
  header.rank_source = records::RankSource::kEnvironment;
  header.world_size = 1;
  header.pid = static_cast<std::uint32_t>(getpid());
  header.host = "bench";
  header.detnccl_version_text = "bench";
  header.run = "bench";
  return header;
}

// One log of `count` meta records with pages populated `window` bytes ahead (0: none). Nothing on failure.
std::optional<Sample> measure(const std::string& dir, const std::string& run, std::uint64_t count,
                              std::uint64_t window) {
  records::WriterOptions options;
  options.populate_ahead_bytes = window;
  records::CreatedWriter created =
      records::RecordWriter::create({dir, run, records::rank_log_file_name(0)}, bench_header(), options);
  if (!created.writer) {
    std::fprintf(stderr, "cannot create the log: %s\n", created.error.c_str());
    return std::nullopt;
  }
  records::RecordWriter& writer = *created.writer;
  records::CallRecord call;
  call.op = records::OpId::kAllReduce;
  call.datatype = 7;
  call.peer = -1;
  call.count = 1024;
  const int traps = open_trap_counter();
  rusage before{}, after{};
  const std::int64_t traps_before = read_counter(traps);
  getrusage(RUSAGE_SELF, &before);
  const auto start = Clock::now();
  bool ok = true;
  for (std::uint64_t i = 0; i < count; ++i) {
    call.seq = i;
    call.comm_seq = i;
    call.step = i / 16;
    ok &= writer.append(call) == records::AppendStatus::kOk;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  getrusage(RUSAGE_SELF, &after);
  const std::int64_t traps_after = read_counter(traps);
  if (traps >= 0) close(traps);
  Sample sample;
  sample.rss_kib = static_cast<double>(resident_kib());
  writer.close();
  std::filesystem::remove_all(std::filesystem::path(dir) / run);
  if (!ok) {
    std::fprintf(stderr, "an append failed: %s\n", writer.stop_reason().c_str());
    return std::nullopt;
  }
  const auto per_record = [count](double s) { return s * 1e9 / static_cast<double>(count); };
  sample.ns_per_record = per_record(seconds);
  sample.user_ns_per_record = per_record(seconds_of(after.ru_utime) - seconds_of(before.ru_utime));
  sample.system_ns_per_record = per_record(seconds_of(after.ru_stime) - seconds_of(before.ru_stime));
  sample.minor_faults_per_million =
      static_cast<double>(after.ru_minflt - before.ru_minflt) * 1e6 / static_cast<double>(count);
  if (traps_before >= 0 && traps_after >= 0) {
    sample.traps_per_million = static_cast<double>(traps_after - traps_before) * 1e6 / static_cast<double>(count);
  }
  return sample;
}

std::string size_name(std::uint64_t bytes) {
  if (bytes == 0) return "off";
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes >> 10) + " KiB";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"RecordWriter::append per meta record, pages populated ahead in windows of several sizes vs none."};
  std::string dir = "/tmp";
  std::uint64_t count = 1000000;
  int rounds = 5;
  std::vector<std::uint64_t> windows = {0, 64u << 10, 256u << 10, 1u << 20, 4u << 20};
  app.add_option("--dir", dir, "Directory for the logs (each removed after its measurement)");
  app.add_option("--records", count, "Records per log")->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds, "Measurements per window size; the median is shown")->check(CLI::PositiveNumber);
  app.add_option("--windows", windows, "populate_ahead_bytes values (0, 64KiB, 1MiB...); the first is the baseline")
      ->delimiter(',')
      ->transform(CLI::AsSizeValue(false));
  CLI11_PARSE(app, argc, argv);

  std::string scratch = dir + "/bench-record-writer-XXXXXX";
  if (mkdtemp(scratch.data()) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  std::vector<std::vector<Sample>> samples(windows.size());
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t w = 0; w < windows.size(); ++w) {
      const std::optional<Sample> one =
          measure(scratch, "r" + std::to_string(round) + "w" + std::to_string(w), count, windows[w]);
      if (!one) {
        std::filesystem::remove_all(scratch);
        return 1;
      }
      samples[w].push_back(*one);
    }
  }
  std::filesystem::remove_all(scratch);

  std::printf("RecordWriter::append of %llu meta records (128 bytes each) per log in %s, median of %d rounds\n",
              static_cast<unsigned long long>(count), dir.c_str(), rounds);
  std::printf("%-10s %10s %10s %10s %12s %12s %8s %10s\n", "populate", "ns/record", "user ns", "sys ns", "minflt/M rec",
              "traps/M rec", "ratio", "VmRSS KiB");
  double baseline = 0;
  for (std::size_t w = 0; w < windows.size(); ++w) {
    const auto pick = [&samples, w](double Sample::*field) {
      std::vector<double> values;
      for (const Sample& s : samples[w]) values.push_back(s.*field);
      return median(values);
    };
    const double ns = pick(&Sample::ns_per_record);
    if (w == 0) baseline = ns;
    std::printf("%-10s %10.1f %10.1f %10.1f %12.0f %12.0f %8.3f %10.0f\n", size_name(windows[w]).c_str(), ns,
                pick(&Sample::user_ns_per_record), pick(&Sample::system_ns_per_record),
                pick(&Sample::minor_faults_per_million), pick(&Sample::traps_per_million), ns / baseline,
                pick(&Sample::rss_kib));
  }
  std::printf("ratio: ns/record against the first row, measured in the same run\n");
  return 0;
}
