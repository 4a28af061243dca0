// hostnccl point-to-point: grouped sends and receives among many peers never deadlock (an all-to-all built from
// one group of sends and receives among 8 ranks, messages larger than the ring), issue order per peer, sends to
// self, blocking pairs outside groups, and size mismatches.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "tests/test_hostnccl_harness.h"

namespace {
using namespace hostnccl_test;

// Element i of the message from src to dst, and the message's length: uneven, some longer than a 4 KiB ring.
std::int32_t message_value(int src, int dst, std::size_t i) {
  return static_cast<std::int32_t>(src * 1000003 + dst * 10007 + static_cast<int>(i));
}
std::size_t message_count(int src, int dst) { return 1 + static_cast<std::size_t>((src * 5 + dst * 3) % 7) * 700; }

void all_to_all_from_sends_and_receives(Rank& R) {
  const int n = R.nranks, me = R.rank;
  std::vector<std::vector<std::int32_t>> out(static_cast<std::size_t>(n)), in(static_cast<std::size_t>(n));
  for (int peer = 0; peer < n; ++peer) {
    const auto p = static_cast<std::size_t>(peer);
    out[p].resize(message_count(me, peer));
    for (std::size_t i = 0; i < out[p].size(); ++i) out[p][i] = message_value(me, peer, i);
    in[p].assign(message_count(peer, me), -1);
  }
  R.check.ok(ncclGroupStart(), "ncclGroupStart");
  // Receives first on odd ranks, sends first on even ones: the order inside a group must not matter.
  for (int step = 0; step < 2; ++step) {
    const bool sending = (step == 0) == (me % 2 == 0);
    for (int k = 0; k < n; ++k) {
      const int peer = (me + k) % n;  // self included
      const auto p = static_cast<std::size_t>(peer);
      if (sending) {
        R.check.ok(ncclSend(out[p].data(), out[p].size(), ncclInt32, peer, R.comm, nullptr), "ncclSend");
      } else {
        R.check.ok(ncclRecv(in[p].data(), in[p].size(), ncclInt32, peer, R.comm, nullptr), "ncclRecv");
      }
    }
  }
  if (!R.check.ok(ncclGroupEnd(), "ncclGroupEnd")) return;
  for (int peer = 0; peer < n; ++peer) {
    const auto& got = in[static_cast<std::size_t>(peer)];
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (!R.check.expect(got[i] == message_value(peer, me, i), "from %d element %zu: %d, expected %d", peer, i, got[i],
                          message_value(peer, me, i))) {
        break;
      }
    }
  }
}

// Several messages to the same peer in one group arrive in issue order, whatever their sizes.
void issue_order_per_peer(Rank& R) {
  const int n = R.nranks, me = R.rank;
  const int right = (me + 1) % n, left = (me + n - 1) % n;
  const std::vector<std::size_t> sizes{3000, 1, 0, 17};
  std::vector<std::vector<double>> out, in;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    out.emplace_back(sizes[k], static_cast<double>(me * 100 + static_cast<int>(k)));
    in.emplace_back(sizes[k], -1.0);
  }
  R.check.ok(ncclGroupStart(), "ncclGroupStart");
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    R.check.ok(ncclRecv(in[k].data(), sizes[k], ncclFloat64, left, R.comm, nullptr), "ncclRecv");
    R.check.ok(ncclSend(out[k].data(), sizes[k], ncclFloat64, right, R.comm, nullptr), "ncclSend");
  }
  if (!R.check.ok(ncclGroupEnd(), "ncclGroupEnd")) return;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    for (double value : in[k]) {
      if (!R.check.expect(value == left * 100 + static_cast<int>(k), "message %zu from %d holds %g", k, left, value)) {
        break;
      }
    }
  }
}

// Outside any group each call is a group of one: a send larger than the ring completes as the peer drains it.
void blocking_pairs(Rank& R) {
  if (R.nranks < 2 || R.rank > 1) return;
  std::vector<std::uint8_t> data(20000);
  if (R.rank == 0) {
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::uint8_t>(i * 7);
    R.check.ok(ncclSend(data.data(), data.size(), ncclUint8, 1, R.comm, nullptr), "ncclSend");
  } else {
    R.check.ok(ncclRecv(data.data(), data.size(), ncclUint8, 0, R.comm, nullptr), "ncclRecv");
    for (std::size_t i = 0; i < data.size(); ++i) {
      if (!R.check.expect(data[i] == static_cast<std::uint8_t>(i * 7), "byte %zu", i)) break;
    }
  }
}

void point_to_point(Rank& R) {
  all_to_all_from_sends_and_receives(R);
  issue_order_per_peer(R);
  blocking_pairs(R);
  // Zero-count messages need no partner.
  R.check.ok(ncclSend(nullptr, 0, ncclFloat32, 0, R.comm, nullptr), "empty ncclSend");
  R.check.ok(ncclRecv(nullptr, 0, ncclFloat32, 0, R.comm, nullptr), "empty ncclRecv");
}

class HostncclP2p : public ::testing::TestWithParam<int> {};

TEST_P(HostncclP2p, Forked) {
  ScopedEnv env{{"HOSTNCCL_RING_BYTES", "4096"}};
  const ForkResult result = run_forked(GetParam(), point_to_point, 120);
  for (std::size_t r = 0; r < result.status.size(); ++r) EXPECT_EQ(result.status[r], 0) << "rank " << r;
}

TEST_P(HostncclP2p, ThreadsInitRank) {
  ScopedEnv env{{"HOSTNCCL_RING_BYTES", "4096"}};
  EXPECT_EQ(run_threads(GetParam(), ThreadInit::kInitRank, point_to_point), 0);
}

TEST_P(HostncclP2p, ThreadsInitAll) {
  ScopedEnv env{{"HOSTNCCL_RING_BYTES", "4096"}};
  EXPECT_EQ(run_threads(GetParam(), ThreadInit::kInitAll, point_to_point), 0);
}

INSTANTIATE_TEST_SUITE_P(Ranks, HostncclP2p, ::testing::Values(1, 2, 3, 4, 5, 8));

TEST(HostncclP2p, ReceiveOfTheWrongSizeFails) {
  const ForkResult result = run_forked(2, [](Rank& R) {
    std::vector<float> data(8, 1.0f);
    if (R.rank == 0) {
      R.check.ok(ncclSend(data.data(), 4, ncclFloat32, 1, R.comm, nullptr), "ncclSend");
    } else {
      const ncclResult_t received = ncclRecv(data.data(), 8, ncclFloat32, 0, R.comm, nullptr);
      R.check.expect(received == ncclInvalidUsage, "mismatched ncclRecv returned %d", static_cast<int>(received));
      R.check.expect(std::string(ncclGetLastError(R.comm)).find("sent 16") != std::string::npos, "last error: %s",
                     ncclGetLastError(R.comm));
      ncclResult_t async = ncclSuccess;
      R.check.ok(ncclCommGetAsyncError(R.comm, &async), "ncclCommGetAsyncError");
      R.check.expect(async == ncclInvalidUsage, "async error %d", static_cast<int>(async));
    }
  });
  EXPECT_TRUE(result.all_ok());
}

}  // namespace
