/* hostnccl: groups and the progress loop that drives a thread's pending operations.
 *
 * Every call that moves data is an Op. Outside a group it is a group of one; inside ncclGroupStart/End it waits in
 * this thread's list until the outermost ncclGroupEnd, which drives all of them (of any number of communicators)
 * until all are done. The loop never blocks inside an op; when nothing moves it backs off (spin, yield, then short
 * sleeps), checks that the peers of the waiting communicators are alive and have not aborted, and gives up after
 * HOSTNCCL_TIMEOUT_S seconds without progress.
 *
 * Non-blocking communicators (ncclConfig_t.blocking = 0): a group of their operations is handed to a background
 * thread and the call returns ncclInProgress; ncclCommGetAsyncError says ncclInProgress until the thread finishes,
 * then the group's result. As NCCL requires, the caller must wait for that before the communicator's next call (a
 * call made earlier fails with ncclInvalidArgument, as NCCL's ncclCommEnsureReady refuses it). A non-blocking init runs in the background the same way (the
 * communicator is usable once ncclCommGetAsyncError says ncclSuccess), and so does a split of a non-blocking parent,
 * as NCCL's does: the call returns ncclInProgress with *newcomm still null, and the background thread stores the child
 * there before the parent's async error leaves ncclInProgress. A group may not mix the two kinds.
 */
#ifndef DETNCCL_HOSTNCCL_PROGRESS_H
#define DETNCCL_HOSTNCCL_PROGRESS_H

#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "hostnccl/ops.h"

namespace hostnccl {

/* Drives `ops` until all are done or one fails. On failure the unfinished ops' communicators get the error as their
 * async error and their peers are told to stop (the segment's abort flag); returns the first error. */
ncclResult_t drive(std::vector<std::unique_ptr<Op>>& ops);

/* Queues `op` in this thread's group, or drives it at once when no group is open. */
ncclResult_t submit(std::unique_ptr<Op> op);

/* True while this thread is inside ncclGroupStart/ncclGroupEnd. */
bool in_group();

/* Records an argument error of a call made inside a group: the outermost ncclGroupEnd then returns it and drops
 * the group's operations, as NCCL does. */
void record_group_error(ncclResult_t result);

ncclResult_t group_start();
ncclResult_t group_end();

/* One group of non-blocking communicators' operations, driven on its own thread. The communicators' async errors
 * must say ncclInProgress before start(); the thread sets them to the group's result when it is done. */
class InFlightGroup {
 public:
  InFlightGroup(std::vector<std::unique_ptr<Op>> ops, std::vector<Comm*> comms);
  ~InFlightGroup();
  InFlightGroup(const InFlightGroup&) = delete;
  InFlightGroup& operator=(const InFlightGroup&) = delete;

  /* Starts the thread; if no thread can be started, drives the group on the caller's thread instead. */
  void start();
  /* Waits for the thread (any thread may call it, once or many times). */
  void join();

 private:
  void run();

  std::vector<std::unique_ptr<Op>> ops_;
  std::vector<Comm*> comms_;
  std::mutex join_mutex_;
  std::thread thread_;
};

/* Waits until `comm`'s background group, if any, has finished (before destroying the communicator, for instance). */
void join_in_flight(Comm* comm);

}  // namespace hostnccl

#endif  // DETNCCL_HOSTNCCL_PROGRESS_H
