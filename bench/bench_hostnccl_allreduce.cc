// Throughput of hostnccl's ncclAllReduce (fp32 sum, 4 ranks as 4 processes) at 1 KiB, 1 MiB and 64 MiB, for both
// reduce orders, each beside a memcpy of the same size measured in the same run on the same machine.
//
// RATIONALE: Google Benchmark drives one process; an allreduce needs four in lockstep. So this program times its
// own loops: the driver measures memcpy first (no rank running, so nothing competes for the cores), then forks
// four ranks per reduce order. The ranks calibrate on the slowest rank's time (an allreduce with max, so that all
// choose the same iteration count and no rank waits for a call the others never make), time that many calls, and
// rank 0 sends the slowest rank's time back to the driver, which prints one table with ratios against memcpy.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "abi/nccl_abi.h"
#include "launcher/bootstrap.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kRanks = 4;
constexpr std::array<std::size_t, 3> kSizes = {std::size_t{1} << 10, std::size_t{1} << 20, std::size_t{64} << 20};
constexpr std::array<const char*, 2> kReduceOrders = {"arrival", "rank"};
// Each measurement runs for about this long (at least kMinIterations calls): long enough to average over
// scheduling noise, short enough that the whole program stays well under a minute.
constexpr double kTargetSeconds = 0.5;
constexpr int kMinIterations = 5;
// Calibration batches grow until one lasts this long, so that a single slow call does not set the count.
constexpr double kCalibrationSeconds = 0.02;
constexpr int kMaxIterations = 100000;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

int iterations_for(double seconds_per_call) {
  const double wanted = kTargetSeconds / std::max(seconds_per_call, 1e-9);
  return static_cast<int>(std::clamp(wanted, double{kMinIterations}, double{kMaxIterations}));
}

// Seconds per memcpy of `bytes` between two buffers whose pages are already mapped.
double time_memcpy(std::size_t bytes) {
  std::vector<char> source(bytes, 1);
  std::vector<char> destination(bytes, 0);
  const auto copy = [&] {
    std::memcpy(destination.data(), source.data(), bytes);
    benchmark::DoNotOptimize(destination.data());
    benchmark::ClobberMemory();
  };
  copy();  // warm-up
  int batch = 1;
  double batch_seconds = 0;
  while (true) {
    const auto batch_start = Clock::now();
    for (int i = 0; i < batch; ++i) copy();
    batch_seconds = seconds_since(batch_start);
    if (batch_seconds >= kCalibrationSeconds || batch >= kMaxIterations) break;
    batch *= 4;
  }
  const int iterations = iterations_for(batch_seconds / batch);
  const auto start = Clock::now();
  for (int i = 0; i < iterations; ++i) copy();
  return seconds_since(start) / iterations;
}

struct Measurement {
  int iterations = 0;
  double seconds_per_call = 0;
};

bool nccl_ok(ncclResult_t result, const char* what, int rank) {
  if (result == ncclSuccess) return true;
  std::fprintf(stderr, "rank %d: %s failed: %s\n", rank, what, ncclGetErrorString(result));
  return false;
}

// One rank's part of one size: warm-up, agree on the iteration count, time the calls. Every rank returns the
// slowest rank's time (an allreduce with max), which is what the job as a whole waits for.
bool measure_allreduce(ncclComm_t comm, int rank, std::size_t bytes, Measurement* out) {
  const std::size_t count = bytes / sizeof(float);
  std::vector<float> send(count);
  std::vector<float> received(count, 0.0f);
  for (std::size_t i = 0; i < count; ++i) send[i] = static_cast<float>((i % 1024) + rank) * 0.25f;
  const auto all_reduce = [&] {
    return ncclAllReduce(send.data(), received.data(), count, ncclFloat32, ncclSum, comm, nullptr);
  };
  if (!nccl_ok(all_reduce(), "ncclAllReduce (warm-up)", rank)) return false;
  // Calibration: every rank takes the slowest rank's batch time (an allreduce with max), so all make the same
  // decisions and call ncclAllReduce equally often.
  int batch = 1;
  double batch_seconds = 0;
  while (true) {
    const auto batch_start = Clock::now();
    for (int i = 0; i < batch; ++i) {
      if (!nccl_ok(all_reduce(), "ncclAllReduce (calibration)", rank)) return false;
    }
    batch_seconds = seconds_since(batch_start);
    if (!nccl_ok(ncclAllReduce(&batch_seconds, &batch_seconds, 1, ncclFloat64, ncclMax, comm, nullptr),
                 "agreeing on the calibration", rank)) {
      return false;
    }
    if (batch_seconds >= kCalibrationSeconds || batch >= kMaxIterations) break;
    batch *= 4;
  }
  const int iterations = iterations_for(batch_seconds / batch);
  const auto start = Clock::now();
  for (int i = 0; i < iterations; ++i) {
    if (!nccl_ok(all_reduce(), "ncclAllReduce", rank)) return false;
  }
  double seconds = seconds_since(start) / iterations;
  if (!nccl_ok(ncclAllReduce(&seconds, &seconds, 1, ncclFloat64, ncclMax, comm, nullptr), "slowest time", rank)) {
    return false;
  }
  // Every rank holds the sum of the same inputs, so one spot check catches a broken reduction.
  float expected = 0.0f;  // element 0 of rank r is r * 0.25: small multiples of 0.25 add exactly in any order
  for (int r = 0; r < kRanks; ++r) expected += static_cast<float>(r) * 0.25f;
  if (count > 0 && received[0] != expected) {
    std::fprintf(stderr, "rank %d: element 0 is %g, expected %g\n", rank, received[0], expected);
    return false;
  }
  *out = {iterations, seconds};
  return true;
}

// The body of a forked rank; returns its exit code. Rank 0 writes "bytes iterations seconds" lines to result_fd.
int run_rank(int rank, const std::string& id_file, int result_fd) {
  ncclUniqueId id{};
  std::string error;
  if (!detnccl::share_unique_id_through_file(id_file, rank, std::chrono::seconds(60), &id, &error)) {
    std::fprintf(stderr, "rank %d: %s\n", rank, error.c_str());
    return 1;
  }
  ncclComm_t comm = nullptr;
  if (!nccl_ok(ncclCommInitRank(&comm, kRanks, id, rank), "ncclCommInitRank", rank)) return 1;
  std::string results;
  for (const std::size_t bytes : kSizes) {
    Measurement measurement;
    if (!measure_allreduce(comm, rank, bytes, &measurement)) return 1;
    std::array<char, 96> line{};
    // Full precision: a 1 KiB call takes microseconds, which std::to_string's 6 decimals would round away.
    std::snprintf(line.data(), line.size(), "%zu %d %.9e\n", bytes, measurement.iterations,
                  measurement.seconds_per_call);
    results += line.data();
  }
  if (!nccl_ok(ncclCommDestroy(comm), "ncclCommDestroy", rank)) return 1;
  if (rank == 0 && write(result_fd, results.data(), results.size()) != static_cast<ssize_t>(results.size())) {
    return 1;
  }
  return 0;
}

// Forks the ranks of one job with HOSTNCCL_REDUCE_ORDER=order and collects rank 0's measurements by size.
bool run_job(const char* order, std::map<std::size_t, Measurement>* by_size) {
  setenv("HOSTNCCL_REDUCE_ORDER", order, 1);
  std::string id_dir = (std::filesystem::temp_directory_path() / "bench_hostnccl.XXXXXX").string();
  if (mkdtemp(id_dir.data()) == nullptr) {
    std::perror("mkdtemp");
    return false;
  }
  const std::string id_file = id_dir + "/unique-id";
  int result_pipe[2];
  if (pipe(result_pipe) != 0) {
    std::perror("pipe");
    return false;
  }
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < kRanks; ++rank) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      break;
    }
    if (pid == 0) {
      close(result_pipe[0]);
      std::fflush(nullptr);
      _exit(run_rank(rank, id_file, result_pipe[1]));
    }
    pids.push_back(pid);
  }
  close(result_pipe[1]);

  // Wait for every rank, but not forever: a rank that fails would leave its peers waiting for it.
  bool ok = pids.size() == static_cast<std::size_t>(kRanks);
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  std::size_t running = pids.size();
  std::vector<bool> done(pids.size(), false);
  while (running > 0) {
    for (std::size_t r = 0; r < pids.size(); ++r) {
      int status = 0;
      if (done[r] || waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
      done[r] = true;
      --running;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        if (ok) std::fprintf(stderr, "rank %zu failed (wait status %d); stopping the others\n", r, status);
        ok = false;
      }
    }
    if (!ok || Clock::now() > deadline) {
      if (ok) std::fprintf(stderr, "the ranks did not finish within 120 s; stopping them\n");
      ok = false;
      for (std::size_t r = 0; r < pids.size(); ++r) {
        if (!done[r]) kill(pids[r], SIGKILL);
      }
    }
    if (running > 0) usleep(2000);
  }

  std::string results;
  std::array<char, 4096> buffer;
  for (ssize_t n; (n = read(result_pipe[0], buffer.data(), buffer.size())) > 0;) {
    results.append(buffer.data(), static_cast<std::size_t>(n));
  }
  close(result_pipe[0]);
  std::error_code ignored;
  std::filesystem::remove_all(id_dir, ignored);
  std::istringstream lines(results);
  std::size_t bytes = 0;
  Measurement measurement;
  while (lines >> bytes >> measurement.iterations >> measurement.seconds_per_call) (*by_size)[bytes] = measurement;
  return ok && by_size->size() == kSizes.size();
}

std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

std::string size_text(std::size_t bytes) {
  if (bytes >= (std::size_t{1} << 20)) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes >> 10) + " KiB";
}

std::string time_text(double seconds) {
  std::array<char, 32> text{};
  if (seconds < 1e-6) {
    std::snprintf(text.data(), text.size(), "%.1f ns", seconds * 1e9);
  } else if (seconds < 1e-3) {
    std::snprintf(text.data(), text.size(), "%.2f us", seconds * 1e6);
  } else {
    std::snprintf(text.data(), text.size(), "%.3f ms", seconds * 1e3);
  }
  return text.data();
}

}  // namespace

int main() {
  const std::time_t now = std::time(nullptr);
  std::array<char, 64> date{};
  std::strftime(date.data(), date.size(), "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  std::printf("hostnccl ncclAllReduce, fp32 sum, %d ranks (processes); memcpy of the same size measured in this run\n",
              kRanks);
  std::printf("date: %s; machine: %ld online CPUs, %s\n", date.data(), sysconf(_SC_NPROCESSORS_ONLN),
              cpu_model().c_str());
  std::printf(
      "algbw = bytes / time per call; busbw = algbw * 2(n-1)/n (nccl-tests' convention); "
      "ratio = allreduce time / memcpy time\n\n");

  std::map<std::size_t, double> memcpy_seconds;
  for (const std::size_t bytes : kSizes) memcpy_seconds[bytes] = time_memcpy(bytes);

  std::printf("%-8s %8s %7s %12s %11s %11s %12s %12s %8s\n", "order", "size", "iters", "time/call", "algbw GB/s",
              "busbw GB/s", "memcpy", "memcpy GB/s", "ratio");
  for (const char* order : kReduceOrders) {
    std::map<std::size_t, Measurement> by_size;
    if (!run_job(order, &by_size)) {
      std::fprintf(stderr, "the %s-order job failed\n", order);
      return 1;
    }
    for (const std::size_t bytes : kSizes) {
      const Measurement& m = by_size[bytes];
      const double algbw = static_cast<double>(bytes) / m.seconds_per_call / 1e9;
      const double busbw = algbw * 2.0 * (kRanks - 1) / kRanks;
      const double copy = memcpy_seconds[bytes];
      std::printf("%-8s %8s %7d %12s %11.3f %11.3f %12s %12.3f %7.1fx\n", order, size_text(bytes).c_str(), m.iterations,
                  time_text(m.seconds_per_call).c_str(), algbw, busbw, time_text(copy).c_str(),
                  static_cast<double>(bytes) / copy / 1e9, m.seconds_per_call / copy);
    }
  }
  return 0;
}
