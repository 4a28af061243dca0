// shim_process_job: jobs about the shim's life inside a process (tests/test_shim_process.cc), over hostnccl, run with
// the shim preloaded and without a launcher.
//
//   shim_process_job fork-ranks N STEPS
//       The parent makes its own one-rank communicator and two AllReduces on it, then calls ncclGetUniqueId for a job
//       of N ranks and forks them, plus one helper child that makes no NCCL call and leaves at once with exit(0).
//       Each rank sets RANK and WORLD_SIZE for itself, creates its communicator (ncclCommInitRank), makes STEPS fp32
//       AllReduces of values whose sum depends on the order of addition (each step marked with detnccl_set_step when
//       the shim is loaded), checks that they are finite, and leaves with exit(0) (so the at-exit hooks run). The
//       parent marks a step after forking, waits for every child, makes two more AllReduces and exits 0 when every
//       child did. (The common "the launcher makes the id, its children are the ranks" pattern.)
//   shim_process_job oom-in-group CALLS
//       One rank: CALLS AllReduces (checked), then one group of 4096 zero-count Sends to itself during which every
//       allocation of 64 KiB or more fails with std::bad_alloc (operator new is replaced in this program: the shim's
//       allocations come here too), then CALLS AllReduces more. Exits 0 when every call succeeded.
//   shim_process_job watchdog-abort
//       Forks 2 ranks. Rank 0 makes an fp32 AllReduce of 1 Mi elements that rank 1 does not join (it waits until rank 0
//       is done); after 200 ms a watchdog thread of rank 0 calls ncclCommAbort, which must end the blocked call with an
//       error (with DETNCCL_DETERMINISTIC=1 the shim's algorithm is the one blocked, using its scratch). Exits 0 when
//       the call failed, the abort succeeded and both ranks exited 0.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "abi/nccl_abi.h"
#include "tests/job_support.h"

namespace {

// Allocations of at least this many bytes fail (SIZE_MAX: none).
std::atomic<std::size_t> g_fail_allocations_from{SIZE_MAX};

bool ok(ncclResult_t result, const char* what) {
  if (result == ncclSuccess) return true;
  std::fprintf(stderr, "%s failed: %s (%s)\n", what, ncclGetErrorString(result), ncclGetLastError(nullptr));
  return false;
}

// A one-rank communicator of this process.
ncclComm_t single_rank_communicator() {
  ncclUniqueId id;
  ncclComm_t comm = nullptr;
  if (!ok(ncclGetUniqueId(&id), "ncclGetUniqueId") || !ok(ncclCommInitRank(&comm, 1, id, 0), "ncclCommInitRank")) {
    return nullptr;
  }
  return comm;
}

bool small_allreduces(ncclComm_t comm, int calls) {
  for (int c = 0; c < calls; ++c) {
    float value = static_cast<float>(c) + 0.5f;
    if (!ok(ncclAllReduce(&value, &value, 1, ncclFloat32, ncclSum, comm, nullptr), "ncclAllReduce")) return false;
    if (value != static_cast<float>(c) + 0.5f) {
      std::fprintf(stderr, "one-rank AllReduce %d gave %g\n", c, static_cast<double>(value));
      return false;
    }
  }
  return true;
}

int run_rank(int rank, int nranks, int steps, const ncclUniqueId& id) {
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(nranks).c_str(), 1);
  ncclComm_t comm = nullptr;
  if (!ok(ncclCommInitRank(&comm, nranks, id, rank), "ncclCommInitRank")) return 1;
  const auto set_step = detnccl::test::find_set_step();
  for (int step = 0; step < steps; ++step) {
    if (set_step != nullptr) set_step(static_cast<std::uint64_t>(step));
    const std::vector<float> input = detnccl::test::wide_magnitude_values(rank, step, 4096);
    std::vector<float> output(input.size());
    if (!ok(ncclAllReduce(input.data(), output.data(), input.size(), ncclFloat32, ncclSum, comm, nullptr),
            "ncclAllReduce")) {
      return 1;
    }
    for (float v : output) {
      if (!std::isfinite(v)) {
        std::fprintf(stderr, "rank %d step %d: a sum is not finite\n", rank, step);
        return 1;
      }
    }
  }
  return ok(ncclCommDestroy(comm), "ncclCommDestroy") ? 0 : 1;
}

int fork_ranks_mode(int nranks, int steps) {
  ncclComm_t own = single_rank_communicator();
  if (own == nullptr || !small_allreduces(own, 2)) return 1;
  ncclUniqueId id;
  if (!ok(ncclGetUniqueId(&id), "ncclGetUniqueId")) return 1;
  std::fflush(nullptr);
  std::vector<pid_t> children;
  for (int rank = 0; rank <= nranks; ++rank) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      return 1;
    }
    if (pid == 0) std::exit(rank == nranks ? 0 : run_rank(rank, nranks, steps, id));  // rank nranks: the helper
    children.push_back(pid);
  }
  if (const auto set_step = detnccl::test::find_set_step(); set_step != nullptr) set_step(0);
  int failed = 0;
  for (const pid_t child : children) {
    int status = 0;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  if (!small_allreduces(own, 2) || !ok(ncclCommDestroy(own), "ncclCommDestroy")) return 1;
  if (failed != 0) {
    std::fprintf(stderr, "shim_process_job: %d children failed\n", failed);
    return 1;
  }
  std::printf("shim_process_job: %d forked ranks x %d steps, every child succeeded\n", nranks, steps);
  return 0;
}

int oom_in_group_mode(int calls) {
  ncclComm_t comm = single_rank_communicator();
  if (comm == nullptr || !small_allreduces(comm, calls)) return 1;
  if (!ok(ncclGroupStart(), "ncclGroupStart")) return 1;
  g_fail_allocations_from.store(64 << 10);
  bool sent = true;
  for (int i = 0; i < 4096 && sent; ++i) sent = ok(ncclSend(nullptr, 0, ncclFloat32, 0, comm, nullptr), "ncclSend");
  g_fail_allocations_from.store(SIZE_MAX);
  if (!ok(ncclGroupEnd(), "ncclGroupEnd") || !sent) return 1;
  if (!small_allreduces(comm, calls) || !ok(ncclCommDestroy(comm), "ncclCommDestroy")) return 1;
  std::printf("shim_process_job: every call succeeded\n");
  return 0;
}

int watchdog_abort_mode() {
  ncclUniqueId id;
  if (!ok(ncclGetUniqueId(&id), "ncclGetUniqueId")) return 1;
  auto* rank0_done = static_cast<std::atomic<int>*>(
      mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (rank0_done == MAP_FAILED) return 1;
  new (rank0_done) std::atomic<int>(0);
  pid_t children[2] = {};
  for (int rank = 0; rank < 2; ++rank) {
    children[rank] = fork();
    if (children[rank] < 0) return 1;
    if (children[rank] > 0) continue;
    setenv("RANK", std::to_string(rank).c_str(), 1);
    setenv("WORLD_SIZE", "2", 1);
    ncclComm_t comm = nullptr;
    if (!ok(ncclCommInitRank(&comm, 2, id, rank), "ncclCommInitRank")) std::_Exit(1);
    if (rank == 1) {
      while (rank0_done->load() == 0) usleep(5000);
      ncclCommAbort(comm);  // its peer is gone
      std::exit(0);
    }
    ncclResult_t aborted = ncclInternalError;  // written by the watchdog, read after joining it
    std::thread watchdog([comm, &aborted] {
      usleep(200000);
      aborted = ncclCommAbort(comm);
    });
    std::vector<float> input(1 << 20, 1.0f), output(input.size());
    const ncclResult_t blocked =
        ncclAllReduce(input.data(), output.data(), input.size(), ncclFloat32, ncclSum, comm, nullptr);
    watchdog.join();
    rank0_done->store(1);
    std::printf("watchdog-abort: the blocked AllReduce returned %d, the abort %d\n", static_cast<int>(blocked),
                static_cast<int>(aborted));
    std::exit(blocked != ncclSuccess && aborted == ncclSuccess ? 0 : 1);
  }
  int failed = 0;
  for (pid_t child : children) {
    int status = 0;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace

// Replaced for the whole program (the preloaded shim's allocations included), to make allocations fail on demand.
void* operator new(std::size_t size) {
  if (size >= g_fail_allocations_from.load(std::memory_order_relaxed)) throw std::bad_alloc();
  if (void* memory = std::malloc(size == 0 ? 1 : size)) return memory;
  throw std::bad_alloc();
}
void operator delete(void* memory) noexcept { std::free(memory); }
void operator delete(void* memory, std::size_t) noexcept { std::free(memory); }

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "fork-ranks" && argc == 4) return fork_ranks_mode(std::atoi(argv[2]), std::atoi(argv[3]));
  if (mode == "oom-in-group" && argc == 3) return oom_in_group_mode(std::atoi(argv[2]));
  if (mode == "watchdog-abort" && argc == 2) return watchdog_abort_mode();
  std::fprintf(stderr, "usage: %s fork-ranks N STEPS | oom-in-group CALLS | watchdog-abort\n", argv[0]);
  return 2;
}
