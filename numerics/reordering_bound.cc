#include "numerics/reordering_bound.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "numerics/elements.h"

namespace detnccl::numerics {
namespace {

constexpr long double kInfinity = std::numeric_limits<long double>::infinity();
// Widening for the bound's own long double arithmetic (a few roundings of relative size 2^-64 each).
const long double kBoundSlack = 1.0L + std::ldexp(1.0L, -40);

// gamma_k(u) = k u / (1 - k u); infinite once k u >= 1 (fp8 at many ranks: no bound is possible).
long double gamma(int k, long double u) {
  const long double ku = static_cast<long double>(k) * u;
  return ku >= 1 ? kInfinity : ku / (1 - ku);
}

bool is_narrow(ncclDataType_t type) { return type != ncclFloat32 && type != ncclFloat64; }

// One result's bound B_P for a sum of n contributions m x_i with partial sums in precision P (see the header).
long double sum_bound(const FloatFormat& t, const FloatFormat& p, bool final_rounding, bool premultiplied,
                      long double u_pre, long double eta_pre, long double a, long double s, int n) {
  const long double e1 = premultiplied ? u_pre * a + static_cast<long double>(n) * eta_pre : 0;
  const long double e2 = gamma(n - 1, p.unit_roundoff) * (a + e1);
  const long double e3 = final_rounding ? t.unit_roundoff * (std::fabs(s) + e1 + e2) + t.half_min_subnormal : 0;
  return e1 + e2 + e3;
}

}  // namespace

long double allowed_difference(ncclDataType_t type, const ReductionOp& op, const std::uint64_t* addends, int n) {
  if (!abi::datatype_is_floating(type) || n < 2) return 0;  // integers: exact in any order; one rank: a copy
  const bool premul = op.is_premulsum();
  if (!premul && op.redop != ncclSum && op.redop != ncclAvg && op.redop != ncclProd) return 0;  // min, max
  const FloatFormat t = float_format(type), f32 = float_format(ncclFloat32);
  const bool narrow = is_narrow(type);

  if (op.redop == ncclProd) {
    long double product = 1, below_one = 1, above_one = 1;
    for (int r = 0; r < n; ++r) {
      const long double x = element_value(type, addends[r]);
      if (!std::isfinite(x) || x == 0) return 0;  // zeros and non-finite factors: no rounding to bound
      product *= x;
      if (std::fabs(x) < 1) below_one *= std::fabs(x);
      if (std::fabs(x) > 1) above_one *= std::fabs(x);
    }
    // No partial product of any order leaves the normal range: every one lies in [below_one, above_one] (up to the
    // roundings, which the factor 2 covers).
    if (below_one < 2 * t.min_normal || above_one > t.max_finite / 2) return 0;
    const long double native = gamma(n - 1, t.unit_roundoff);
    long double relative = native;
    if (narrow) relative = std::max(native, (1 + gamma(n - 1, f32.unit_roundoff)) * (1 + t.unit_roundoff) - 1);
    return 2 * relative * std::fabs(product) * kBoundSlack;
  }

  // Sum, avg, PreMulSum: contributions m x_i.
  long double m = 1;
  if (op.redop == ncclAvg) {
    m = type == ncclFloat64 ? static_cast<long double>(1.0 / n)
                            : static_cast<long double>(1.0f / static_cast<float>(n));
  } else if (premul) {
    m = element_value(type, op.premulsum_scalar_bits);
    if (!std::isfinite(m)) return 0;
  }
  long double a = 0, s = 0;
  for (int r = 0; r < n; ++r) {
    const long double x = element_value(type, addends[r]);
    if (!std::isfinite(x)) return 0;
    a += std::fabs(m * x);
    s += m * x;
  }
  const bool premultiplied = op.redop == ncclAvg || premul;
  // Partial sums in the datatype: the product of a narrow type is rounded to fp32 and then to T.
  const long double u_pre_native =
      narrow ? t.unit_roundoff + f32.unit_roundoff + t.unit_roundoff * f32.unit_roundoff : t.unit_roundoff;
  const long double eta_pre_native = narrow ? t.half_min_subnormal + f32.half_min_subnormal : t.half_min_subnormal;
  long double bound = sum_bound(t, t, false, premultiplied, u_pre_native, eta_pre_native, a, s, n);
  if (narrow) {  // DETNCCL_ACCUMULATE=fp32: contributions and partial sums in fp32, one rounding to T at the end
    bound = std::max(bound, sum_bound(t, f32, true, premultiplied, f32.unit_roundoff, f32.half_min_subnormal, a, s, n));
  }
  return 2 * bound * kBoundSlack;
}

ReorderingVerdict check_reordering_bound(ncclDataType_t type, const ReductionOp& op,
                                         const std::vector<const void*>& inputs, std::size_t count,
                                         const void* output_a, const void* output_b) {
  ReorderingVerdict verdict;
  const std::size_t size = abi::datatype_size(type);
  if (size == 0) return verdict;
  verdict.elements_checked = count;
  const int n = static_cast<int>(inputs.size());
  const bool floating = abi::datatype_is_floating(type);
  const long double max_finite = float_format(type).max_finite;
  std::vector<std::uint64_t> addends(inputs.size());
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t a = element_bits(output_a, i, size), b = element_bits(output_b, i, size);
    if (a == b) continue;
    const long double x = element_value(type, a), y = element_value(type, b);
    const long double difference = std::fabs(x - y);
    long double allowed = 0;
    // NaN payloads, infinities and saturated values are not bounded: such a difference is never within. +0 against
    // -0 (difference 0) is within wherever the bound allows any difference: a rounding to zero from either side
    // (a pre-multiplied tiny contribution, fp32 partials rounded once at the end) leaves the sign of what it rounded.
    const bool boundable =
        floating && std::isfinite(x) && std::isfinite(y) && std::fabs(x) < max_finite && std::fabs(y) < max_finite;
    if (boundable) {
      for (std::size_t r = 0; r < inputs.size(); ++r) addends[r] = element_bits(inputs[r], i, size);
      allowed = allowed_difference(type, op, addends.data(), n);
    }
    const double ratio =
        allowed > 0 ? static_cast<double>(difference / allowed) : std::numeric_limits<double>::infinity();
    const auto index = static_cast<std::int64_t>(i);
    if (!(boundable && allowed > 0 && difference <= allowed)) {
      ++verdict.elements_beyond;
      if (verdict.first_beyond_index < 0) verdict.first_beyond_index = index;
      verdict.within_reordering_bound = false;
    }
    if (verdict.worst_index < 0 || ratio > verdict.worst_ratio) {
      verdict.worst_index = index;
      verdict.worst_ratio = ratio;
    }
  }
  return verdict;
}

}  // namespace detnccl::numerics
