// trace_threads_job: one process drives several ranks, one thread per rank (the ncclCommInitAll pattern), each
// thread making its own AllReduce calls and groups at the same time as the others. The shim tests run it preloaded
// to check that every call of every thread is recorded, intact, with per-communicator order kept.
//   trace_threads_job RANKS CALLS [ROUNDS]
// With ROUNDS (default 1), the same threads go on through ROUNDS generations of communicators: between rounds the
// main thread destroys them all and creates new ones, which may get the destroyed ones' handles back; each call must
// be recorded as a call of the communicator of its own round.
//   trace_threads_job RANKS CALLS --one-thread
// The other pattern NCCL documents: the main thread drives every rank, each call one group with an AllReduce per
// rank (as nccl-tests -g N does).
//   trace_threads_job RANKS CALLS --one-thread-split
// The same on children: the main thread first splits every rank inside one group (as NCCL requires of a thread that
// splits several ranks; NCCL hands the children over at the group's end), then drives the children.
//   trace_threads_job RANKS CALLS --one-thread-split-after-nocolor
// The same, after a first group of splits in which rank 0 passes NCCL_SPLIT_NOCOLOR (it gets no child; the others
// get one of their own): the parents' second splits still make one communicator of all ranks.
//   trace_threads_job RANKS CALLS --late-children-elsewhere
// One thread per rank creates it (ncclCommInitRankConfig, non-blocking, one id) and splits it (all one color);
// NCCL stores each child late, on its own thread; each thread only watches its variable. Then the main thread,
// which created none of them, drives every child, each call one group with an AllReduce per rank.
// Rank r's input of call c (counted within the round), element i, is the small integer (r + 3c + i) % 97; outputs are
// sums over ranks.
#include <sched.h>

#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string_view>
#include <thread>
#include <vector>

#include "abi/nccl_abi.h"

namespace {

constexpr std::size_t kCount = 513;

float input(int rank, int call, std::size_t i) {
  return static_cast<float>((rank + 3 * call + static_cast<int>(i)) % 97);
}

// Whether `out` holds the sum over ranks of call c's inputs.
bool sums_are_right(const std::vector<float>& out, int nranks, int call) {
  for (std::size_t i = 0; i < kCount; ++i) {
    float expected = 0;
    for (int q = 0; q < nranks; ++q) expected += input(q, call, i);
    if (out[i] != expected) return false;
  }
  return true;
}

// Splits every rank of `parents` inside one group, rank r with color colors[r] and key r.
bool split_in_one_group(const std::vector<ncclComm_t>& parents, const std::vector<int>& colors,
                        std::vector<ncclComm_t>* children) {
  children->assign(parents.size(), nullptr);
  ncclGroupStart();
  for (std::size_t r = 0; r < parents.size(); ++r) {
    ncclCommSplit(parents[r], colors[r], static_cast<int>(r), &(*children)[r], nullptr);
  }
  if (ncclGroupEnd() != ncclSuccess) {
    std::fprintf(stderr, "the group of splits failed: %s\n", ncclGetLastError(nullptr));
    return false;
  }
  return true;
}

enum class Split { kNone, kOnce, kAfterNoColor };

int one_thread(int nranks, int calls, Split split) {
  std::vector<ncclComm_t> comms(static_cast<std::size_t>(nranks));
  if (ncclCommInitAll(comms.data(), nranks, nullptr) != ncclSuccess) {
    std::fprintf(stderr, "ncclCommInitAll failed: %s\n", ncclGetLastError(nullptr));
    return 1;
  }
  std::vector<ncclComm_t> parents, first_children;
  if (split == Split::kAfterNoColor) {
    std::vector<int> colors(comms.size(), 1);
    colors[0] = NCCL_SPLIT_NOCOLOR;
    if (!split_in_one_group(comms, colors, &first_children)) return 1;
    if (first_children[0] != nullptr) {
      std::fprintf(stderr, "NCCL_SPLIT_NOCOLOR gave rank 0 a communicator\n");
      return 1;
    }
  }
  if (split != Split::kNone) {
    parents.swap(comms);
    if (!split_in_one_group(parents, std::vector<int>(parents.size(), 0), &comms)) return 1;
  }
  std::vector<std::vector<float>> in(comms.size(), std::vector<float>(kCount)), out = in;
  int failed = 0;
  for (int c = 0; c < calls; ++c) {
    for (int r = 0; r < nranks; ++r) {
      for (std::size_t i = 0; i < kCount; ++i) in[static_cast<std::size_t>(r)][i] = input(r, c, i);
    }
    ncclGroupStart();
    for (int r = 0; r < nranks; ++r) {
      const auto at = static_cast<std::size_t>(r);
      if (ncclAllReduce(in[at].data(), out[at].data(), kCount, ncclFloat32, ncclSum, comms[at], nullptr) !=
          ncclSuccess) {
        ++failed;
      }
    }
    if (ncclGroupEnd() != ncclSuccess) ++failed;
    for (const auto& result : out) failed += sums_are_right(result, nranks, c) ? 0 : 1;
  }
  for (ncclComm_t comm : comms) ncclCommDestroy(comm);
  for (ncclComm_t comm : first_children) {
    if (comm != nullptr) ncclCommDestroy(comm);
  }
  for (ncclComm_t comm : parents) ncclCommDestroy(comm);
  if (failed != 0) {
    std::fprintf(stderr, "trace_threads_job --one-thread: %d failures\n", failed);
    return 1;
  }
  std::printf("trace_threads_job --one-thread: %d ranks x %d grouped calls, every output as expected\n", nranks, calls);
  return 0;
}

// What a call (or group) of a non-blocking communicator comes to once polled (as NCCL requires before its next call).
ncclResult_t settle(ncclResult_t result, ncclComm_t comm) {
  while (result == ncclInProgress) {
    if (ncclCommGetAsyncError(comm, &result) != ncclSuccess) return ncclInternalError;
    if (result == ncclInProgress) sched_yield();
  }
  return result;
}

int late_children_elsewhere(int nranks, int calls) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
  const auto n = static_cast<std::size_t>(nranks);
  std::vector<ncclComm_t> worlds(n, nullptr), children(n, nullptr);
  std::vector<int> failures(n, 0);
  std::vector<std::thread> creators;
  for (int r = 0; r < nranks; ++r) {
    creators.emplace_back([&, r] {
      const auto at = static_cast<std::size_t>(r);
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      const ncclResult_t init = ncclCommInitRankConfig(&worlds[at], nranks, id, r, &config);
      if (settle(init, worlds[at]) != ncclSuccess) {
        ++failures[at];
        return;
      }
      const ncclResult_t split = ncclCommSplit(worlds[at], 0, r, &children[at], nullptr);
      if (split != ncclSuccess && split != ncclInProgress) {
        ++failures[at];
        return;
      }
      while (__atomic_load_n(&children[at], __ATOMIC_ACQUIRE) == nullptr) sched_yield();  // NCCL's thread stores it
    });
  }
  for (auto& thread : creators) thread.join();
  int failed = 0;
  for (int f : failures) failed += f;
  if (failed != 0) {
    std::fprintf(stderr, "trace_threads_job --late-children-elsewhere: the communicators failed\n");
    return 1;
  }
  std::vector<std::vector<float>> in(n, std::vector<float>(kCount)), out = in;
  for (int c = 0; c < calls; ++c) {
    for (std::size_t r = 0; r < n; ++r) {
      for (std::size_t i = 0; i < kCount; ++i) in[r][i] = input(static_cast<int>(r), c, i);
    }
    ncclGroupStart();
    for (std::size_t r = 0; r < n; ++r) {
      const ncclResult_t result =
          ncclAllReduce(in[r].data(), out[r].data(), kCount, ncclFloat32, ncclSum, children[r], nullptr);
      if (result != ncclSuccess && result != ncclInProgress) ++failed;
    }
    const ncclResult_t group = ncclGroupEnd();
    for (std::size_t r = 0; r < n; ++r) failed += settle(group, children[r]) == ncclSuccess ? 0 : 1;
    for (const auto& result : out) failed += sums_are_right(result, nranks, c) ? 0 : 1;
  }
  for (std::size_t r = 0; r < n; ++r) {
    failed += settle(ncclSuccess, worlds[r]) == ncclSuccess ? 0 : 1;  // the splits are over
    ncclCommDestroy(children[r]);
    ncclCommDestroy(worlds[r]);
  }
  if (failed != 0) {
    std::fprintf(stderr, "trace_threads_job --late-children-elsewhere: %d failures\n", failed);
    return 1;
  }
  std::printf("trace_threads_job --late-children-elsewhere: %d ranks x %d grouped calls, every output as expected\n",
              nranks, calls);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr,
                 "usage: %s RANKS CALLS [ROUNDS | --one-thread | --one-thread-split | "
                 "--one-thread-split-after-nocolor | --late-children-elsewhere]\n",
                 argv[0]);
    return 2;
  }
  const int nranks = std::atoi(argv[1]);
  const int calls = std::atoi(argv[2]);
  if (argc == 4 && std::string_view(argv[3]) == "--one-thread") return one_thread(nranks, calls, Split::kNone);
  if (argc == 4 && std::string_view(argv[3]) == "--one-thread-split") return one_thread(nranks, calls, Split::kOnce);
  if (argc == 4 && std::string_view(argv[3]) == "--one-thread-split-after-nocolor") {
    return one_thread(nranks, calls, Split::kAfterNoColor);
  }
  if (argc == 4 && std::string_view(argv[3]) == "--late-children-elsewhere")
    return late_children_elsewhere(nranks, calls);
  const int rounds = argc == 4 ? std::atoi(argv[3]) : 1;
  std::vector<ncclComm_t> comms(static_cast<std::size_t>(nranks));
  std::vector<int> failures(static_cast<std::size_t>(nranks), 0);
  // Twice per round: once the round's communicators exist, and once every thread is done with them.
  std::barrier round_step(nranks + 1);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      std::vector<float> in(kCount), out(kCount);
      for (int round = 0; round < rounds; ++round) {
        round_step.arrive_and_wait();
        for (int c = 0; c < calls; ++c) {
          for (std::size_t i = 0; i < kCount; ++i) in[i] = input(r, c, i);
          // Every other call inside a group of one, to exercise the per-thread group state.
          const bool grouped = c % 2 == 1;
          if (grouped) ncclGroupStart();
          const ncclResult_t result = ncclAllReduce(in.data(), out.data(), kCount, ncclFloat32, ncclSum,
                                                    comms[static_cast<std::size_t>(r)], nullptr);
          if (grouped) ncclGroupEnd();
          if (result != ncclSuccess) ++failures[static_cast<std::size_t>(r)];
          if (!sums_are_right(out, nranks, c)) ++failures[static_cast<std::size_t>(r)];
        }
        round_step.arrive_and_wait();
      }
    });
  }
  std::set<ncclComm_t> handles_seen;
  int handles_reused = 0;
  for (int round = 0; round < rounds; ++round) {
    if (ncclCommInitAll(comms.data(), nranks, nullptr) != ncclSuccess) {
      std::fprintf(stderr, "ncclCommInitAll failed: %s\n", ncclGetLastError(nullptr));
      std::_Exit(1);  // the threads wait at the barrier for good
    }
    for (ncclComm_t comm : comms) handles_reused += handles_seen.insert(comm).second ? 0 : 1;
    round_step.arrive_and_wait();
    round_step.arrive_and_wait();
    for (ncclComm_t comm : comms) ncclCommDestroy(comm);
  }
  for (auto& thread : threads) thread.join();
  int failed = 0;
  for (int f : failures) failed += f;
  if (failed != 0) {
    std::fprintf(stderr, "trace_threads_job: %d failed calls\n", failed);
    return 1;
  }
  std::printf("trace_threads_job: %d ranks x %d calls x %d rounds, every output as expected; %d handles reused\n",
              nranks, calls, rounds, handles_reused);
  return 0;
}
