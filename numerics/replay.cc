#include "numerics/replay.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>

#include "collectives/association_tree.h"
#include "collectives/backend.h"
#include "collectives/dtype_arith.h"
#include "hostnccl/reduce.h"
#include "numerics/elements.h"

namespace detnccl::numerics {
namespace {

namespace dc = collectives;

// Elements of the reduction's result: count, or n * count for ReduceScatter (every rank's block).
std::size_t result_elements(const ReplayCall& call) {
  return call.collective == ReplayCollective::kReduceScatter ? call.count * call.inputs.size() : call.count;
}

bool check_call(const ReplayCall& call, std::string* error) {
  const std::size_t size = abi::datatype_size(call.datatype);
  if (size == 0) {
    *error = "replay: datatype " + std::to_string(static_cast<int>(call.datatype)) + " is not an NCCL datatype";
    return false;
  }
  if (call.op.redop < 0) {
    *error = "replay: the call has no reduction operator";
    return false;
  }
  if (call.inputs.empty()) {
    *error = "replay: no inputs";
    return false;
  }
  // RATIONALE: the count comes from a log, which may be damaged or forged: a product that wraps (2^62 float32s is 0
  // bytes) would let empty inputs pass for it, and the reduction would then read and write far past them.
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
  const std::size_t members = call.collective == ReplayCollective::kReduceScatter ? call.inputs.size() : 1;
  if (call.count > kMax / members || call.count * members > kMax / size) {
    *error = "replay: the call's count (" + std::to_string(call.count) + ") in bytes does not fit in 64 bits";
    return false;
  }
  const std::size_t bytes = result_elements(call) * size;
  for (std::size_t r = 0; r < call.inputs.size(); ++r) {
    if (call.inputs[r].size() != bytes) {
      *error = "replay: rank " + std::to_string(r) + "'s input holds " + std::to_string(call.inputs[r].size()) +
               " bytes, not the " + std::to_string(bytes) + " the call reduces";
      return false;
    }
  }
  return true;
}

hostnccl::ReduceSpec hostnccl_spec(const ReplayCall& call) {
  if (call.op.is_premulsum()) {
    hostnccl::ReduceSpec spec;
    spec.kind = hostnccl::ReduceSpec::Kind::kPreMulSum;
    spec.scalar_bits = call.op.premulsum_scalar_bits;
    return spec;
  }
  return hostnccl::builtin_reduce_spec(static_cast<ncclRedOp_t>(call.op.redop), call.datatype);
}

dc::ReductionKind collectives_kind(const ReductionOp& op) {
  if (op.is_premulsum()) return dc::ReductionKind::kPreMulSum;
  switch (op.redop) {
    case ncclProd:
      return dc::ReductionKind::kProd;
    case ncclMax:
      return dc::ReductionKind::kMax;
    case ncclMin:
      return dc::ReductionKind::kMin;
    case ncclAvg:
      return dc::ReductionKind::kAvg;
    default:
      return dc::ReductionKind::kSum;
  }
}

// The exact result of one element in long double (NaN when any addend is NaN or the operation makes one).
long double exact_element(const ReplayCall& call, std::size_t index) {
  const std::size_t size = abi::datatype_size(call.datatype);
  const int n = static_cast<int>(call.inputs.size());
  const auto x = [&](int r) {
    return element_value(call.datatype, element_bits(call.inputs[static_cast<std::size_t>(r)].data(), index, size));
  };
  long double result = x(0);
  const long double scalar = call.op.is_premulsum() ? element_value(call.datatype, call.op.premulsum_scalar_bits) : 1;
  if (call.op.is_premulsum()) result *= scalar;
  for (int r = 1; r < n; ++r) {
    const long double v = x(r);
    if (std::isnan(v) || std::isnan(result)) {
      result = std::numeric_limits<long double>::quiet_NaN();
      continue;
    }
    switch (call.op.redop) {
      case ncclProd:
        result *= v;
        break;
      case ncclMax:
        result = std::fmax(result, v);
        break;
      case ncclMin:
        result = std::fmin(result, v);
        break;
      default:
        result += call.op.is_premulsum() ? v * scalar : v;
        break;
    }
  }
  if (call.op.redop == ncclAvg) result /= n;
  return result;
}

// `value` rounded to the floating datatype (narrow ones through fp32), as raw bits.
std::uint64_t round_to_type(ncclDataType_t type, long double value) {
  std::uint64_t bits = 0;
  arith::visit_dtype(type, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, double>) {
      const double v = static_cast<double>(value);
      std::memcpy(&bits, &v, sizeof v);
    } else if constexpr (std::is_same_v<T, float>) {
      bits = arith::float_bits(static_cast<float>(value));
    } else if constexpr (dc::kIsNarrowFloat<T>) {
      bits = arith::Arith<T>::from_compute(static_cast<float>(value)).bits;
    }
  });
  return bits;
}

}  // namespace

std::optional<std::vector<unsigned char>> ordered_output(const ReplayCall& call, const std::vector<int>& order,
                                                         std::string* error) {
  if (!check_call(call, error)) return std::nullopt;
  const std::size_t n = call.inputs.size();
  std::vector<bool> seen(n, false);
  std::vector<const void*> inputs;
  for (int r : order) {
    if (r < 0 || static_cast<std::size_t>(r) >= n || seen[static_cast<std::size_t>(r)]) {
      *error = "replay: the order is not a permutation of the ranks";
      return std::nullopt;
    }
    seen[static_cast<std::size_t>(r)] = true;
    inputs.push_back(call.inputs[static_cast<std::size_t>(r)].data());
  }
  if (inputs.size() != n) {
    *error = "replay: the order is not a permutation of the ranks";
    return std::nullopt;
  }
  const std::size_t elements = result_elements(call);
  std::vector<unsigned char> output(elements * abi::datatype_size(call.datatype));
  hostnccl::reduce_in_order(output.data(), inputs.data(), static_cast<int>(n), elements, call.datatype,
                            hostnccl_spec(call));
  return output;
}

std::optional<std::vector<unsigned char>> deterministic_output(const ReplayCall& call, dc::Accumulate accumulate,
                                                               std::string* error) {
  if (!check_call(call, error)) return std::nullopt;
  const int n = static_cast<int>(call.inputs.size());
  const std::size_t elements = result_elements(call);
  if (n == 1) return call.inputs[0];  // one rank: collectives/ copies the input unchanged
  dc::ElementSpec spec;
  spec.datatype = call.datatype;
  spec.kind = collectives_kind(call.op);
  spec.float_accumulator = dc::uses_float_accumulator(call.datatype, spec.kind, accumulate);
  spec.nranks = n;
  spec.scalar_bits = call.op.premulsum_scalar_bits;
  const std::unique_ptr<dc::Backend> backend = dc::make_host_backend(spec);
  if (backend == nullptr) {
    *error = "replay: collectives/ has no host backend for this datatype";
    return std::nullopt;
  }
  // Every rank's contribution (loaded: pre-multiplied, in the accumulator type), then the tree's steps in place:
  // step j folds, for every rank r below its place value s_j, the partials at r, r + s_j, ..., r + (p_j - 1) s_j
  // into r (collectives/association_tree.h). What is left at rank 0 is the result.
  const std::size_t acc_size = spec.acc_size();
  std::vector<unsigned char> partials(static_cast<std::size_t>(n) * elements * acc_size);
  const auto partial = [&](int r) { return partials.data() + static_cast<std::size_t>(r) * elements * acc_size; };
  for (int r = 0; r < n; ++r) backend->load(partial(r), call.inputs[static_cast<std::size_t>(r)].data(), elements);
  const dc::AssociationTree tree(n);
  for (int step = 0; step < tree.steps(); ++step) {
    const int place = tree.place_value(step);
    for (int r = 0; r < place; ++r) {
      backend->fold(partial(r), partial(r), static_cast<std::size_t>(place) * elements, tree.radix(step), -1, nullptr,
                    elements);
    }
  }
  std::vector<unsigned char> output(elements * spec.type_size());
  backend->finish(output.data(), partial(0), elements);
  return output;
}

std::optional<Replay> replay(const ReplayCall& call, const ReplayOptions& options, std::string* error) {
  if (!check_call(call, error)) return std::nullopt;
  const int n = static_cast<int>(call.inputs.size());
  const std::size_t elements = result_elements(call), size = abi::datatype_size(call.datatype);
  Replay result;

  std::vector<int> rank_order(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) rank_order[static_cast<std::size_t>(r)] = r;
  std::optional<std::vector<unsigned char>> by_rank = ordered_output(call, rank_order, error);
  if (!by_rank) return std::nullopt;

  if (abi::datatype_is_floating(call.datatype)) {
    result.reference.resize(elements * size);
    for (std::size_t i = 0; i < elements; ++i) {
      const std::uint64_t bits = round_to_type(call.datatype, exact_element(call, i));
      std::memcpy(result.reference.data() + i * size, &bits, size);
    }
  } else {
    result.reference = *by_rank;  // integer arithmetic is exact (modulo 2^bits) in every order
  }

  const auto add = [&](std::string order, std::vector<int> permutation, std::vector<unsigned char> output) {
    ReplayedOutput replayed{std::move(order), std::move(permutation), std::move(output), {}};
    replayed.from_reference = compare_buffers(call.datatype, result.reference.data(), replayed.output.data(), elements);
    result.outputs.push_back(std::move(replayed));
  };
  add("rank", rank_order, std::move(*by_rank));
  std::optional<std::vector<unsigned char>> tree = deterministic_output(call, options.accumulate, error);
  if (!tree) return std::nullopt;
  add("deterministic", {}, std::move(*tree));

  std::mt19937_64 random(options.seed);
  for (int k = 0; k < options.arrival_orders; ++k) {
    std::vector<int> order = rank_order;
    for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[random() % i]);  // Fisher-Yates
    std::optional<std::vector<unsigned char>> output = ordered_output(call, order, error);
    if (!output) return std::nullopt;
    add("arrival", std::move(order), std::move(*output));
  }
  return result;
}

}  // namespace detnccl::numerics
