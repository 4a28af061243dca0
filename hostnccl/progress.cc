#include "hostnccl/progress.h"

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <system_error>
#include <thread>

namespace hostnccl {
namespace {

using Clock = std::chrono::steady_clock;

struct GroupState {
  int depth = 0;
  ncclResult_t error = ncclSuccess;
  std::vector<std::unique_ptr<Op>> ops;
};
thread_local GroupState group_state;

// Waiting ranks must leave the CPU to the ranks they wait for (8 ranks on 2 cores): spin only very briefly.
void back_off(unsigned idle_rounds) {
  if (idle_rounds < 16) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  } else if (idle_rounds < 32) {
    sched_yield();
  } else {
    const unsigned exponent = std::min(idle_rounds - 32, 5u);
    std::this_thread::sleep_for(std::chrono::microseconds(16u << exponent));  // 16 us .. 512 us
  }
}

// A peer that exited, or a peer that failed and raised the abort flag, means the waiting ops can never finish.
// Only the ranks an op waits for count: a rank that finished its part may legitimately be gone.
ncclResult_t check_peers(const std::vector<std::unique_ptr<Op>>& ops) {
  const pid_t self = getpid();
  for (const auto& op : ops) {
    const Comm* comm = op->waited_comm();
    if (op->done() || comm->segment == nullptr) continue;
    if (comm->segment->header().abort_flag.load(std::memory_order_acquire) != 0) {
      set_last_error(std::string("hostnccl: ") + op->name() + " on rank " + std::to_string(comm->rank) +
                     ": a peer rank failed or aborted the communicator");
      return ncclRemoteError;
    }
    const int only = op->waited_rank();
    for (int r = only < 0 ? 0 : only; r < (only < 0 ? comm->nranks : only + 1); ++r) {
      const pid_t pid = comm->segment->rank(r).pid.load(std::memory_order_acquire);
      if (pid == 0 || pid == self) continue;
      if (kill(pid, 0) != 0 && errno == ESRCH) {
        set_last_error(std::string("hostnccl: ") + op->name() + " on rank " + std::to_string(comm->rank) +
                       ": peer rank " + std::to_string(r) + " (pid " + std::to_string(pid) + ") has exited");
        return ncclRemoteError;
      }
    }
  }
  return ncclSuccess;
}

// The group waits as long as its most patient communicator allows; 0 (wait forever) wins.
double group_timeout_s(const std::vector<std::unique_ptr<Op>>& ops) {
  double timeout = 0;
  for (const auto& op : ops) {
    if (op->comm()->config.timeout_s == 0) return 0;
    timeout = std::max(timeout, op->comm()->config.timeout_s);
  }
  return timeout;
}

void fail_unfinished(std::vector<std::unique_ptr<Op>>& ops, ncclResult_t result) {
  for (auto& op : ops) {
    if (op->done()) continue;
    op->on_failure();
    Comm* comm = op->comm();
    ncclResult_t expected = ncclSuccess;
    comm->async_error.compare_exchange_strong(expected, result);
    if (comm->segment != nullptr) comm->segment->header().abort_flag.store(1, std::memory_order_release);
  }
}

// A group dropped because one of its calls failed its checks never started any op: give the ops' places in line
// back, so the communicators stay usable (all their unfinished ops are in this group, the most recently issued).
// A communicator whose init was in the group can never become ready: it gets the error.
void drop_unstarted(std::vector<std::unique_ptr<Op>>& ops, ncclResult_t result) {
  for (auto& op : ops) {
    Comm* comm = op->comm();
    if (!comm->ready) {
      ncclResult_t expected = ncclSuccess;
      comm->async_error.compare_exchange_strong(expected, result);
      continue;
    }
    comm->colls_issued = comm->colls_done;
    comm->sends_issued = comm->sends_done;
    comm->recvs_issued = comm->recvs_done;
  }
}

// drive() on this thread, counted in each communicator's `drivers` until the ops are gone: after the last decrement
// nothing here touches a communicator again, so an ncclCommAbort waiting for the count may free it.
ncclResult_t drive_holding_communicators(std::vector<std::unique_ptr<Op>>& ops) {
  std::vector<Comm*> held;
  for (const auto& op : ops) {
    if (std::find(held.begin(), held.end(), op->comm()) == held.end()) held.push_back(op->comm());
  }
  for (Comm* comm : held) comm->drivers.fetch_add(1, std::memory_order_acq_rel);
  const ncclResult_t result = drive(ops);
  ops.clear();
  for (Comm* comm : held) comm->drivers.fetch_sub(1, std::memory_order_acq_rel);
  return result;
}

// Each op's Op::launch, in the calling thread; the first failure drops the group (no op has started).
ncclResult_t launch_all(std::vector<std::unique_ptr<Op>>& ops) {
  for (const auto& op : ops) {
    if (const ncclResult_t result = op->launch(); result != ncclSuccess) {
      drop_unstarted(ops, result);
      return result;
    }
  }
  return ncclSuccess;
}

// The outermost ncclGroupEnd (or a call outside any group): blocking communicators are driven here; a group of
// non-blocking ones goes to a background thread (RATIONALE: real NCCL progresses those on its own threads too).
// A non-blocking communicator's init (ncclCommInitRankConfig with blocking = 0, alone or in a group of such inits)
// runs in the background too, as NCCL's does: the call returns ncclInProgress and the communicator can be used (or
// queried) once ncclCommGetAsyncError says ncclSuccess. So does a split, whose mode is its parent's (NCCL launches the
// split's job on the parent: src/group.cc, ncclAsyncLaunch): the child appears in *newcomm when the parent's async
// error leaves ncclInProgress. A group mixing the creation of blocking and non-blocking communicators stays blocking
// (as before: NCCL refuses such a group).
ncclResult_t run_group(std::vector<std::unique_ptr<Op>> ops) {
  bool any_blocking = false, any_non_blocking = false, creates = false;
  for (const auto& op : ops) {
    (op->comm()->config.blocking ? any_blocking : any_non_blocking) = true;
    creates = creates || op->creates_communicator();
  }
  if (!any_non_blocking || (creates && any_blocking)) {
    if (const ncclResult_t result = launch_all(ops); result != ncclSuccess) return result;
    return drive_holding_communicators(ops);
  }
  if (any_blocking) {
    set_last_error("hostnccl: ncclGroupEnd: a group may not mix blocking and non-blocking communicators");
    drop_unstarted(ops, ncclInvalidUsage);
    return ncclInvalidUsage;
  }
  if (const ncclResult_t result = launch_all(ops); result != ncclSuccess) return result;
  std::vector<Comm*> comms;
  for (const auto& op : ops) {
    if (std::find(comms.begin(), comms.end(), op->comm()) == comms.end()) comms.push_back(op->comm());
  }
  for (Comm* comm : comms) {
    join_in_flight(comm);
    comm->async_error.store(ncclInProgress);  // before the thread starts: it replaces this with the result
  }
  auto group = std::make_shared<InFlightGroup>(std::move(ops), comms);
  for (Comm* comm : comms) comm->in_flight = group;
  group->start();
  return ncclInProgress;
}

}  // namespace

InFlightGroup::InFlightGroup(std::vector<std::unique_ptr<Op>> ops, std::vector<Comm*> comms)
    : ops_(std::move(ops)), comms_(std::move(comms)) {}

InFlightGroup::~InFlightGroup() { join(); }

void InFlightGroup::start() {
  try {
    thread_ = std::thread([this] { run(); });
  } catch (const std::system_error&) {
    run();  // no thread to be had: the call completes before it returns, which NCCL allows too
  }
}

void InFlightGroup::join() {
  const std::lock_guard<std::mutex> lock(join_mutex_);
  if (thread_.joinable()) thread_.join();
}

void InFlightGroup::run() {
  const ncclResult_t result = drive(ops_);
  ops_.clear();  // nothing touches the communicators once the caller can see the result
  for (Comm* comm : comms_) {
    if (result != ncclSuccess) comm->async_error_text = last_error();  // this thread's text: the caller's is another
    ncclResult_t expected = ncclInProgress;
    comm->async_error.compare_exchange_strong(expected, result);
  }
}

void join_in_flight(Comm* comm) {
  if (comm->in_flight == nullptr) return;
  comm->in_flight->join();
  comm->in_flight.reset();
}

ncclResult_t drive(std::vector<std::unique_ptr<Op>>& ops) {
  const double timeout_s = group_timeout_s(ops);
  Clock::time_point last_progress = Clock::now(), last_check = last_progress;
  std::size_t remaining =
      static_cast<std::size_t>(std::count_if(ops.begin(), ops.end(), [](const auto& op) { return !op->done(); }));
  // One pass over the unfinished ops; returns an op's error, with *any_progress telling whether anything moved.
  const auto sweep = [&](bool* any_progress) {
    for (auto& op : ops) {
      if (op->done()) continue;
      bool progressed = false;
      if (const ncclResult_t result = op->advance(&progressed); result != ncclSuccess) return result;
      *any_progress = *any_progress || progressed;
      if (op->done()) --remaining;
    }
    return ncclSuccess;
  };
  unsigned idle_rounds = 0;
  while (remaining > 0) {
    bool any_progress = false;
    if (const ncclResult_t result = sweep(&any_progress); result != ncclSuccess) {
      fail_unfinished(ops, result);
      return result;
    }
    if (remaining == 0) break;
    const Clock::time_point now = Clock::now();
    if (any_progress) {
      idle_rounds = 0;
      last_progress = now;
      continue;
    }
    ++idle_rounds;
    if (now - last_check >= std::chrono::milliseconds(10)) {
      last_check = now;
      if (ncclResult_t result = check_peers(ops); result != ncclSuccess) {
        // A peer may have done its last part and exited between our sweep and the check: only if another sweep
        // still moves nothing is it really missing.
        bool moved = false;
        if (const ncclResult_t swept = sweep(&moved); swept != ncclSuccess) result = swept;
        if (moved && result == ncclRemoteError) continue;
        fail_unfinished(ops, result);
        return result;
      }
      if (timeout_s > 0 && now - last_progress > std::chrono::duration<double>(timeout_s)) {
        const Op* stuck = std::find_if(ops.begin(), ops.end(), [](const auto& op) { return !op->done(); })->get();
        set_last_error(std::string("hostnccl: ") + stuck->name() + " on rank " + std::to_string(stuck->comm()->rank) +
                       " made no progress for HOSTNCCL_TIMEOUT_S=" + std::to_string(timeout_s) +
                       " s: a peer is not taking part");
        fail_unfinished(ops, ncclSystemError);
        return ncclSystemError;
      }
    }
    back_off(idle_rounds);
  }
  return ncclSuccess;
}

ncclResult_t submit(std::unique_ptr<Op> op) {
  group_state.ops.push_back(std::move(op));
  if (group_state.depth > 0) return ncclSuccess;
  std::vector<std::unique_ptr<Op>> ops = std::move(group_state.ops);
  group_state.ops.clear();
  return run_group(std::move(ops));
}

bool in_group() { return group_state.depth > 0; }

void record_group_error(ncclResult_t result) {
  if (group_state.depth > 0 && group_state.error == ncclSuccess) group_state.error = result;
}

ncclResult_t group_start() {
  ++group_state.depth;
  return ncclSuccess;
}

ncclResult_t group_end() {
  if (group_state.depth == 0) {
    set_last_error("hostnccl: ncclGroupEnd without a matching ncclGroupStart");
    return ncclInvalidUsage;
  }
  if (--group_state.depth > 0) return ncclSuccess;
  std::vector<std::unique_ptr<Op>> ops = std::move(group_state.ops);
  group_state.ops.clear();
  const ncclResult_t error = group_state.error;
  group_state.error = ncclSuccess;
  if (error != ncclSuccess) {  // NCCL drops a group in which a call failed its checks
    drop_unstarted(ops, error);
    return error;
  }
  return run_group(std::move(ops));
}

}  // namespace hostnccl
