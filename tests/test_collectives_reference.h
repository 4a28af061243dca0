// The tests' own model of deterministic mode, written from docs/deterministic.md and not from collectives/: the
// order of operations (a recursive split by the largest prime factor), the operators' meaning (pre-multiplication,
// canonical NaN, min/max with NaN and signed zeros), and the inputs every rank can compute for every other rank.
// The element conversions come from collectives/dtype_arith.h, which tests/test_dtype_arith.cc checks against each
// format's definition.
#ifndef DETNCCL_TESTS_TEST_COLLECTIVES_REFERENCE_H
#define DETNCCL_TESTS_TEST_COLLECTIVES_REFERENCE_H

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "collectives/deterministic.h"
#include "collectives/dtype_arith.h"

namespace collectives_test {

using detnccl::arith::Bfloat16;
using detnccl::arith::Fp8E4M3;
using detnccl::arith::Fp8E5M2;
using detnccl::arith::Half;
using detnccl::collectives::Accumulate;
using detnccl::collectives::ReductionKind;

template <typename T>
constexpr bool kNarrow =
    std::is_same_v<T, Half> || std::is_same_v<T, Bfloat16> || std::is_same_v<T, Fp8E4M3> || std::is_same_v<T, Fp8E5M2>;
template <typename T>
constexpr bool kFloating = kNarrow<T> || std::is_floating_point_v<T>;

// A narrow value's exact value as a float, and a float rounded (RNE) to the narrow format.
template <typename T>
float widen(T x) {
  using namespace detnccl::arith;
  if constexpr (std::is_same_v<T, Half>) return half_to_float(x.bits);
  if constexpr (std::is_same_v<T, Bfloat16>) return bf16_to_float(x.bits);
  if constexpr (std::is_same_v<T, Fp8E4M3>) return e4m3_to_float(x.bits);
  if constexpr (std::is_same_v<T, Fp8E5M2>) return e5m2_to_float(x.bits);
}
template <typename T>
T round_to(float x) {
  using namespace detnccl::arith;
  if constexpr (std::is_same_v<T, Half>) return Half{float_to_half(x)};
  if constexpr (std::is_same_v<T, Bfloat16>) return Bfloat16{float_to_bf16(x)};
  if constexpr (std::is_same_v<T, Fp8E4M3>) return Fp8E4M3{float_to_e4m3(x)};
  if constexpr (std::is_same_v<T, Fp8E5M2>) return Fp8E5M2{float_to_e5m2(x)};
}

// Any element as a long double (exact for every type but the widest integers, which the error tests do not use).
template <typename T>
long double value_of(T x) {
  if constexpr (kNarrow<T>) {
    return widen(x);
  } else {
    return static_cast<long double>(x);
  }
}

template <typename T>
bool is_nan(T x) {
  if constexpr (kFloating<T>) {
    return std::isnan(value_of(x));
  } else {
    return false;
  }
}

// The documented canonical NaN: positive, only the quiet bit (fp8 e4m3: its one NaN pattern 0x7F; e5m2: 0x7E).
template <typename T>
T canonical_nan() {
  if constexpr (std::is_same_v<T, float>) return std::numeric_limits<float>::quiet_NaN();
  if constexpr (std::is_same_v<T, double>) return std::numeric_limits<double>::quiet_NaN();
  if constexpr (std::is_same_v<T, Half>) return Half{0x7E00};
  if constexpr (std::is_same_v<T, Bfloat16>) return Bfloat16{0x7FC0};
  if constexpr (std::is_same_v<T, Fp8E4M3>) return Fp8E4M3{0x7F};
  if constexpr (std::is_same_v<T, Fp8E5M2>) return Fp8E5M2{0x7E};
}

template <typename T>
bool same_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// The model of one operator over an accumulator type V (T, or float for fp32 accumulation of narrow types).
template <typename T, typename V>
struct Model {
  ReductionKind kind;
  int nranks;

  static V nan_to_canonical(V v) {
    if constexpr (std::is_floating_point_v<V>) {
      return std::isnan(v) ? std::numeric_limits<V>::quiet_NaN() : v;
    } else if constexpr (kNarrow<V>) {
      return is_nan(v) ? canonical_nan<V>() : v;
    } else {
      return v;
    }
  }

  // Arithmetic of V: narrow types compute in float and round once; integers wrap.
  static V add(V a, V b) {
    if constexpr (kNarrow<V>) {
      return nan_to_canonical(round_to<V>(widen(a) + widen(b)));
    } else if constexpr (std::is_floating_point_v<V>) {
      return nan_to_canonical(a + b);
    } else {
      using U = std::make_unsigned_t<V>;
      return static_cast<V>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    }
  }
  static V mul(V a, V b) {
    if constexpr (kNarrow<V>) {
      return nan_to_canonical(round_to<V>(widen(a) * widen(b)));
    } else if constexpr (std::is_floating_point_v<V>) {
      return nan_to_canonical(a * b);
    } else {
      using U = std::make_unsigned_t<V>;
      return static_cast<V>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    }
  }
  // min/max: any NaN gives the canonical NaN; -0 is below +0.
  static V extreme(V a, V b, bool want_max) {
    if (is_nan(a) || is_nan(b)) {
      if constexpr (kFloating<V>) return canonical_nan<V>();
    }
    const long double x = value_of(a), y = value_of(b);
    if (x == y) {
      const bool a_negative = std::signbit(x);
      return (a_negative != want_max) ? a : b;  // max prefers +0, min prefers -0; equal otherwise
    }
    return (want_max ? x > y : x < y) ? a : b;
  }

  V combine(V a, V b) const {
    switch (kind) {
      case ReductionKind::kProd:
        return mul(a, b);
      case ReductionKind::kMin:
        return extreme(a, b, false);
      case ReductionKind::kMax:
        return extreme(a, b, true);
      default:
        return add(a, b);
    }
  }
};

// The pre-multiplication factor: the PreMulSum scalar, or 1/n computed in fp32 (fp64 for double) for a floating
// average. Integers: the scalar itself.
template <typename T>
auto factor_of(ReductionKind kind, T scalar, int n) {
  if constexpr (kNarrow<T>) {
    return kind == ReductionKind::kAvg ? 1.0f / static_cast<float>(n) : widen(scalar);
  } else if constexpr (std::is_floating_point_v<T>) {
    return kind == ReductionKind::kAvg ? T(1) / static_cast<T>(n) : scalar;
  } else {
    return scalar;
  }
}

// The order of docs/deterministic.md: with p the largest prime factor of the number of inputs, reduce the p
// classes of inputs with equal index modulo p (each in index order, recursively), then add the p results in order
// of residue, left to right.
inline int largest_prime_factor(int n) {
  int largest = 1;
  for (int p = 2; p * p <= n; ++p) {
    while (n % p == 0) {
      largest = p;
      n /= p;
    }
  }
  return n > 1 ? n : largest;
}

template <typename V, typename Combine>
V reduce_in_documented_order(const std::vector<V>& inputs, const Combine& combine) {
  if (inputs.size() == 1) return inputs[0];
  const int n = static_cast<int>(inputs.size()), p = largest_prime_factor(n);
  V result{};
  for (int q = 0; q < p; ++q) {
    std::vector<V> residue_class;
    for (int i = q; i < n; i += p) residue_class.push_back(inputs[static_cast<std::size_t>(i)]);
    const V part = reduce_in_documented_order(residue_class, combine);
    result = q == 0 ? part : combine(result, part);
  }
  return result;
}

// The expected result of one element given every rank's input and scalar.
template <typename T>
T expected_element(ReductionKind kind, Accumulate accumulate, const std::vector<T>& inputs,
                   const std::vector<T>& scalars) {
  const int n = static_cast<int>(inputs.size());
  const bool premultiply = kind == ReductionKind::kPreMulSum || (kind == ReductionKind::kAvg && kFloating<T>);
  const bool in_fp32 =
      kNarrow<T> && accumulate == Accumulate::kFloat32 && kind != ReductionKind::kMin && kind != ReductionKind::kMax;
  if constexpr (kNarrow<T>) {
    if (in_fp32) {
      const Model<T, float> model{kind, n};
      std::vector<float> contributions;
      for (int r = 0; r < n; ++r) {
        const float x = widen(inputs[static_cast<std::size_t>(r)]);
        contributions.push_back(premultiply ? Model<T, float>::nan_to_canonical(
                                                  x * factor_of<T>(kind, scalars[static_cast<std::size_t>(r)], n))
                                            : x);
      }
      const float sum =
          reduce_in_documented_order(contributions, [&](float a, float b) { return model.combine(a, b); });
      return std::isnan(sum) ? canonical_nan<T>() : round_to<T>(sum);
    }
  }
  const Model<T, T> model{kind, n};
  std::vector<T> contributions;
  for (int r = 0; r < n; ++r) {
    const T x = inputs[static_cast<std::size_t>(r)];
    if (!premultiply) {
      contributions.push_back(x);
    } else if constexpr (kNarrow<T>) {
      contributions.push_back(Model<T, T>::nan_to_canonical(
          round_to<T>(widen(x) * factor_of<T>(kind, scalars[static_cast<std::size_t>(r)], n))));
    } else {
      contributions.push_back(Model<T, T>::mul(x, factor_of<T>(kind, scalars[static_cast<std::size_t>(r)], n)));
    }
  }
  T result = reduce_in_documented_order(contributions, [&](T a, T b) { return model.combine(a, b); });
  if constexpr (!kFloating<T>) {
    if (kind == ReductionKind::kAvg) result = static_cast<T>(result / static_cast<T>(n));
  }
  return result;
}

// Deterministic pseudo-random inputs: any rank can compute any rank's input.
inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Element i of rank r's input for a seed: finite values of mixed signs and magnitudes (so that the order of
// additions matters), near 1 for products (so that they neither overflow nor vanish at once); integers: any bits.
template <typename T>
T input_value(std::uint64_t seed, int rank, std::size_t i, ReductionKind kind) {
  const std::uint64_t bits = mix(seed * 1000003u + static_cast<std::uint64_t>(rank) * 7919u + i * 104729u);
  if constexpr (kFloating<T>) {
    const double unit = static_cast<double>(bits >> 11) * 0x1.0p-53;  // [0, 1)
    const double sign = (bits & 1) ? -1.0 : 1.0;
    double value;
    if (kind == ReductionKind::kProd) {
      value = sign * (0.75 + 0.5 * unit);
    } else {
      const int spread = kNarrow<T> ? 4 : 12;  // fp8 has a tiny range
      const int exponent = static_cast<int>((bits >> 3) % static_cast<std::uint64_t>(2 * spread + 1)) - spread;
      value = sign * std::ldexp(1.0 + unit, exponent);
    }
    if constexpr (kNarrow<T>) {
      return round_to<T>(static_cast<float>(value));
    } else {
      return static_cast<T>(value);
    }
  } else {
    return static_cast<T>(bits);
  }
}

// Rank r's PreMulSum scalar: a different value on every rank.
template <typename T>
T scalar_value(int rank) {
  if constexpr (kNarrow<T>) {
    return round_to<T>(0.5f + 0.375f * static_cast<float>(rank));
  } else {
    return static_cast<T>(rank + 1) / static_cast<T>(kFloating<T> ? 2 : 1);
  }
}

}  // namespace collectives_test

#endif  // DETNCCL_TESTS_TEST_COLLECTIVES_REFERENCE_H
