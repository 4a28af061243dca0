/* detnccl collectives: the fixed association tree every deterministic reduction adds in.
 *
 * Write n = p_1 * p_2 * ... * p_k with primes p_1 <= p_2 <= ... <= p_k, and rank r in mixed radix with digit d_1
 * (radix p_1) most significant: r = sum_j d_j * s_j, where the place value s_j = n / (p_1 * ... * p_j). Step j adds,
 * for every choice of the other digits, the partial results of the p_j ranks that differ only in digit j, in
 * increasing order of d_j, left to right: ((x_0 + x_1) + x_2) + ... Step 1 adds the inputs.
 *
 * Equivalently (the definition docs/deterministic.md gives and the tests implement): to reduce a list of n inputs,
 * split it into p = the largest prime factor of n classes by index modulo p, reduce each class (in index order)
 * recursively, and add the p class results in order of residue, left to right.
 *
 * The tree depends on n alone: not on the message, the chunking or the algorithm.
 */
#ifndef DETNCCL_COLLECTIVES_ASSOCIATION_TREE_H
#define DETNCCL_COLLECTIVES_ASSOCIATION_TREE_H

#include <vector>

namespace detnccl::collectives {

class AssociationTree {
 public:
  /* The tree for `nranks` >= 1 ranks. */
  explicit AssociationTree(int nranks);

  int nranks() const { return nranks_; }
  /* Number of steps k (prime factors of n with multiplicity; 0 for n = 1). */
  int steps() const { return static_cast<int>(radices_.size()); }
  /* p_j for step j in [0, steps()) (0-based here). */
  int radix(int step) const { return radices_[static_cast<std::size_t>(step)]; }
  /* s_j: how far apart in rank the members of one group of step `step` are. */
  int place_value(int step) const { return place_values_[static_cast<std::size_t>(step)]; }
  /* Digit of `rank` for step `step`: its position in its group of that step. */
  int digit(int rank, int step) const { return (rank / place_value(step)) % radix(step); }
  /* The radices p_1..p_k. */
  const std::vector<int>& radices() const { return radices_; }
  /* sum_j (p_j - 1): the most additions on a path from one input to the result. */
  int height() const;

 private:
  int nranks_;
  std::vector<int> radices_;
  std::vector<int> place_values_;
};

}  // namespace detnccl::collectives

#endif  // DETNCCL_COLLECTIVES_ASSOCIATION_TREE_H
