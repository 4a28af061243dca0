/* detnccl numerics: reading one element of any NCCL datatype from a byte buffer, as raw bits and as a number.
 *
 * Every value of every NCCL datatype is exactly a long double (x86-64's 80-bit format: 64-bit significand, so int64
 * and uint64 too, and every float format's values), so comparisons and bounds are computed there. The narrow float
 * formats are decoded by collectives/dtype_arith.h, the one source of truth for them.
 */
#ifndef DETNCCL_NUMERICS_ELEMENTS_H
#define DETNCCL_NUMERICS_ELEMENTS_H

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "abi/nccl_datatypes.h"
#include "collectives/dtype_arith.h"

namespace detnccl::numerics {

static_assert(sizeof(long double) >= 10 && __LDBL_MANT_DIG__ >= 64,
              "numerics/ needs a long double with a 64-bit significand (every int64 and uint64 exact)");

/* The raw bits of element `index` of a buffer of `size`-byte elements (little end first, as NCCL's buffers on
 * every supported machine), zero-extended. */
inline std::uint64_t element_bits(const void* base, std::size_t index, std::size_t size) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, static_cast<const unsigned char*>(base) + index * size, size);
  return bits;
}

/* The value of an element of `type` with raw bits `bits`, exactly. NaN stays NaN. */
inline long double element_value(ncclDataType_t type, std::uint64_t bits) {
  switch (type) {
    case ncclInt8:
      return static_cast<std::int8_t>(static_cast<std::uint8_t>(bits));
    case ncclUint8:
      return static_cast<std::uint8_t>(bits);
    case ncclInt32:
      return static_cast<std::int32_t>(static_cast<std::uint32_t>(bits));
    case ncclUint32:
      return static_cast<std::uint32_t>(bits);
    case ncclInt64:
      return static_cast<std::int64_t>(bits);
    case ncclUint64:
      return bits;
    case ncclFloat16:
      return arith::half_to_float(static_cast<std::uint16_t>(bits));
    case ncclBfloat16:
      return arith::bf16_to_float(static_cast<std::uint16_t>(bits));
    case ncclFloat8e4m3:
      return arith::e4m3_to_float(static_cast<std::uint8_t>(bits));
    case ncclFloat8e5m2:
      return arith::e5m2_to_float(static_cast<std::uint8_t>(bits));
    case ncclFloat32:
      return arith::float_from_bits(static_cast<std::uint32_t>(bits));
    case ncclFloat64: {
      double value;
      std::memcpy(&value, &bits, sizeof value);
      return value;
    }
    default:
      return 0;
  }
}

/* Facts about a floating datatype's precision (all zero for integers and invalid types). */
struct FloatFormat {
  int significand_bits = 0;            // p, the hidden bit included: 53, 24, 11, 8, 4 (e4m3), 3 (e5m2)
  long double unit_roundoff = 0;       // u = 2^-p: the relative error of one rounding to nearest
  long double half_min_subnormal = 0;  // eta: the absolute error of one rounding in the subnormal range
  long double min_normal = 0;          // the smallest positive normal value
  long double max_finite = 0;          // the largest finite value (fp8 saturates there)
};

/* The format of `type`: fp64, fp32, fp16, bf16, fp8 e4m3, fp8 e5m2; zeros for every other type. */
inline FloatFormat float_format(ncclDataType_t type) {
  const auto pow2 = [](int e) { return std::ldexp(1.0L, e); };
  // (p, the exponent of the smallest normal, the exponent of the smallest subnormal, max finite)
  switch (type) {
    case ncclFloat64:
      return {53, pow2(-53), pow2(-1075), pow2(-1022), static_cast<long double>(__DBL_MAX__)};
    case ncclFloat32:
      return {24, pow2(-24), pow2(-150), pow2(-126), static_cast<long double>(__FLT_MAX__)};
    case ncclFloat16:
      return {11, pow2(-11), pow2(-25), pow2(-14), 65504.0L};
    case ncclBfloat16:
      return {8, pow2(-8), pow2(-134), pow2(-126), 3.3895313892515355e38L};
    case ncclFloat8e4m3:
      return {4, pow2(-4), pow2(-10), pow2(-6), 448.0L};
    case ncclFloat8e5m2:
      return {3, pow2(-3), pow2(-17), pow2(-14), 57344.0L};
    default:
      return {};
  }
}

}  // namespace detnccl::numerics

#endif  // DETNCCL_NUMERICS_ELEMENTS_H
