// Deterministic AllReduce / ReduceScatter / Reduce (collectives/) over hostnccl, 1 to 8 forked ranks: bitwise
// agreement with the tests' own model of the documented order (test_collectives_reference.h) for every datatype,
// operator, algorithm and accumulation mode at sizes 0, 1, n-1, n+1, primes and multi-chunk; independence from
// hostnccl's arrival order, from fusion into buckets, from the choice of algorithm and from placement; in-place
// buffers, user groups around the calls, PreMulSum scalars, and bytes sent against a ring's, counted.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "collectives/deterministic.h"
#include "tests/test_collectives_reference.h"
#include "tests/test_hostnccl_harness.h"

namespace {
using namespace hostnccl_test;
using namespace collectives_test;
namespace dc = detnccl::collectives;
using dc::Algorithm;
using dc::Collective;

// hostnccl's real entry points, with the bytes each process sends counted on the way (forked ranks each count
// their own).
std::atomic<std::size_t> g_bytes_sent{0};
ncclResult_t counting_send(const void* data, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                           cudaStream_t stream) {
  g_bytes_sent += count * detnccl::arith::dtype_size(type);
  return pncclSend(data, count, type, peer, comm, stream);
}
const dc::P2pFunctions kHostnccl{counting_send, pncclRecv, pncclGroupStart, pncclGroupEnd};

dc::CallContext context_of(const Rank& R) { return {R.comm, R.rank, R.nranks, nullptr, false}; }

constexpr ReductionKind kAllKinds[] = {ReductionKind::kSum, ReductionKind::kProd, ReductionKind::kMin,
                                       ReductionKind::kMax, ReductionKind::kAvg,  ReductionKind::kPreMulSum};
const char* kind_name(ReductionKind kind) {
  static const char* const kNames[] = {"sum", "prod", "min", "max", "avg", "premulsum"};
  return kNames[static_cast<int>(kind)];
}
const char* collective_name(Collective c) {
  return c == Collective::kAllReduce ? "allreduce" : c == Collective::kReduceScatter ? "reducescatter" : "reduce";
}

template <typename T>
ncclDataType_t datatype_of() {
  if constexpr (std::is_same_v<T, std::int8_t>) return ncclInt8;
  if constexpr (std::is_same_v<T, std::uint8_t>) return ncclUint8;
  if constexpr (std::is_same_v<T, std::int32_t>) return ncclInt32;
  if constexpr (std::is_same_v<T, std::uint32_t>) return ncclUint32;
  if constexpr (std::is_same_v<T, std::int64_t>) return ncclInt64;
  if constexpr (std::is_same_v<T, std::uint64_t>) return ncclUint64;
  if constexpr (std::is_same_v<T, Half>) return ncclFloat16;
  if constexpr (std::is_same_v<T, float>) return ncclFloat32;
  if constexpr (std::is_same_v<T, double>) return ncclFloat64;
  if constexpr (std::is_same_v<T, Bfloat16>) return ncclBfloat16;
  if constexpr (std::is_same_v<T, Fp8E4M3>) return ncclFloat8e4m3;
  if constexpr (std::is_same_v<T, Fp8E5M2>) return ncclFloat8e5m2;
}

// One deterministic call's shape.
struct Shape {
  Collective collective = Collective::kAllReduce;
  std::size_t count = 0;  // ReduceScatter: per-rank count
  ReductionKind kind = ReductionKind::kSum;
  int root = 0;
  dc::Options options;
  std::uint64_t seed = 1;
};

// Runs one call on this rank with inputs from input_value and checks the output against the model; returns false
// (after reporting) on any difference. `out` receives this rank's output. With `shift` > 0 the call's buffers start
// that many bytes past an aligned address (NCCL accepts any address).
template <typename T>
bool run_and_check(Rank& R, const Shape& s, std::vector<T>* out = nullptr, bool in_place = false,
                   std::size_t shift = 0) {
  const int n = R.nranks, me = R.rank;
  const std::size_t blocks = s.collective == Collective::kReduceScatter ? static_cast<std::size_t>(n) : 1;
  const std::size_t send_count = s.count * blocks;
  std::vector<T> send(send_count), recv(s.count);
  for (std::size_t i = 0; i < send_count; ++i) send[i] = input_value<T>(s.seed, me, i, s.kind);
  for (auto& x : recv) std::memset(&x, 0xA5, sizeof x);  // poison: every element must be written

  std::vector<T> scalars;
  for (int r = 0; r < n; ++r) scalars.push_back(scalar_value<T>(r));
  T my_scalar = scalars[static_cast<std::size_t>(me)];
  dc::Reduction reduction = *dc::builtin_reduction(ncclSum);
  reduction.kind = s.kind;
  if (s.kind == ReductionKind::kPreMulSum) {
    // Alternate the residences by seed: host-immediate copies now, device-style reads at the call.
    const auto residence = (s.seed & 1) ? ncclScalarHostImmediate : ncclScalarDevice;
    reduction = dc::premul_sum_reduction(&my_scalar, datatype_of<T>(), residence);
  }

  // Byte copies of the buffers, `shift` bytes in (shift 0: the vectors themselves).
  std::vector<unsigned char> send_bytes(shift + send_count * sizeof(T)), recv_bytes(shift + s.count * sizeof(T), 0xA5);
  unsigned char* sendbuff = reinterpret_cast<unsigned char*>(send.data());
  unsigned char* recvbuff = reinterpret_cast<unsigned char*>(recv.data());
  if (shift > 0) {
    std::memcpy(send_bytes.data() + shift, send.data(), send_count * sizeof(T));
    sendbuff = send_bytes.data() + shift;
    recvbuff = recv_bytes.data() + shift;
  }
  if (in_place) {
    recvbuff = sendbuff +
               (s.collective == Collective::kReduceScatter ? static_cast<std::size_t>(me) * s.count : 0) * sizeof(T);
  }
  dc::Workspace workspace;
  dc::Report report;
  ncclResult_t result = ncclSuccess;
  switch (s.collective) {
    case Collective::kAllReduce:
      result = dc::all_reduce(kHostnccl, context_of(R), sendbuff, recvbuff, s.count, datatype_of<T>(), reduction,
                              workspace, s.options, &report);
      break;
    case Collective::kReduceScatter:
      result = dc::reduce_scatter(kHostnccl, context_of(R), sendbuff, recvbuff, s.count, datatype_of<T>(), reduction,
                                  workspace, s.options, &report);
      break;
    case Collective::kReduce:
      result = dc::reduce(kHostnccl, context_of(R), sendbuff, me == s.root ? recvbuff : nullptr, s.count,
                          datatype_of<T>(), reduction, s.root, workspace, s.options, &report);
      break;
  }
  char what[200];
  std::snprintf(what, sizeof what, "%s %s type %d count %zu algo %s acc %s root %d%s shift %zu",
                collective_name(s.collective), kind_name(s.kind), static_cast<int>(datatype_of<T>()), s.count,
                dc::algorithm_name(report.algorithm), dc::accumulate_name(s.options.accumulate), s.root,
                in_place ? " in-place" : "", shift);
  if (!R.check.expect(result == ncclSuccess, "%s: returned %d: %s", what, static_cast<int>(result),
                      report.error.c_str())) {
    return false;
  }
  if (in_place || shift > 0) std::memcpy(recv.data(), recvbuff, s.count * sizeof(T));
  if (s.collective == Collective::kReduce && me != s.root) {
    if (out != nullptr) out->clear();
    return true;
  }
  // The expected value of each output element, from every rank's input.
  const std::size_t offset = s.collective == Collective::kReduceScatter ? static_cast<std::size_t>(me) * s.count : 0;
  std::vector<T> inputs(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < s.count; ++i) {
    for (int r = 0; r < n; ++r) inputs[static_cast<std::size_t>(r)] = input_value<T>(s.seed, r, offset + i, s.kind);
    const T want = expected_element<T>(s.kind, s.options.accumulate, inputs, scalars);
    if (!same_bits(recv[i], want)) {
      R.check.expect(false, "%s: element %zu is %.17Lg, expected %.17Lg", what, i, value_of(recv[i]), value_of(want));
      return false;
    }
  }
  if (out != nullptr) *out = recv;
  return true;
}

// Every collective x datatype x operator x algorithm x accumulation at the sizes the issue names; large sizes with a
// tiny scratch cap, so that they take many chunks.
template <typename T>
void every_shape_of_type(Rank& R) {
  const int n = R.nranks;
  const std::size_t un = static_cast<std::size_t>(n);
  std::vector<std::size_t> counts{0, 1, un + 1, 13, 131};
  if (n > 1) counts.push_back(un - 1);
  std::uint64_t seed = 11;
  for (Collective collective : {Collective::kAllReduce, Collective::kReduceScatter, Collective::kReduce}) {
    for (ReductionKind kind : kAllKinds) {
      for (Algorithm algorithm : {Algorithm::kMixedRadix, Algorithm::kOneShot}) {
        for (Accumulate accumulate : {Accumulate::kNative, Accumulate::kFloat32}) {
          if (accumulate == Accumulate::kFloat32 && !kNarrow<T>) continue;
          for (std::size_t count : counts) {
            Shape s;
            s.collective = collective;
            s.count = count;
            s.kind = kind;
            s.root = static_cast<int>((count + static_cast<std::size_t>(kind)) % un);
            s.options.algorithm = algorithm;
            s.options.accumulate = accumulate;
            // 131 is the "large" size: a scratch cap of 4 n^2 bytes splits it into several chunks (from 2 to dozens,
            // depending on the algorithm, the collective and the accumulator).
            s.options.scratch_bytes = count == 131 ? 4 * un * un : dc::kDefaultScratchBytes;
            s.seed = ++seed;
            if (!run_and_check<T>(R, s)) return;
          }
        }
      }
    }
  }
}

class EveryShape : public ::testing::TestWithParam<int> {};

TEST_P(EveryShape, MatchesTheDocumentedOrderBitForBit) {
  const int n = GetParam();
  const ForkResult result = run_forked(
      n,
      [](Rank& R) {
        every_shape_of_type<float>(R);
        every_shape_of_type<double>(R);
        every_shape_of_type<Half>(R);
        every_shape_of_type<Bfloat16>(R);
        every_shape_of_type<Fp8E4M3>(R);
        every_shape_of_type<Fp8E5M2>(R);
        every_shape_of_type<std::int8_t>(R);
        every_shape_of_type<std::uint8_t>(R);
        every_shape_of_type<std::int32_t>(R);
        every_shape_of_type<std::uint32_t>(R);
        every_shape_of_type<std::int64_t>(R);
        every_shape_of_type<std::uint64_t>(R);
      },
      240);
  for (std::size_t r = 0; r < result.status.size(); ++r) EXPECT_EQ(result.status[r], 0) << "rank " << r;
}
std::string ranks_name(const ::testing::TestParamInfo<int>& info) { return std::to_string(info.param) + "ranks"; }
INSTANTIATE_TEST_SUITE_P(Ranks, EveryShape, ::testing::Range(1, 9), ranks_name);

// ---------------------------------------------------------------------------------------------------------------
// Arrival order: hostnccl's own AllReduce adds in the order ranks arrive, so forcing a different arrival order per
// repetition changes its bits; the deterministic AllReduce gives the model's bits every time.

// A 64-bit digest of a buffer, to compare repetitions through shared memory.
std::uint64_t digest(const void* data, std::size_t bytes) {
  std::uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

TEST(Collectives, ArrivalOrderChangesHostncclButNotDeterministicResults) {
  ScopedEnv env{{"HOSTNCCL_REDUCE_ORDER", "arrival"}};
  constexpr int kRanks = 5, kRepetitions = 8;
  constexpr std::size_t kCount = 2000;
  SharedMemory shared(sizeof(std::uint64_t) * 2 * kRepetitions);
  auto* digests = shared.as<std::uint64_t>();  // [rep][0: hostnccl, 1: deterministic], written by rank 0
  const ForkResult result = run_forked(kRanks, [&](Rank& R) {
    std::vector<float> send(kCount), recv(kCount);
    for (std::size_t i = 0; i < kCount; ++i) send[i] = input_value<float>(99, R.rank, i, ReductionKind::kSum);
    for (int rep = 0; rep < kRepetitions; ++rep) {
      // Rank r arrives ((r * k) mod 5) * 3 ms late: k = 1..4 gives four different arrival orders.
      const int k = rep % 4 + 1;
      std::this_thread::sleep_for(std::chrono::milliseconds(3 * ((R.rank * k) % kRanks)));
      if (!R.check.ok(ncclAllReduce(send.data(), recv.data(), kCount, ncclFloat32, ncclSum, R.comm, nullptr),
                      "hostnccl ncclAllReduce")) {
        return;
      }
      if (R.rank == 0) digests[2 * rep] = digest(recv.data(), kCount * sizeof(float));
      std::this_thread::sleep_for(std::chrono::milliseconds(3 * ((R.rank * k) % kRanks)));
      Shape s;
      s.count = kCount;
      s.seed = 99;
      std::vector<float> out;
      if (!run_and_check<float>(R, s, &out)) return;
      if (R.rank == 0) digests[2 * rep + 1] = digest(out.data(), kCount * sizeof(float));
    }
  });
  ASSERT_TRUE(result.all_ok());
  std::vector<std::uint64_t> hostnccl_digests;
  for (int rep = 0; rep < kRepetitions; ++rep) {
    hostnccl_digests.push_back(digests[2 * rep]);
    EXPECT_EQ(digests[2 * rep + 1], digests[1]) << "repetition " << rep;
  }
  std::sort(hostnccl_digests.begin(), hostnccl_digests.end());
  const auto distinct = std::unique(hostnccl_digests.begin(), hostnccl_digests.end()) - hostnccl_digests.begin();
  // Without deterministic mode the same inputs gave several different results: the premise of the test.
  EXPECT_GE(distinct, 2) << "hostnccl's arrival order did not change its result; the test proves nothing";
}

// Non-blocking communicators: hostnccl's ncclGroupEnd returns ncclInProgress and moves the data on a background
// thread. With comm_get_async_error the algorithms wait for each exchange and give the blocking run's bits; without
// it they stop at the first exchange with ncclInProgress and say why.
TEST(Collectives, NonBlockingCommunicatorsGiveTheBlockingBits) {
  constexpr int kRanks = 4;
  const std::size_t counts[] = {1, 1000, 300001};
  SharedMemory shared(sizeof(std::uint64_t) * 2 * std::size(counts));
  auto* digests = shared.as<std::uint64_t>();  // [count][0: blocking, 1: non-blocking], written by rank 0
  const auto reduce_all = [&](const dc::P2pFunctions& nccl, ncclComm_t comm, int rank, RankCheck& check, int slot) {
    for (std::size_t c = 0; c < std::size(counts); ++c) {
      std::vector<float> send(counts[c]), recv(counts[c]);
      for (std::size_t i = 0; i < counts[c]; ++i) send[i] = input_value<float>(7, rank, i, ReductionKind::kSum);
      dc::Workspace workspace;
      dc::Report report;
      const ncclResult_t result =
          dc::all_reduce(nccl, {comm, rank, kRanks, nullptr, false}, send.data(), recv.data(), counts[c], ncclFloat32,
                         *dc::builtin_reduction(ncclSum), workspace, dc::Options{}, &report);
      if (!check.expect(result == ncclSuccess, "count %zu: all_reduce returned %d: %s", counts[c],
                        static_cast<int>(result), report.error.c_str())) {
        return;
      }
      if (rank == 0) digests[2 * c + static_cast<std::size_t>(slot)] = digest(recv.data(), counts[c] * sizeof(float));
    }
  };
  ASSERT_TRUE(run_forked(kRanks, [&](Rank& R) { reduce_all(kHostnccl, R.comm, R.rank, R.check, 0); }).all_ok());

  dc::P2pFunctions polling = kHostnccl;
  polling.comm_get_async_error = pncclCommGetAsyncError;
  const ForkResult non_blocking = fork_ranks(kRanks, [&](int rank, const ncclUniqueId& id) {
    RankCheck check(rank);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    // The init itself is non-blocking: it returns ncclInProgress and completes in the background.
    ncclResult_t state = ncclCommInitRankConfig(&comm, kRanks, id, rank, &config);
    while (state == ncclInProgress && pncclCommGetAsyncError(comm, &state) == ncclSuccess) {
      std::this_thread::yield();
    }
    if (!check.ok(state, "ncclCommInitRankConfig")) return 1;
    reduce_all(polling, comm, rank, check, 1);
    // Without a way to wait, the first exchange cannot go on: the call fails and names the reason.
    float x = 1, y = 0;
    dc::Workspace workspace;
    dc::Report report;
    const ncclResult_t refused = dc::all_reduce(kHostnccl, {comm, rank, kRanks, nullptr, false}, &x, &y, 1, ncclFloat32,
                                                *dc::builtin_reduction(ncclSum), workspace, dc::Options{}, &report);
    check.expect(refused == ncclInProgress, "without comm_get_async_error: %d", static_cast<int>(refused));
    check.expect(report.error.find("comm_get_async_error") != std::string::npos, "reason: %s", report.error.c_str());
    check.ok(ncclCommDestroy(comm), "ncclCommDestroy");  // waits for the abandoned exchange to finish
    return check.failures() == 0 ? 0 : 1;
  });
  ASSERT_TRUE(non_blocking.all_ok());
  for (std::size_t c = 0; c < std::size(counts); ++c) {
    EXPECT_EQ(digests[2 * c + 1], digests[2 * c]) << counts[c] << " elements";
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Fusion: a tensor reduced alone, or inside a bucket at any offset, with any algorithm and chunking, has the same bits.

template <typename T>
void fusion_invariance(Rank& R, Collective collective) {
  constexpr std::size_t kTensor = 37, kBucket = 30011;
  const std::size_t un = static_cast<std::size_t>(R.nranks);
  const std::size_t blocks = collective == Collective::kReduceScatter ? un : 1;
  const auto tensor_value = [&](int rank, std::size_t block, std::size_t i) {
    return input_value<T>(5, rank, block * kTensor + i, ReductionKind::kSum);
  };
  // Alone (the automatic choice: one_shot at this size for n <= 16).
  std::vector<T> alone_send(kTensor * blocks), alone(kTensor);
  for (std::size_t b = 0; b < blocks; ++b) {
    for (std::size_t i = 0; i < kTensor; ++i) alone_send[b * kTensor + i] = tensor_value(R.rank, b, i);
  }
  dc::Workspace workspace;
  const dc::Reduction sum = *dc::builtin_reduction(ncclSum);
  const int root = R.nranks - 1;
  const auto call = [&](const std::vector<T>& send, std::vector<T>& recv, std::size_t count, const dc::Options& options,
                        dc::Report* report) {
    if (collective == Collective::kAllReduce) {
      return dc::all_reduce(kHostnccl, context_of(R), send.data(), recv.data(), count, datatype_of<T>(), sum, workspace,
                            options, report);
    }
    if (collective == Collective::kReduceScatter) {
      return dc::reduce_scatter(kHostnccl, context_of(R), send.data(), recv.data(), count, datatype_of<T>(), sum,
                                workspace, options, report);
    }
    return dc::reduce(kHostnccl, context_of(R), send.data(), recv.data(), count, datatype_of<T>(), sum, root, workspace,
                      options, report);
  };
  dc::Report alone_report;
  if (!R.check.ok(call(alone_send, alone, kTensor, dc::Options{}, &alone_report), "alone")) return;
  const bool has_output = collective != Collective::kReduce || R.rank == root;

  for (std::size_t offset : {std::size_t{0}, std::size_t{1}, std::size_t{12345}, kBucket - kTensor}) {
    for (std::size_t scratch : {dc::kDefaultScratchBytes, std::size_t{4096}}) {
      std::vector<T> send(kBucket * blocks), recv(kBucket);
      for (std::size_t i = 0; i < send.size(); ++i) send[i] = input_value<T>(6, R.rank, i, ReductionKind::kSum);
      for (std::size_t b = 0; b < blocks; ++b) {
        for (std::size_t i = 0; i < kTensor; ++i) send[b * kBucket + offset + i] = tensor_value(R.rank, b, i);
      }
      dc::Options options;
      options.scratch_bytes = scratch;
      dc::Report report;
      if (!R.check.ok(call(send, recv, kBucket, options, &report), "bucket")) return;
      if (!has_output) continue;
      for (std::size_t i = 0; i < kTensor; ++i) {
        if (!R.check.expect(same_bits(recv[offset + i], alone[i]),
                            "%s type %d: element %zu alone (%s) is %.17Lg, in a bucket at offset %zu (%s, %zu "
                            "chunks) %.17Lg",
                            collective_name(collective), static_cast<int>(datatype_of<T>()), i,
                            dc::algorithm_name(alone_report.algorithm), value_of(alone[i]), offset,
                            dc::algorithm_name(report.algorithm), report.chunks, value_of(recv[offset + i]))) {
          return;
        }
      }
    }
  }
}

class Fusion : public ::testing::TestWithParam<int> {};

TEST_P(Fusion, TensorAloneOrInAnyBucketHasTheSameBits) {
  const ForkResult result = run_forked(GetParam(), [](Rank& R) {
    for (Collective c : {Collective::kAllReduce, Collective::kReduceScatter, Collective::kReduce}) {
      fusion_invariance<float>(R, c);
      fusion_invariance<Bfloat16>(R, c);
    }
    fusion_invariance<Fp8E4M3>(R, Collective::kAllReduce);
  });
  EXPECT_TRUE(result.all_ok());
}
INSTANTIATE_TEST_SUITE_P(Ranks, Fusion, ::testing::Values(3, 6, 8), ranks_name);

// ---------------------------------------------------------------------------------------------------------------
// Placement: which process runs which logical rank (and when each arrives) does not change any rank's bits. With
// hostnccl on one machine a placement is a permutation of processes over logical ranks.

TEST(Collectives, PlacementOfLogicalRanksOnProcessesDoesNotChangeBits) {
  constexpr int kRanks = 6;
  constexpr std::size_t kCount = 4099;
  SharedMemory shared(sizeof(float) * kCount * kRanks * 2);
  auto* results = shared.as<float>();  // [placement][logical rank][element]
  const int placements[2][kRanks] = {{0, 1, 2, 3, 4, 5}, {4, 2, 5, 0, 3, 1}};
  for (int placement = 0; placement < 2; ++placement) {
    const ForkResult result = fork_ranks(kRanks, [&](int process, const ncclUniqueId& id) {
      const int rank = placements[placement][process];
      RankCheck check(rank);
      ncclComm_t comm = nullptr;
      if (!check.ok(ncclCommInitRank(&comm, kRanks, id, rank), "ncclCommInitRank")) return 1;
      Rank R{rank, kRanks, comm, check};
      std::this_thread::sleep_for(std::chrono::milliseconds(2 * process));  // arrival follows the process
      Shape s;
      s.count = kCount;
      s.seed = 4;
      s.options.algorithm = Algorithm::kMixedRadix;
      std::vector<float> out;
      if (run_and_check<float>(R, s, &out)) {
        std::memcpy(results + (static_cast<std::size_t>(placement) * kRanks + static_cast<std::size_t>(rank)) * kCount,
                    out.data(), kCount * sizeof(float));
      }
      check.ok(ncclCommDestroy(comm), "ncclCommDestroy");
      return check.failures() == 0 ? 0 : 1;
    });
    ASSERT_TRUE(result.all_ok());
  }
  for (int rank = 0; rank < kRanks; ++rank) {
    EXPECT_EQ(0, std::memcmp(results + static_cast<std::size_t>(rank) * kCount,
                             results + (static_cast<std::size_t>(kRanks) + static_cast<std::size_t>(rank)) * kCount,
                             kCount * sizeof(float)))
        << "logical rank " << rank;
    EXPECT_EQ(0, std::memcmp(results, results + static_cast<std::size_t>(rank) * kCount, kCount * sizeof(float)))
        << "ranks 0 and " << rank << " disagree";
  }
}

// ---------------------------------------------------------------------------------------------------------------
// In place, and inside a program that uses groups of its own around the calls.

TEST(Collectives, InPlaceBuffers) {
  for (int n : {1, 5}) {
    const ForkResult result = run_forked(n, [](Rank& R) {
      for (Collective c : {Collective::kAllReduce, Collective::kReduceScatter, Collective::kReduce}) {
        for (Algorithm algorithm : {Algorithm::kMixedRadix, Algorithm::kOneShot}) {
          Shape s;
          s.collective = c;
          s.count = 211;
          s.root = R.nranks / 2;
          s.options.algorithm = algorithm;
          s.options.scratch_bytes = 256;
          run_and_check<float>(R, s, nullptr, true);
          s.kind = ReductionKind::kAvg;
          run_and_check<Bfloat16>(R, s, nullptr, true);
          s.options.accumulate = Accumulate::kFloat32;
          run_and_check<Half>(R, s, nullptr, true);
        }
      }
    });
    EXPECT_TRUE(result.all_ok()) << n << " ranks";
  }
}

// Buffers at any address, as NCCL allows: elements not aligned for their type (a float at an odd address) give the
// model's bits with every algorithm, in and out of place. (A typed access there is undefined behaviour, which the
// UBSan build reports, and a fault on GPUs: bench/bench_deterministic_gpu.cu checks the device kernels.)
TEST(Collectives, BuffersNotAlignedForTheirTypeGiveTheModelsBits) {
  for (int n : {1, 6}) {
    const ForkResult result = run_forked(n, [](Rank& R) {
      for (Collective c : {Collective::kAllReduce, Collective::kReduceScatter, Collective::kReduce}) {
        for (Algorithm algorithm : {Algorithm::kMixedRadix, Algorithm::kOneShot}) {
          for (std::size_t shift : {std::size_t{1}, std::size_t{3}}) {
            for (bool in_place : {false, true}) {
              Shape s;
              s.collective = c;
              s.count = 97;
              s.root = R.nranks - 1;
              s.options.algorithm = algorithm;
              s.options.scratch_bytes = 512;  // several chunks
              if (!run_and_check<float>(R, s, nullptr, in_place, shift)) return;
              if (!run_and_check<double>(R, s, nullptr, in_place, shift)) return;
              s.kind = ReductionKind::kAvg;
              if (!run_and_check<Half>(R, s, nullptr, in_place, shift)) return;
              s.kind = ReductionKind::kPreMulSum;
              s.options.accumulate = Accumulate::kFloat32;
              if (!run_and_check<Bfloat16>(R, s, nullptr, in_place, shift)) return;
            }
          }
        }
      }
    });
    EXPECT_TRUE(result.all_ok()) << n << " ranks";
  }
}

// The shim runs a deterministic call that the user made inside a group after the outermost ncclGroupEnd; this is
// that sequence: the user's grouped transfers, the deterministic call, then more user transfers, all correct.
TEST(Collectives, CallsBetweenTheUsersGroupsKeepEveryMessageInPlace) {
  const ForkResult result = run_forked(4, [](Rank& R) {
    const int n = R.nranks, right = (R.rank + 1) % n, left = (R.rank + n - 1) % n;
    std::vector<std::int32_t> out(1000, R.rank), in(1000, -1), in_after(1000, -1);
    R.check.ok(ncclGroupStart(), "ncclGroupStart");
    R.check.ok(ncclGroupStart(), "nested ncclGroupStart");
    R.check.ok(ncclSend(out.data(), out.size(), ncclInt32, right, R.comm, nullptr), "ncclSend");
    R.check.ok(ncclRecv(in.data(), in.size(), ncclInt32, left, R.comm, nullptr), "ncclRecv");
    R.check.ok(ncclGroupEnd(), "nested ncclGroupEnd");
    R.check.ok(ncclGroupEnd(), "outermost ncclGroupEnd");
    Shape s;
    s.count = 777;
    s.seed = 8;
    run_and_check<double>(R, s);  // deferred to here by the shim
    R.check.ok(ncclGroupStart(), "ncclGroupStart");
    R.check.ok(ncclSend(out.data(), out.size(), ncclInt32, left, R.comm, nullptr), "ncclSend");
    R.check.ok(ncclRecv(in_after.data(), in_after.size(), ncclInt32, right, R.comm, nullptr), "ncclRecv");
    R.check.ok(ncclGroupEnd(), "ncclGroupEnd");
    R.check.expect(in == std::vector<std::int32_t>(1000, left), "message from the left rank");
    R.check.expect(in_after == std::vector<std::int32_t>(1000, right), "message from the right rank");
  });
  EXPECT_TRUE(result.all_ok());
}

// ---------------------------------------------------------------------------------------------------------------
// PreMulSum: a host-immediate scalar is the value at creation; a device-resident one is read at the call.

TEST(Collectives, PreMulSumScalarsAreReadWhenTheirResidenceSays) {
  const ForkResult result = run_forked(3, [](Rank& R) {
    constexpr std::size_t kCount = 5;
    std::vector<float> send(kCount, 1.0f + static_cast<float>(R.rank)), recv(kCount);
    float scalar = 2.0f;
    const dc::Reduction immediate = dc::premul_sum_reduction(&scalar, ncclFloat32, ncclScalarHostImmediate);
    const dc::Reduction resident = dc::premul_sum_reduction(&scalar, ncclFloat32, ncclScalarDevice);
    scalar = 0.5f * static_cast<float>(R.rank + 1);  // each rank changes its scalar after creating the ops
    dc::Workspace workspace;
    R.check.ok(dc::all_reduce(kHostnccl, context_of(R), send.data(), recv.data(), kCount, ncclFloat32, immediate,
                              workspace, dc::Options{}),
               "immediate");
    R.check.expect(recv[0] == 2.0f * (1 + 2 + 3), "immediate: %g, expected 12", static_cast<double>(recv[0]));
    R.check.ok(dc::all_reduce(kHostnccl, context_of(R), send.data(), recv.data(), kCount, ncclFloat32, resident,
                              workspace, dc::Options{}),
               "resident");
    // sum over r of (1 + r) * (r + 1) / 2 = (1 + 4 + 9) / 2
    R.check.expect(recv[0] == 7.0f, "resident: %g, expected 7", static_cast<double>(recv[0]));
  });
  EXPECT_TRUE(result.all_ok());
}

// ---------------------------------------------------------------------------------------------------------------
// Rounding edge cases, with expected bit patterns worked out by hand from each format's definition.

struct EdgeCase {
  const char* what;
  std::vector<std::uint16_t> inputs;  // one per rank, raw bits
  std::uint16_t native;               // expected bits, rounded at every step
  std::uint16_t fp32;                 // expected bits with DETNCCL_ACCUMULATE=fp32
};

template <typename T>
void check_edge_cases(const std::vector<EdgeCase>& cases) {
  for (const EdgeCase& edge : cases) {
    const int n = static_cast<int>(edge.inputs.size());
    const ForkResult result = run_forked(n, [&](Rank& R) {
      for (Accumulate accumulate : {Accumulate::kNative, Accumulate::kFloat32}) {
        for (Algorithm algorithm : {Algorithm::kMixedRadix, Algorithm::kOneShot}) {
          T x, y;
          const std::uint16_t bits = edge.inputs[static_cast<std::size_t>(R.rank)];
          std::memcpy(&x, &bits, sizeof x);
          dc::Options options;
          options.accumulate = accumulate;
          options.algorithm = algorithm;
          dc::Workspace workspace;
          if (!R.check.ok(dc::all_reduce(kHostnccl, context_of(R), &x, &y, 1, datatype_of<T>(),
                                         *dc::builtin_reduction(ncclSum), workspace, options),
                          edge.what)) {
            return;
          }
          std::uint16_t got = 0;
          std::memcpy(&got, &y, sizeof y);
          const std::uint16_t want = accumulate == Accumulate::kNative ? edge.native : edge.fp32;
          R.check.expect(got == want, "%s (%s, %s): 0x%04x, expected 0x%04x", edge.what,
                         dc::accumulate_name(accumulate), dc::algorithm_name(algorithm), got, want);
        }
      }
    });
    EXPECT_TRUE(result.all_ok()) << edge.what;
  }
}

TEST(Collectives, Bfloat16RoundingEdgeCases) {
  // bf16: 1 sign, 8 exponent (bias 127), 7 mantissa bits. 1.0 = 0x3F80, ulp(1) = 2^-7; 2^-8 = 0x3B80.
  check_edge_cases<Bfloat16>({
      {"tie to even, down: 1 + 2^-8", {0x3F80, 0x3B80}, 0x3F80, 0x3F80},
      {"tie to even, up: (1 + 2^-7) + 2^-8", {0x3F81, 0x3B80}, 0x3F82, 0x3F82},
      {"per-step rounding: (1 + 2^-8) + 2^-8 (three ranks)", {0x3F80, 0x3B80, 0x3B80}, 0x3F80, 0x3F81},
      {"overflow to inf: max + max", {0x7F7F, 0x7F7F}, 0x7F80, 0x7F80},
      {"NaN with payload becomes the canonical NaN", {0xFFA1, 0x3F80}, 0x7FC0, 0x7FC0},
      {"inf + -inf is the canonical NaN", {0x7F80, 0xFF80}, 0x7FC0, 0x7FC0},
      {"-0 + -0 = -0", {0x8000, 0x8000}, 0x8000, 0x8000},
      {"-0 + +0 = +0", {0x8000, 0x0000}, 0x0000, 0x0000},
  });
}

TEST(Collectives, Fp8RoundingEdgeCases) {
  // e4m3: bias 7, 3 mantissa bits, no inf, 0x7F NaN, max 448 = 0x7E, saturating. 1.0 = 0x38, 1/16 = 0x18.
  check_edge_cases<Fp8E4M3>({
      {"e4m3 tie to even, down: 1 + 1/16", {0x38, 0x18}, 0x38, 0x38},
      {"e4m3 tie to even, up: 1.125 + 1/16", {0x39, 0x18}, 0x3A, 0x3A},
      {"e4m3 per-step rounding: (1 + 1/16) + 1/16", {0x38, 0x18, 0x18}, 0x38, 0x39},
      {"e4m3 overflow saturates: 448 + 448", {0x7E, 0x7E}, 0x7E, 0x7E},
      {"e4m3 negative NaN becomes 0x7F", {0xFF, 0x38}, 0x7F, 0x7F},
      {"e4m3 -0 + -0 = -0", {0x80, 0x80}, 0x80, 0x80},
  });
  // e5m2: bias 15, 2 mantissa bits, 0x7C inf, max 57344 = 0x7B, saturating. 1.0 = 0x3C, 1/8 = 0x30.
  check_edge_cases<Fp8E5M2>({
      {"e5m2 tie to even, down: 1 + 1/8", {0x3C, 0x30}, 0x3C, 0x3C},
      {"e5m2 tie to even, up: 1.25 + 1/8", {0x3D, 0x30}, 0x3E, 0x3E},
      {"e5m2 overflow saturates: 57344 + 57344", {0x7B, 0x7B}, 0x7B, 0x7B},
      {"e5m2 inf + 1 saturates to max finite", {0x7C, 0x3C}, 0x7B, 0x7B},
      {"e5m2 NaN becomes 0x7E", {0x7F, 0x3C}, 0x7E, 0x7E},
      {"e5m2 -0 + +0 = +0", {0x80, 0x00}, 0x00, 0x00},
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Error bound (docs/deterministic.md, "Error bounds"): against an exact long-double sum, |result - exact| <=
// gamma_h * sum |c_r| with c_r the (pre-multiplied) contributions, h the tree height (+1 when pre-multiplying),
// gamma_h = h u / (1 - h u), u the datatype's unit roundoff; with fp32 accumulation u_T |exact| + gamma_h(2^-24)
// sum |c_r|, plus one rounding of the result. Small-magnitude inputs keep fp8 away from saturation.

template <typename T>
void check_error_bound(Rank& R, ReductionKind kind, Accumulate accumulate, long double unit_roundoff,
                       long double half_smallest_subnormal) {
  constexpr std::size_t kCount = 3001;
  const int n = R.nranks;
  const auto value = [&](int rank, std::size_t i) {
    const std::uint64_t bits = mix(static_cast<std::uint64_t>(rank) * 31 + i * 1009);
    const float magnitude =
        std::ldexp(1.0f + static_cast<float>(bits >> 40) * 0x1.0p-24f, static_cast<int>(bits % 7) - 4);
    const float x = (bits & 8) ? -magnitude : magnitude;
    if constexpr (kNarrow<T>) {
      return round_to<T>(x);
    } else {
      return static_cast<T>(x);
    }
  };
  std::vector<T> send(kCount), recv(kCount);
  for (std::size_t i = 0; i < kCount; ++i) send[i] = value(R.rank, i);
  dc::Options options;
  options.accumulate = accumulate;
  dc::Workspace workspace;
  if (!R.check.ok(
          dc::all_reduce(kHostnccl, context_of(R), send.data(), recv.data(), kCount, datatype_of<T>(),
                         *dc::builtin_reduction(kind == ReductionKind::kAvg ? ncclAvg : ncclSum), workspace, options),
          "error bound")) {
    return;
  }
  const bool premultiply = kind == ReductionKind::kAvg;
  const long double h = dc::association_height(n) + (premultiply ? 1 : 0);
  const bool fp32 = kNarrow<T> && accumulate == Accumulate::kFloat32;
  const long double u = fp32 ? 0x1.0p-24L : unit_roundoff;
  const long double gamma = h * u / (1 - h * u);
  long double worst = 0;
  for (std::size_t i = 0; i < kCount; ++i) {
    long double exact = 0, magnitude = 0;
    for (int r = 0; r < n; ++r) {
      const long double c = value_of(value(r, i)) / (premultiply ? n : 1);
      exact += c;  // exact: a few dozen bits at most
      magnitude += std::fabs(c);
    }
    // Underflow: a pre-multiplied contribution (native) or the final rounding (fp32 accumulation) that lands among
    // the subnormals may be off by half the smallest subnormal, whatever its size; sums of subnormals are exact.
    const long double tiny =
        (premultiply && !fp32 ? n : 0) * half_smallest_subnormal + (fp32 ? half_smallest_subnormal : 0);
    const long double bound = gamma * magnitude + (fp32 ? unit_roundoff * std::fabs(exact) * (1 + gamma) : 0) + tiny;
    const long double error = std::fabs(value_of(recv[i]) - exact);
    if (!R.check.expect(error <= bound, "type %d %s acc %s element %zu: error %Lg above the bound %Lg",
                        static_cast<int>(datatype_of<T>()), kind_name(kind), dc::accumulate_name(accumulate), i, error,
                        bound)) {
      return;
    }
    if (magnitude > 0) worst = std::max(worst, error / magnitude);
  }
  if (R.rank == 0) {
    std::printf("  n=%d type %2d %-4s acc %-6s: worst |error| / sum|c| = %.3Le, bound gamma_h = %.3Le\n", n,
                static_cast<int>(datatype_of<T>()), kind_name(kind), dc::accumulate_name(accumulate), worst,
                gamma + (fp32 ? unit_roundoff : 0));
  }
}

class ErrorBound : public ::testing::TestWithParam<int> {};

TEST_P(ErrorBound, NarrowAndWideFloatsStayWithinTheDocumentedBound) {
  const ForkResult result = run_forked(GetParam(), [](Rank& R) {
    for (ReductionKind kind : {ReductionKind::kSum, ReductionKind::kAvg}) {
      for (Accumulate accumulate : {Accumulate::kNative, Accumulate::kFloat32}) {
        check_error_bound<Bfloat16>(R, kind, accumulate, 0x1.0p-8L, 0x1.0p-134L);
        check_error_bound<Half>(R, kind, accumulate, 0x1.0p-11L, 0x1.0p-25L);
        check_error_bound<Fp8E4M3>(R, kind, accumulate, 0x1.0p-4L, 0x1.0p-10L);
        check_error_bound<Fp8E5M2>(R, kind, accumulate, 0x1.0p-3L, 0x1.0p-17L);
      }
      check_error_bound<float>(R, kind, Accumulate::kNative, 0x1.0p-24L, 0x1.0p-150L);
      check_error_bound<double>(R, kind, Accumulate::kNative, 0x1.0p-53L, 0);
    }
  });
  EXPECT_TRUE(result.all_ok());
}
INSTANTIATE_TEST_SUITE_P(Ranks, ErrorBound, ::testing::Values(3, 7, 8), ranks_name);

// ---------------------------------------------------------------------------------------------------------------
// Bytes sent, counted at the send function: at large sizes no more than 1.1 x a ring's, for every n in 2..8.

TEST(Collectives, LargeMessagesSendNoMoreThanARingForEveryRankCount) {
  for (int n = 2; n <= 8; ++n) {
    SharedMemory shared(sizeof(double) * 3 * 8);
    auto* ratios = shared.as<double>();  // [rank][allreduce, reducescatter, reduce]
    const ForkResult result = run_forked(n, [&](Rank& R) {
      constexpr std::size_t kCount = std::size_t{1} << 17;  // 512 KiB of fp32 per rank and call
      const double nd = R.nranks, bytes = kCount * sizeof(float);
      std::vector<float> send(kCount * static_cast<std::size_t>(R.nranks), 1.0f), recv(kCount);
      dc::Workspace workspace;
      const dc::Reduction sum = *dc::builtin_reduction(ncclSum);
      dc::Report report;
      const auto counted = [&](const char* what, auto&& call, double ring_bytes, int slot) {
        const std::size_t before = g_bytes_sent.load();
        if (!R.check.ok(call(), what)) return;
        const auto sent = static_cast<double>(g_bytes_sent.load() - before);
        R.check.expect(static_cast<double>(report.bytes_sent) == sent, "%s: the report says %zu bytes, counted %.0f",
                       what, report.bytes_sent, sent);
        ratios[R.rank * 3 + slot] = sent / ring_bytes;
      };
      counted(
          "allreduce",
          [&] {
            return dc::all_reduce(kHostnccl, context_of(R), send.data(), recv.data(), kCount, ncclFloat32, sum,
                                  workspace, dc::Options{}, &report);
          },
          2 * (nd - 1) / nd * bytes, 0);
      counted(
          "reducescatter",
          [&] {
            return dc::reduce_scatter(kHostnccl, context_of(R), send.data(), recv.data(),
                                      kCount / static_cast<std::size_t>(R.nranks), ncclFloat32, sum, workspace,
                                      dc::Options{}, &report);
          },
          (nd - 1) / nd * bytes, 1);
      // A ring (chain) Reduce has every rank but the last send the whole message.
      counted(
          "reduce",
          [&] {
            return dc::reduce(kHostnccl, context_of(R), send.data(), recv.data(), kCount, ncclFloat32, sum, 0,
                              workspace, dc::Options{}, &report);
          },
          bytes, 2);
    });
    ASSERT_TRUE(result.all_ok()) << n << " ranks";
    for (int r = 0; r < n; ++r) {
      EXPECT_LE(ratios[r * 3 + 0], 1.1) << "allreduce, " << n << " ranks, rank " << r;
      EXPECT_LE(ratios[r * 3 + 1], 1.1) << "reducescatter, " << n << " ranks, rank " << r;
      EXPECT_LE(ratios[r * 3 + 2], 1.1) << "reduce, " << n << " ranks, rank " << r;
      EXPECT_GT(ratios[r * 3 + 0], 0.9) << "allreduce moved less than a ring can: the counter is broken";
    }
  }
}

TEST(Collectives, PlannedBytesMatchWhatIsSent) {
  const ForkResult result = run_forked(6, [](Rank& R) {
    constexpr std::size_t kCount = 6 * 1000;
    std::vector<Bfloat16> send(kCount * 6, Bfloat16{0x3F80}), recv(kCount);
    dc::Workspace workspace;
    for (Algorithm algorithm : {Algorithm::kMixedRadix, Algorithm::kOneShot}) {
      for (Accumulate accumulate : {Accumulate::kNative, Accumulate::kFloat32}) {
        dc::Options options;
        options.algorithm = algorithm;
        options.accumulate = accumulate;
        dc::Report report;
        R.check.ok(dc::all_reduce(kHostnccl, context_of(R), send.data(), recv.data(), kCount, ncclBfloat16,
                                  *dc::builtin_reduction(ncclSum), workspace, options, &report),
                   "allreduce");
        const std::size_t planned = dc::planned_bytes_sent(Collective::kAllReduce, algorithm, kCount, ncclBfloat16,
                                                           R.nranks, R.rank, 0, accumulate);
        R.check.expect(report.bytes_sent == planned, "%s %s: sent %zu, planned %zu", dc::algorithm_name(algorithm),
                       dc::accumulate_name(accumulate), report.bytes_sent, planned);
      }
    }
  });
  EXPECT_TRUE(result.all_ok());
}

// ---------------------------------------------------------------------------------------------------------------
// Single-process checks: the tree, the automatic choice, names, classification, argument errors, the scratch cap.

TEST(CollectivesUnit, AssociationTreeIsThePrimeFactorisation) {
  EXPECT_EQ(dc::association_radices(1), std::vector<int>{});
  EXPECT_EQ(dc::association_radices(8), (std::vector<int>{2, 2, 2}));
  EXPECT_EQ(dc::association_radices(12), (std::vector<int>{2, 2, 3}));
  EXPECT_EQ(dc::association_radices(7), std::vector<int>{7});
  EXPECT_EQ(dc::association_radices(2432), (std::vector<int>{2, 2, 2, 2, 2, 2, 2, 19}));
  EXPECT_EQ(dc::association_height(8), 3);
  EXPECT_EQ(dc::association_height(6), 3);
  EXPECT_EQ(dc::association_height(2432), 7 + 18);
}

TEST(CollectivesUnit, AutomaticChoiceFollowsTheDocumentedRule) {
  // AllReduce, 8 ranks, fp32: one_shot while 7 x count x 4 bytes <= 256 KiB, i.e. count <= 9362.
  EXPECT_EQ(dc::select_algorithm(Collective::kAllReduce, 9362, ncclFloat32, 8), Algorithm::kOneShot);
  EXPECT_EQ(dc::select_algorithm(Collective::kAllReduce, 9363, ncclFloat32, 8), Algorithm::kMixedRadix);
  // Two ranks: one_shot moves no more than mixed_radix at any size.
  EXPECT_EQ(dc::select_algorithm(Collective::kAllReduce, std::size_t{1} << 30, ncclFloat32, 2), Algorithm::kOneShot);
  // ReduceScatter moves the ring's bytes with either: one_shot up to 16 ranks.
  EXPECT_EQ(dc::select_algorithm(Collective::kReduceScatter, std::size_t{1} << 28, ncclBfloat16, 16),
            Algorithm::kOneShot);
  EXPECT_EQ(dc::select_algorithm(Collective::kReduceScatter, 1, ncclBfloat16, 17), Algorithm::kMixedRadix);
  // Reduce: the root receives everything with one_shot, so only small messages.
  EXPECT_EQ(dc::select_algorithm(Collective::kReduce, 1024, ncclFloat32, 8), Algorithm::kOneShot);
  EXPECT_EQ(dc::select_algorithm(Collective::kReduce, 1 << 20, ncclFloat32, 8), Algorithm::kMixedRadix);
  EXPECT_EQ(dc::select_algorithm(Collective::kAllReduce, 1, ncclFloat32, 64), Algorithm::kMixedRadix);
  dc::Options forced;
  forced.algorithm = Algorithm::kOneShot;
  EXPECT_EQ(dc::resolve_algorithm(Collective::kAllReduce, 1 << 20, ncclFloat32, 8, forced), Algorithm::kOneShot);
}

TEST(CollectivesUnit, NamesRoundTrip) {
  for (Algorithm a : {Algorithm::kAuto, Algorithm::kMixedRadix, Algorithm::kOneShot}) {
    EXPECT_EQ(dc::algorithm_from_name(dc::algorithm_name(a)), a);
  }
  EXPECT_EQ(dc::algorithm_from_name("Mixed-Radix"), Algorithm::kMixedRadix);
  EXPECT_EQ(dc::algorithm_from_name("ring"), std::nullopt);
  EXPECT_EQ(dc::accumulate_from_name("FP32"), Accumulate::kFloat32);
  EXPECT_EQ(dc::accumulate_from_name("native"), Accumulate::kNative);
  EXPECT_EQ(dc::accumulate_from_name("fp64"), std::nullopt);
}

TEST(CollectivesUnit, ClassificationSubstitutesFloatsAndPassesIntegersThrough) {
  const dc::Reduction sum = *dc::builtin_reduction(ncclSum);
  EXPECT_EQ(dc::classify(ncclBfloat16, sum).handling, dc::Handling::kSubstitute);
  EXPECT_EQ(dc::classify(ncclFloat8e5m2, *dc::builtin_reduction(ncclMax)).handling, dc::Handling::kSubstitute);
  EXPECT_EQ(dc::classify(ncclInt32, sum).handling, dc::Handling::kPassThrough);
  const dc::Classification bad_type = dc::classify(static_cast<ncclDataType_t>(42), sum);
  EXPECT_EQ(bad_type.handling, dc::Handling::kUnsupported);
  EXPECT_NE(bad_type.reason.find("42"), std::string::npos) << bad_type.reason;
  EXPECT_FALSE(dc::builtin_reduction(static_cast<ncclRedOp_t>(ncclNumOps)).has_value());
}

// One rank needs no communicator: the argument checks and the chunking can be seen without forking.
TEST(CollectivesUnit, ArgumentErrorsAreReportedNotThrown) {
  dc::Workspace workspace;
  dc::Report report;
  float x = 1, y = 0;
  const dc::CallContext one_rank{nullptr, 0, 1, nullptr, false};
  EXPECT_EQ(dc::all_reduce(dc::P2pFunctions{}, one_rank, &x, &y, 1, ncclFloat32, *dc::builtin_reduction(ncclSum),
                           workspace, dc::Options{}, &report),
            ncclInvalidArgument);
  EXPECT_NE(report.error.find("P2pFunctions"), std::string::npos) << report.error;
  EXPECT_EQ(dc::reduce(kHostnccl, one_rank, &x, &y, 1, ncclFloat32, *dc::builtin_reduction(ncclSum), 3, workspace,
                       dc::Options{}, &report),
            ncclInvalidArgument);
  EXPECT_NE(report.error.find("root"), std::string::npos) << report.error;
  EXPECT_EQ(dc::all_reduce(kHostnccl, one_rank, &x, &y, 1, static_cast<ncclDataType_t>(12),
                           *dc::builtin_reduction(ncclSum), workspace, dc::Options{}, &report),
            ncclInvalidArgument);
  EXPECT_EQ(dc::all_reduce(kHostnccl, one_rank, nullptr, &y, 1, ncclFloat32, *dc::builtin_reduction(ncclSum), workspace,
                           dc::Options{}, &report),
            ncclInvalidArgument);
  // Device buffers on a machine without a usable GPU: a clear failure, never a crash.
  const dc::CallContext on_device{nullptr, 0, 1, nullptr, true};
  EXPECT_NE(dc::all_reduce(kHostnccl, on_device, &x, &y, 1, ncclFloat32, *dc::builtin_reduction(ncclSum), workspace,
                           dc::Options{}, &report),
            ncclSuccess);
  EXPECT_FALSE(report.error.empty());
}

TEST(CollectivesUnit, ScratchStaysUnderTheCapWithManyChunks) {
  constexpr std::size_t kCount = 100000;
  std::vector<float> send(kCount), recv(kCount);
  for (std::size_t i = 0; i < kCount; ++i) send[i] = input_value<float>(3, 0, i, ReductionKind::kSum);
  dc::Workspace workspace;
  dc::Options options;
  options.scratch_bytes = 4096;
  options.algorithm = Algorithm::kOneShot;
  dc::Report report;
  const dc::CallContext one_rank{nullptr, 0, 1, nullptr, false};
  ASSERT_EQ(dc::reduce(kHostnccl, one_rank, send.data(), recv.data(), kCount, ncclFloat32,
                       *dc::builtin_reduction(ncclSum), 0, workspace, options, &report),
            ncclSuccess);
  EXPECT_LE(workspace.host_bytes(), options.scratch_bytes);
  EXPECT_EQ(report.chunks, (kCount * sizeof(float) + 4095) / 4096);
  EXPECT_EQ(0, std::memcmp(send.data(), recv.data(), kCount * sizeof(float)));  // one rank: the input itself
}

}  // namespace
