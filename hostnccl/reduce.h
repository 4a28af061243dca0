/* hostnccl: element-wise reduction of several contributions in a given order, for every datatype and op.
 *
 * The arithmetic (rounding, wrapping, NaN rules) is collectives/dtype_arith.h's; this file only fixes the order:
 * out = x[0] (+) x[1] (+) ... (+) x[n-1], left to right, where x[k] is the k-th input pointer given.
 */
#ifndef DETNCCL_HOSTNCCL_REDUCE_H
#define DETNCCL_HOSTNCCL_REDUCE_H

#include <cstddef>
#include <cstdint>

#include "abi/nccl_abi.h"

namespace hostnccl {

/* A reduction with everything it needs resolved when the call is issued. */
struct ReduceSpec {
  enum class Kind { kSum, kProd, kMin, kMax, kPreMulSum, kFloatAvg, kIntegerAvg };
  Kind kind = Kind::kSum;
  std::uint64_t scalar_bits = 0;  // kPreMulSum: the scalar, as an element of the reduction's datatype
};

/* Maps a built-in op (ncclSum..ncclAvg) to its spec for `type`. */
ReduceSpec builtin_reduce_spec(ncclRedOp_t op, ncclDataType_t type);

/* Writes to `out` (count elements of `type`) the reduction of inputs[0..ninputs) in that order. `out` may alias
 * none of the inputs. For the averages, `ninputs` is the divisor. Buffers need no particular alignment. */
void reduce_in_order(void* out, const void* const* inputs, int ninputs, std::size_t count, ncclDataType_t type,
                     const ReduceSpec& spec);

/* HOSTNCCL_CORRUPT's fault: element `index` of `data` (of `type`) multiplied by `factor` and rounded to the type
 * (fp16, bf16 and fp8 through fp32, fp8 saturating as every conversion of dtype_arith.h does); integer types get
 * `factor` truncated toward zero added, wrapping. */
void corrupt_element(void* data, std::size_t index, ncclDataType_t type, double factor);

}  // namespace hostnccl

#endif  // DETNCCL_HOSTNCCL_REDUCE_H
