// detnccl analysis: the one way the commands use several cores — independent tasks (usually one per rank) taken
// one at a time by a few threads.
#ifndef DETNCCL_CLI_ANALYSIS_PARALLEL_H
#define DETNCCL_CLI_ANALYSIS_PARALLEL_H

#include <atomic>
#include <cstddef>
#include <functional>

namespace detnccl::analysis {

// The number of threads to use when the user did not say: the cores this process may run on (at least 1).
unsigned default_thread_count() noexcept;

// Runs task(i) for every i in [0, count) on up to `threads` threads (0: default_thread_count()), each thread taking
// the next index when it finishes one, and returns when all are done. task must not throw. When done is not null it
// is incremented after each task (for progress reports).
void parallel_for(std::size_t count, unsigned threads, const std::function<void(std::size_t)>& task,
                  std::atomic<std::size_t>* done = nullptr);

}  // namespace detnccl::analysis

#endif  // DETNCCL_CLI_ANALYSIS_PARALLEL_H
