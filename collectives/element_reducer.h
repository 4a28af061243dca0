/* detnccl collectives: what one reduction step does to one element, for host loops and CUDA kernels alike.
 *
 * Built only from collectives/dtype_arith.h's conversions and arithmetic, so the CPU and the GPU round identically.
 * A reduction is three functions over an accumulator type Acc (the datatype T itself, or float for narrow floats
 * with DETNCCL_ACCUMULATE=fp32):
 *   load(x)       a rank's own input as a contribution: x, or x times the pre-multiplication scale
 *   combine(a, b) one addition (or product, min, max) of two partial results, a from the lower digit
 *   finish(a)     the partial result as the output datatype (rounding, integer average's division)
 * Every floating result that is NaN is replaced by the type's canonical quiet NaN: CPUs and GPUs propagate NaN
 * payloads differently, and this makes their bits agree (min/max already return the canonical NaN).
 *
 * RATIONALE: CUDA code must be compiled with --fmad=false: a fused multiply-add would round once where the CPU
 * rounds twice.
 */
#ifndef DETNCCL_COLLECTIVES_ELEMENT_REDUCER_H
#define DETNCCL_COLLECTIVES_ELEMENT_REDUCER_H

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "collectives/deterministic.h"
#include "collectives/dtype_arith.h"

namespace detnccl::collectives {

/* The canonical quiet NaN of each floating type (positive sign, only the quiet bit set), as dtype_arith's min/max
 * return it. */
template <typename T>
DETNCCL_HOST_DEVICE inline T canonical_nan() {
  if constexpr (std::is_same_v<T, float>) {
    return arith::float_from_bits(0x7FC00000u);
  } else if constexpr (std::is_same_v<T, double>) {
    const std::uint64_t bits = 0x7FF8000000000000ull;
    double value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
  } else if constexpr (std::is_same_v<T, arith::Half>) {
    return T{0x7E00u};
  } else if constexpr (std::is_same_v<T, arith::Bfloat16>) {
    return T{0x7FC0u};
  } else if constexpr (std::is_same_v<T, arith::Fp8E4M3>) {
    return T{0x7Fu};
  } else {
    static_assert(std::is_same_v<T, arith::Fp8E5M2>, "canonical_nan: not a floating type");
    return T{0x7Eu};
  }
}

/* True for the storage types of fp16, bf16 and fp8 (computed through float). */
template <typename T>
inline constexpr bool kIsNarrowFloat = std::is_same_v<T, arith::Half> || std::is_same_v<T, arith::Bfloat16> ||
                                       std::is_same_v<T, arith::Fp8E4M3> || std::is_same_v<T, arith::Fp8E5M2>;

template <typename T>
inline constexpr bool kIsIeeeFloat = std::is_same_v<T, float> || std::is_same_v<T, double>;

/* One reduction's element functions. T: the datatype; Acc: T, or float when T is narrow and partial results stay
 * fp32. `Scale` is the pre-multiplication factor in T's compute type (float for narrow floats). */
template <typename T, typename Acc>
struct ElementReducer {
  using A = arith::Arith<T>;
  using Scale = typename A::Compute;
  static_assert(std::is_same_v<Acc, T> || (kIsNarrowFloat<T> && std::is_same_v<Acc, float>),
                "ElementReducer: Acc must be T, or float for a narrow float T");

  ReductionKind kind = ReductionKind::kSum;
  bool premultiply = false;  // kAvg on floating types and kPreMulSum
  Scale scale{};
  int nranks = 1;  // the divisor of an integer kAvg

  DETNCCL_HOST_DEVICE Acc load(T x) const {
    if constexpr (std::is_same_v<Acc, T>) {
      if (!premultiply) return x;
      if constexpr (kIsNarrowFloat<T>) {
        return narrow(A::to_compute(x) * scale);
      } else if constexpr (kIsIeeeFloat<T>) {
        return ieee(x * scale);
      } else {
        return A::mul_compute(x, scale);
      }
    } else {
      const float value = A::to_compute(x);
      return premultiply ? ieee(value * scale) : value;
    }
  }

  DETNCCL_HOST_DEVICE Acc combine(Acc a, Acc b) const {
    switch (kind) {
      case ReductionKind::kProd:
        return multiply(a, b);
      case ReductionKind::kMin:
        return smallest(a, b);
      case ReductionKind::kMax:
        return largest(a, b);
      default:
        return add(a, b);
    }
  }

  DETNCCL_HOST_DEVICE T finish(Acc a) const {
    if constexpr (std::is_same_v<Acc, T>) {
      if constexpr (!kIsNarrowFloat<T> && !kIsIeeeFloat<T>) {
        if (kind == ReductionKind::kAvg) return A::div(a, nranks);
      }
      return a;
    } else {
      return a != a ? canonical_nan<T>() : A::from_compute(a);
    }
  }

  // The four operations, for callers that fix the kind at compile time (host loops).
  DETNCCL_HOST_DEVICE static Acc add(Acc a, Acc b) {
    if constexpr (std::is_same_v<Acc, T> && kIsNarrowFloat<T>) {
      return narrow(A::to_compute(a) + A::to_compute(b));
    } else if constexpr (std::is_same_v<Acc, T> && !kIsIeeeFloat<T>) {
      return A::add(a, b);  // integers wrap
    } else {
      return ieee(a + b);
    }
  }
  DETNCCL_HOST_DEVICE static Acc multiply(Acc a, Acc b) {
    if constexpr (std::is_same_v<Acc, T> && kIsNarrowFloat<T>) {
      return narrow(A::to_compute(a) * A::to_compute(b));
    } else if constexpr (std::is_same_v<Acc, T> && !kIsIeeeFloat<T>) {
      return A::mul(a, b);
    } else {
      return ieee(a * b);
    }
  }
  // Min and max never use a float accumulator (they are exact), so Acc is T here whenever they are called.
  DETNCCL_HOST_DEVICE static Acc smallest(Acc a, Acc b) { return arith::Arith<Acc>::min(a, b); }
  DETNCCL_HOST_DEVICE static Acc largest(Acc a, Acc b) { return arith::Arith<Acc>::max(a, b); }

 private:
  // A float result rounded to the narrow T, NaN made canonical.
  DETNCCL_HOST_DEVICE static T narrow(float value) {
    if constexpr (kIsNarrowFloat<T>) {
      return value != value ? canonical_nan<T>() : A::from_compute(value);
    } else {
      return T{};
    }
  }
  // An fp32/fp64 result, NaN made canonical.
  template <typename F>
  DETNCCL_HOST_DEVICE static F ieee(F value) {
    return value != value ? canonical_nan<F>() : value;
  }
};

/* Whether partial results of narrow type `datatype` stay fp32 for `kind` under `accumulate`: only for narrow floats,
 * and never for min/max, which are exact in any precision. */
inline bool uses_float_accumulator(ncclDataType_t datatype, ReductionKind kind, Accumulate accumulate) {
  const bool narrow =
      datatype == ncclFloat16 || datatype == ncclBfloat16 || datatype == ncclFloat8e4m3 || datatype == ncclFloat8e5m2;
  return narrow && accumulate == Accumulate::kFloat32 && kind != ReductionKind::kMin && kind != ReductionKind::kMax;
}

/* The per-call description every backend turns into an ElementReducer. */
struct ElementSpec {
  ncclDataType_t datatype = ncclFloat32;
  bool float_accumulator = false;
  ReductionKind kind = ReductionKind::kSum;
  int nranks = 1;
  // kPreMulSum: the scalar's bits (host-immediate scalars, and device-resident ones once read on the host), or, for
  // device buffers with a device-resident scalar, the pointer a kernel reads it from.
  std::uint64_t scalar_bits = 0;
  const void* device_scalar = nullptr;

  std::size_t type_size() const { return arith::dtype_size(datatype); }
  std::size_t acc_size() const { return float_accumulator ? sizeof(float) : type_size(); }
};

/* The ElementReducer for `spec` with the scalar given as T (for kPreMulSum). */
template <typename T, typename Acc>
DETNCCL_HOST_DEVICE inline ElementReducer<T, Acc> make_reducer(const ElementSpec& spec, T scalar) {
  using R = ElementReducer<T, Acc>;
  using Scale = typename R::Scale;
  R reducer;
  reducer.kind = spec.kind;
  reducer.nranks = spec.nranks;
  constexpr bool kFloating = kIsNarrowFloat<T> || kIsIeeeFloat<T>;
  if (spec.kind == ReductionKind::kPreMulSum) {
    reducer.premultiply = true;
    reducer.scale = R::A::to_compute(scalar);
  } else if (spec.kind == ReductionKind::kAvg && kFloating) {
    reducer.premultiply = true;
    reducer.scale = Scale(1) / static_cast<Scale>(spec.nranks);
  }
  return reducer;
}

/* The scalar of a kPreMulSum spec as T, from scalar_bits. */
template <typename T>
inline T scalar_from_bits(std::uint64_t bits) {
  T value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

}  // namespace detnccl::collectives

#endif  // DETNCCL_COLLECTIVES_ELEMENT_REDUCER_H
