// hostnccl's non-blocking communicators (ncclConfig_t.blocking = 0): the init, the calls and the splits return
// ncclInProgress, the operations complete on a background thread, ncclCommGetAsyncError reports ncclInProgress until
// then and the group's result after; a call made before completion is refused; a group may not mix blocking and
// non-blocking communicators.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_hostnccl_harness.h"

namespace {

using hostnccl_test::fork_ranks;
using hostnccl_test::RankCheck;

// Polls ncclCommGetAsyncError until the state is no longer ncclInProgress; returns that state.
ncclResult_t wait_for(ncclComm_t comm, RankCheck& check) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress && std::chrono::steady_clock::now() < deadline) {
    if (!check.ok(ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError")) return ncclInternalError;
    if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return state;
}

// One fp32 AllReduce of rank + 1 on a 2-rank non-blocking communicator: it returns ncclInProgress, completes in the
// background and leaves 1 + 2. `what` names the communicator in messages.
void expect_non_blocking_sum(ncclComm_t comm, int rank, RankCheck& check, const char* what) {
  float value = static_cast<float>(rank + 1);
  check.expect(ncclAllReduce(&value, &value, 1, ncclFloat32, ncclSum, comm, nullptr) == ncclInProgress,
               "%s: the AllReduce did not return ncclInProgress", what);
  check.expect(wait_for(comm, check) == ncclSuccess, "%s: the AllReduce did not complete", what);
  check.expect(value == 3.0f, "%s: the AllReduce gave %g, expected 3", what, static_cast<double>(value));
}

ncclResult_t start_non_blocking_init(ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return ncclCommInitRankConfig(comm, nranks, id, rank, &config);
}

// Creates a non-blocking communicator and waits until it is ready: its init returns ncclInProgress and completes in
// the background. Returns the state it settled in (ncclSuccess when ready).
ncclResult_t init_non_blocking(ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank) {
  RankCheck check(rank);
  const ncclResult_t issued = start_non_blocking_init(comm, nranks, id, rank);
  if (!check.expect(issued == ncclInProgress, "ncclCommInitRankConfig returned %d, expected ncclInProgress",
                    static_cast<int>(issued))) {
    return issued == ncclSuccess ? ncclInternalError : issued;
  }
  return wait_for(*comm, check);
}

// The init of a non-blocking communicator returns ncclInProgress and completes in the background, as NCCL's does.
// Until then the communicator refuses calls, and its queries fail the way NCCL's do (ncclInvalidArgument, with NCCL's
// text as the last error); afterwards it works and the queries answer.
TEST(HostncclNonBlocking, InitReturnsInProgressAndQueriesFailUntilItCompletes) {
  constexpr int kRanks = 2;
  const auto result = fork_ranks(kRanks, [&](int rank, const ncclUniqueId& id) {
    RankCheck check(rank);
    // Rank 0's init cannot complete before rank 1 joins, half a second later.
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    ncclComm_t comm = nullptr;
    const ncclResult_t issued = start_non_blocking_init(&comm, kRanks, id, rank);
    check.expect(issued == ncclInProgress, "init returned %d, expected ncclInProgress", static_cast<int>(issued));
    check.expect(comm != nullptr, "no communicator handle while the init is in progress");
    if (comm == nullptr) return 1;
    if (rank == 0) {
      ncclResult_t state = ncclSuccess;
      check.ok(ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError");
      check.expect(state == ncclInProgress, "async error %d before rank 1 joined", static_cast<int>(state));
      int count = -1, user_rank = -1, device = -1;
      check.expect(ncclCommCount(comm, &count) == ncclInvalidArgument, "ncclCommCount answered %d early", count);
      const std::string why = ncclGetLastError(comm);
      check.expect(why.find("before the previous operation returned ncclSuccess") != std::string::npos,
                   "last error: %s", why.c_str());
      check.expect(ncclCommUserRank(comm, &user_rank) == ncclInvalidArgument, "ncclCommUserRank answered early");
      check.expect(ncclCommCuDevice(comm, &device) == ncclInvalidArgument, "ncclCommCuDevice answered early");
      check.expect(count == -1 && user_rank == -1 && device == -1, "a refused query wrote its output");
      float value = 1;
      check.expect(ncclAllReduce(&value, &value, 1, ncclFloat32, ncclSum, comm, nullptr) == ncclInvalidArgument,
                   "a call during the init was not refused as NCCL refuses it");
    }
    check.expect(wait_for(comm, check) == ncclSuccess, "the init did not complete");
    int count = -1, user_rank = -1;
    check.ok(ncclCommCount(comm, &count), "ncclCommCount");
    check.ok(ncclCommUserRank(comm, &user_rank), "ncclCommUserRank");
    check.expect(count == kRanks && user_rank == rank, "ready: count %d rank %d", count, user_rank);
    expect_non_blocking_sum(comm, rank, check, "the ready communicator");
    check.ok(ncclCommDestroy(comm), "ncclCommDestroy");
    return check.failures() == 0 ? 0 : 1;
  });
  EXPECT_TRUE(result.all_ok());
}

// An init inside a group is created at the outermost ncclGroupEnd (as in NCCL): before that its queries fail, without
// failing the group.
TEST(HostncclNonBlocking, AnInitInsideAGroupCannotBeQueriedBeforeGroupEnd) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  ASSERT_NE(comm, nullptr);
  int count = -1;
  EXPECT_EQ(ncclCommCount(comm, &count), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(comm)).find("outermost ncclGroupEnd"), std::string::npos)
      << ncclGetLastError(comm);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess) << "a refused query does not fail the group";
  EXPECT_EQ(ncclCommCount(comm, &count), ncclSuccess);
  EXPECT_EQ(count, 1);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

TEST(HostncclNonBlocking, AllReduceReturnsInProgressAndCompletesWhenPolled) {
  constexpr int kRanks = 4;
  constexpr std::size_t kCount = 100000;  // several slots' worth of chunks
  const auto result = fork_ranks(kRanks, [&](int rank, const ncclUniqueId& id) {
    RankCheck check(rank);
    ncclComm_t comm = nullptr;
    if (!check.ok(init_non_blocking(&comm, kRanks, id, rank), "ncclCommInitRankConfig")) return 1;
    std::vector<std::int64_t> data(kCount);
    for (std::size_t i = 0; i < kCount; ++i) data[i] = static_cast<std::int64_t>(i) * (rank + 1);
    for (int round = 0; round < 3; ++round) {
      const ncclResult_t issued = ncclAllReduce(data.data(), data.data(), kCount, ncclInt64, ncclSum, comm, nullptr);
      check.expect(issued == ncclInProgress, "round %d: ncclAllReduce returned %d, expected ncclInProgress", round,
                   static_cast<int>(issued));
      check.expect(wait_for(comm, check) == ncclSuccess, "round %d: the AllReduce did not complete", round);
    }
    // Round 1 sums i * (1 + 2 + 3 + 4); rounds 2 and 3 each sum four equal values.
    for (std::size_t i = 0; i < kCount; i += 997) {
      const std::int64_t expected = static_cast<std::int64_t>(i) * 10 * kRanks * kRanks;
      if (!check.expect(data[i] == expected, "element %zu is %lld, expected %lld", i, static_cast<long long>(data[i]),
                        static_cast<long long>(expected))) {
        break;
      }
    }
    check.ok(ncclCommDestroy(comm), "ncclCommDestroy");
    return check.failures() == 0 ? 0 : 1;
  });
  EXPECT_TRUE(result.all_ok());
}

TEST(HostncclNonBlocking, GroupedSendRecvRingCompletesInTheBackground) {
  constexpr int kRanks = 3;
  constexpr std::size_t kBytes = 3 << 20;  // larger than a ring buffer: the transfer needs many passes
  const auto result = fork_ranks(kRanks, [&](int rank, const ncclUniqueId& id) {
    RankCheck check(rank);
    ncclComm_t comm = nullptr;
    if (!check.ok(init_non_blocking(&comm, kRanks, id, rank), "ncclCommInitRankConfig")) return 1;
    std::vector<std::uint8_t> out(kBytes), in(kBytes, 0);
    for (std::size_t i = 0; i < kBytes; ++i) out[i] = static_cast<std::uint8_t>(i * 7 + rank);
    const int next = (rank + 1) % kRanks, previous = (rank + kRanks - 1) % kRanks;
    check.ok(ncclGroupStart(), "ncclGroupStart");
    check.ok(ncclSend(out.data(), kBytes, ncclUint8, next, comm, nullptr), "ncclSend");
    check.ok(ncclRecv(in.data(), kBytes, ncclUint8, previous, comm, nullptr), "ncclRecv");
    const ncclResult_t end = ncclGroupEnd();
    check.expect(end == ncclInProgress, "ncclGroupEnd returned %d, expected ncclInProgress", static_cast<int>(end));
    check.expect(wait_for(comm, check) == ncclSuccess, "the grouped send/recv did not complete");
    for (std::size_t i = 0; i < kBytes; i += 4099) {
      if (!check.expect(in[i] == static_cast<std::uint8_t>(i * 7 + previous), "byte %zu differs", i)) break;
    }
    check.ok(ncclCommDestroy(comm), "ncclCommDestroy");
    return check.failures() == 0 ? 0 : 1;
  });
  EXPECT_TRUE(result.all_ok());
}

TEST(HostncclNonBlocking, CallBeforeCompletionIsRefusedAndTheCommunicatorStaysUsable) {
  constexpr int kRanks = 2;
  const auto result = fork_ranks(kRanks, [&](int rank, const ncclUniqueId& id) {
    RankCheck check(rank);
    ncclComm_t comm = nullptr;
    if (!check.ok(init_non_blocking(&comm, kRanks, id, rank), "ncclCommInitRankConfig")) return 1;
    float value = static_cast<float>(rank + 1);
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 0's first call must wait
    check.expect(ncclAllReduce(&value, &value, 1, ncclFloat32, ncclSum, comm, nullptr) == ncclInProgress,
                 "first AllReduce did not return ncclInProgress");
    if (rank == 0) {
      float other = 1;
      const ncclResult_t early = ncclAllReduce(&other, &other, 1, ncclFloat32, ncclSum, comm, nullptr);
      check.expect(early == ncclInvalidArgument,
                   "a call during ncclInProgress returned %d, expected ncclInvalidArgument (ncclCommEnsureReady)",
                   static_cast<int>(early));
    }
    check.expect(wait_for(comm, check) == ncclSuccess, "the first AllReduce did not complete");
    check.expect(value == 3.0f, "first AllReduce gave %g, expected 3", static_cast<double>(value));
    check.expect(ncclAllReduce(&value, &value, 1, ncclFloat32, ncclSum, comm, nullptr) == ncclInProgress,
                 "second AllReduce did not return ncclInProgress");
    check.expect(wait_for(comm, check) == ncclSuccess, "the second AllReduce did not complete");
    check.expect(value == 6.0f, "second AllReduce gave %g, expected 6", static_cast<double>(value));
    check.ok(ncclCommDestroy(comm), "ncclCommDestroy");
    return check.failures() == 0 ? 0 : 1;
  });
  EXPECT_TRUE(result.all_ok());
}

TEST(HostncclNonBlocking, PeerDeathIsReportedThroughTheAsyncError) {
  constexpr int kRanks = 2;
  const auto result = fork_ranks(kRanks, [&](int rank, const ncclUniqueId& id) {
    RankCheck check(rank);
    ncclComm_t comm = nullptr;
    if (!check.ok(init_non_blocking(&comm, kRanks, id, rank), "ncclCommInitRankConfig")) return 1;
    if (rank == 1) {  // leaves without taking part (destroying it joins the init's finished background thread)
      ncclCommDestroy(comm);
      _exit(0);
    }
    double value = 1;
    check.expect(ncclAllReduce(&value, &value, 1, ncclFloat64, ncclSum, comm, nullptr) == ncclInProgress,
                 "AllReduce did not return ncclInProgress");
    const ncclResult_t state = wait_for(comm, check);
    check.expect(state == ncclRemoteError, "async error is %d, expected ncclRemoteError", static_cast<int>(state));
    // The background thread's explanation reaches the polling thread.
    const std::string why = ncclGetLastError(nullptr);
    check.expect(why.find("peer rank 1") != std::string::npos, "ncclGetLastError says: %s", why.c_str());
    // The failed communicator answers no query: NCCL returns its async error.
    int count = -1;
    check.expect(ncclCommCount(comm, &count) == ncclRemoteError && count == -1, "ncclCommCount answered %d", count);
    ncclCommAbort(comm);
    return check.failures() == 0 ? 0 : 1;
  });
  EXPECT_TRUE(result.all_ok());
}

// A split's child is as blocking as its parent, unless the split's own config says otherwise (as in NCCL). The split
// itself is as blocking as its parent (NCCL launches its job on the parent), whatever the child's mode.
TEST(HostncclNonBlocking, SplitChildTakesTheSplitsConfigElseItsParentsMode) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t parent = nullptr;
  ASSERT_EQ(init_non_blocking(&parent, 1, id, 0), ncclSuccess);
  ncclConfig_t blocking_config = NCCL_CONFIG_INITIALIZER;
  blocking_config.blocking = 1;
  ncclConfig_t unset_config = NCCL_CONFIG_INITIALIZER;  // blocking left NCCL_CONFIG_UNDEF_INT
  ncclComm_t inherited = nullptr, unset = nullptr, blocking = nullptr;
  RankCheck check(0);
  ASSERT_EQ(ncclCommSplit(parent, 0, 0, &inherited, nullptr), ncclInProgress);
  ASSERT_EQ(wait_for(parent, check), ncclSuccess);
  ASSERT_EQ(ncclCommSplit(parent, 0, 0, &unset, &unset_config), ncclInProgress);
  ASSERT_EQ(wait_for(parent, check), ncclSuccess);
  ASSERT_EQ(ncclCommSplit(parent, 0, 0, &blocking, &blocking_config), ncclInProgress);
  ASSERT_EQ(wait_for(parent, check), ncclSuccess);
  ASSERT_TRUE(inherited != nullptr && unset != nullptr && blocking != nullptr);
  int value = 1;
  EXPECT_EQ(ncclAllReduce(&value, &value, 1, ncclInt32, ncclSum, inherited, nullptr), ncclInProgress);
  EXPECT_EQ(wait_for(inherited, check), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(&value, &value, 1, ncclInt32, ncclSum, unset, nullptr), ncclInProgress);
  EXPECT_EQ(wait_for(unset, check), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(&value, &value, 1, ncclInt32, ncclSum, blocking, nullptr), ncclSuccess);
  EXPECT_EQ(check.failures(), 0);
  for (ncclComm_t comm : {blocking, unset, inherited, parent}) EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// A split of a non-blocking parent is non-blocking, as NCCL's (src/init.cc ncclCommSplit launches the child's init on
// the parent; src/group.cc runs a non-blocking parent's group on a thread of its own): the call returns ncclInProgress
// with *newcomm null, the parent's async error says ncclInProgress (its calls are refused) until the ranks have
// exchanged their colors and created the child, and the child is in *newcomm once it says ncclSuccess. A rank that
// passes NCCL_SPLIT_NOCOLOR takes part the same way and gets no child.
TEST(HostncclNonBlocking, SplitOfANonBlockingParentReturnsInProgressAndHandsTheChildOverWhenDone) {
  constexpr int kRanks = 3;
  const auto result = fork_ranks(kRanks, [&](int rank, const ncclUniqueId& id) {
    RankCheck check(rank);
    ncclComm_t parent = nullptr;
    if (!check.ok(init_non_blocking(&parent, kRanks, id, rank), "ncclCommInitRankConfig")) return 1;
    // Rank 0's split cannot complete before rank 1 takes part, half a second later.
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    ncclComm_t child = reinterpret_cast<ncclComm_t>(&check);  // not a communicator: the split must clear it
    const int color = rank == 2 ? NCCL_SPLIT_NOCOLOR : 0;
    const ncclResult_t issued = ncclCommSplit(parent, color, -rank, &child, nullptr);
    check.expect(issued == ncclInProgress, "ncclCommSplit returned %d, expected ncclInProgress",
                 static_cast<int>(issued));
    if (rank == 0) {
      // Read atomically: the background thread stores the child there once the split is over.
      check.expect(__atomic_load_n(&child, __ATOMIC_ACQUIRE) == nullptr, "*newcomm is set before the split is over");
      ncclResult_t state = ncclSuccess;
      check.ok(ncclCommGetAsyncError(parent, &state), "ncclCommGetAsyncError");
      check.expect(state == ncclInProgress, "the parent's async error is %d before rank 1 split",
                   static_cast<int>(state));
      float value = 1;
      const ncclResult_t early = ncclAllReduce(&value, &value, 1, ncclFloat32, ncclSum, parent, nullptr);
      check.expect(early != ncclSuccess && early != ncclInProgress, "a call on the parent during the split returned %d",
                   static_cast<int>(early));
    }
    check.expect(wait_for(parent, check) == ncclSuccess, "the split did not complete");
    if (rank == 2) {
      check.expect(child == nullptr, "NCCL_SPLIT_NOCOLOR got a communicator");
    } else if (check.expect(child != nullptr, "no child once the parent says ncclSuccess")) {
      int count = -1, child_rank = -1;
      check.ok(ncclCommCount(child, &count), "ncclCommCount");
      check.ok(ncclCommUserRank(child, &child_rank), "ncclCommUserRank");
      check.expect(count == 2 && child_rank == 1 - rank, "child: count %d rank %d (keys reversed)", count, child_rank);
      expect_non_blocking_sum(child, rank, check, "the child (non-blocking as its parent)");
      check.ok(ncclCommDestroy(child), "ncclCommDestroy (child)");
    }
    // The parent still works.
    float value = 1;
    check.expect(ncclAllReduce(&value, &value, 1, ncclFloat32, ncclSum, parent, nullptr) == ncclInProgress,
                 "AllReduce on the parent");
    check.expect(wait_for(parent, check) == ncclSuccess, "the parent's AllReduce did not complete");
    check.expect(value == 3.0f, "the parent's AllReduce gave %g", static_cast<double>(value));
    check.ok(ncclCommDestroy(parent), "ncclCommDestroy");
    return check.failures() == 0 ? 0 : 1;
  });
  EXPECT_TRUE(result.all_ok());
}

// A split inside a group (of a blocking parent) hands its child over at the outermost ncclGroupEnd, as NCCL's does
// (the child's init job stores it in *newcomm when it ends, and the group's jobs run at ncclGroupEnd).
TEST(HostncclNonBlocking, SplitInsideAGroupHandsTheChildOverAtGroupEnd) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t parent = nullptr;
  ASSERT_EQ(ncclCommInitRank(&parent, 1, id, 0), ncclSuccess);
  ncclComm_t child = nullptr;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclCommSplit(parent, 0, 0, &child, nullptr), ncclSuccess);
  EXPECT_EQ(child, nullptr);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  ASSERT_NE(child, nullptr);
  int value = 5;
  EXPECT_EQ(ncclAllReduce(&value, &value, 1, ncclInt32, ncclSum, child, nullptr), ncclSuccess);
  EXPECT_EQ(value, 5);
  EXPECT_EQ(ncclCommDestroy(child), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(parent), ncclSuccess);
}

TEST(HostncclNonBlocking, GroupMixingBlockingAndNonBlockingCommunicatorsIsRefused) {
  ncclUniqueId first_id, second_id;
  ASSERT_EQ(ncclGetUniqueId(&first_id), ncclSuccess);
  ASSERT_EQ(ncclGetUniqueId(&second_id), ncclSuccess);
  ncclComm_t non_blocking = nullptr, blocking = nullptr;
  ASSERT_EQ(init_non_blocking(&non_blocking, 1, first_id, 0), ncclSuccess);
  ASSERT_EQ(ncclCommInitRank(&blocking, 1, second_id, 0), ncclSuccess);
  int a = 1, b = 2;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(&a, &a, 1, ncclInt32, ncclSum, non_blocking, nullptr), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(&b, &b, 1, ncclInt32, ncclSum, blocking, nullptr), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("mix blocking and non-blocking"), std::string::npos);
  // Both still work on their own.
  EXPECT_EQ(ncclAllReduce(&b, &b, 1, ncclInt32, ncclSum, blocking, nullptr), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(&a, &a, 1, ncclInt32, ncclSum, non_blocking, nullptr), ncclInProgress);
  RankCheck check(0);
  EXPECT_EQ(wait_for(non_blocking, check), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(non_blocking), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(blocking), ncclSuccess);
}

}  // namespace
