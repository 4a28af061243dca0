// test_faults_job: the NCCL job the fault tests (test_faults.cc) run with the shim preloaded.
//
//   test_faults_job threads RANKS CALLS COUNT
//       One process drives RANKS ranks (ncclCommInitAll), one thread per rank, all calling at once: CALLS AllReduces
//       (sum) of COUNT floats each, every other one inside a group. Rank r's input of call c, element i, is the
//       small integer (r + 3c + i) % 97; each output is checked against the sum over ranks. Exits 1 on any failure.
//   test_faults_job kill-in-allreduce STEPS KILL_STEP
//       With RANK, WORLD_SIZE and HOSTNCCL_ID_FILE set (as by hostnccl-run): one AllReduce per step (marked with
//       detnccl_set_step when the shim is loaded), checked. At KILL_STEP, rank 1 enters the AllReduce at once while
//       the others wait a second first; a thread kills rank 1 with SIGKILL 300 ms later, so it dies inside the call.
//       (Run it with HOSTNCCL_SLOT_BYTES=4096: the buffer then moves in several chunks, and rank 1 dies having
//       contributed only the first, so the call cannot complete without it.) The survivors print
//         "rank R step K: ncclAllReduce returned <ncclResult_t> after <ms> ms (<error string>)"
//       and exit 3 (a failed call) or 4 (the call succeeded, which must not happen).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "abi/nccl_abi.h"
#include "tests/job_support.h"

namespace {

float input_value(int rank, int call, std::size_t i) {
  return static_cast<float>((rank + 3 * call + static_cast<int>(i)) % 97);
}

float sum_over_ranks(int nranks, int call, std::size_t i) {
  float sum = 0;
  for (int r = 0; r < nranks; ++r) sum += input_value(r, call, i);
  return sum;
}

int threads_mode(int nranks, int calls, std::size_t count) {
  std::vector<ncclComm_t> comms(static_cast<std::size_t>(nranks));
  if (ncclCommInitAll(comms.data(), nranks, nullptr) != ncclSuccess) {
    std::fprintf(stderr, "ncclCommInitAll failed: %s\n", ncclGetLastError(nullptr));
    return 1;
  }
  std::vector<int> failures(static_cast<std::size_t>(nranks), 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      std::vector<float> in(count), out(count);
      for (int c = 0; c < calls; ++c) {
        for (std::size_t i = 0; i < count; ++i) in[i] = input_value(r, c, i);
        const bool grouped = c % 2 == 1;
        if (grouped) ncclGroupStart();
        const ncclResult_t result = ncclAllReduce(in.data(), out.data(), count, ncclFloat32, ncclSum,
                                                  comms[static_cast<std::size_t>(r)], nullptr);
        if (grouped && ncclGroupEnd() != ncclSuccess) ++failures[static_cast<std::size_t>(r)];
        if (result != ncclSuccess) ++failures[static_cast<std::size_t>(r)];
        for (std::size_t i = 0; i < count; ++i) {
          if (out[i] != sum_over_ranks(nranks, c, i)) {
            ++failures[static_cast<std::size_t>(r)];
            break;
          }
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (ncclComm_t comm : comms) ncclCommDestroy(comm);
  int failed = 0;
  for (int f : failures) failed += f;
  if (failed != 0) {
    std::fprintf(stderr, "test_faults_job: %d failed calls\n", failed);
    return 1;
  }
  std::printf("test_faults_job: %d ranks x %d calls, every output as expected\n", nranks, calls);
  return 0;
}

int kill_in_allreduce_mode(int steps, int kill_step) {
  const detnccl::test::JobRank job = detnccl::test::job_rank_from_environment();
  const int rank = job.rank;
  const int nranks = job.nranks;
  ncclComm_t comm = detnccl::test::init_job_communicator(job);
  if (comm == nullptr) return 1;
  const auto set_step = detnccl::test::find_set_step();
  constexpr std::size_t kCount = 4099;
  std::vector<float> in(kCount), out(kCount);
  for (int step = 0; step < steps; ++step) {
    if (set_step != nullptr) set_step(static_cast<std::uint64_t>(step));
    for (std::size_t i = 0; i < kCount; ++i) in[i] = input_value(rank, step, i);
    if (step == kill_step) {
      if (rank == 1) {
        std::thread([] {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          kill(getpid(), SIGKILL);
        }).detach();
      } else {
        // RATIONALE: rank 1 must be inside the call (waiting for the others) when it dies.
        std::this_thread::sleep_for(std::chrono::seconds(1));
      }
    }
    const auto start = std::chrono::steady_clock::now();
    const ncclResult_t result = ncclAllReduce(in.data(), out.data(), kCount, ncclFloat32, ncclSum, comm, nullptr);
    const auto elapsed_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
    if (step == kill_step) {
      std::printf("rank %d step %d: ncclAllReduce returned %d after %lld ms (%s)\n", rank, step,
                  static_cast<int>(result), static_cast<long long>(elapsed_ms), ncclGetErrorString(result));
      std::fflush(stdout);
      ncclCommAbort(comm);
      return result == ncclSuccess ? 4 : 3;
    }
    if (result != ncclSuccess) {
      std::fprintf(stderr, "rank %d step %d: ncclAllReduce failed: %s\n", rank, step, ncclGetErrorString(result));
      return 1;
    }
    for (std::size_t i = 0; i < kCount; ++i) {
      if (out[i] != sum_over_ranks(nranks, step, i)) {
        std::fprintf(stderr, "rank %d step %d: wrong output at %zu\n", rank, step, i);
        return 1;
      }
    }
  }
  ncclCommDestroy(comm);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "threads" && argc == 5) {
    return threads_mode(std::atoi(argv[2]), std::atoi(argv[3]), static_cast<std::size_t>(std::atoll(argv[4])));
  }
  if (mode == "kill-in-allreduce" && argc == 4) return kill_in_allreduce_mode(std::atoi(argv[2]), std::atoi(argv[3]));
  std::fprintf(stderr, "usage: %s threads RANKS CALLS COUNT | kill-in-allreduce STEPS KILL_STEP\n", argv[0]);
  return 2;
}
