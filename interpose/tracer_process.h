// detnccl shim: the tracer's process state — everything the tracer knows about this process, set up at its first
// communicator call (configuration), closed at exit, and started over in a fork()ed child. Each part lives with its
// job: the communicator registry (communicator_registry.h), the log (trace_log.h), the digest pipeline
// (digest_pipeline.h); call tracing is tracer.cc.
//
// Internal to the shim: the tracer, and deterministic mode's lookups in the registry.
#ifndef DETNCCL_INTERPOSE_TRACER_PROCESS_H
#define DETNCCL_INTERPOSE_TRACER_PROCESS_H

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "interpose/communicator_registry.h"
#include "interpose/digest_pipeline.h"
#include "interpose/trace_log.h"
#include "steps/step_inference.h"

namespace detnccl::interpose {

// Everything the tracer knows about this process. Allocated once and never freed, so that no static destructor
// can pull it away from a thread still calling NCCL while the process exits.
struct Process {
  config::Config config;
  std::vector<std::string> environment_copy;  // for the log header (NCCL_* variables)
  // A fork()ed child: it starts over (see start_over_in_child) and reads the environment again at its first log.
  bool forked_child = false;

  std::mutex mutex;  // guards the registry (but its atomics; deterministic mode's parts too) and the log's creation
  CommunicatorRegistry registry;
  TraceLog log;
  DigestQueue digests;  // its own queue_mutex

  std::atomic<std::uint64_t> next_call{0};
  std::atomic<std::uint64_t> next_group{1};

  // The numbering of steps the job does not mark (DETNCCL_STEP_INFERENCE, DETNCCL_STEP_BOUNDARY): tracer.cc.
  std::mutex step_mutex;  // guards step_inference
  steps::StepInference step_inference;
};

// This process's tracer state; null before the first communicator call (ensure_configured).
extern Process* g_process;

// What the step window selected, when it may not be what the user meant: a warning for the exit (DETNCCL_STEPS set
// but no step numbered beyond 0), or empty. tracer.cc.
std::string step_window_warning(Process& process);

// In a fork()ed child: the step numbering starts over with the child's own calls (tracer.cc).
void steps_start_over_in_child(Process& process) noexcept;

// The group this thread has open (0 outside any group): tracer.cc. A communicator created inside one is created by
// NCCL at its outermost ncclGroupEnd.
std::uint64_t open_group_of_this_thread() noexcept;

// In a fork()ed child: the records of the forking thread's open group are the parent's (tracer.cc).
void group_start_over_in_child() noexcept;

inline std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

inline std::vector<std::string_view> views_of(const std::vector<std::string>& strings) {
  return {strings.begin(), strings.end()};
}

}  // namespace detnccl::interpose

#endif  // DETNCCL_INTERPOSE_TRACER_PROCESS_H
