// hostnccl collectives: every collective x datatype x op, for 1, 2, 3, 4, 5 and 8 ranks, as forked processes and
// as threads (ncclCommInitRank per thread, and ncclCommInitAll), with zero, odd and multi-chunk counts and in-place
// buffers. Inputs are small integers chosen so that every partial sum in any order is exact in the datatype, so the
// expected values computed here do not depend on the order the library adds in.
#include <gtest/gtest.h>

#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <type_traits>
#include <vector>

#include "collectives/dtype_arith.h"
#include "tests/test_hostnccl_harness.h"

namespace {
using namespace hostnccl_test;
using namespace detnccl::arith;

// A value of T holding the integer v: exact for the small values used here; integers wrap modulo 2^bits.
template <typename T>
T make(long long v) {
  if constexpr (std::is_same_v<T, Half>) {
    return Half{float_to_half(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<T, Bfloat16>) {
    return Bfloat16{float_to_bf16(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<T, Fp8E4M3>) {
    return Fp8E4M3{float_to_e4m3(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<T, Fp8E5M2>) {
    return Fp8E5M2{float_to_e5m2(static_cast<float>(v))};
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(v);
  } else {
    return static_cast<T>(static_cast<unsigned long long>(v));
  }
}

template <typename T>
double as_double(T x) {
  if constexpr (std::is_same_v<T, Half>) {
    return half_to_float(x.bits);
  } else if constexpr (std::is_same_v<T, Bfloat16>) {
    return bf16_to_float(x.bits);
  } else if constexpr (std::is_same_v<T, Fp8E4M3>) {
    return e4m3_to_float(x.bits);
  } else if constexpr (std::is_same_v<T, Fp8E5M2>) {
    return e5m2_to_float(x.bits);
  } else {
    return static_cast<double>(x);
  }
}

// Largest input value whose partial sums over 8 ranks stay exact: e5m2 holds integers exactly up to 8, e4m3 to 16.
template <typename T>
constexpr long long max_input() {
  if constexpr (std::is_same_v<T, Fp8E5M2>) return 1;
  if constexpr (std::is_same_v<T, Fp8E4M3>) return 2;
  return 4;
}

template <typename T>
constexpr bool has_negatives() {
  return !std::is_integral_v<T> || std::is_signed_v<T>;
}

enum class OpKind { kSum, kProd, kMax, kMin, kAvg, kPreMulHost, kPreMulDevice };
constexpr OpKind kAllOps[] = {OpKind::kSum, OpKind::kProd,       OpKind::kMax,         OpKind::kMin,
                              OpKind::kAvg, OpKind::kPreMulHost, OpKind::kPreMulDevice};
const char* op_name(OpKind kind) {
  static const char* const kNames[] = {"sum", "prod", "max", "min", "avg", "premulsum(host)", "premulsum(device)"};
  return kNames[static_cast<int>(kind)];
}

// The input of rank r at element i for an op.
template <typename T>
long long input(OpKind kind, int r, std::size_t i) {
  const long long base = (3 * r + 7 * static_cast<long long>(i) + 1) % (max_input<T>() + 1);
  switch (kind) {
    case OpKind::kProd:
      return 1 + ((r + static_cast<long long>(i)) % 3 == 0 ? 1 : 0);  // products <= 2^8
    case OpKind::kMax:
    case OpKind::kMin:
      return base - (has_negatives<T>() ? max_input<T>() / 2 : 0);
    case OpKind::kAvg:
      // Floating averages pre-multiply by 1/n, which rounds; equal inputs on every rank make the result the same in
      // any order, so the test can compute it.
      return std::is_integral_v<T> ? base : (7 * static_cast<long long>(i) + 1) % (max_input<T>() + 1);
    default:
      return base;
  }
}

// The expected reduction over n ranks of element i, computed from the op's definition.
template <typename T>
T expected(OpKind kind, int n, std::size_t i) {
  long long sum = 0, product = 1, low = input<T>(kind, 0, i), high = low;
  for (int r = 0; r < n; ++r) {
    const long long x = input<T>(kind, r, i);
    sum += x;
    product *= x;
    low = std::min(low, x);
    high = std::max(high, x);
  }
  switch (kind) {
    case OpKind::kSum:
      return make<T>(sum);
    case OpKind::kProd:
      return make<T>(product);
    case OpKind::kMax:
      return make<T>(high);
    case OpKind::kMin:
      return make<T>(low);
    case OpKind::kPreMulHost:
      return make<T>(2 * sum);  // the host scalar as it was at creation
    case OpKind::kPreMulDevice:
      return make<T>(sum);  // the device-style scalar as it is at the call
    case OpKind::kAvg:
      if constexpr (std::is_integral_v<T>) {
        return make<T>(sum / n);
      } else {
        // Each input times 1/n in the compute precision, rounded to T, then summed with rounding at every step.
        using A = Arith<T>;
        const auto factor = typename A::Compute(1) / static_cast<typename A::Compute>(n);
        const T share = A::mul_compute(make<T>(input<T>(kind, 0, i)), factor);
        T acc = share;
        for (int r = 1; r < n; ++r) acc = A::add(acc, share);
        return acc;
      }
  }
  return T{};
}

template <typename T>
void expect_elements(Rank& R, const std::vector<T>& got, const std::vector<T>& want, const char* what) {
  if (got.size() != want.size()) {
    R.check.expect(false, "%s: size %zu, expected %zu", what, got.size(), want.size());
    return;
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      R.check.expect(false, "%s: element %zu is %g, expected %g", what, i, as_double(got[i]), as_double(want[i]));
      return;
    }
  }
}

// The reduction op handles of one datatype on one communicator (the PreMulSum ones created here).
struct Ops {
  ncclRedOp_t handle[7];
};

template <typename T>
void reductions(Rank& R, ncclDataType_t type, const Ops& ops, int type_index) {
  const int n = R.nranks, me = R.rank;
  char what[160];
  for (OpKind kind : kAllOps) {
    const ncclRedOp_t op = ops.handle[static_cast<int>(kind)];
    for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{129}}) {
      std::vector<T> send(count), recv(count), want(count);
      for (std::size_t i = 0; i < count; ++i) {
        send[i] = make<T>(input<T>(kind, me, i));
        want[i] = expected<T>(kind, n, i);
      }
      std::snprintf(what, sizeof what, "type %d allreduce %s count %zu", type_index, op_name(kind), count);
      if (R.check.ok(ncclAllReduce(send.data(), recv.data(), count, type, op, R.comm, nullptr), what)) {
        expect_elements(R, recv, want, what);
      }
      std::snprintf(what, sizeof what, "type %d allreduce in-place %s count %zu", type_index, op_name(kind), count);
      std::vector<T> inplace = send;
      if (R.check.ok(ncclAllReduce(inplace.data(), inplace.data(), count, type, op, R.comm, nullptr), what)) {
        expect_elements(R, inplace, want, what);
      }
    }
    // Reduce to a root that moves with the type and op; root in-place.
    const int root = (type_index + static_cast<int>(kind)) % n;
    {
      const std::size_t count = 77;
      std::vector<T> send(count), recv(count, make<T>(0)), want(count);
      for (std::size_t i = 0; i < count; ++i) {
        send[i] = make<T>(input<T>(kind, me, i));
        want[i] = expected<T>(kind, n, i);
      }
      std::snprintf(what, sizeof what, "type %d reduce %s root %d", type_index, op_name(kind), root);
      const bool in_place = kind == OpKind::kMin;
      void* out = in_place ? static_cast<void*>(send.data()) : static_cast<void*>(recv.data());
      if (R.check.ok(ncclReduce(send.data(), me == root ? out : nullptr, count, type, op, root, R.comm, nullptr),
                     what) &&
          me == root) {
        expect_elements(R, in_place ? send : recv, want, what);
      }
    }
    // ReduceScatter: block j of every rank's input reduces into rank j's output.
    {
      const std::size_t count = 13;
      std::vector<T> send(count * static_cast<std::size_t>(n)), recv(count), want(count);
      for (std::size_t i = 0; i < send.size(); ++i) send[i] = make<T>(input<T>(kind, me, i));
      for (std::size_t i = 0; i < count; ++i) want[i] = expected<T>(kind, n, static_cast<std::size_t>(me) * count + i);
      std::snprintf(what, sizeof what, "type %d reducescatter %s", type_index, op_name(kind));
      if (R.check.ok(ncclReduceScatter(send.data(), recv.data(), count, type, op, R.comm, nullptr), what)) {
        expect_elements(R, recv, want, what);
      }
    }
  }
  // Many chunks (the tests run with 4 KiB slots): allreduce in place, reduce-scatter in place.
  {
    const std::size_t count = 5003;
    std::vector<T> buffer(count), want(count);
    for (std::size_t i = 0; i < count; ++i) {
      buffer[i] = make<T>(input<T>(OpKind::kSum, me, i));
      want[i] = expected<T>(OpKind::kSum, n, i);
    }
    std::snprintf(what, sizeof what, "type %d allreduce sum multi-chunk", type_index);
    if (R.check.ok(ncclAllReduce(buffer.data(), buffer.data(), count, type, ncclSum, R.comm, nullptr), what)) {
      expect_elements(R, buffer, want, what);
    }
    const std::size_t recvcount = 1003;
    std::vector<T> scatter(recvcount * static_cast<std::size_t>(n)), scatter_want(recvcount);
    for (std::size_t i = 0; i < scatter.size(); ++i) scatter[i] = make<T>(input<T>(OpKind::kMax, me, i));
    for (std::size_t i = 0; i < recvcount; ++i) {
      scatter_want[i] = expected<T>(OpKind::kMax, n, static_cast<std::size_t>(me) * recvcount + i);
    }
    T* mine = scatter.data() + static_cast<std::size_t>(me) * recvcount;
    std::snprintf(what, sizeof what, "type %d reducescatter max in-place multi-chunk", type_index);
    if (R.check.ok(ncclReduceScatter(scatter.data(), mine, recvcount, type, ncclMax, R.comm, nullptr), what)) {
      expect_elements(R, std::vector<T>(mine, mine + recvcount), scatter_want, what);
    }
  }
  // Zero counts complete at once, even with null buffers.
  std::snprintf(what, sizeof what, "type %d zero-count reductions", type_index);
  R.check.ok(ncclAllReduce(nullptr, nullptr, 0, type, ncclSum, R.comm, nullptr), what);
  R.check.ok(ncclReduce(nullptr, nullptr, 0, type, ncclSum, 0, R.comm, nullptr), what);
  R.check.ok(ncclReduceScatter(nullptr, nullptr, 0, type, ncclSum, R.comm, nullptr), what);
}

// A byte of rank r's data at element i, byte b: data movement is checked byte for byte, whatever the type.
unsigned char pattern(int r, std::size_t i, std::size_t b) {
  return static_cast<unsigned char>(r * 37 + static_cast<int>(i) * 11 + static_cast<int>(b) * 3 + 5);
}
std::vector<unsigned char> rank_data(int r, std::size_t count, std::size_t size, std::size_t first = 0) {
  std::vector<unsigned char> data(count * size);
  for (std::size_t i = 0; i < count; ++i) {
    for (std::size_t b = 0; b < size; ++b) data[i * size + b] = pattern(r, first + i, b);
  }
  return data;
}

void expect_bytes(Rank& R, const std::vector<unsigned char>& got, const std::vector<unsigned char>& want,
                  const char* what) {
  const auto mismatch = std::mismatch(got.begin(), got.end(), want.begin(), want.end());
  R.check.expect(got.size() == want.size() && mismatch.first == got.end(), "%s: differs at byte %td of %zu", what,
                 mismatch.first - got.begin(), got.size());
}

void data_movement(Rank& R, ncclDataType_t type, int type_index) {
  const int n = R.nranks, me = R.rank;
  const std::size_t size = dtype_size(type), nn = static_cast<std::size_t>(n);
  char what[160];
  // AllGather, out of place (multi-chunk for wide types) and in place.
  for (std::size_t count : {std::size_t{1003}, std::size_t{7}}) {
    const bool in_place = count == 7;
    std::vector<unsigned char> want, recv(nn * count * size, 0);
    for (int r = 0; r < n; ++r) {
      const auto block = rank_data(r, count, size);
      want.insert(want.end(), block.begin(), block.end());
    }
    std::vector<unsigned char> send = rank_data(me, count, size);
    if (in_place) std::copy(send.begin(), send.end(), recv.begin() + static_cast<std::ptrdiff_t>(me * count * size));
    const void* source = in_place ? recv.data() + static_cast<std::size_t>(me) * count * size : send.data();
    std::snprintf(what, sizeof what, "type %d allgather count %zu%s", type_index, count, in_place ? " in-place" : "");
    if (R.check.ok(ncclAllGather(source, recv.data(), count, type, R.comm, nullptr), what)) {
      expect_bytes(R, recv, want, what);
    }
  }
  // Broadcast from the last rank; Bcast in place from rank 0.
  {
    const std::size_t count = 1003;
    const int root = n - 1;
    std::vector<unsigned char> send = rank_data(me, count, size), recv(count * size, 0);
    std::snprintf(what, sizeof what, "type %d broadcast root %d", type_index, root);
    if (R.check.ok(ncclBroadcast(me == root ? send.data() : nullptr, recv.data(), count, type, root, R.comm, nullptr),
                   what)) {
      expect_bytes(R, recv, rank_data(root, count, size), what);
    }
    std::vector<unsigned char> buffer = rank_data(me, 7, size);
    std::snprintf(what, sizeof what, "type %d bcast in-place", type_index);
    if (R.check.ok(ncclBcast(buffer.data(), 7, type, 0, R.comm, nullptr), what)) {
      expect_bytes(R, buffer, rank_data(0, 7, size), what);
    }
  }
  // AlltoAll: block j of rank r goes to rank j, landing as block r.
  {
    const std::size_t count = 131;
    std::vector<unsigned char> send = rank_data(me, nn * count, size), recv(nn * count * size, 0), want;
    for (int r = 0; r < n; ++r) {
      const auto block = rank_data(r, count, size, static_cast<std::size_t>(me) * count);
      want.insert(want.end(), block.begin(), block.end());
    }
    std::snprintf(what, sizeof what, "type %d alltoall", type_index);
    if (R.check.ok(ncclAlltoAll(send.data(), recv.data(), count, type, R.comm, nullptr), what)) {
      expect_bytes(R, recv, want, what);
    }
  }
  // Gather and Scatter, in place at the root.
  {
    const std::size_t count = 131;
    const int root = (type_index + 1) % n;
    std::vector<unsigned char> gathered(nn * count * size, 0), want;
    for (int r = 0; r < n; ++r) {
      const auto block = rank_data(r, count, size);
      want.insert(want.end(), block.begin(), block.end());
    }
    std::vector<unsigned char> send = rank_data(me, count, size);
    const void* source = send.data();
    if (me == root) {
      std::copy(send.begin(), send.end(), gathered.begin() + static_cast<std::ptrdiff_t>(me * count * size));
      source = gathered.data() + static_cast<std::size_t>(me) * count * size;
    }
    std::snprintf(what, sizeof what, "type %d gather root %d", type_index, root);
    if (R.check.ok(ncclGather(source, me == root ? gathered.data() : nullptr, count, type, root, R.comm, nullptr),
                   what) &&
        me == root) {
      expect_bytes(R, gathered, want, what);
    }
    std::vector<unsigned char> all = rank_data(root, nn * count, size), recv(count * size, 0);
    void* target = me == root ? static_cast<void*>(all.data() + static_cast<std::size_t>(me) * count * size)
                              : static_cast<void*>(recv.data());
    std::snprintf(what, sizeof what, "type %d scatter root %d", type_index, root);
    if (R.check.ok(ncclScatter(me == root ? all.data() : nullptr, target, count, type, root, R.comm, nullptr), what)) {
      const auto* got = static_cast<const unsigned char*>(target);
      expect_bytes(R, std::vector<unsigned char>(got, got + count * size),
                   rank_data(root, count, size, static_cast<std::size_t>(me) * count), what);
    }
  }
  std::snprintf(what, sizeof what, "type %d zero-count data movement", type_index);
  R.check.ok(ncclAllGather(nullptr, nullptr, 0, type, R.comm, nullptr), what);
  R.check.ok(ncclBroadcast(nullptr, nullptr, 0, type, 0, R.comm, nullptr), what);
  R.check.ok(ncclAlltoAll(nullptr, nullptr, 0, type, R.comm, nullptr), what);
  R.check.ok(ncclGather(nullptr, nullptr, 0, type, 0, R.comm, nullptr), what);
  R.check.ok(ncclScatter(nullptr, nullptr, 0, type, 0, R.comm, nullptr), what);
}

void every_collective(Rank& R, const std::vector<ncclDataType_t>& types) {
  for (ncclDataType_t type : types) {
    const int type_index = static_cast<int>(type);
    visit_dtype(type, [&](auto tag) {
      using T = decltype(tag);
      Ops ops{{ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg, ncclSum, ncclSum}};
      T host_scalar = make<T>(2), device_scalar = make<T>(2);
      R.check.ok(ncclRedOpCreatePreMulSum(&ops.handle[5], &host_scalar, type, ncclScalarHostImmediate, R.comm),
                 "ncclRedOpCreatePreMulSum(host)");
      R.check.ok(ncclRedOpCreatePreMulSum(&ops.handle[6], &device_scalar, type, ncclScalarDevice, R.comm),
                 "ncclRedOpCreatePreMulSum(device)");
      R.check.expect(ops.handle[5] >= ncclNumOps && ops.handle[6] >= ncclNumOps && ops.handle[5] != ops.handle[6],
                     "custom ops get distinct handles >= ncclNumOps");
      // The host-immediate scalar was read at creation; the device-style one is read at each call.
      host_scalar = make<T>(1);
      device_scalar = make<T>(1);
      reductions<T>(R, type, ops, type_index);
      R.check.ok(ncclRedOpDestroy(ops.handle[5], R.comm), "ncclRedOpDestroy");
      R.check.ok(ncclRedOpDestroy(ops.handle[6], R.comm), "ncclRedOpDestroy");
    });
    data_movement(R, type, type_index);
  }
}

std::vector<ncclDataType_t> all_types() {
  std::vector<ncclDataType_t> types;
  for (int t = 0; t < ncclNumTypes; ++t) types.push_back(static_cast<ncclDataType_t>(t));
  return types;
}

enum class Mode { kForked, kThreadsInitRank, kThreadsInitAll };
struct Param {
  Mode mode;
  int nranks;
};
std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  static const char* const kModes[] = {"Forked", "ThreadsInitRank", "ThreadsInitAll"};
  return std::string(kModes[static_cast<int>(info.param.mode)]) + std::to_string(info.param.nranks);
}

class HostncclCollectives : public ::testing::TestWithParam<Param> {};

TEST_P(HostncclCollectives, EveryCollectiveDatatypeAndOp) {
  // Small slots and rings so that moderate counts already take many chunks.
  ScopedEnv env{{"HOSTNCCL_SLOT_BYTES", "4096"}, {"HOSTNCCL_RING_BYTES", "4096"}, {"HOSTNCCL_TIMEOUT_S", "60"}};
  const Param param = GetParam();
  // Processes get every datatype; threads (one address space, the TSan case) a set covering each arithmetic kind.
  const std::vector<ncclDataType_t> types =
      param.mode == Mode::kForked
          ? all_types()
          : std::vector<ncclDataType_t>{ncclInt8,    ncclUint64,   ncclFloat16,    ncclFloat32,
                                        ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
  const RankBody body = [&](Rank& R) { every_collective(R, types); };
  if (param.mode == Mode::kForked) {
    const ForkResult result = run_forked(param.nranks, body, 240);
    for (std::size_t r = 0; r < result.status.size(); ++r) EXPECT_EQ(result.status[r], 0) << "rank " << r;
  } else {
    const ThreadInit init = param.mode == Mode::kThreadsInitAll ? ThreadInit::kInitAll : ThreadInit::kInitRank;
    EXPECT_EQ(run_threads(param.nranks, init, body), 0);
  }
}

std::vector<Param> all_params() {
  std::vector<Param> params;
  for (Mode mode : {Mode::kForked, Mode::kThreadsInitRank, Mode::kThreadsInitAll}) {
    for (int nranks : {1, 2, 3, 4, 5, 8}) params.push_back({mode, nranks});
  }
  return params;
}
INSTANTIATE_TEST_SUITE_P(Ranks, HostncclCollectives, ::testing::ValuesIn(all_params()), param_name);

}  // namespace
