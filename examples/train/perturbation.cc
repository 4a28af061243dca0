#include "examples/train/perturbation.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

namespace train {
namespace {

// Permutations beyond this many contributions are too many to try (6! = 720 per element is still cheap, but 8! is
// not); larger jobs check rank order, its reverse and the trees.
constexpr std::size_t kMaxPermutedContributions = 5;

float sum_in_order(std::span<const float> values, std::span<const std::size_t> order) {
  float sum = values[order[0]];
  for (std::size_t i = 1; i < order.size(); ++i) sum += values[order[i]];
  return sum;
}

// Pairwise tree over rank order. Neighbours first: (0+1), (2+3), then those pairs, ... (recursive doubling).
// Halves first: the ranks beyond the largest power of two p <= n fold onto the first ones, then element i takes
// element i + p/2, then i + p/4, ... (recursive halving).
float sum_as_tree(std::vector<float> values, bool neighbours_first) {
  const std::size_t n = values.size();
  if (neighbours_first) {
    for (std::size_t stride = 1; stride < n; stride *= 2) {
      for (std::size_t i = 0; i + stride < n; i += 2 * stride) values[i] += values[i + stride];
    }
    return values[0];
  }
  std::size_t p = 1;
  while (p * 2 <= n) p *= 2;
  for (std::size_t i = 0; i + p < n; ++i) values[i] += values[i + p];
  for (std::size_t stride = p / 2; stride >= 1; stride /= 2) {
    for (std::size_t i = 0; i < stride; ++i) values[i] += values[i + stride];
  }
  return values[0];
}

// detnccl's deterministic mode (docs/deterministic.md): the ranks split by the largest prime factor p of n into the p
// classes of equal rank mod p, each reduced the same way, the class sums added left to right. For powers of two it
// is the halves-first tree above; for other rank counts (6, 12, 40, ...) it is an order of its own.
float sum_as_prime_factor_tree(std::span<const float> values) {
  const std::size_t n = values.size();
  if (n == 1) return values[0];
  std::size_t largest_prime = n, rest = n;
  for (std::size_t factor = 2; factor * factor <= rest; ++factor) {
    while (rest % factor == 0) {
      largest_prime = factor;
      rest /= factor;
    }
  }
  if (rest > 1) largest_prime = rest;
  float sum = 0;
  std::vector<float> members;
  for (std::size_t residue = 0; residue < largest_prime; ++residue) {
    members.clear();
    for (std::size_t i = residue; i < n; i += largest_prime) members.push_back(values[i]);
    const float class_sum = sum_as_prime_factor_tree(members);
    sum = residue == 0 ? class_sum : sum + class_sum;
  }
  return sum;
}

float exactly_rounded_sum(std::span<const float> values) {
  // long double (64-bit mantissa on x86-64) holds the sum of a few floats of any magnitudes closely enough that a
  // single rounding to float is the exactly rounded sum in all but pathological cases.
  long double sum = 0;
  for (float v : values) sum += static_cast<long double>(v);
  return static_cast<float>(sum);
}

// Every sum of `values` the checks consider, in a fixed sequence.
std::vector<float> sums_in_every_order(std::span<const float> values) {
  std::vector<float> sums;
  std::vector<std::size_t> order(values.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  if (values.size() <= kMaxPermutedContributions) {
    do {
      sums.push_back(sum_in_order(values, order));
    } while (std::next_permutation(order.begin(), order.end()));
  } else {
    sums.push_back(sum_in_order(values, order));
    std::reverse(order.begin(), order.end());
    sums.push_back(sum_in_order(values, order));
  }
  const std::vector<float> copy(values.begin(), values.end());
  sums.push_back(sum_as_tree(copy, true));
  sums.push_back(sum_as_tree(copy, false));
  sums.push_back(sum_as_prime_factor_tree(values));
  sums.push_back(exactly_rounded_sum(values));
  return sums;
}

}  // namespace

bool perturbation_survives_every_order(std::span<const float> contributions, std::size_t rank) {
  std::vector<float> perturbed(contributions.begin(), contributions.end());
  perturbed[rank] = std::nextafter(perturbed[rank], std::numeric_limits<float>::infinity());
  const std::vector<float> before = sums_in_every_order(contributions);
  const std::vector<float> after = sums_in_every_order(perturbed);
  for (std::size_t i = 0; i < before.size(); ++i) {
    // Bits, not values: +0 and -0 differ in a fingerprint.
    if (std::memcmp(&before[i], &after[i], sizeof(float)) == 0) return false;
  }
  return true;
}

std::optional<std::size_t> visible_perturbation_element(std::span<const std::vector<float>> local_gradients,
                                                        std::size_t rank) {
  const std::vector<float>& own = local_gradients[rank];
  std::vector<std::size_t> candidates(own.size());
  std::iota(candidates.begin(), candidates.end(), std::size_t{0});
  // Largest magnitude first; ties by index, so the choice is the same on every run.
  std::stable_sort(candidates.begin(), candidates.end(),
                   [&](std::size_t a, std::size_t b) { return std::fabs(own[a]) > std::fabs(own[b]); });
  std::vector<float> contributions(local_gradients.size());
  for (std::size_t element : candidates) {
    for (std::size_t r = 0; r < local_gradients.size(); ++r) contributions[r] = local_gradients[r][element];
    if (perturbation_survives_every_order(contributions, rank)) return element;
  }
  return std::nullopt;
}

}  // namespace train
