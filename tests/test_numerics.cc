// numerics/ (issue #18): ULP distances against std::nextafter and every narrow bit pattern, magnitudes of computed
// perturbations, the reordering bound against real reorderings (hostnccl's arrival orders, detnccl's tree) of
// random mixed-magnitude data and against injected errors, and replay's orders against hostnccl's and collectives/'
// own results (threads over hostnccl), bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "collectives/deterministic.h"
#include "collectives/dtype_arith.h"
#include "numerics/elements.h"
#include "numerics/magnitude.h"
#include "numerics/reordering_bound.h"
#include "numerics/replay.h"
#include "tests/test_hostnccl_harness.h"

namespace {
using namespace detnccl::numerics;
namespace arith = detnccl::arith;
namespace dc = detnccl::collectives;
using hostnccl_test::Rank;
using hostnccl_test::ScopedEnv;
using hostnccl_test::ThreadInit;

template <typename T>
std::uint64_t bits_of(T value) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof value);
  return bits;
}

// ---------------------------------------------------------------------------------------------------------------
// ULP distances

TEST(NumericsUlp, AdjacentNarrowPatternsAreOneApartAcrossZeroAndSubnormals) {
  struct Format {
    ncclDataType_t type;
    unsigned bits;
  };
  for (const Format f :
       {Format{ncclFloat16, 16}, Format{ncclBfloat16, 16}, Format{ncclFloat8e4m3, 8}, Format{ncclFloat8e5m2, 8}}) {
    const std::uint64_t sign = std::uint64_t{1} << (f.bits - 1);
    // Every non-NaN pattern, sorted by value (the order is computed from the decoded values, not from the bits).
    std::vector<std::uint64_t> patterns;
    for (std::uint64_t p = 0; p < (std::uint64_t{1} << f.bits); ++p) {
      if (!std::isnan(element_value(f.type, p)) && p != sign) patterns.push_back(p);  // -0: same place as +0
    }
    std::sort(patterns.begin(), patterns.end(),
              [&](std::uint64_t a, std::uint64_t b) { return element_value(f.type, a) < element_value(f.type, b); });
    for (std::size_t i = 1; i < patterns.size(); ++i) {
      ASSERT_LT(element_value(f.type, patterns[i - 1]), element_value(f.type, patterns[i])) << "duplicate value";
      ASSERT_EQ(ulp_distance(f.type, patterns[i - 1], patterns[i]), 1u)
          << "type " << f.type << " patterns " << patterns[i - 1] << " and " << patterns[i];
      ASSERT_EQ(ulp_distance(f.type, patterns[i], patterns[i - 1]), 1u);
    }
    // And the distance between any two is their distance in that order.
    std::mt19937_64 random(f.bits * 31 + f.type);
    for (int k = 0; k < 2000; ++k) {
      const std::size_t i = random() % patterns.size(), j = random() % patterns.size();
      const std::uint64_t expected = i > j ? i - j : j - i;
      ASSERT_EQ(ulp_distance(f.type, patterns[i], patterns[j]), expected);
    }
    EXPECT_EQ(ulp_distance(f.type, 0, sign), 0u) << "+0 and -0 are the same value";
    EXPECT_EQ(ulp_distance(f.type, 1, sign | 1), 2u) << "the two smallest subnormals are 2 apart, across zero";
  }
}

template <typename F, typename Bits>
void check_nextafter_neighbours(ncclDataType_t type) {
  std::vector<F> values = {
      F(0), -F(0), std::numeric_limits<F>::denorm_min(), std::numeric_limits<F>::min(), -std::numeric_limits<F>::min(),
      F(1), F(-1), std::numeric_limits<F>::max(),        -std::numeric_limits<F>::max()};
  std::mt19937_64 random(7);
  for (int k = 0; k < 20000; ++k) {
    Bits bits = static_cast<Bits>(random());
    F value;
    std::memcpy(&value, &bits, sizeof value);
    if (!std::isnan(value)) values.push_back(value);
  }
  const F infinity = std::numeric_limits<F>::infinity();
  for (const F x : values) {
    for (const F toward : {infinity, -infinity}) {
      if (std::isinf(x) && (x > 0) == (toward > 0)) continue;
      const F y = std::nextafter(x, toward);
      if (x == 0 && y == 0) continue;  // nextafter(-0, +inf) is the smallest subnormal, never +0: not reached
      ASSERT_EQ(ulp_distance(type, bits_of(x), bits_of(y)), 1u) << x << " -> " << y;
    }
  }
  // Zero crossing: -denorm_min, -0/+0, +denorm_min.
  const F tiny = std::numeric_limits<F>::denorm_min();
  EXPECT_EQ(ulp_distance(type, bits_of(-tiny), bits_of(F(0))), 1u);
  EXPECT_EQ(ulp_distance(type, bits_of(-tiny), bits_of(tiny)), 2u);
  EXPECT_EQ(ulp_distance(type, bits_of(std::numeric_limits<F>::max()), bits_of(infinity)), 1u);
  EXPECT_EQ(ulp_distance(type, bits_of(F(1)), bits_of(std::numeric_limits<F>::quiet_NaN())), kInfiniteUlp);
}

TEST(NumericsUlp, Fp32AndFp64NeighboursByNextafterAreOneApart) {
  check_nextafter_neighbours<float, std::uint32_t>(ncclFloat32);
  check_nextafter_neighbours<double, std::uint64_t>(ncclFloat64);
}

TEST(NumericsUlp, IntegersAreTheirExactDifference) {
  EXPECT_EQ(ulp_distance(ncclInt64, bits_of(std::numeric_limits<std::int64_t>::min()),
                         bits_of(std::numeric_limits<std::int64_t>::max())),
            std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(ulp_distance(ncclUint64, 0, ~std::uint64_t{0}), ~std::uint64_t{0});
  EXPECT_EQ(ulp_distance(ncclInt8, bits_of(std::int8_t{-128}), bits_of(std::int8_t{127})), 255u);
  EXPECT_EQ(ulp_distance(ncclInt32, bits_of(std::int32_t{-5}), bits_of(std::int32_t{7})), 12u);
  EXPECT_EQ(ulp_distance(ncclUint8, 3, 250), 247u);
  EXPECT_EQ(ulp_distance(ncclUint32, 4000000000u, 1u), 3999999999u);
}

// ---------------------------------------------------------------------------------------------------------------
// Magnitudes

TEST(NumericsMagnitude, OneNeighbourStepIsOneElementOneUlp) {
  std::mt19937_64 random(3);
  std::normal_distribution<double> normal;
  std::vector<float> a(1000);
  for (float& x : a) x = static_cast<float>(normal(random) * std::ldexp(1.0, static_cast<int>(random() % 20) - 10));
  for (std::size_t index : {std::size_t{0}, std::size_t{417}, std::size_t{999}}) {
    std::vector<float> b = a;
    b[index] = std::nextafter(a[index], 1e30f);
    const Magnitude m = compare_buffers(ncclFloat32, a.data(), b.data(), a.size());
    EXPECT_EQ(m.elements_compared, 1000u);
    EXPECT_EQ(m.elements_differing, 1u);
    EXPECT_EQ(m.first_index, static_cast<std::int64_t>(index));
    EXPECT_EQ(m.worst_index, static_cast<std::int64_t>(index));
    EXPECT_EQ(m.max_ulp, 1u);
    EXPECT_EQ(m.max_abs_error, static_cast<double>(b[index]) - a[index]);
    EXPECT_DOUBLE_EQ(m.max_rel_error, (static_cast<double>(b[index]) - a[index]) / std::fabs(a[index]));
  }
  const Magnitude same = compare_buffers(ncclFloat32, a.data(), a.data(), a.size());
  EXPECT_TRUE(same.identical());
  EXPECT_EQ(same.first_index, -1);
  EXPECT_EQ(same.worst_index, -1);
}

TEST(NumericsMagnitude, WorstIsTheLargestUlpAndTiesGoToTheFirst) {
  std::vector<double> a(50, 1.0), b = a;
  b[5] = std::nextafter(1.0, 2.0);                        // 1 ulp
  b[9] = std::nextafter(std::nextafter(1.0, 0.0), 0.0);   // 2 ulp
  b[30] = std::nextafter(std::nextafter(1.0, 2.0), 2.0);  // 2 ulp again: the tie goes to 9
  const Magnitude m = compare_buffers(ncclFloat64, a.data(), b.data(), a.size());
  EXPECT_EQ(m.elements_differing, 3u);
  EXPECT_EQ(m.first_index, 5);
  EXPECT_EQ(m.worst_index, 9);
  EXPECT_EQ(m.max_ulp, 2u);
}

TEST(NumericsMagnitude, ZerosNansAndInfinitiesAreCountedAndFlagged) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::uint32_t other_nan_bits = 0x7FC00001u;
  float other_nan;
  std::memcpy(&other_nan, &other_nan_bits, sizeof other_nan);
  const std::vector<float> a = {0.0f, 1.0f, nan, 2.0f, 0.0f, 5.0f};
  const std::vector<float> b = {-0.0f, nan, other_nan, inf, 1e-30f, 5.0f};
  const Magnitude m = compare_buffers(ncclFloat32, a.data(), b.data(), a.size());
  EXPECT_EQ(m.elements_differing, 5u);
  EXPECT_EQ(m.signed_zero_differences, 1u);
  EXPECT_EQ(m.nan_mismatches, 1u);
  EXPECT_EQ(m.nan_payload_differences, 1u);
  EXPECT_EQ(m.infinity_differences, 1u);
  EXPECT_EQ(m.first_index, 0);
  EXPECT_EQ(m.worst_index, 1);  // NaN against a number: infinitely many ulps
  EXPECT_EQ(m.max_ulp, kInfiniteUlp);
  EXPECT_TRUE(std::isinf(m.max_abs_error));
  EXPECT_TRUE(std::isinf(m.max_rel_error));  // also 1e-30 against a reference of 0
  // Only the zero against 1e-30: abs 1e-30, rel infinite (reference 0).
  const Magnitude zero = compare_buffers(ncclFloat32, a.data() + 4, b.data() + 4, 1);
  EXPECT_EQ(zero.max_abs_error, static_cast<double>(1e-30f));
  EXPECT_TRUE(std::isinf(zero.max_rel_error));
  EXPECT_EQ(zero.max_ulp, bits_of(1e-30f));  // from +0, the pattern's magnitude counts the steps
}

TEST(NumericsMagnitude, IntegersAreExact) {
  const std::vector<std::int64_t> a = {std::numeric_limits<std::int64_t>::max(), 7, -3};
  const std::vector<std::int64_t> b = {std::numeric_limits<std::int64_t>::max() - 1, 7, 4};
  const Magnitude m = compare_buffers(ncclInt64, a.data(), b.data(), a.size());
  EXPECT_EQ(m.elements_differing, 2u);
  EXPECT_EQ(m.first_index, 0);
  EXPECT_EQ(m.worst_index, 2);
  EXPECT_EQ(m.max_ulp, 7u);
  EXPECT_EQ(m.max_abs_error, 7.0);
  EXPECT_DOUBLE_EQ(m.max_rel_error, 7.0 / 3.0);
  const std::vector<std::uint8_t> c = {0, 200}, d = {255, 200};
  const Magnitude u = compare_buffers(ncclUint8, c.data(), d.data(), 2);
  EXPECT_EQ(u.max_ulp, 255u);
  EXPECT_TRUE(std::isinf(u.max_rel_error));
}

// ---------------------------------------------------------------------------------------------------------------
// Random mixed-magnitude data and replayed orders

// Rank r's input: count values of mixed sign and magnitudes 2^-12..2^12, rounded to the datatype.
std::vector<unsigned char> random_input(ncclDataType_t type, std::size_t count, std::mt19937_64& random) {
  const std::size_t size = arith::dtype_size(type);
  std::vector<unsigned char> bytes(count * size);
  std::uniform_real_distribution<double> mantissa(-1.0, 1.0);
  for (std::size_t i = 0; i < count; ++i) {
    const double value = mantissa(random) * std::ldexp(1.0, static_cast<int>(random() % 25) - 12);
    std::uint64_t bits = 0;
    switch (type) {
      case ncclFloat64:
        bits = bits_of(value);
        break;
      case ncclFloat32:
        bits = bits_of(static_cast<float>(value));
        break;
      case ncclFloat16:
        bits = arith::float_to_half(static_cast<float>(value));
        break;
      case ncclBfloat16:
        bits = arith::float_to_bf16(static_cast<float>(value));
        break;
      case ncclFloat8e4m3:
        bits = arith::float_to_e4m3(static_cast<float>(value / 64));
        break;
      case ncclFloat8e5m2:
        bits = arith::float_to_e5m2(static_cast<float>(value));
        break;
      default:
        bits = random() & 0xFF;
        break;
    }
    std::memcpy(bytes.data() + i * size, &bits, size);
  }
  return bytes;
}

ReplayCall random_call(ncclDataType_t type, std::int64_t redop, int n, std::size_t count, std::uint64_t seed) {
  std::mt19937_64 random(seed);
  ReplayCall call;
  call.datatype = type;
  call.op.redop = redop;
  call.count = count;
  for (int r = 0; r < n; ++r) call.inputs.push_back(random_input(type, count, random));
  return call;
}

std::vector<const void*> input_pointers(const ReplayCall& call) {
  std::vector<const void*> pointers;
  for (const auto& input : call.inputs) pointers.push_back(input.data());
  return pointers;
}

TEST(NumericsReorderingBound, EveryOrderOfRandomSumsIsWithinTheBound) {
  // For every type and n = 2..8, many seeds: rank order, the deterministic tree (both accumulations) and random
  // arrival orders, pairwise, are within the bound; and the bound is not vacuous: the largest ratio seen is
  // recorded and must exceed a few percent for fp32 and bf16 (a bound 100x too loose would fail this).
  for (const ncclDataType_t type : {ncclFloat32, ncclBfloat16, ncclFloat16, ncclFloat64, ncclFloat8e4m3}) {
    for (const std::int64_t redop : {std::int64_t{ncclSum}, std::int64_t{ncclAvg}}) {
      double worst = 0;
      std::uint64_t differing = 0;
      for (int n = 2; n <= 8; ++n) {
        for (std::uint64_t seed = 1; seed <= 30; ++seed) {
          const ReplayCall call = random_call(type, redop, n, 257, seed * 1000 + static_cast<std::uint64_t>(n));
          std::string error;
          ReplayOptions options;
          options.arrival_orders = 4;
          options.seed = seed;
          const std::optional<Replay> replayed = replay(call, options, &error);
          ASSERT_TRUE(replayed) << error;
          std::vector<std::vector<unsigned char>> outputs;
          for (const ReplayedOutput& o : replayed->outputs) outputs.push_back(o.output);
          const auto fp32_tree = deterministic_output(call, dc::Accumulate::kFloat32, &error);
          ASSERT_TRUE(fp32_tree) << error;
          outputs.push_back(*fp32_tree);
          for (std::size_t i = 0; i < outputs.size(); ++i) {
            for (std::size_t j = i + 1; j < outputs.size(); ++j) {
              const ReorderingVerdict v = check_reordering_bound(type, call.op, input_pointers(call), call.count,
                                                                 outputs[i].data(), outputs[j].data());
              ASSERT_TRUE(v.within_reordering_bound)
                  << "type " << type << " op " << redop << " n " << n << " seed " << seed << " outputs " << i << ","
                  << j << ": element " << v.first_beyond_index << " ratio " << v.worst_ratio;
              if (v.worst_index >= 0) {
                worst = std::max(worst, v.worst_ratio);
                ++differing;
              }
            }
          }
        }
      }
      RecordProperty("worst_ratio_" + std::to_string(type) + "_" + std::to_string(redop), std::to_string(worst));
      std::printf("type %d op %lld: %llu differing pairs, worst |a-b| / bound = %.3g\n", static_cast<int>(type),
                  static_cast<long long>(redop), static_cast<unsigned long long>(differing), worst);
      EXPECT_GT(differing, 0u) << "no order changed any bit: the test proves nothing for type " << type;
      if (type == ncclFloat32 || type == ncclBfloat16) {
        EXPECT_GT(worst, 0.02) << "type " << type;
      }
    }
  }
}

TEST(NumericsReorderingBound, AnElementTimes1001IsBeyond) {
  for (const ncclDataType_t type : {ncclFloat32, ncclBfloat16, ncclFloat16, ncclFloat64}) {
    for (int n = 2; n <= 8; ++n) {
      const ReplayCall call = random_call(type, ncclSum, n, 64, 77 + static_cast<std::uint64_t>(n));
      std::string error;
      const auto a = ordered_output(
          call,
          [&] {
            std::vector<int> order;
            for (int r = 0; r < n; ++r) order.push_back(r);
            return order;
          }(),
          &error);
      ASSERT_TRUE(a) << error;
      std::vector<unsigned char> b = *a;
      const std::size_t size = arith::dtype_size(type), index = 13;
      const long double value = element_value(type, element_bits(a->data(), index, size));
      ASSERT_NE(value, 0);
      // The element times 1001, rounded to the type.
      std::uint64_t bits = 0;
      const long double scaled = value * 1001;
      switch (type) {
        case ncclFloat64:
          bits = bits_of(static_cast<double>(scaled));
          break;
        case ncclFloat32:
          bits = bits_of(static_cast<float>(scaled));
          break;
        case ncclFloat16:
          bits = arith::float_to_half(static_cast<float>(scaled));
          break;
        default:
          bits = arith::float_to_bf16(static_cast<float>(scaled));
          break;
      }
      std::memcpy(b.data() + index * size, &bits, size);
      const ReorderingVerdict v =
          check_reordering_bound(type, call.op, input_pointers(call), call.count, a->data(), b.data());
      EXPECT_FALSE(v.within_reordering_bound) << "type " << type << " n " << n;
      EXPECT_EQ(v.first_beyond_index, static_cast<std::int64_t>(index));
      EXPECT_EQ(v.worst_index, static_cast<std::int64_t>(index));
      EXPECT_EQ(v.elements_beyond, 1u);
      EXPECT_GT(v.worst_ratio, 1.0);
    }
  }
}

TEST(NumericsReorderingBound, MinMaxAndIntegersAllowNoDifference) {
  const std::vector<float> x0 = {1.0f, 2.0f}, x1 = {3.0f, -1.0f};
  const std::vector<const void*> inputs = {x0.data(), x1.data()};
  const std::vector<float> a = {3.0f, 2.0f}, b = {3.0f, std::nextafter(2.0f, 3.0f)};
  for (const std::int64_t redop : {std::int64_t{ncclMin}, std::int64_t{ncclMax}}) {
    ReductionOp op;
    op.redop = redop;
    const ReorderingVerdict v = check_reordering_bound(ncclFloat32, op, inputs, 2, a.data(), b.data());
    EXPECT_FALSE(v.within_reordering_bound);
    EXPECT_EQ(v.first_beyond_index, 1);
    EXPECT_TRUE(std::isinf(v.worst_ratio));
    EXPECT_TRUE(check_reordering_bound(ncclFloat32, op, inputs, 2, a.data(), a.data()).within_reordering_bound);
  }
  const std::vector<std::int32_t> i0 = {1, 2}, i1 = {3, 4}, ia = {4, 6}, ib = {4, 7};
  ReductionOp sum;
  EXPECT_FALSE(
      check_reordering_bound(ncclInt32, sum, {i0.data(), i1.data()}, 2, ia.data(), ib.data()).within_reordering_bound);
  EXPECT_EQ(allowed_difference(ncclInt32, sum, std::vector<std::uint64_t>{1, 3}.data(), 2), 0);
}

TEST(NumericsReorderingBound, TheBoundIsTheDocumentedFormula) {
  // fp32 sum of n = 4 addends: 2 gamma_3(2^-24) sum|x|, widened by 2^-40.
  const std::vector<float> x = {1.0f, -2.5f, 1e-3f, 7.0f};
  std::vector<std::uint64_t> bits;
  long double absolute = 0;
  for (float v : x) {
    bits.push_back(bits_of(v));
    absolute += std::fabs(static_cast<long double>(v));
  }
  const long double u = std::ldexp(1.0L, -24), gamma3 = 3 * u / (1 - 3 * u);
  const long double expected = 2 * gamma3 * absolute * (1 + std::ldexp(1.0L, -40));
  EXPECT_EQ(allowed_difference(ncclFloat32, ReductionOp{}, bits.data(), 4), expected);
  // bf16: the larger of native (gamma_3(2^-8) sum|x|) and fp32 accumulation (u_T |s| + ... ), here native.
  std::vector<std::uint64_t> narrow;
  long double narrow_absolute = 0;
  for (float v : x) {
    const std::uint16_t b = arith::float_to_bf16(v);
    narrow.push_back(b);
    narrow_absolute += std::fabs(static_cast<long double>(arith::bf16_to_float(b)));
  }
  const long double ub = std::ldexp(1.0L, -8);
  EXPECT_EQ(allowed_difference(ncclBfloat16, ReductionOp{}, narrow.data(), 4),
            2 * (3 * ub / (1 - 3 * ub)) * narrow_absolute * (1 + std::ldexp(1.0L, -40)));
  // Prod with a zero factor, or factors whose partial products could underflow: not bounded.
  ReductionOp prod;
  prod.redop = ncclProd;
  EXPECT_EQ(allowed_difference(ncclFloat32, prod, std::vector<std::uint64_t>{bits_of(0.0f), bits_of(2.0f)}.data(), 2),
            0);
  EXPECT_EQ(allowed_difference(ncclFloat32, prod,
                               std::vector<std::uint64_t>{bits_of(1e-30f), bits_of(1e-20f), bits_of(1e30f)}.data(), 3),
            0);
  EXPECT_GT(allowed_difference(ncclFloat32, prod, std::vector<std::uint64_t>{bits_of(3.0f), bits_of(0.7f)}.data(), 2),
            0);
}

TEST(NumericsReorderingBound, ProductsInAnyOrderAreWithinTheBound) {
  std::mt19937_64 random(11);
  std::uniform_real_distribution<float> factor(0.5f, 2.0f);
  for (const ncclDataType_t type : {ncclFloat32, ncclBfloat16}) {
    for (int n = 2; n <= 8; ++n) {
      ReplayCall call;
      call.datatype = type;
      call.op.redop = ncclProd;
      call.count = 200;
      for (int r = 0; r < n; ++r) {
        std::vector<unsigned char> bytes(call.count * arith::dtype_size(type));
        for (std::size_t i = 0; i < call.count; ++i) {
          const float v = (random() & 1 ? -1.0f : 1.0f) * factor(random);
          const std::uint64_t b = type == ncclFloat32 ? bits_of(v) : arith::float_to_bf16(v);
          std::memcpy(bytes.data() + i * arith::dtype_size(type), &b, arith::dtype_size(type));
        }
        call.inputs.push_back(bytes);
      }
      std::string error;
      const std::optional<Replay> replayed = replay(call, ReplayOptions{}, &error);
      ASSERT_TRUE(replayed) << error;
      for (const ReplayedOutput& o : replayed->outputs) {
        EXPECT_TRUE(check_reordering_bound(type, call.op, input_pointers(call), call.count,
                                           replayed->outputs[0].output.data(), o.output.data())
                        .within_reordering_bound)
            << "type " << type << " n " << n << " order " << o.order;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Replay's orders against hostnccl and collectives/ themselves

// Runs ncclAllReduce (hostnccl, threads) on call's inputs; returns rank 0's output.
std::vector<unsigned char> hostnccl_all_reduce(const ReplayCall& call) {
  const int n = static_cast<int>(call.inputs.size());
  const std::size_t bytes = call.inputs[0].size();
  std::vector<std::vector<unsigned char>> outputs(static_cast<std::size_t>(n), std::vector<unsigned char>(bytes));
  const int failures = hostnccl_test::run_threads(n, ThreadInit::kInitRank, [&](Rank& R) {
    const auto r = static_cast<std::size_t>(R.rank);
    R.check.ok(ncclAllReduce(call.inputs[r].data(), outputs[r].data(), call.count, call.datatype,
                             static_cast<ncclRedOp_t>(call.op.redop), R.comm, nullptr),
               "ncclAllReduce");
  });
  EXPECT_EQ(failures, 0);
  for (int r = 1; r < n; ++r) EXPECT_EQ(outputs[static_cast<std::size_t>(r)], outputs[0]) << "rank " << r;
  return outputs[0];
}

TEST(NumericsReplay, RankOrderIsHostncclsRankOrderAllReduceBitForBit) {
  ScopedEnv env{{"HOSTNCCL_REDUCE_ORDER", "rank"}};
  for (const ncclDataType_t type : {ncclFloat32, ncclBfloat16}) {
    for (const int n : {3, 5, 8}) {
      const ReplayCall call = random_call(type, ncclSum, n, 3001, 500 + static_cast<std::uint64_t>(n));
      std::string error;
      const std::optional<Replay> replayed = replay(call, ReplayOptions{}, &error);
      ASSERT_TRUE(replayed) << error;
      ASSERT_EQ(replayed->outputs[0].order, "rank");
      EXPECT_EQ(replayed->outputs[0].output, hostnccl_all_reduce(call)) << "type " << type << " n " << n;
      // The premise: another order gives other bits for this data.
      bool some_order_differs = false;
      for (const ReplayedOutput& o : replayed->outputs) some_order_differs |= o.output != replayed->outputs[0].output;
      EXPECT_TRUE(some_order_differs) << "type " << type << " n " << n;
    }
  }
}

TEST(NumericsReplay, DeterministicOrderIsCollectivesAllReduceAndReduceScatterBitForBit) {
  const dc::P2pFunctions nccl{pncclSend, pncclRecv, pncclGroupStart, pncclGroupEnd, pncclCommGetAsyncError};
  for (const dc::Accumulate accumulate : {dc::Accumulate::kNative, dc::Accumulate::kFloat32}) {
    for (const ncclDataType_t type : {ncclFloat32, ncclBfloat16, ncclFloat16}) {
      for (const int n : {2, 3, 4, 6, 8}) {
        for (const bool scatter : {false, true}) {
          ReplayCall call = random_call(type, ncclSum, n, scatter ? 97 * static_cast<std::size_t>(n) : 1001,
                                        900 + static_cast<std::uint64_t>(n));
          if (scatter) {
            call.collective = ReplayCollective::kReduceScatter;
            call.count = 97;
          }
          std::string error;
          const auto expected = deterministic_output(call, accumulate, &error);
          ASSERT_TRUE(expected) << error;
          const std::size_t size = arith::dtype_size(type);
          const std::size_t out_bytes = call.count * size;
          std::vector<std::vector<unsigned char>> outputs(static_cast<std::size_t>(n),
                                                          std::vector<unsigned char>(out_bytes));
          dc::Options options;
          options.accumulate = accumulate;
          const int failures = hostnccl_test::run_threads(n, ThreadInit::kInitRank, [&](Rank& R) {
            const auto r = static_cast<std::size_t>(R.rank);
            dc::Workspace workspace;
            const dc::CallContext context{R.comm, R.rank, R.nranks, nullptr, false};
            const dc::Reduction sum{};
            const ncclResult_t result =
                scatter ? dc::reduce_scatter(nccl, context, call.inputs[r].data(), outputs[r].data(), call.count, type,
                                             sum, workspace, options)
                        : dc::all_reduce(nccl, context, call.inputs[r].data(), outputs[r].data(), call.count, type, sum,
                                         workspace, options);
            R.check.ok(result, "deterministic reduction");
          });
          ASSERT_EQ(failures, 0);
          for (int r = 0; r < n; ++r) {
            const std::size_t offset = scatter ? static_cast<std::size_t>(r) * out_bytes : 0;
            const std::vector<unsigned char> block(expected->begin() + static_cast<std::ptrdiff_t>(offset),
                                                   expected->begin() + static_cast<std::ptrdiff_t>(offset + out_bytes));
            EXPECT_EQ(outputs[static_cast<std::size_t>(r)], block)
                << "type " << type << " n " << n << (scatter ? " ReduceScatter" : " AllReduce") << " rank " << r;
          }
        }
      }
    }
  }
}

TEST(NumericsReplay, DeterministicOrderOfEveryOperatorIsCollectivesBitForBit) {
  const dc::P2pFunctions nccl{pncclSend, pncclRecv, pncclGroupStart, pncclGroupEnd, pncclCommGetAsyncError};
  for (const ncclDataType_t type : {ncclFloat32, ncclBfloat16}) {
    // The PreMulSum scalar, an element of the datatype: 0.3 rounded to it.
    const std::uint64_t scalar_bits = type == ncclFloat32 ? bits_of(0.3f) : arith::float_to_bf16(0.3f);
    for (const std::int64_t redop :
         {std::int64_t{ncclAvg}, std::int64_t{ncclProd}, std::int64_t{ncclMax}, std::int64_t{ncclNumOps}}) {
      for (const int n : {3, 4, 6}) {
        ReplayCall call = random_call(type, redop, n, 513, 40 + static_cast<std::uint64_t>(n));
        call.op.premulsum_scalar_bits = scalar_bits;
        std::string error;
        const auto expected = deterministic_output(call, dc::Accumulate::kNative, &error);
        ASSERT_TRUE(expected) << error;
        const dc::Reduction reduction = call.op.is_premulsum()
                                            ? dc::premul_sum_reduction(&scalar_bits, type, ncclScalarHostImmediate)
                                            : *dc::builtin_reduction(static_cast<ncclRedOp_t>(redop));
        std::vector<std::vector<unsigned char>> outputs(static_cast<std::size_t>(n),
                                                        std::vector<unsigned char>(expected->size()));
        const int failures = hostnccl_test::run_threads(n, ThreadInit::kInitRank, [&](Rank& R) {
          const auto r = static_cast<std::size_t>(R.rank);
          dc::Workspace workspace;
          const dc::CallContext context{R.comm, R.rank, R.nranks, nullptr, false};
          R.check.ok(dc::all_reduce(nccl, context, call.inputs[r].data(), outputs[r].data(), call.count, type,
                                    reduction, workspace, dc::Options{}),
                     "deterministic AllReduce");
        });
        ASSERT_EQ(failures, 0);
        for (int r = 0; r < n; ++r) {
          EXPECT_EQ(outputs[static_cast<std::size_t>(r)], *expected)
              << "type " << type << " op " << redop << " n " << n << " rank " << r;
        }
      }
    }
  }
}

TEST(NumericsReplay, DistancesFromTheReferenceAreMeasured) {
  // fp32 sums of integers below 2^20 are exact in every order: every distance is 0.
  ReplayCall exact;
  exact.datatype = ncclFloat32;
  exact.count = 100;
  std::mt19937_64 random(5);
  for (int r = 0; r < 6; ++r) {
    std::vector<float> values(exact.count);
    for (float& v : values) v = static_cast<float>(static_cast<int>(random() % 2000000) - 1000000);
    std::vector<unsigned char> bytes(values.size() * sizeof(float));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    exact.inputs.push_back(bytes);
  }
  std::string error;
  const std::optional<Replay> e = replay(exact, ReplayOptions{}, &error);
  ASSERT_TRUE(e) << error;
  ASSERT_EQ(e->outputs.size(), 2u + 8u);
  for (const ReplayedOutput& o : e->outputs) EXPECT_TRUE(o.from_reference.identical()) << o.order;

  // 1 + 2^-24 + 2^-24 ... : rank order loses every 2^-24 (ties to even), the reference keeps them.
  ReplayCall lossy;
  lossy.datatype = ncclFloat32;
  lossy.count = 1;
  for (int r = 0; r < 5; ++r) {
    const float v = r == 0 ? 1.0f : std::ldexp(1.0f, -24);
    std::vector<unsigned char> bytes(sizeof v);
    std::memcpy(bytes.data(), &v, sizeof v);
    lossy.inputs.push_back(bytes);
  }
  ReplayOptions options;
  options.arrival_orders = 0;
  const std::optional<Replay> l = replay(lossy, options, &error);
  ASSERT_TRUE(l) << error;
  float reference, by_rank;
  std::memcpy(&reference, l->reference.data(), sizeof reference);
  std::memcpy(&by_rank, l->outputs[0].output.data(), sizeof by_rank);
  EXPECT_EQ(reference, 1.0f + std::ldexp(1.0f, -22));  // 1 + 4 * 2^-24, exact in fp32
  EXPECT_EQ(by_rank, 1.0f);
  EXPECT_EQ(l->outputs[0].from_reference.max_ulp, 2u);  // 2^-22 is 2 ulps of 1 (ulp 2^-23)
  EXPECT_EQ(l->outputs[0].from_reference.elements_differing, 1u);
  // The tree (4 + 1 ranks... n = 5 is prime: left to right too) gives the same here.
  EXPECT_EQ(l->outputs[1].order, "deterministic");
}

TEST(NumericsReplay, BadCallsAreRefusedWithAReason) {
  ReplayCall call = random_call(ncclFloat32, ncclSum, 3, 10, 1);
  call.inputs[1].pop_back();
  std::string error;
  EXPECT_FALSE(replay(call, ReplayOptions{}, &error));
  EXPECT_NE(error.find("rank 1"), std::string::npos) << error;
  call = random_call(ncclFloat32, ncclSum, 3, 10, 1);
  // 14: no NCCL datatype, yet within the enum's range (0-15): a value beyond it, such as 99, is undefined behaviour.
  call.datatype = static_cast<ncclDataType_t>(14);
  EXPECT_FALSE(replay(call, ReplayOptions{}, &error));
  EXPECT_NE(error.find("datatype"), std::string::npos) << error;
  call = random_call(ncclFloat32, ncclSum, 3, 10, 1);
  EXPECT_FALSE(ordered_output(call, {0, 0, 1}, &error));
  // A count from a forged log whose byte size wraps to 0 (2^62 float32s): empty inputs must not pass for it.
  for (const ReplayCollective collective : {ReplayCollective::kAllReduce, ReplayCollective::kReduceScatter}) {
    call = random_call(ncclFloat32, ncclSum, 4, 10, 1);
    call.collective = collective;
    call.count = collective == ReplayCollective::kAllReduce ? std::size_t{1} << 62 : std::size_t{1} << 60;
    for (auto& input : call.inputs) input.clear();
    error.clear();
    EXPECT_FALSE(replay(call, ReplayOptions{}, &error));
    EXPECT_NE(error.find("does not fit in 64 bits"), std::string::npos) << error;
  }
}

}  // namespace
