// The registry of algorithms and the automatic choice between them.
#include <algorithm>
#include <cctype>

#include "collectives/algorithm.h"
#include "collectives/dtype_arith.h"

namespace detnccl::collectives {
namespace {

// The automatic choice (docs/deterministic.md, "Choosing an algorithm"). RATIONALE: one_shot's single round of
// messages wins while messages are small, but every rank talks to every other at once, so it is kept to small
// communicators; beyond these limits mixed_radix's ring-equal traffic wins.
constexpr int kOneShotMaxRanks = 16;
constexpr double kOneShotMaxBytes = 256.0 * 1024;

// The most bytes any one rank sends or receives in a call of this shape (native accumulation).
double busiest_rank_bytes(Collective collective, Algorithm algorithm, double message, double n) {
  if (algorithm == Algorithm::kOneShot) {
    switch (collective) {
      case Collective::kAllReduce:
        return (n - 1) * message;
      case Collective::kReduceScatter:
        return (n - 1) / n * message;
      case Collective::kReduce:
        return (n - 1) * message;  // the root receives every contribution
    }
  }
  switch (collective) {
    case Collective::kAllReduce:
      return 2 * (n - 1) / n * message;
    case Collective::kReduceScatter:
      return (n - 1) / n * message;
    case Collective::kReduce:
      return std::max(message, 2 * (n - 1) / n * message);  // a sender: its share + block; the root: both phases in
  }
  return 0;
}

std::string lowercase(std::string_view text) {
  std::string out(text);
  for (char& ch : out) ch = ch == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

}  // namespace

const AlgorithmDescriptor& algorithm_descriptor(Algorithm algorithm) {
  // The registry: one line per algorithm.
  static const AlgorithmDescriptor* const kRegistry[] = {&kMixedRadixAlgorithm, &kOneShotAlgorithm};
  for (const AlgorithmDescriptor* descriptor : kRegistry) {
    if (descriptor->id == algorithm) return *descriptor;
  }
  return kMixedRadixAlgorithm;
}

const char* algorithm_name(Algorithm algorithm) noexcept {
  for (const AlgorithmName& entry : kAlgorithmNames) {
    if (entry.algorithm == algorithm) return entry.name;
  }
  return "?";
}

std::optional<Algorithm> algorithm_from_name(std::string_view name) noexcept {
  const std::string wanted = lowercase(name);
  for (const AlgorithmName& entry : kAlgorithmNames) {
    if (wanted == entry.name) return entry.algorithm;
  }
  return std::nullopt;
}

const char* accumulate_name(Accumulate accumulate) noexcept {
  for (const AccumulateName& entry : kAccumulateNames) {
    if (entry.accumulate == accumulate) return entry.name;
  }
  return "?";
}

std::optional<Accumulate> accumulate_from_name(std::string_view name) noexcept {
  const std::string wanted = lowercase(name);
  for (const AccumulateName& entry : kAccumulateNames) {
    if (wanted == entry.name) return entry.accumulate;
  }
  return std::nullopt;
}

Algorithm select_algorithm(Collective collective, std::size_t count, ncclDataType_t datatype, int nranks) noexcept {
  if (nranks < 2 || nranks > kOneShotMaxRanks) return Algorithm::kMixedRadix;
  const double n = nranks;
  double message = static_cast<double>(count) * static_cast<double>(arith::dtype_size(datatype));
  if (collective == Collective::kReduceScatter) message *= n;
  const double one_shot = busiest_rank_bytes(collective, Algorithm::kOneShot, message, n);
  const double mixed_radix = busiest_rank_bytes(collective, Algorithm::kMixedRadix, message, n);
  return one_shot <= mixed_radix || one_shot <= kOneShotMaxBytes ? Algorithm::kOneShot : Algorithm::kMixedRadix;
}

Algorithm resolve_algorithm(Collective collective, std::size_t count, ncclDataType_t datatype, int nranks,
                            const Options& options) noexcept {
  if (options.algorithm != Algorithm::kAuto) return options.algorithm;
  return select_algorithm(collective, count, datatype, nranks);
}

std::vector<int> association_radices(int nranks) { return AssociationTree(nranks).radices(); }

int association_height(int nranks) { return AssociationTree(nranks).height(); }

ncclResult_t reduce_with_tree(const AssociationTree& tree, Backend& backend, unsigned char* base, std::size_t stride,
                              std::size_t acc_size, std::size_t count) {
  // After step j the partial result of each group sits in its member whose digits 0..j are all zero, i.e. in the
  // arrays x < s_j; the members of the group based at x are x + q * s_j.
  for (int j = 0; j < tree.steps(); ++j) {
    const auto place = static_cast<std::size_t>(tree.place_value(j));
    for (std::size_t x = 0; x < place; ++x) {
      unsigned char* partial = base + x * stride * acc_size;
      if (const ncclResult_t r = backend.fold(partial, partial, place * stride, tree.radix(j), -1, nullptr, count);
          r != ncclSuccess) {
        return r;
      }
    }
  }
  return ncclSuccess;
}

}  // namespace detnccl::collectives
