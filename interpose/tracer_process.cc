// detnccl shim: the tracer's process lifetime (see tracer_process.h) — configuration at the first communicator call,
// the log's closing at exit, and fork().
#include "interpose/tracer_process.h"

#include <pthread.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string_view>

#include "interpose/deterministic.h"
#include "interpose/shim_log.h"
#include "interpose/shim_state.h"
#include "interpose/tracer.h"

namespace detnccl::interpose {

Process* g_process = nullptr;

namespace {

// EX_CONFIG from sysexits.h: the job stops because of its configuration.
constexpr int kExitInvalidConfiguration = 78;

std::once_flag g_configured;

void close_log_at_exit() {
  Process* process = g_process;
  if (process == nullptr) return;
  // A fork()ed child that traced nothing of its own has nothing to close and nothing to say: the parent's log and
  // warnings are the parent's (and its threads, which may have held the tracer's locks, do not exist here).
  if (process->forked_child && !process->log.writer_attempted) return;
  if (const std::string warning = step_window_warning(*process); !warning.empty()) log_warning(warning);
  drain_queue_at_exit(*process);
  close_log(*process);
}

// fork(): the tracer's locks are taken before it and released on both sides after it, so that the child finds them
// free and what they guard consistent, whatever the parent's other threads were doing.
void lock_before_fork() {
  if (g_process == nullptr) return;
  g_process->mutex.lock();
  g_process->digests.queue_mutex.lock();
  g_process->step_mutex.lock();
}

void unlock_in_parent() {
  if (g_process == nullptr) return;
  g_process->step_mutex.unlock();
  g_process->digests.queue_mutex.unlock();
  g_process->mutex.unlock();
}

// In a fork()ed child (it has only the thread that forked): the parent's log, communicators and collector thread are
// the parent's. The child forgets them without writing to the log, and starts over as a process of its own: tracing
// (and deterministic mode, which shim_active() keeps on) go on, and the child's first communicator opens a log of its
// own (named by the child's rank; if that file exists, the usual one warning says so and the child runs untraced).
// What a fork()ed child keeps of its parent's tracer stays untouched and is never freed: the writer (its mutex may
// have been held by a parent thread at fork time), the communicators, the queued and grouped records (their
// destructors are the parent's business). RATIONALE: each part keeps its leftovers reachable from a global of its
// own, so that leak checkers (ASan's at a child's exit) see them as the deliberate leftovers they are.
void start_over_in_child() {
  Process* process = g_process;
  if (process == nullptr) return;
  process->forked_child = true;
  log_start_over_in_child(process->log);
  registry_start_over_in_child(process->registry);
  process->next_call.store(0, std::memory_order_relaxed);
  digests_start_over_in_child(process->digests);
  group_start_over_in_child();
  steps_start_over_in_child(*process);
  process->step_mutex.unlock();
  process->digests.queue_mutex.unlock();
  process->mutex.unlock();
}

void configure_once() {
  auto* process = new Process;  // never freed (see Process)
  const config::ParsedConfig parsed = config::config_from_environment();
  if (!parsed.ok()) {
    std::fprintf(stderr, "[detnccl] invalid configuration; the job stops here (exit status %d):\n%s\n",
                 kExitInvalidConfiguration, parsed.error_text().c_str());
    std::fflush(nullptr);
    std::_Exit(kExitInvalidConfiguration);
  }
  process->config = parsed.config();
  process->step_inference = steps::StepInference(process->config.step_boundary);
  for (std::string_view entry : config::process_environment()) process->environment_copy.emplace_back(entry);
  configure_log(process->config);
  // Messages carry the rank from the start when the launcher names it (the log's own rank replaces it later),
  // so that deterministic-mode warnings of an untraced job say which rank they come from.
  if (const auto rank = config::global_rank_from_environment(views_of(process->environment_copy))) {
    set_log_rank(rank->rank);
  }
  if (process->config.print_config) {
    std::fprintf(stderr, "[detnccl] effective configuration (pid %d):\n%s", static_cast<int>(getpid()),
                 config::format_config(process->config).c_str());
  }
  configure_deterministic(process->config);
  g_process = process;
  std::atexit(close_log_at_exit);
  pthread_atfork(lock_before_fork, unlock_in_parent, start_over_in_child);
  g_shim_active.store(process->config.tracing() || process->config.deterministic_mode(), std::memory_order_release);
}

}  // namespace

void ensure_configured() noexcept { std::call_once(g_configured, configure_once); }

}  // namespace detnccl::interpose
