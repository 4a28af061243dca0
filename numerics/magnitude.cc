#include "numerics/magnitude.h"

#include <cmath>

#include "numerics/elements.h"

namespace detnccl::numerics {
namespace {

std::uint64_t absolute_difference(std::uint64_t a, std::uint64_t b) { return a > b ? a - b : b - a; }

}  // namespace

std::uint64_t ulp_distance(ncclDataType_t type, std::uint64_t a, std::uint64_t b) {
  const std::size_t size = abi::datatype_size(type);
  switch (abi::datatype_kind(static_cast<std::int64_t>(type))) {
    case abi::DatatypeKind::kSigned: {
      const auto x = static_cast<std::int64_t>(element_value(type, a));
      const auto y = static_cast<std::int64_t>(element_value(type, b));
      // Two's complement subtraction in unsigned arithmetic is exact modulo 2^64, and |x - y| < 2^64.
      return x >= y ? static_cast<std::uint64_t>(x) - static_cast<std::uint64_t>(y)
                    : static_cast<std::uint64_t>(y) - static_cast<std::uint64_t>(x);
    }
    case abi::DatatypeKind::kUnsigned:
      return absolute_difference(a, b);
    case abi::DatatypeKind::kFloating: {
      const bool a_nan = std::isnan(element_value(type, a)), b_nan = std::isnan(element_value(type, b));
      if (a_nan || b_nan) return a_nan && b_nan ? 0 : kInfiniteUlp;
      const std::uint64_t sign = std::uint64_t{1} << (8 * size - 1);
      const std::uint64_t a_magnitude = a & (sign - 1), b_magnitude = b & (sign - 1);
      // Same sign: the magnitudes' patterns are in value order. Opposite signs: the distance passes through zero
      // (both zeros at the same place), at most 2 * (2^63 - 1) < 2^64.
      return ((a ^ b) & sign) == 0 ? absolute_difference(a_magnitude, b_magnitude) : a_magnitude + b_magnitude;
    }
    case abi::DatatypeKind::kInvalid:
      break;
  }
  return 0;
}

Magnitude compare_buffers(ncclDataType_t type, const void* reference, const void* other, std::size_t count) {
  Magnitude result;
  const std::size_t size = abi::datatype_size(type);
  if (size == 0) return result;
  result.elements_compared = count;
  const bool floating = abi::datatype_is_floating(type);
  constexpr double kInfinity = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t a = element_bits(reference, i, size), b = element_bits(other, i, size);
    if (a == b) continue;
    const auto index = static_cast<std::int64_t>(i);
    ++result.elements_differing;
    if (result.first_index < 0) result.first_index = index;
    const std::uint64_t ulp = ulp_distance(type, a, b);
    if (result.worst_index < 0 || ulp > result.max_ulp) {
      result.worst_index = index;
      result.max_ulp = ulp;
    }
    const long double x = element_value(type, a), y = element_value(type, b);
    double abs_error, rel_error;
    if (floating && (std::isnan(x) || std::isnan(y))) {
      if (std::isnan(x) && std::isnan(y)) {
        ++result.nan_payload_differences;
        abs_error = rel_error = 0;
      } else {
        ++result.nan_mismatches;
        abs_error = rel_error = kInfinity;
      }
    } else if (floating && (std::isinf(x) || std::isinf(y))) {
      ++result.infinity_differences;
      abs_error = rel_error = kInfinity;
    } else {
      if (x == 0 && y == 0) ++result.signed_zero_differences;  // bits differ, values equal: +0 and -0
      // Exact in long double for integers (|x - y| < 2^64, 64-bit significand) up to one rounding; for floats one
      // rounding at most.
      const long double difference = std::fabs(y - x);
      abs_error = static_cast<double>(difference);
      rel_error = difference == 0 ? 0.0 : x == 0 ? kInfinity : static_cast<double>(difference / std::fabs(x));
    }
    if (abs_error > result.max_abs_error) result.max_abs_error = abs_error;
    if (rel_error > result.max_rel_error) result.max_rel_error = rel_error;
  }
  return result;
}

}  // namespace detnccl::numerics
