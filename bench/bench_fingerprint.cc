// Host fingerprint throughput against two baselines measured in the same run on the same buffer:
// XXH3_64bits over the whole buffer with detnccl's own XXH3 build (hash/xxh3_host.h, the hash the fingerprint is built
// from; one thread, it cannot be split) and memcpy (with the same number of threads as the fingerprint). Target:
// fingerprint >= 90% of whole-buffer XXH3 on one thread from 1 MiB up. A last column shows the system's libxxhash on
// the whole buffer, for comparison with detnccl's build.
#include <xxhash.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "hash/fingerprint.h"
#include "hash/parallel_fingerprint.h"
#include "hash/xxh3_host.h"

namespace {

namespace hash = detnccl::hash;
using Clock = std::chrono::steady_clock;

volatile std::uint64_t g_sink;  // keeps the measured work observable

// Best throughput (GB/s) of each piece of work over `bytes`. RATIONALE: the pieces run in alternation, round after
// round, until `min_seconds` per piece have passed (at least 3 rounds), so that load from other processes hits every
// figure alike and the ratios stay meaningful on a shared machine.
std::vector<double> best_gbps(std::size_t bytes, double min_seconds, const std::vector<std::function<void()>>& work) {
  for (const auto& w : work) w();  // warm caches and page tables
  std::vector<double> best(work.size(), 0.0);
  const auto start = Clock::now();
  const double budget = min_seconds * static_cast<double>(work.size());
  for (int round = 0; round < 3 || std::chrono::duration<double>(Clock::now() - start).count() < budget; ++round) {
    for (std::size_t i = 0; i < work.size(); ++i) {
      const auto t0 = Clock::now();
      work[i]();
      const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      best[i] = std::max(best[i], static_cast<double>(bytes) / seconds / 1e9);
    }
  }
  return best;
}

// memcpy split evenly between `threads` threads.
void parallel_memcpy(std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes, unsigned threads) {
  if (threads <= 1) {
    std::memcpy(dst, src, bytes);
    return;
  }
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    const std::size_t first = bytes * t / threads;
    const std::size_t last = bytes * (t + 1) / threads;
    workers.emplace_back([=] { std::memcpy(dst + first, src + first, last - first); });
  }
  for (auto& w : workers) w.join();
}

std::string size_name(std::size_t bytes) {
  if (bytes >= (std::size_t{1} << 30)) return std::to_string(bytes >> 30) + " GiB";
  if (bytes >= (std::size_t{1} << 20)) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes >> 10) + " KiB";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Host fingerprint throughput vs whole-buffer XXH3_64bits and memcpy (same run, same buffer)."};
  std::size_t max_bytes = std::size_t{1} << 30;
  double min_seconds = 0.3;
  unsigned all_threads = std::max(1U, std::thread::hardware_concurrency());
  app.add_option("--max-bytes", max_bytes, "Largest buffer measured (sizes: 4KiB, 1MiB, 64MiB, 1GiB)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--min-seconds", min_seconds, "Minimum time spent on each figure");
  app.add_option("--threads", all_threads, "Thread count of the 'all threads' rows");
  CLI11_PARSE(app, argc, argv);

  const std::vector<std::size_t> sizes = {std::size_t{4} << 10, std::size_t{1} << 20, std::size_t{64} << 20,
                                          std::size_t{1} << 30};
  std::size_t largest = 0;
  for (std::size_t s : sizes) largest = s <= max_bytes ? std::max(largest, s) : largest;
  std::vector<std::uint8_t> source(largest);
  std::vector<std::uint8_t> destination(largest);
  std::uint64_t state = 0x9E3779B97F4A7C15ULL;
  for (std::size_t i = 0; i + 8 <= largest; i += 8) {  // cheap non-constant content (xorshift)
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    std::memcpy(&source[i], &state, 8);
  }
  hash::ParallelFingerprinter single(1);
  hash::ParallelFingerprinter pool(all_threads);

  std::printf(
      "fingerprint v%u, leaf %zu bytes; XXH3 (detnccl's build, %s) baseline is one thread (it cannot be "
      "split); system libxxhash version %u\n",
      hash::kFingerprintVersion, hash::kLeafBytes, hash::xxh3_vector_unit(), XXH_versionNumber());
  std::printf("%-8s %7s %14s %14s %14s %12s %12s %16s\n", "size", "threads", "fingerprint", "XXH3 whole", "memcpy",
              "fp/XXH3", "fp/memcpy", "libxxhash whole");
  for (std::size_t bytes : sizes) {
    if (bytes > max_bytes) continue;
    for (unsigned threads : {1U, all_threads}) {
      hash::ParallelFingerprinter& hasher = threads == 1 ? single : pool;
      const std::vector<double> gbps = best_gbps(bytes, min_seconds,
                                                 {[&] { g_sink = hasher.fingerprint(source.data(), bytes); },
                                                  [&] { g_sink = hash::xxh3_64(source.data(), bytes); },
                                                  [&] {
                                                    parallel_memcpy(destination.data(), source.data(), bytes,
                                                                    bytes >= (std::size_t{4} << 20) ? threads : 1);
                                                    g_sink = destination[bytes / 2];
                                                  },
                                                  [&] { g_sink = XXH3_64bits(source.data(), bytes); }});
      const double fp = gbps[0], xxh3 = gbps[1], copy = gbps[2], library = gbps[3];
      std::printf("%-8s %7u %9.2f GB/s %9.2f GB/s %9.2f GB/s %11.1f%% %11.1f%% %11.2f GB/s\n", size_name(bytes).c_str(),
                  threads, fp, xxh3, copy, 100 * fp / xxh3, 100 * fp / copy, library);
      if (all_threads == 1) break;
    }
  }
  return 0;
}
