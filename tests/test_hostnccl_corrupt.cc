// HOSTNCCL_CORRUPT (hostnccl/settings.h, docs/hostnccl.md "Fault injection"): the same job with and without the fault
// differs in exactly the chosen element of the chosen rank's output of the chosen call, by the factor (integers: by
// the addend), counting calls as the shim's seq does (every collective, send and receive of the process, from 0).
//
// Every test forks its ranks from a test process that makes no NCCL call itself, so each rank's count of calls
// starts at 0 whatever ran before in this binary.
#include <cmath>
#include <cstring>
#include <vector>

#include "collectives/dtype_arith.h"
#include "tests/test_hostnccl_harness.h"

namespace {
using namespace hostnccl_test;

constexpr int kRanks = 3;
constexpr std::size_t kCount = 1000;

// What one rank saw: the output of each of its reductions, as bytes.
struct Outputs {
  std::vector<std::vector<unsigned char>> per_call;
};

// Runs the job (forked ranks, rank order so that runs repeat bit for bit) and returns, per rank, the outputs of its
// reductions: [0] AllReduce (call 0), [1] AllReduce (call 3, after a send and a receive: calls 1 and 2),
// [2] ReduceScatter (call 4).
template <typename T>
std::vector<Outputs> run_job(ncclDataType_t type, const char* corrupt) {
  ScopedEnv env{{"HOSTNCCL_REDUCE_ORDER", "rank"}, {"HOSTNCCL_CORRUPT", corrupt}};
  constexpr std::size_t kOutputs = 3;
  const std::size_t bytes = kCount * sizeof(T);
  SharedMemory shared(kRanks * kOutputs * bytes);
  auto* base = shared.as<unsigned char>();
  const ForkResult result = run_forked(kRanks, [&](Rank& R) {
    std::vector<T> send(kCount * kRanks), recv(kCount), ring_out(4), ring_in(4);
    for (std::size_t i = 0; i < send.size(); ++i) {
      const float v = static_cast<float>((R.rank + 1) * 0.37 + static_cast<double>(i) * 0.011);
      if constexpr (std::is_same_v<T, detnccl::arith::Bfloat16>) {
        send[i] = T{detnccl::arith::float_to_bf16(v)};
      } else {
        send[i] = static_cast<T>(std::is_integral_v<T> ? (R.rank + 1) * 10 + static_cast<int>(i) : v);
      }
    }
    const auto keep = [&](std::size_t k) {
      std::memcpy(base + (static_cast<std::size_t>(R.rank) * kOutputs + k) * bytes, recv.data(), bytes);
    };
    R.check.ok(ncclAllReduce(send.data(), recv.data(), kCount, type, ncclSum, R.comm, nullptr), "AllReduce");
    keep(0);
    const int next = (R.rank + 1) % kRanks, previous = (R.rank + kRanks - 1) % kRanks;
    R.check.ok(ncclGroupStart(), "ncclGroupStart");
    R.check.ok(ncclSend(ring_out.data(), ring_out.size(), type, next, R.comm, nullptr), "ncclSend");
    R.check.ok(ncclRecv(ring_in.data(), ring_in.size(), type, previous, R.comm, nullptr), "ncclRecv");
    R.check.ok(ncclGroupEnd(), "ncclGroupEnd");
    R.check.ok(ncclAllReduce(send.data(), recv.data(), kCount, type, ncclSum, R.comm, nullptr), "AllReduce");
    keep(1);
    R.check.ok(ncclReduceScatter(send.data(), recv.data(), kCount, type, ncclSum, R.comm, nullptr), "ReduceScatter");
    keep(2);
  });
  EXPECT_TRUE(result.all_ok());
  std::vector<Outputs> outputs(kRanks);
  for (std::size_t r = 0; r < kRanks; ++r) {
    for (std::size_t k = 0; k < kOutputs; ++k) {
      const unsigned char* at = base + (r * kOutputs + k) * bytes;
      outputs[r].per_call.emplace_back(at, at + bytes);
    }
  }
  return outputs;
}

// The elements of `a` and `b` (of `size` bytes) that differ.
std::vector<std::size_t> differing(const std::vector<unsigned char>& a, const std::vector<unsigned char>& b,
                                   std::size_t size) {
  std::vector<std::size_t> indices;
  for (std::size_t i = 0; i * size < a.size(); ++i) {
    if (std::memcmp(a.data() + i * size, b.data() + i * size, size) != 0) indices.push_back(i);
  }
  return indices;
}

// Runs the job with and without the fault; expects exactly one element of one output to differ, returns the pair.
template <typename T>
std::pair<T, T> only_difference(ncclDataType_t type, const char* corrupt, int rank, int output, std::size_t element) {
  const std::vector<Outputs> clean = run_job<T>(type, nullptr), faulty = run_job<T>(type, corrupt);
  std::pair<T, T> values{};
  for (int r = 0; r < kRanks; ++r) {
    for (int k = 0; k < 3; ++k) {
      const auto& a = clean[static_cast<std::size_t>(r)].per_call[static_cast<std::size_t>(k)];
      const auto& b = faulty[static_cast<std::size_t>(r)].per_call[static_cast<std::size_t>(k)];
      const std::vector<std::size_t> indices = differing(a, b, sizeof(T));
      if (r == rank && k == output) {
        EXPECT_EQ(indices, std::vector<std::size_t>{element}) << "rank " << r << " output " << k;
        std::memcpy(&values.first, a.data() + element * sizeof(T), sizeof(T));
        std::memcpy(&values.second, b.data() + element * sizeof(T), sizeof(T));
      } else {
        EXPECT_TRUE(indices.empty()) << "rank " << r << " output " << k << " differs at " << indices.size()
                                     << " elements";
      }
    }
  }
  return values;
}

TEST(HostncclCorrupt, Fp32AllReduceDiffersInExactlyTheChosenElementByTheFactor) {
  // Call 3: the second AllReduce (calls 1 and 2 are the send and the receive).
  const auto [clean, faulty] = only_difference<float>(ncclFloat32, "rank:1,call:3,element:417,factor:1001", 1, 1, 417);
  EXPECT_EQ(faulty, static_cast<float>(static_cast<double>(clean) * 1001));
  EXPECT_NE(clean, 0.0f);
}

TEST(HostncclCorrupt, FirstCallAndReduceScatterAreChosenToo) {
  const auto [a, b] = only_difference<double>(ncclFloat64, "rank:0,call:0,element:0,factor:-2", 0, 0, 0);
  EXPECT_EQ(b, -2 * a);
  const auto [c, d] = only_difference<float>(ncclFloat32, "call:4,rank:2,element:999,factor:1.5", 2, 2, 999);
  EXPECT_EQ(d, static_cast<float>(static_cast<double>(c) * 1.5));
}

TEST(HostncclCorrupt, Bfloat16IsRoundedAndIntegersGetTheFactorAdded) {
  const auto [a, b] =
      only_difference<detnccl::arith::Bfloat16>(ncclBfloat16, "rank:2,call:0,element:10,factor:1001", 2, 0, 10);
  EXPECT_EQ(b.bits, detnccl::arith::float_to_bf16(detnccl::arith::bf16_to_float(a.bits) * 1001.0f));
  const auto [i, j] = only_difference<std::int32_t>(ncclInt32, "rank:0,call:3,element:5,factor:7", 0, 1, 5);
  EXPECT_EQ(j, i + 7);
}

TEST(HostncclCorrupt, NotAReductionOrBeyondTheOutputChangesNothing) {
  // Call 1 is a send; element 1000 is past the output: the runs are the same.
  for (const char* fault : {"rank:0,call:1,element:0,factor:9", "rank:0,call:0,element:1000,factor:9"}) {
    const std::vector<Outputs> clean = run_job<float>(ncclFloat32, nullptr),
                               faulty = run_job<float>(ncclFloat32, fault);
    for (int r = 0; r < kRanks; ++r) {
      EXPECT_EQ(clean[static_cast<std::size_t>(r)].per_call, faulty[static_cast<std::size_t>(r)].per_call) << fault;
    }
  }
}

TEST(HostncclCorrupt, AMalformedValueFailsTheInitNamingTheVariable) {
  for (const char* bad : {"rank:1,call:3,element:4", "rank:1,call:3,element:4,factor:x",
                          "rank:-1,call:3,element:4,factor:2", "rank:1,call:3,element:4,factor:2,",
                          "rank:1,rank:2,call:3,element:4,factor:2", "colour:1,call:3,element:4,factor:2"}) {
    ScopedEnv env{{"HOSTNCCL_CORRUPT", bad}};
    const ForkResult result = fork_ranks(1, [&](int rank, const ncclUniqueId& id) {
      ncclComm_t comm = nullptr;
      const ncclResult_t r = ncclCommInitRank(&comm, 1, id, rank);
      const std::string text = ncclGetLastError(nullptr);
      if (r != ncclInvalidArgument || text.find("HOSTNCCL_CORRUPT='") == std::string::npos) {
        std::fprintf(stderr, "%s: init returned %d, last error '%s'\n", bad, static_cast<int>(r), text.c_str());
        return 1;
      }
      return 0;
    });
    EXPECT_TRUE(result.all_ok()) << bad;
  }
}

}  // namespace
