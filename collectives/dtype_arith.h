/* detnccl: element arithmetic for every NCCL datatype, the one source of truth for how reductions round. The
 * datatypes' facts (sizes, names, kinds) are abi/nccl_datatypes.h's; this file only computes with them.
 *
 * Header-only C++20, usable from host code and (later) from CUDA: every function is DETNCCL_HOST_DEVICE. No compiler
 * half-precision types are used; the 16- and 8-bit floating formats are stored as raw bits and converted by integer
 * manipulation, so results are bit exact and identical on every compiler and device.
 *
 * Conversions float -> narrow format round to nearest, ties to even (RNE). Special values:
 *   - fp16 (IEEE binary16) and bf16: IEEE behaviour. Overflow rounds to +-inf, inf stays inf, -0 stays -0,
 *     subnormals are produced and read exactly. NaN stays NaN: the sign and the top mantissa bits are kept and the
 *     quiet bit is set (a signalling NaN comes back quiet, a quiet NaN round-trips exactly).
 *   - fp8 e4m3 (OCP "E4M3FN": bias 7, no infinity, S.1111.111 is NaN, max finite 448) and fp8 e5m2 (bias 15,
 *     S.11111.00 is inf, S.11111.xx (xx != 0) NaN, max finite 57344): SATURATING, like CUDA's __nv_fp8_e4m3 /
 *     __nv_fp8_e5m2 constructors (__NV_SATFINITE), which is what NCCL's fp8 reductions produce on a GPU: any value
 *     whose magnitude exceeds the max finite value, infinity included, becomes +-max finite. NaN becomes NaN
 *     (e4m3: S.1111.111; e5m2: quiet, S.11111.1x keeping the top payload bit). Subnormals exact, -0 kept.
 *   - Reading any format into float is exact (every value of every narrow format is a float).
 *
 * Arithmetic (struct Arith<T>): the operations a reduction needs, per storage type.
 *   - Integers wrap (two's complement, computed in unsigned arithmetic, as NCCL does); min/max compare signed or
 *     unsigned per the type; division (for ncclAvg) truncates toward zero.
 *   - float and double use native IEEE arithmetic in their own precision.
 *   - fp16, bf16, fp8: each operand is converted to float, the operation is done in float, and the result is
 *     rounded back (RNE) after every single operation.
 *   - min/max on floating types: if either operand is NaN the result is the type's canonical quiet NaN (positive
 *     sign), and -0 is ordered below +0. Both rules make min/max independent of operand order, so a reduction's
 *     result never depends on arrival order for these ops.
 */
#ifndef DETNCCL_COLLECTIVES_DTYPE_ARITH_H
#define DETNCCL_COLLECTIVES_DTYPE_ARITH_H

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "abi/nccl_abi.h"
#include "abi/nccl_datatypes.h"  // element sizes and kinds; defines DETNCCL_HOST_DEVICE

namespace detnccl::arith {

/* Size in bytes of one element of `type`, or 0 when `type` is not a valid ncclDataType_t (abi/nccl_datatypes.h). */
DETNCCL_HOST_DEVICE constexpr std::size_t dtype_size(ncclDataType_t type) { return abi::datatype_size(type); }

/* True when `type` is a floating-point type (fp8, fp16, bf16, float, double). */
DETNCCL_HOST_DEVICE constexpr bool dtype_is_floating(ncclDataType_t type) { return abi::datatype_is_floating(type); }

/* The bits of a float, and the float with given bits (memcpy works in host and device code alike). */
DETNCCL_HOST_DEVICE inline std::uint32_t float_bits(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}
DETNCCL_HOST_DEVICE inline float float_from_bits(std::uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

namespace detail {

/* A narrow binary floating format with kExpBits exponent bits and kManBits stored mantissa bits. */
template <int kExpBits, int kManBits>
struct NarrowFormat {
  static constexpr int kBias = (1 << (kExpBits - 1)) - 1;
  static constexpr std::uint32_t kExpMax = (1u << kExpBits) - 1;
  static constexpr std::uint32_t kSignBit = 1u << (kExpBits + kManBits);
  static constexpr std::uint32_t kManMask = (1u << kManBits) - 1;
};

/* Rounds the finite, non-negative float with bits `abs_bits` to the format's magnitude bits (RNE), without
 * overflow handling: the result may exceed the largest finite encoding, and the caller decides what that means. */
template <int kExpBits, int kManBits>
DETNCCL_HOST_DEVICE constexpr std::uint32_t round_magnitude(std::uint32_t abs_bits) {
  using F = NarrowFormat<kExpBits, kManBits>;
  const int float_exp = static_cast<int>(abs_bits >> 23);
  // A float subnormal is mantissa * 2^-149; written as (mantissa << 1) * 2^(-127 - 23) it fits the normal formula.
  const std::uint32_t significand = (float_exp == 0) ? (abs_bits & 0x7FFFFFu) << 1 : (abs_bits & 0x7FFFFFu) | 0x800000u;
  const int unbiased = (float_exp == 0) ? -127 : float_exp - 127;
  const int target_exp = unbiased + F::kBias;  // biased exponent in the narrow format
  int shift = 23 - kManBits;                   // bits dropped from the 24-bit significand
  std::uint32_t exp_field = 0;
  if (target_exp >= 1) {
    exp_field = static_cast<std::uint32_t>(target_exp);
  } else {
    shift += 1 - target_exp;  // subnormal: the implicit bit moves into the mantissa
  }
  if (shift > 25) return 0;  // less than a quarter of the smallest subnormal
  const std::uint32_t kept = significand >> shift;
  const std::uint32_t rest = significand & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1);
  const std::uint32_t round_up = (rest > half || (rest == half && (kept & 1u))) ? 1u : 0u;
  // For normals `kept` carries the implicit bit at position kManBits; replacing it by the exponent field and adding
  // the rounding carry (which may ripple into the exponent) gives the encoding.
  const std::uint32_t magnitude = exp_field != 0 ? (exp_field << kManBits) + (kept & F::kManMask) : kept;
  return magnitude + round_up;
}

/* Reads a narrow value into float, exactly. kIeeeSpecials: the largest exponent encodes inf/NaN (fp16, e5m2);
 * otherwise only the all-ones pattern is NaN (e4m3). */
template <int kExpBits, int kManBits, bool kIeeeSpecials>
DETNCCL_HOST_DEVICE inline float narrow_to_float(std::uint32_t bits) {
  using F = NarrowFormat<kExpBits, kManBits>;
  const std::uint32_t sign = (bits & F::kSignBit) ? 0x80000000u : 0u;
  const std::uint32_t exp_field = (bits >> kManBits) & F::kExpMax;
  std::uint32_t mantissa = bits & F::kManMask;
  if (kIeeeSpecials && exp_field == F::kExpMax) {
    return float_from_bits(sign | 0x7F800000u | (mantissa << (23 - kManBits)));
  }
  if (!kIeeeSpecials && exp_field == F::kExpMax && mantissa == F::kManMask) {
    return float_from_bits(sign | 0x7FC00000u);  // e4m3's single NaN encoding
  }
  if (exp_field == 0) {
    if (mantissa == 0) return float_from_bits(sign);
    int exp = 1 - F::kBias;  // normalise the subnormal: shift until the implicit bit appears
    while ((mantissa & (1u << kManBits)) == 0) {
      mantissa <<= 1;
      --exp;
    }
    mantissa &= F::kManMask;
    return float_from_bits(sign | (static_cast<std::uint32_t>(exp + 127) << 23) | (mantissa << (23 - kManBits)));
  }
  const int exp = static_cast<int>(exp_field) - F::kBias;
  return float_from_bits(sign | (static_cast<std::uint32_t>(exp + 127) << 23) | (mantissa << (23 - kManBits)));
}

}  // namespace detail

/* IEEE binary16 bits -> float (exact). */
DETNCCL_HOST_DEVICE inline float half_to_float(std::uint16_t bits) {
  return detail::narrow_to_float<5, 10, true>(bits);
}

/* float -> IEEE binary16 bits, RNE; overflow gives inf; NaN stays NaN (quieted, top payload bits kept). */
DETNCCL_HOST_DEVICE inline std::uint16_t float_to_half(float value) {
  const std::uint32_t bits = float_bits(value);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const std::uint32_t abs_bits = bits & 0x7FFFFFFFu;
  if (abs_bits > 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7E00u | ((abs_bits >> 13) & 0x3FFu));
  if (abs_bits == 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7C00u);
  std::uint32_t magnitude = detail::round_magnitude<5, 10>(abs_bits);
  if (magnitude > 0x7BFFu) magnitude = 0x7C00u;
  return static_cast<std::uint16_t>(sign | magnitude);
}

/* bfloat16 bits -> float (exact: bf16 is the top half of a float). */
DETNCCL_HOST_DEVICE inline float bf16_to_float(std::uint16_t bits) {
  return float_from_bits(static_cast<std::uint32_t>(bits) << 16);
}

/* float -> bfloat16 bits, RNE; overflow gives inf; NaN stays NaN (quieted, top payload bits kept). */
DETNCCL_HOST_DEVICE inline std::uint16_t float_to_bf16(float value) {
  const std::uint32_t bits = float_bits(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  // Adding 0x7FFF plus the lowest kept bit rounds to nearest with ties to even; a carry into the exponent is the
  // correct next binade, and the largest finite values carry into the inf encoding exactly as IEEE requires.
  return static_cast<std::uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

/* fp8 e4m3 (E4M3FN) bits -> float (exact; 0x7F/0xFF are NaN). */
DETNCCL_HOST_DEVICE inline float e4m3_to_float(std::uint8_t bits) { return detail::narrow_to_float<4, 3, false>(bits); }

/* float -> fp8 e4m3 bits, RNE, saturating to +-448 (inf included); NaN gives S.1111.111. */
DETNCCL_HOST_DEVICE inline std::uint8_t float_to_e4m3(float value) {
  const std::uint32_t bits = float_bits(value);
  const std::uint32_t sign = (bits >> 24) & 0x80u;
  const std::uint32_t abs_bits = bits & 0x7FFFFFFFu;
  if (abs_bits > 0x7F800000u) return static_cast<std::uint8_t>(sign | 0x7Fu);
  if (abs_bits >= 0x43E00000u) return static_cast<std::uint8_t>(sign | 0x7Eu);  // |x| >= 448 (inf too)
  return static_cast<std::uint8_t>(sign | detail::round_magnitude<4, 3>(abs_bits));
}

/* fp8 e5m2 bits -> float (exact; S.11111.00 is inf, other S.11111.xx NaN). */
DETNCCL_HOST_DEVICE inline float e5m2_to_float(std::uint8_t bits) { return detail::narrow_to_float<5, 2, true>(bits); }

/* float -> fp8 e5m2 bits, RNE, saturating to +-57344 (inf included); NaN stays NaN (quiet). */
DETNCCL_HOST_DEVICE inline std::uint8_t float_to_e5m2(float value) {
  const std::uint32_t bits = float_bits(value);
  const std::uint32_t sign = (bits >> 24) & 0x80u;
  const std::uint32_t abs_bits = bits & 0x7FFFFFFFu;
  if (abs_bits > 0x7F800000u) return static_cast<std::uint8_t>(sign | 0x7Eu | ((abs_bits >> 21) & 1u));
  if (abs_bits >= 0x47600000u) return static_cast<std::uint8_t>(sign | 0x7Bu);  // |x| >= 57344 (inf too)
  return static_cast<std::uint8_t>(sign | detail::round_magnitude<5, 2>(abs_bits));
}

/* Storage types for the narrow floating formats: raw bits, so no compiler half type is involved. */
struct Half {
  std::uint16_t bits;
};
struct Bfloat16 {
  std::uint16_t bits;
};
struct Fp8E4M3 {
  std::uint8_t bits;
};
struct Fp8E5M2 {
  std::uint8_t bits;
};

/* Arith<T>: add, mul, min, max, multiplication by a scalar in the compute type, and (integers) division by a
 * count, each with the rounding rules in this file's header comment. `Compute` is the precision operations are
 * done in; `from_compute` rounds a compute value back to T. */
template <typename T>
struct Arith;

namespace detail {

template <typename T, typename U>
struct IntegerArith {
  using Compute = T;
  DETNCCL_HOST_DEVICE static T add(T a, T b) {
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  }
  DETNCCL_HOST_DEVICE static T mul(T a, T b) {
    return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  }
  DETNCCL_HOST_DEVICE static T min(T a, T b) { return b < a ? b : a; }
  DETNCCL_HOST_DEVICE static T max(T a, T b) { return a < b ? b : a; }
  DETNCCL_HOST_DEVICE static T mul_compute(T a, Compute s) { return mul(a, s); }
  DETNCCL_HOST_DEVICE static T div(T a, int n) { return static_cast<T>(a / static_cast<T>(n)); }
  DETNCCL_HOST_DEVICE static Compute to_compute(T a) { return a; }
  DETNCCL_HOST_DEVICE static T from_compute(Compute a) { return a; }
};

/* Order-independent min/max for IEEE values: NaN wins (as the canonical NaN), -0 < +0. */
template <typename F>
DETNCCL_HOST_DEVICE inline F ieee_min(F a, F b, F canonical_nan) {
  if (a != a || b != b) return canonical_nan;
  if (a == b) return std::signbit(b) ? b : a;  // equal: only +0 vs -0 can differ, and -0 is the smaller
  return b < a ? b : a;
}
template <typename F>
DETNCCL_HOST_DEVICE inline F ieee_max(F a, F b, F canonical_nan) {
  if (a != a || b != b) return canonical_nan;
  if (a == b) return std::signbit(a) ? b : a;
  return a < b ? b : a;
}

/* A narrow float computed through float, rounded back after each operation. */
template <typename T, float (*kToFloat)(std::uint32_t), typename Bits, Bits (*kFromFloat)(float), Bits kNan>
struct NarrowArith {
  using Compute = float;
  DETNCCL_HOST_DEVICE static float to_compute(T a) { return kToFloat(a.bits); }
  DETNCCL_HOST_DEVICE static T from_compute(float a) { return T{kFromFloat(a)}; }
  DETNCCL_HOST_DEVICE static T add(T a, T b) { return from_compute(to_compute(a) + to_compute(b)); }
  DETNCCL_HOST_DEVICE static T mul(T a, T b) { return from_compute(to_compute(a) * to_compute(b)); }
  DETNCCL_HOST_DEVICE static T mul_compute(T a, float s) { return from_compute(to_compute(a) * s); }
  DETNCCL_HOST_DEVICE static T min(T a, T b) {
    const float x = to_compute(a), y = to_compute(b);
    if (x != x || y != y) return T{kNan};
    return from_compute(ieee_min(x, y, x));
  }
  DETNCCL_HOST_DEVICE static T max(T a, T b) {
    const float x = to_compute(a), y = to_compute(b);
    if (x != x || y != y) return T{kNan};
    return from_compute(ieee_max(x, y, x));
  }
};

DETNCCL_HOST_DEVICE inline float half_bits_to_float(std::uint32_t bits) {
  return half_to_float(static_cast<std::uint16_t>(bits));
}
DETNCCL_HOST_DEVICE inline float bf16_bits_to_float(std::uint32_t bits) {
  return bf16_to_float(static_cast<std::uint16_t>(bits));
}
DETNCCL_HOST_DEVICE inline float e4m3_bits_to_float(std::uint32_t bits) {
  return e4m3_to_float(static_cast<std::uint8_t>(bits));
}
DETNCCL_HOST_DEVICE inline float e5m2_bits_to_float(std::uint32_t bits) {
  return e5m2_to_float(static_cast<std::uint8_t>(bits));
}

template <typename F>
struct IeeeArith {
  using Compute = F;
  DETNCCL_HOST_DEVICE static F nan() { return static_cast<F>(__builtin_nan("")); }
  DETNCCL_HOST_DEVICE static F add(F a, F b) { return a + b; }
  DETNCCL_HOST_DEVICE static F mul(F a, F b) { return a * b; }
  DETNCCL_HOST_DEVICE static F mul_compute(F a, F s) { return a * s; }
  DETNCCL_HOST_DEVICE static F min(F a, F b) { return ieee_min(a, b, nan()); }
  DETNCCL_HOST_DEVICE static F max(F a, F b) { return ieee_max(a, b, nan()); }
  DETNCCL_HOST_DEVICE static F to_compute(F a) { return a; }
  DETNCCL_HOST_DEVICE static F from_compute(F a) { return a; }
};

}  // namespace detail

template <>
struct Arith<std::int8_t> : detail::IntegerArith<std::int8_t, std::uint8_t> {};
template <>
struct Arith<std::uint8_t> : detail::IntegerArith<std::uint8_t, std::uint8_t> {};
template <>
struct Arith<std::int32_t> : detail::IntegerArith<std::int32_t, std::uint32_t> {};
template <>
struct Arith<std::uint32_t> : detail::IntegerArith<std::uint32_t, std::uint32_t> {};
template <>
struct Arith<std::int64_t> : detail::IntegerArith<std::int64_t, std::uint64_t> {};
template <>
struct Arith<std::uint64_t> : detail::IntegerArith<std::uint64_t, std::uint64_t> {};
template <>
struct Arith<float> : detail::IeeeArith<float> {};
template <>
struct Arith<double> : detail::IeeeArith<double> {};
template <>
struct Arith<Half> : detail::NarrowArith<Half, detail::half_bits_to_float, std::uint16_t, float_to_half, 0x7E00u> {};
template <>
struct Arith<Bfloat16>
    : detail::NarrowArith<Bfloat16, detail::bf16_bits_to_float, std::uint16_t, float_to_bf16, 0x7FC0u> {};
template <>
struct Arith<Fp8E4M3> : detail::NarrowArith<Fp8E4M3, detail::e4m3_bits_to_float, std::uint8_t, float_to_e4m3, 0x7Fu> {};
template <>
struct Arith<Fp8E5M2> : detail::NarrowArith<Fp8E5M2, detail::e5m2_bits_to_float, std::uint8_t, float_to_e5m2, 0x7Eu> {};

/* Calls fn(T{}) with the storage type of `type` (e.g. Half for ncclFloat16); returns false for an invalid type. */
template <typename Fn>
inline bool visit_dtype(ncclDataType_t type, Fn&& fn) {
  switch (type) {
    case ncclInt8:
      fn(std::int8_t{});
      return true;
    case ncclUint8:
      fn(std::uint8_t{});
      return true;
    case ncclInt32:
      fn(std::int32_t{});
      return true;
    case ncclUint32:
      fn(std::uint32_t{});
      return true;
    case ncclInt64:
      fn(std::int64_t{});
      return true;
    case ncclUint64:
      fn(std::uint64_t{});
      return true;
    case ncclFloat16:
      fn(Half{});
      return true;
    case ncclFloat32:
      fn(float{});
      return true;
    case ncclFloat64:
      fn(double{});
      return true;
    case ncclBfloat16:
      fn(Bfloat16{});
      return true;
    case ncclFloat8e4m3:
      fn(Fp8E4M3{});
      return true;
    case ncclFloat8e5m2:
      fn(Fp8E5M2{});
      return true;
    default:
      return false;
  }
}

}  // namespace detnccl::arith

#endif /* DETNCCL_COLLECTIVES_DTYPE_ARITH_H */
