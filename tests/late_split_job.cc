// late_split_job: a split whose child NCCL hands over late, run under hostnccl-run (4 ranks) with the shim preloaded.
// NCCL 2.28 stores a split's child in *newcomm only when the child's init ends: at the outermost ncclGroupEnd for a
// split inside a group, and on NCCL's own thread for a split of a non-blocking parent (the call returns
// ncclInProgress; the job polls the parent's ncclCommGetAsyncError). Every rank splits the world by rank % 2 (key:
// its rank) and runs one fp32 AllReduce of kCount elements, all equal to rank + 1, on its child, checking the sum.
//   late_split_job [--in-group] [--nonblocking [--wait-on-child [--on-another-thread]]]
//   --in-group       the split is made inside ncclGroupStart/ncclGroupEnd
//   --nonblocking    the world communicator is created with ncclConfig_t.blocking = 0 (so is the child, its parent's)
//   --wait-on-child  the job waits for the child by watching *newcomm, not by polling the parent (it polls the parent
//                    only after the child's AllReduce): the shim first sees the child at that call
//   --on-another-thread  the child's AllReduce is made (and polled) by another thread than the one that split
// Prints one line per rank; exits non-zero on any surprise.
#include <sched.h>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "tests/job_support.h"

namespace {

constexpr std::size_t kCount = 33;

int failures = 0;

bool expect(bool condition, const char* what, int rank) {
  if (!condition) {
    std::fprintf(stderr, "rank %d: %s (last error: %s)\n", rank, what, ncclGetLastError(nullptr));
    ++failures;
  }
  return condition;
}

// What a call (or group) of a non-blocking communicator comes to once polled: ncclCommGetAsyncError until it leaves
// ncclInProgress, as NCCL requires before the communicator's next call.
ncclResult_t settle(ncclResult_t result, ncclComm_t comm) {
  while (result == ncclInProgress) {
    if (ncclCommGetAsyncError(comm, &result) != ncclSuccess) return ncclInternalError;
    if (result == ncclInProgress) sched_yield();
  }
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  bool in_group = false, nonblocking = false, wait_on_child = false, on_another_thread = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--in-group") {
      in_group = true;
    } else if (arg == "--nonblocking") {
      nonblocking = true;
    } else if (arg == "--wait-on-child") {
      wait_on_child = true;
    } else if (arg == "--on-another-thread") {
      on_another_thread = true;
    } else {
      std::fprintf(stderr, "usage: %s [--in-group] [--nonblocking [--wait-on-child [--on-another-thread]]]\n", argv[0]);
      return 2;
    }
  }
  const detnccl::test::JobRank job = detnccl::test::job_rank_from_environment();
  const int rank = job.rank;
  ncclUniqueId id;
  if (!detnccl::test::share_job_unique_id(rank, &id)) return 1;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = nonblocking ? 0 : 1;
  ncclComm_t world = nullptr;
  const ncclResult_t init = ncclCommInitRankConfig(&world, job.nranks, id, rank, &config);
  if (!expect(settle(init, world) == ncclSuccess, "init", rank)) return 1;

  ncclComm_t child = nullptr;
  ncclResult_t split;
  if (in_group) {
    expect(ncclGroupStart() == ncclSuccess, "ncclGroupStart", rank);
    expect(ncclCommSplit(world, rank % 2, rank, &child, nullptr) == ncclSuccess, "split inside the group", rank);
    expect(child == nullptr, "the child is there before ncclGroupEnd", rank);
    split = ncclGroupEnd();
  } else {
    split = ncclCommSplit(world, rank % 2, rank, &child, nullptr);
  }
  expect(split == (nonblocking ? ncclInProgress : ncclSuccess), "the split's result", rank);
  if (wait_on_child) {
    while (__atomic_load_n(&child, __ATOMIC_ACQUIRE) == nullptr) sched_yield();  // NCCL's thread stores it
  } else {
    expect(settle(split, world) == ncclSuccess, "the split completes", rank);
  }
  if (!expect(child != nullptr, "the child is there once the split is over", rank)) return 1;

  std::vector<float> values(kCount, static_cast<float>(rank + 1)), sums(kCount, 0.0f);
  const auto reduce = [&] {
    const ncclResult_t reduced =
        ncclAllReduce(values.data(), sums.data(), kCount, ncclFloat32, ncclSum, child, nullptr);
    expect(settle(reduced, child) == ncclSuccess, "AllReduce on the child", rank);
  };
  if (on_another_thread) {
    std::thread(reduce).join();
  } else {
    reduce();
  }
  float expected = 0;
  for (int r = rank % 2; r < job.nranks; r += 2) expected += static_cast<float>(r + 1);
  for (float sum : sums) {
    if (!expect(sum == expected, "the child's AllReduce sum", rank)) break;
  }
  if (wait_on_child) expect(settle(split, world) == ncclSuccess, "the split completes", rank);
  expect(ncclCommDestroy(child) == ncclSuccess, "destroy the child", rank);
  expect(ncclCommDestroy(world) == ncclSuccess, "destroy the world", rank);
  std::printf("late_split_job rank %d: %s\n", rank, failures == 0 ? "every call as expected" : "FAILURES");
  return failures == 0 ? 0 : 1;
}
