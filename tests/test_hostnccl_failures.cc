// hostnccl failure handling and reduction order: a killed peer makes the survivors fail instead of hanging, a peer
// that never joins makes them time out after HOSTNCCL_TIMEOUT_S, and nothing is left in /dev/shm either way;
// HOSTNCCL_REDUCE_ORDER=arrival really makes floating-point sums vary from call to call (identically on every rank
// of a call), and HOSTNCCL_REDUCE_ORDER=rank makes them reproducible.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "tests/test_hostnccl_harness.h"

namespace {
using namespace hostnccl_test;

// Survivors of a peer killed while they wait in a collective (or a group of receives) get an error; afterwards the
// communicator reports the error, answers no query (NCCL 2.28's ncclCommEnsureReady returns the async error to
// ncclCommCount, ncclCommCuDevice and ncclCommUserRank, without a message of its own) and can still be destroyed.
void expect_failure_after_peer_death(bool point_to_point) {
  ScopedEnv env{{"HOSTNCCL_TIMEOUT_S", "3"}};
  constexpr int kRanks = 4, kVictim = 2;
  const ForkResult result = run_forked(
      kRanks,
      [&](Rank& R) {
        std::vector<float> data(10000, 1.0f);
        R.check.ok(ncclAllReduce(data.data(), data.data(), data.size(), ncclFloat32, ncclSum, R.comm, nullptr),
                   "first ncclAllReduce");
        if (R.rank == kVictim) raise(SIGKILL);
        ncclResult_t outcome;
        if (point_to_point) {
          ncclGroupStart();
          for (int peer = 0; peer < R.nranks; ++peer) {
            ncclRecv(data.data(), 100, ncclFloat32, peer, R.comm, nullptr);
            ncclSend(data.data() + 100, 100, ncclFloat32, peer, R.comm, nullptr);
          }
          outcome = ncclGroupEnd();
        } else {
          outcome = ncclAllReduce(data.data(), data.data(), data.size(), ncclFloat32, ncclSum, R.comm, nullptr);
        }
        R.check.expect(outcome == ncclRemoteError, "the call without the dead peer returned %d (%s)",
                       static_cast<int>(outcome), ncclGetLastError(R.comm));
        ncclResult_t async = ncclSuccess;
        R.check.ok(ncclCommGetAsyncError(R.comm, &async), "ncclCommGetAsyncError");
        R.check.expect(async == ncclRemoteError, "the communicator reports %d", static_cast<int>(async));
        const std::string why = ncclGetLastError(R.comm);
        int count = -1, device = -1, user_rank = -1;
        R.check.expect(ncclCommCount(R.comm, &count) == async, "ncclCommCount on the failed communicator");
        R.check.expect(ncclCommCuDevice(R.comm, &device) == async, "ncclCommCuDevice on the failed communicator");
        R.check.expect(ncclCommUserRank(R.comm, &user_rank) == async, "ncclCommUserRank on the failed communicator");
        R.check.expect(count == -1 && device == -1 && user_rank == -1, "a refused query wrote its output");
        R.check.expect(why == ncclGetLastError(R.comm), "a refused query changed the last error: %s",
                       ncclGetLastError(R.comm));
      },
      60);
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(result.status[static_cast<std::size_t>(r)], r == kVictim ? 128 + SIGKILL : 0) << "rank " << r;
  }
}

TEST(HostncclFailures, PeerKilledDuringCollective) { expect_failure_after_peer_death(false); }
TEST(HostncclFailures, PeerKilledDuringGroupedSendRecv) { expect_failure_after_peer_death(true); }

TEST(HostncclFailures, PeerThatNeverJoinsTimesOut) {
  ScopedEnv env{{"HOSTNCCL_TIMEOUT_S", "1"}};
  SharedMemory flag(sizeof(std::atomic<int>));
  auto* survivor_done = new (flag.as<void>()) std::atomic<int>(0);
  const ForkResult result = run_forked(2, [&](Rank& R) {
    if (R.rank == 1) {
      // Alive but absent: stays away until rank 0 has given up, so only the timeout can end rank 0's wait.
      while (survivor_done->load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return;
    }
    int x = 1;
    const ncclResult_t outcome = ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, R.comm, nullptr);
    survivor_done->store(1);
    R.check.expect(outcome == ncclSystemError, "the call returned %d", static_cast<int>(outcome));
    R.check.expect(std::string(ncclGetLastError(R.comm)).find("HOSTNCCL_TIMEOUT_S") != std::string::npos,
                   "last error names the timeout: %s", ncclGetLastError(R.comm));
  });
  EXPECT_TRUE(result.all_ok());
}

TEST(HostncclFailures, AbortFromAnotherThreadEndsABlockedCall) {
  // A watchdog thread aborts the communicator while the rank's own thread is blocked in an AllReduce that the other
  // rank never joins: the call returns ncclRemoteError (not the timeout), and the abort frees the communicator only
  // after the blocked call has let go of it (ASan reports a use after free otherwise).
  ScopedEnv env{{"HOSTNCCL_TIMEOUT_S", "30"}};
  SharedMemory flag(sizeof(std::atomic<int>));
  auto* rank0_done = new (flag.as<void>()) std::atomic<int>(0);
  const ForkResult result = fork_ranks(2, [&](int rank, const ncclUniqueId& id) {
    RankCheck check(rank);
    ncclComm_t comm = nullptr;
    if (!check.ok(ncclCommInitRank(&comm, 2, id, rank), "ncclCommInitRank")) return 1;
    if (rank == 1) {
      while (rank0_done->load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      ncclCommAbort(comm);  // its peer aborted: nothing more to do on it
      return 0;
    }
    ncclResult_t aborted = ncclInternalError;  // written by the watchdog, read after joining it
    std::thread watchdog([comm, &aborted] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      aborted = ncclCommAbort(comm);
    });
    int x = 1;
    const auto started = std::chrono::steady_clock::now();
    const ncclResult_t outcome = ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, comm, nullptr);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    watchdog.join();
    rank0_done->store(1);
    check.ok(aborted, "ncclCommAbort");
    check.expect(outcome == ncclRemoteError, "the blocked call returned %d", static_cast<int>(outcome));
    check.expect(waited < 10, "the blocked call ended %.1f s later, not at the abort", waited);
    return check.failures() == 0 ? 0 : 1;
  });
  EXPECT_TRUE(result.all_ok());
}

TEST(HostncclFailures, InitWithoutPeersTimesOutAndUnlinks) {
  ScopedEnv env{{"HOSTNCCL_TIMEOUT_S", "1"}};
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  EXPECT_EQ(ncclCommInitRank(&comm, 3, id, 0), ncclSystemError);
  EXPECT_EQ(comm, nullptr);
  EXPECT_FALSE(path_exists(segment_path(id)));
}

// Values of widely varying magnitude: their float sum depends on the order of the additions.
constexpr int kOrderRanks = 4;
constexpr std::size_t kOrderCount = 16;
float order_input(int rank, std::size_t i) {
  static const float kMagnitudes[kOrderRanks] = {1.0e8f, 3.0f, -1.0e8f, 7.0e-3f};
  return kMagnitudes[rank] * (1.0f + static_cast<float>(i) * 0.37f);
}

struct OrderResults {
  static constexpr int kTries = 150;
  float values[kTries][kOrderRanks][kOrderCount];
};

// Runs kTries allreduces of order_input on 4 forked ranks, each rank jittering its arrival, and collects every
// rank's result of every try.
void run_order_experiment(OrderResults* results) {
  const ForkResult forked = run_forked(kOrderRanks, [&](Rank& R) {
    std::mt19937 rng(static_cast<unsigned>(R.rank * 7919 + getpid()));
    std::uniform_int_distribution<int> jitter_us(0, 300);
    std::array<float, kOrderCount> send{}, recv{};
    for (std::size_t i = 0; i < kOrderCount; ++i) send[i] = order_input(R.rank, i);
    for (int t = 0; t < OrderResults::kTries; ++t) {
      std::this_thread::sleep_for(std::chrono::microseconds(jitter_us(rng)));
      if (!R.check.ok(ncclAllReduce(send.data(), recv.data(), kOrderCount, ncclFloat32, ncclSum, R.comm, nullptr),
                      "ncclAllReduce")) {
        return;
      }
      std::memcpy(results->values[t][R.rank], recv.data(), sizeof recv);
    }
  });
  ASSERT_TRUE(forked.all_ok());
}

// The left-to-right float sums of element i over every order of the ranks.
std::set<std::uint32_t> every_order_sum(std::size_t i) {
  std::array<int, kOrderRanks> order{0, 1, 2, 3};
  std::set<std::uint32_t> sums;
  do {
    float acc = order_input(order[0], i);
    for (int k = 1; k < kOrderRanks; ++k) acc += order_input(order[static_cast<std::size_t>(k)], i);
    sums.insert(std::bit_cast<std::uint32_t>(acc));
  } while (std::next_permutation(order.begin(), order.end()));
  return sums;
}

TEST(HostncclReduceOrder, ArrivalOrderVariesBetweenCallsButNotBetweenRanks) {
  ScopedEnv env{{"HOSTNCCL_REDUCE_ORDER", nullptr}};  // the default is arrival
  SharedMemory memory(sizeof(OrderResults));
  auto* results = memory.as<OrderResults>();
  run_order_experiment(results);
  const std::set<std::uint32_t> possible = every_order_sum(0);
  ASSERT_GT(possible.size(), 2u) << "the inputs must make the sum order-dependent";
  std::set<std::uint32_t> seen;
  for (int t = 0; t < OrderResults::kTries; ++t) {
    for (int r = 1; r < kOrderRanks; ++r) {
      ASSERT_EQ(std::memcmp(results->values[t][r], results->values[t][0], sizeof results->values[t][0]), 0)
          << "try " << t << ": rank " << r << " differs from rank 0";
    }
    const auto bits = std::bit_cast<std::uint32_t>(results->values[t][0][0]);
    EXPECT_TRUE(possible.count(bits)) << "try " << t << ": " << results->values[t][0][0]
                                      << " is no left-to-right sum in any rank order";
    seen.insert(bits);
  }
  EXPECT_GE(seen.size(), 2u) << "arrival order never changed the sum in " << OrderResults::kTries << " tries";
}

TEST(HostncclReduceOrder, RankOrderIsReproducible) {
  ScopedEnv env{{"HOSTNCCL_REDUCE_ORDER", "rank"}};
  SharedMemory memory(sizeof(OrderResults));
  auto* results = memory.as<OrderResults>();
  run_order_experiment(results);
  for (std::size_t i = 0; i < kOrderCount; ++i) {
    float expected = order_input(0, i);
    for (int r = 1; r < kOrderRanks; ++r) expected += order_input(r, i);
    for (int t = 0; t < OrderResults::kTries; ++t) {
      for (int r = 0; r < kOrderRanks; ++r) {
        ASSERT_EQ(std::bit_cast<std::uint32_t>(results->values[t][r][i]), std::bit_cast<std::uint32_t>(expected))
            << "try " << t << " rank " << r << " element " << i;
      }
    }
  }
}

}  // namespace
