// detnccl analysis: a small work queue over threads (see parallel.h).
#include "cli/analysis/parallel.h"

#include <sched.h>

#include <algorithm>
#include <thread>
#include <vector>

namespace detnccl::analysis {

unsigned default_thread_count() noexcept {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

void parallel_for(std::size_t count, unsigned threads, const std::function<void(std::size_t)>& task,
                  std::atomic<std::size_t>* done) {
  if (threads == 0) threads = default_thread_count();
  std::atomic<std::size_t> next{0};
  const auto worker = [&] {
    for (std::size_t i = next.fetch_add(1); i < count; i = next.fetch_add(1)) {
      task(i);
      if (done != nullptr) done->fetch_add(1);
    }
  };
  const std::size_t extra = std::min<std::size_t>(threads, count) > 0 ? std::min<std::size_t>(threads, count) - 1 : 0;
  std::vector<std::thread> pool;
  pool.reserve(extra);
  for (std::size_t t = 0; t < extra; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& thread : pool) thread.join();
}

}  // namespace detnccl::analysis
