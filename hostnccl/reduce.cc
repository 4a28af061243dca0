#include "hostnccl/reduce.h"

#include <cstring>
#include <type_traits>

#include "collectives/dtype_arith.h"

namespace hostnccl {
namespace {
using detnccl::arith::Arith;

template <typename T>
T load(const void* base, std::size_t i) {
  T value;
  std::memcpy(&value, static_cast<const char*>(base) + i * sizeof(T), sizeof(T));
  return value;
}
template <typename T>
void store(void* base, std::size_t i, T value) {
  std::memcpy(static_cast<char*>(base) + i * sizeof(T), &value, sizeof(T));
}

// Applies `combine(acc, prepare(x))` input by input; `prepare` is the pre-multiplication (identity for most ops).
template <typename T, typename Prepare, typename Combine>
void fold(void* out, const void* const* inputs, int ninputs, std::size_t count, Prepare prepare, Combine combine) {
  for (std::size_t i = 0; i < count; ++i) store<T>(out, i, prepare(load<T>(inputs[0], i)));
  for (int k = 1; k < ninputs; ++k) {
    for (std::size_t i = 0; i < count; ++i) store<T>(out, i, combine(load<T>(out, i), prepare(load<T>(inputs[k], i))));
  }
}

template <typename T>
void reduce_typed(void* out, const void* const* inputs, int ninputs, std::size_t count, const ReduceSpec& spec) {
  using A = Arith<T>;
  using Compute = typename A::Compute;
  const auto same = [](T x) { return x; };
  switch (spec.kind) {
    case ReduceSpec::Kind::kSum:
      fold<T>(out, inputs, ninputs, count, same, A::add);
      break;
    case ReduceSpec::Kind::kProd:
      fold<T>(out, inputs, ninputs, count, same, A::mul);
      break;
    case ReduceSpec::Kind::kMin:
      fold<T>(out, inputs, ninputs, count, same, A::min);
      break;
    case ReduceSpec::Kind::kMax:
      fold<T>(out, inputs, ninputs, count, same, A::max);
      break;
    case ReduceSpec::Kind::kPreMulSum: {
      T scalar;
      std::memcpy(&scalar, &spec.scalar_bits, sizeof(T));
      const Compute factor = A::to_compute(scalar);
      fold<T>(
          out, inputs, ninputs, count, [factor](T x) { return A::mul_compute(x, factor); }, A::add);
      break;
    }
    case ReduceSpec::Kind::kFloatAvg: {
      // NCCL pre-multiplies each floating input by 1/n in the type's compute precision, then sums.
      const Compute factor = Compute(1) / static_cast<Compute>(ninputs);
      fold<T>(
          out, inputs, ninputs, count, [factor](T x) { return A::mul_compute(x, factor); }, A::add);
      break;
    }
    case ReduceSpec::Kind::kIntegerAvg:
      if constexpr (requires(T x) { A::div(x, 1); }) {
        fold<T>(out, inputs, ninputs, count, same, A::add);
        for (std::size_t i = 0; i < count; ++i) store<T>(out, i, A::div(load<T>(out, i), ninputs));
      }
      break;
  }
}

}  // namespace

ReduceSpec builtin_reduce_spec(ncclRedOp_t op, ncclDataType_t type) {
  ReduceSpec spec;
  switch (op) {
    case ncclSum:
      spec.kind = ReduceSpec::Kind::kSum;
      break;
    case ncclProd:
      spec.kind = ReduceSpec::Kind::kProd;
      break;
    case ncclMax:
      spec.kind = ReduceSpec::Kind::kMax;
      break;
    case ncclMin:
      spec.kind = ReduceSpec::Kind::kMin;
      break;
    default:
      spec.kind = detnccl::arith::dtype_is_floating(type) ? ReduceSpec::Kind::kFloatAvg : ReduceSpec::Kind::kIntegerAvg;
      break;
  }
  return spec;
}

void corrupt_element(void* data, std::size_t index, ncclDataType_t type, double factor) {
  detnccl::arith::visit_dtype(type, [&](auto tag) {
    using T = decltype(tag);
    using A = Arith<T>;
    const T x = load<T>(data, index);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      store<T>(data, index, static_cast<T>(static_cast<double>(x) * factor));
    } else if constexpr (std::is_same_v<typename A::Compute, float>) {
      store<T>(data, index, A::from_compute(static_cast<float>(static_cast<double>(A::to_compute(x)) * factor)));
    } else {
      store<T>(data, index, A::add(x, static_cast<T>(static_cast<long long>(factor))));
    }
  });
}

void reduce_in_order(void* out, const void* const* inputs, int ninputs, std::size_t count, ncclDataType_t type,
                     const ReduceSpec& spec) {
  detnccl::arith::visit_dtype(type, [&](auto tag) { reduce_typed<decltype(tag)>(out, inputs, ninputs, count, spec); });
}

}  // namespace hostnccl
