// Tests of collectives/dtype_arith.h against values derived here from each format's definition (sign, exponent
// bias, mantissa width), never from the header's own bit tricks.
#include "collectives/dtype_arith.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace {
using namespace detnccl::arith;

// A binary floating format as its definition states it.
struct Format {
  int exp_bits;
  int man_bits;
  bool ieee_specials;  // all-ones exponent is inf/NaN (fp16, bf16, e5m2); otherwise only all-ones is NaN (e4m3)
  bool saturates;      // conversion saturates to max finite (fp8) instead of overflowing to inf

  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  unsigned patterns() const { return 1u << (1 + exp_bits + man_bits); }
  bool is_nan(unsigned bits) const {
    const unsigned e = (bits >> man_bits) & ((1u << exp_bits) - 1), m = bits & ((1u << man_bits) - 1);
    if (ieee_specials) return e == (1u << exp_bits) - 1 && m != 0;
    return e == (1u << exp_bits) - 1 && m == (1u << man_bits) - 1;
  }
  bool is_inf(unsigned bits) const {
    const unsigned e = (bits >> man_bits) & ((1u << exp_bits) - 1), m = bits & ((1u << man_bits) - 1);
    return ieee_specials && e == (1u << exp_bits) - 1 && m == 0;
  }
  // (-1)^s * 2^(e - bias) * (1 + m / 2^M) for normals, (-1)^s * 2^(1 - bias) * (m / 2^M) for subnormals.
  double value(unsigned bits) const {
    const unsigned s = bits >> (exp_bits + man_bits);
    const int e = static_cast<int>((bits >> man_bits) & ((1u << exp_bits) - 1));
    const double m = static_cast<double>(bits & ((1u << man_bits) - 1)) / std::ldexp(1.0, man_bits);
    const double magnitude = e == 0 ? std::ldexp(m, 1 - bias()) : std::ldexp(1.0 + m, e - bias());
    return s ? -magnitude : magnitude;
  }
  // Every non-negative finite value with its bits, ascending; IEEE formats get the inf encoding appended at the
  // value one ulp above max, which is where IEEE rounding sends overflowing values.
  std::vector<std::pair<double, unsigned>> positive_table() const {
    std::vector<std::pair<double, unsigned>> table;
    const unsigned half = patterns() / 2;
    for (unsigned bits = 0; bits < half; ++bits) {
      if (!is_nan(bits) && !is_inf(bits)) table.emplace_back(value(bits), bits);
    }
    std::sort(table.begin(), table.end());
    if (ieee_specials && !saturates) {
      const double ulp_at_max = table.back().first - table[table.size() - 2].first;
      table.emplace_back(table.back().first + ulp_at_max, ((1u << exp_bits) - 1) << man_bits);
    }
    return table;
  }
};

const Format kHalf{5, 10, true, false};
const Format kBf16{8, 7, true, false};
const Format kE4m3{4, 3, false, true};
const Format kE5m2{5, 2, true, true};

// Reference RNE rounding of a finite float by search in the table: nearest value, ties to the even encoding.
unsigned reference_round(const Format& format, const std::vector<std::pair<double, unsigned>>& table, float x) {
  const unsigned sign = std::signbit(x) ? format.patterns() / 2 : 0;
  const double magnitude = std::fabs(static_cast<double>(x));
  if (format.saturates && magnitude > table.back().first) return sign | table.back().second;
  auto upper = std::upper_bound(table.begin(), table.end(), std::make_pair(magnitude, ~0u));
  if (upper == table.end()) return sign | table.back().second;
  if (upper == table.begin()) return sign | upper->second;
  const auto lower = upper - 1;
  const double below = magnitude - lower->first, above = upper->first - magnitude;
  if (below < above) return sign | lower->second;
  if (above < below) return sign | upper->second;
  return sign | ((lower->second & 1u) == 0 ? lower->second : upper->second);
}

struct Conversions {
  float (*to_float)(unsigned);
  unsigned (*from_float)(float);
};
const Conversions kHalfConv{[](unsigned b) { return half_to_float(static_cast<std::uint16_t>(b)); },
                            [](float f) -> unsigned { return float_to_half(f); }};
const Conversions kBf16Conv{[](unsigned b) { return bf16_to_float(static_cast<std::uint16_t>(b)); },
                            [](float f) -> unsigned { return float_to_bf16(f); }};
const Conversions kE4m3Conv{[](unsigned b) { return e4m3_to_float(static_cast<std::uint8_t>(b)); },
                            [](float f) -> unsigned { return float_to_e4m3(f); }};
const Conversions kE5m2Conv{[](unsigned b) { return e5m2_to_float(static_cast<std::uint8_t>(b)); },
                            [](float f) -> unsigned { return float_to_e5m2(f); }};

void check_every_pattern(const Format& format, const Conversions& conv) {
  for (unsigned bits = 0; bits < format.patterns(); ++bits) {
    const float f = conv.to_float(bits);
    if (format.is_nan(bits)) {
      EXPECT_TRUE(std::isnan(f)) << bits;
      EXPECT_TRUE(format.is_nan(conv.from_float(f))) << bits;
      continue;
    }
    if (format.is_inf(bits)) {
      EXPECT_TRUE(std::isinf(f)) << bits;
      EXPECT_EQ(std::signbit(f), bits >= format.patterns() / 2) << bits;
      continue;
    }
    EXPECT_EQ(static_cast<double>(f), format.value(bits)) << "pattern " << bits;
    EXPECT_EQ(std::signbit(f), bits >= format.patterns() / 2) << "sign of pattern " << bits;  // -0 included
    EXPECT_EQ(conv.from_float(f), bits) << "round trip of pattern " << bits;
  }
}

// Midpoints between neighbours (exact in float for these formats) must round to the even neighbour; a float ulp
// either side of a midpoint must round to the nearer neighbour.
void check_ties(const Format& format, const Conversions& conv) {
  const auto table = format.positive_table();
  int ties = 0;
  for (std::size_t i = 0; i + 1 < table.size(); ++i) {
    const double mid = (table[i].first + table[i + 1].first) / 2;
    const auto midpoint = static_cast<float>(mid);
    ASSERT_EQ(static_cast<double>(midpoint), mid);
    const unsigned even = (table[i].second & 1u) == 0 ? table[i].second : table[i + 1].second;
    EXPECT_EQ(conv.from_float(midpoint), even) << "tie at " << mid;
    EXPECT_EQ(conv.from_float(-midpoint), even | format.patterns() / 2) << "tie at -" << mid;
    EXPECT_EQ(conv.from_float(std::nextafter(midpoint, 0.0f)), table[i].second) << "below " << mid;
    EXPECT_EQ(conv.from_float(std::nextafter(midpoint, INFINITY)), table[i + 1].second) << "above " << mid;
    ++ties;
  }
  EXPECT_GT(ties, 100);
}

void check_random_floats(const Format& format, const Conversions& conv) {
  const auto table = format.positive_table();
  std::mt19937 rng(1234);
  std::uniform_int_distribution<std::uint32_t> any_bits;
  const double max_exp = std::log2(table.back().first) + 2;
  std::uniform_real_distribution<double> exponent(-3.0 * max_exp - 10, max_exp);
  for (int i = 0; i < 100000; ++i) {
    // Half the samples anywhere in float, half near the format's range, where the interesting roundings are.
    float x = i % 2 ? std::bit_cast<float>(any_bits(rng)) : static_cast<float>(std::exp2(exponent(rng)));
    if (i % 4 == 1) x = -x;
    if (std::isnan(x)) continue;
    if (std::isinf(x)) {
      // Saturating formats give max finite, IEEE ones the inf encoding: the table's last entry either way.
      EXPECT_EQ(conv.from_float(x) & (format.patterns() / 2 - 1), table.back().second);
      continue;
    }
    ASSERT_EQ(conv.from_float(x), reference_round(format, table, x)) << "x = " << x;
  }
}

TEST(DtypeArith, ElementSizes) {
  EXPECT_EQ(dtype_size(ncclInt8), 1u);
  EXPECT_EQ(dtype_size(ncclUint8), 1u);
  EXPECT_EQ(dtype_size(ncclInt32), 4u);
  EXPECT_EQ(dtype_size(ncclUint32), 4u);
  EXPECT_EQ(dtype_size(ncclInt64), 8u);
  EXPECT_EQ(dtype_size(ncclUint64), 8u);
  EXPECT_EQ(dtype_size(ncclFloat16), 2u);
  EXPECT_EQ(dtype_size(ncclFloat32), 4u);
  EXPECT_EQ(dtype_size(ncclFloat64), 8u);
  EXPECT_EQ(dtype_size(ncclBfloat16), 2u);
  EXPECT_EQ(dtype_size(ncclFloat8e4m3), 1u);
  EXPECT_EQ(dtype_size(ncclFloat8e5m2), 1u);
  EXPECT_EQ(dtype_size(ncclNumTypes), 0u);
  EXPECT_EQ(dtype_size(static_cast<ncclDataType_t>(15)), 0u);
}

TEST(DtypeArith, HalfEveryPattern) { check_every_pattern(kHalf, kHalfConv); }
TEST(DtypeArith, Bf16EveryPattern) { check_every_pattern(kBf16, kBf16Conv); }
TEST(DtypeArith, E4m3EveryPattern) { check_every_pattern(kE4m3, kE4m3Conv); }
TEST(DtypeArith, E5m2EveryPattern) { check_every_pattern(kE5m2, kE5m2Conv); }
TEST(DtypeArith, HalfTiesToEven) { check_ties(kHalf, kHalfConv); }
TEST(DtypeArith, Bf16TiesToEven) { check_ties(kBf16, kBf16Conv); }
TEST(DtypeArith, E4m3TiesToEven) { check_ties(kE4m3, kE4m3Conv); }
TEST(DtypeArith, E5m2TiesToEven) { check_ties(kE5m2, kE5m2Conv); }
TEST(DtypeArith, HalfRandomFloats) { check_random_floats(kHalf, kHalfConv); }
TEST(DtypeArith, Bf16RandomFloats) { check_random_floats(kBf16, kBf16Conv); }
TEST(DtypeArith, E4m3RandomFloats) { check_random_floats(kE4m3, kE4m3Conv); }
TEST(DtypeArith, E5m2RandomFloats) { check_random_floats(kE5m2, kE5m2Conv); }

TEST(DtypeArith, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(float_to_half(65504.0f), 0x7BFFu);
  EXPECT_EQ(float_to_half(65519.99f), 0x7BFFu);
  EXPECT_EQ(float_to_half(65520.0f), 0x7C00u);  // the midpoint to the next (nonexistent) value overflows
  EXPECT_EQ(float_to_half(-inf), 0xFC00u);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000u);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001u);  // smallest subnormal
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000u);  // half of it: tie to even (zero)
  EXPECT_EQ(float_to_half(std::ldexp(1.5f, -25)), 0x0001u);
  EXPECT_EQ(float_to_half(1e-45f), 0x0000u);  // float subnormal
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7F80u);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::denorm_min()), 0x0000u);
  EXPECT_EQ(float_to_bf16(std::ldexp(1.0f, -133)), 0x0001u);  // smallest bf16 subnormal
  EXPECT_EQ(float_to_e4m3(448.0f), 0x7Eu);
  EXPECT_EQ(float_to_e4m3(1000.0f), 0x7Eu);  // saturates
  EXPECT_EQ(float_to_e4m3(-inf), 0xFEu);     // saturates, no inf in e4m3
  EXPECT_EQ(float_to_e4m3(nan) & 0x7Fu, 0x7Fu);
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -9)), 0x01u);  // smallest subnormal
  EXPECT_EQ(float_to_e5m2(57344.0f), 0x7Bu);
  EXPECT_EQ(float_to_e5m2(inf), 0x7Bu);  // saturates like CUDA's __NV_SATFINITE
  EXPECT_TRUE(std::isinf(e5m2_to_float(0x7C)));
  EXPECT_TRUE(std::isnan(e5m2_to_float(float_to_e5m2(nan))));
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(nan))));
  // A quiet NaN keeps its payload through fp16; a signalling one is quieted.
  EXPECT_EQ(float_to_half(half_to_float(0x7E01u)), 0x7E01u);
  EXPECT_EQ(float_to_half(half_to_float(0x7C01u)), 0x7E01u);
}

TEST(DtypeArith, IntegersWrap) {
  EXPECT_EQ(Arith<std::int8_t>::add(127, 1), -128);
  EXPECT_EQ(Arith<std::uint8_t>::add(255, 2), 1);
  EXPECT_EQ(Arith<std::int8_t>::mul(64, 2), -128);
  EXPECT_EQ(Arith<std::int32_t>::add(std::numeric_limits<std::int32_t>::max(), 1),
            std::numeric_limits<std::int32_t>::min());
  EXPECT_EQ(Arith<std::uint64_t>::mul(1ull << 63, 2), 0u);
  EXPECT_EQ(Arith<std::int64_t>::min(-5, 3), -5);
  EXPECT_EQ(Arith<std::uint32_t>::max(4000000000u, 3), 4000000000u);
  EXPECT_EQ(Arith<std::int32_t>::div(-7, 2), -3);  // truncation toward zero
}

TEST(DtypeArith, NarrowArithmeticRoundsAfterEachOperation) {
  const Half h2048{float_to_half(2048.0f)}, h1{float_to_half(1.0f)}, h2050{float_to_half(2050.0f)};
  EXPECT_EQ(half_to_float(Arith<Half>::add(h2048, h1).bits), 2048.0f);  // tie to even
  EXPECT_EQ(half_to_float(Arith<Half>::add(h2050, h1).bits), 2052.0f);  // tie to even (upwards)
  const Fp8E4M3 big{float_to_e4m3(448.0f)};
  EXPECT_EQ(Arith<Fp8E4M3>::add(big, big).bits, 0x7Eu);  // saturates
  const Bfloat16 b1{float_to_bf16(1.0f)}, tiny{float_to_bf16(std::ldexp(1.0f, -9))};
  EXPECT_EQ(Arith<Bfloat16>::add(b1, tiny).bits, b1.bits);  // below half an ulp (2^-8) of 1
  // 3 * (1/3 in float) = 1.0000000298 is rounded to float first, then to half: exactly 1.
  EXPECT_EQ(half_to_float(Arith<Half>::mul_compute(Half{float_to_half(3.0f)}, 1.0f / 3.0f).bits), 1.0f);
}

TEST(DtypeArith, MinMaxAreOrderIndependent) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(Arith<float>::min(nan, 1.0f)));
  EXPECT_TRUE(std::isnan(Arith<float>::min(1.0f, nan)));
  EXPECT_TRUE(std::isnan(Arith<double>::max(2.0, std::nan(""))));
  EXPECT_TRUE(std::signbit(Arith<float>::min(0.0f, -0.0f)));
  EXPECT_TRUE(std::signbit(Arith<float>::min(-0.0f, 0.0f)));
  EXPECT_FALSE(std::signbit(Arith<float>::max(0.0f, -0.0f)));
  EXPECT_FALSE(std::signbit(Arith<float>::max(-0.0f, 0.0f)));
  EXPECT_EQ(Arith<Half>::min(Half{0x7E00}, Half{float_to_half(1.0f)}).bits, 0x7E00u);
  EXPECT_EQ(Arith<Half>::min(Half{float_to_half(1.0f)}, Half{0x7E55}).bits, 0x7E00u);  // canonical NaN
  EXPECT_EQ(Arith<Fp8E4M3>::max(Fp8E4M3{0x80}, Fp8E4M3{0x00}).bits, 0x00u);            // +0 > -0
  EXPECT_EQ(Arith<Fp8E5M2>::min(Fp8E5M2{0x80}, Fp8E5M2{0x00}).bits, 0x80u);
  EXPECT_EQ(half_to_float(Arith<Half>::max(Half{float_to_half(-3.0f)}, Half{float_to_half(2.0f)}).bits), 2.0f);
}

TEST(DtypeArith, VisitDtypeCoversEveryType) {
  for (int t = 0; t < ncclNumTypes; ++t) {
    std::size_t size = 0;
    EXPECT_TRUE(visit_dtype(static_cast<ncclDataType_t>(t), [&](auto tag) { size = sizeof(tag); }));
    EXPECT_EQ(size, dtype_size(static_cast<ncclDataType_t>(t)));
  }
  EXPECT_FALSE(visit_dtype(ncclNumTypes, [](auto) {}));
}

}  // namespace
