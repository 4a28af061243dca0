// Deterministic AllReduce (collectives/, DETNCCL_ALGO=auto) against hostnccl's own ncclAllReduce, fp32 sum, on 4
// and 8 forked ranks from 1 KiB to 256 MiB: time per call of each, measured in the same run one after the other,
// their ratio, the algorithm chosen, and the bytes each rank sent (counted at the send function) against a ring's
// 2(n-1)/n x S.
//
// RATIONALE: an allreduce needs n processes in lockstep, so this program times its own loops instead of using
// Google Benchmark. Every rank runs a fixed number of iterations per size (decided from the size alone, so that all
// ranks agree without talking), times them after a barrier, and writes its time into shared memory; the driver
// prints the slowest rank's time, which is the collective's time.
#include <sys/mman.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "abi/nccl_abi.h"
#include "collectives/deterministic.h"
#include "collectives/dtype_arith.h"

namespace {

namespace dc = detnccl::collectives;
using Clock = std::chrono::steady_clock;

constexpr int kMaxRanks = 8;
constexpr int kMaxSizes = 16;

std::atomic<std::size_t> g_bytes_sent{0};
ncclResult_t counting_send(const void* data, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                           cudaStream_t stream) {
  g_bytes_sent += count * detnccl::arith::dtype_size(type);
  return pncclSend(data, count, type, peer, comm, stream);
}

// What each rank reports per size, in shared memory.
struct Measurement {
  double hostnccl_seconds;
  double deterministic_seconds;
  double bytes_sent;  // per deterministic call
  int algorithm;
  int ok;
};
struct Shared {
  Measurement m[kMaxRanks][kMaxSizes];
};

// Iterations per size: about 16 MiB of traffic per measurement, at least 2 and at most 200 (all ranks agree).
int iterations_for(std::size_t bytes) {
  return static_cast<int>(std::clamp<std::size_t>((std::size_t{16} << 20) / bytes, 2, 200));
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

int run_rank(int rank, int nranks, const ncclUniqueId& id, const std::vector<std::size_t>& sizes, Shared* shared) {
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) return 1;
  const dc::P2pFunctions nccl{counting_send, pncclRecv, pncclGroupStart, pncclGroupEnd};
  const dc::CallContext context{comm, rank, nranks, nullptr, false};
  dc::Workspace workspace;
  const dc::Reduction sum = *dc::builtin_reduction(ncclSum);
  int barrier_value = 0;
  const auto barrier = [&] { ncclAllReduce(&barrier_value, &barrier_value, 1, ncclInt32, ncclSum, comm, nullptr); };
  for (std::size_t s = 0; s < sizes.size(); ++s) {
    const std::size_t count = sizes[s] / sizeof(float);
    std::vector<float> send(count), recv(count);
    for (std::size_t i = 0; i < count; ++i)
      send[i] = static_cast<float>((i * 7 + static_cast<std::size_t>(rank)) % 13) - 6.0f;
    const int iterations = iterations_for(sizes[s]);
    Measurement& m = shared->m[rank][s];
    m.ok = 1;
    // One untimed call of each warms the pages and the scratch.
    m.ok &= ncclAllReduce(send.data(), recv.data(), count, ncclFloat32, ncclSum, comm, nullptr) == ncclSuccess;
    dc::Report report;
    m.ok &= dc::all_reduce(nccl, context, send.data(), recv.data(), count, ncclFloat32, sum, workspace, dc::Options{},
                           &report) == ncclSuccess;
    barrier();
    auto start = Clock::now();
    for (int i = 0; i < iterations; ++i) {
      m.ok &= ncclAllReduce(send.data(), recv.data(), count, ncclFloat32, ncclSum, comm, nullptr) == ncclSuccess;
    }
    m.hostnccl_seconds = seconds_since(start) / iterations;
    barrier();
    const std::size_t before = g_bytes_sent.load();
    start = Clock::now();
    for (int i = 0; i < iterations; ++i) {
      m.ok &= dc::all_reduce(nccl, context, send.data(), recv.data(), count, ncclFloat32, sum, workspace, dc::Options{},
                             &report) == ncclSuccess;
    }
    m.deterministic_seconds = seconds_since(start) / iterations;
    m.bytes_sent = static_cast<double>(g_bytes_sent.load() - before) / iterations;
    m.algorithm = static_cast<int>(report.algorithm);
    barrier();
  }
  ncclCommDestroy(comm);
  return 0;
}

std::string size_name(std::size_t bytes) {
  char text[32];
  if (bytes >= (std::size_t{1} << 20)) {
    std::snprintf(text, sizeof text, "%zu MiB", bytes >> 20);
  } else {
    std::snprintf(text, sizeof text, "%zu KiB", bytes >> 10);
  }
  return text;
}

std::string time_name(double seconds) {
  char text[32];
  if (seconds >= 1e-3) {
    std::snprintf(text, sizeof text, "%.2f ms", seconds * 1e3);
  } else {
    std::snprintf(text, sizeof text, "%.1f us", seconds * 1e6);
  }
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t max_bytes = std::size_t{256} << 20;
  std::vector<int> rank_counts{4, 8};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--max-mib" && i + 1 < argc) {
      max_bytes = static_cast<std::size_t>(std::atoll(argv[++i])) << 20;
    } else if (arg == "--ranks" && i + 1 < argc) {
      rank_counts = {std::atoi(argv[++i])};
    } else {
      std::fprintf(stderr,
                   "usage: %s [--max-mib N] [--ranks N]\n  deterministic AllReduce vs hostnccl's, 1 KiB to N MiB "
                   "(default 256), 4 and 8 ranks (or N, at most %d)\n",
                   argv[0], kMaxRanks);
      return 2;
    }
  }
  std::vector<std::size_t> sizes;
  for (std::size_t bytes = 1024; bytes <= max_bytes && sizes.size() < kMaxSizes; bytes *= 4) sizes.push_back(bytes);

  utsname host{};
  uname(&host);
  const std::time_t now = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  std::printf("deterministic AllReduce (auto algorithm) vs hostnccl ncclAllReduce, fp32 sum, ranks as processes\n");
  std::printf("date: %s; machine: %s %s, %ld online CPUs\n", date, host.sysname, host.machine,
              sysconf(_SC_NPROCESSORS_ONLN));
  std::printf(
      "time = slowest rank's mean per call; ratio = deterministic / hostnccl; sent/ring = bytes each rank "
      "sent (max over ranks) / (2(n-1)/n x size)\n\n");
  std::printf("%5s %9s %6s %13s %13s %8s %12s %10s\n", "ranks", "size", "iters", "hostnccl", "deterministic", "ratio",
              "algorithm", "sent/ring");

  int failures = 0;
  for (int nranks : rank_counts) {
    if (nranks < 1 || nranks > kMaxRanks) return 2;
    auto* shared =
        static_cast<Shared*>(mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    if (shared == MAP_FAILED) return 1;
    std::memset(shared, 0, sizeof(Shared));
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
    std::fflush(nullptr);
    std::vector<pid_t> pids;
    for (int rank = 0; rank < nranks; ++rank) {
      const pid_t pid = fork();
      if (pid == 0) _exit(run_rank(rank, nranks, id, sizes, shared));
      pids.push_back(pid);
    }
    for (pid_t pid : pids) {
      int status = 0;
      waitpid(pid, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
    }
    for (std::size_t s = 0; s < sizes.size(); ++s) {
      double host_time = 0, det_time = 0, sent = 0;
      bool ok = true;
      for (int r = 0; r < nranks; ++r) {
        const Measurement& m = shared->m[r][s];
        host_time = std::max(host_time, m.hostnccl_seconds);
        det_time = std::max(det_time, m.deterministic_seconds);
        sent = std::max(sent, m.bytes_sent);
        ok = ok && m.ok;
      }
      const double ring = 2.0 * (nranks - 1) / nranks * static_cast<double>(sizes[s]);
      std::printf("%5d %9s %6d %13s %13s %7.2fx %12s %10.3f%s\n", nranks, size_name(sizes[s]).c_str(),
                  iterations_for(sizes[s]), time_name(host_time).c_str(), time_name(det_time).c_str(),
                  det_time / host_time, dc::algorithm_name(static_cast<dc::Algorithm>(shared->m[0][s].algorithm)),
                  sent / ring, ok ? "" : "  FAILED");
      if (!ok) ++failures;
    }
    munmap(shared, sizeof(Shared));
  }
  return failures == 0 ? 0 : 1;
}
