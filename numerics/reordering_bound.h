/* detnccl numerics: is a difference between two outputs of one reduction something a different order of the same
 * additions could produce ("summation order, not corruption"), or more than that (issue #18)?
 *
 * The question is asked of a reduction's `output` divergence with equal inputs: every rank's inputs are known (the
 * element's n addends x_0..x_{n-1}), two runs produced outputs a and b, and each run added the addends in some order
 * (NCCL's ring/tree/NVLS, hostnccl's arrival order, detnccl's association tree) with some accumulation. The bound
 * B(x) below holds for every order and for each accumulation detnccl, hostnccl and NCCL use; two results each
 * within B of the exact value differ by at most 2B. An element is "within the reordering bound" when
 * |a - b| <= 2B, and the call when all its elements are. The formulas, derived, are in docs/magnitudes.md:
 *
 *   u_P, eta_P   unit roundoff and half the smallest subnormal of precision P
 *   gamma_k(u) = k u / (1 - k u)
 *   m            the pre-multiplication factor: 1 (sum), fl(1/n) in fp32 (fp64 for double) (avg), the scalar
 *                (PreMulSum); it is the same in both runs, so the reference is S = m * sum(x_i), A = sum |m x_i|
 *   one result, partial sums in precision P (P = T: rounded to the datatype after every step, as NCCL, hostnccl
 *   and DETNCCL_ACCUMULATE=native do; P = fp32 for fp16/bf16/fp8 with DETNCCL_ACCUMULATE=fp32):
 *     e1 = pre-multiplied ? u_pre A + n eta_pre : 0          (u_pre: u_T + u_32 + u_T u_32 when a narrow T's
 *                                                           product is rounded to fp32 and then to T)
 *     e2 = gamma_{n-1}(u_P) (A + e1)                        (n - 1 additions, in any order)
 *     e3 = P != T ? u_T (|S| + e1 + e2) + eta_T : 0           (the final rounding to the datatype)
 *     B_P = e1 + e2 + e3,   B = max(B_T, B_fp32) for narrow T, B_T for fp32 and fp64.
 *   prod: B = ((1 + gamma_{n-1}(u_P)) (1 + u_T [P != T]) - 1) |prod x_i|, only when no partial product of any
 *     order can leave the normal range (every |x_i| non-zero and finite, the product of the factors below 1 at
 *     least twice the smallest normal, of those above 1 at most half the largest finite); otherwise none.
 *   min, max, every integer type: results do not depend on the order; B = 0, so any difference is beyond.
 *   Any NaN or infinity among an element's addends or outputs, or an output at the largest finite magnitude
 *   (overflow, or fp8's saturation), makes a difference there beyond (not bounded). +0 against -0 is within
 *   wherever B > 0 (a rounding to zero keeps the sign of what it rounded, which orders and accumulations change).
 * The bound itself is computed in long double and widened by a relative 2^-40 for that arithmetic.
 */
#ifndef DETNCCL_NUMERICS_REORDERING_BOUND_H
#define DETNCCL_NUMERICS_REORDERING_BOUND_H

#include <cstddef>
#include <cstdint>
#include <vector>

#include "abi/nccl_abi.h"

namespace detnccl::numerics {

/* A reduction as a call record names it: the ncclRedOp_t number (ncclSum .. ncclAvg), or a PreMulSum operator
 * (numbers from ncclNumOps on) with its scalar's bits, an element of the call's datatype (little end first). */
struct ReductionOp {
  std::int64_t redop = ncclSum;
  std::uint64_t premulsum_scalar_bits = 0;  // redop >= ncclNumOps only

  bool is_premulsum() const { return redop >= ncclNumOps; }
};

/* The most two results of one element may differ by under any summation order: 2B(x) above, for the element whose
 * addends (every rank's input of that element, in rank order) are `addends[0..n)` (raw bits of `type`). 0 when
 * the op or type has no freedom of order or no bound applies (see the header comment); never negative. */
long double allowed_difference(ncclDataType_t type, const ReductionOp& op, const std::uint64_t* addends, int n);

/* The verdict on a whole output. */
struct ReorderingVerdict {
  bool within_reordering_bound = true;  // every element's |a - b| <= its allowed difference
  std::uint64_t elements_checked = 0;
  std::uint64_t elements_beyond = 0;
  std::int64_t first_beyond_index = -1;  // the first element beyond the bound; -1: none
  std::int64_t worst_index = -1;         // the differing element of the largest ratio; -1: no element differs
  double worst_ratio = 0;                // |a - b| / allowed there (+inf: allowed 0, or not bounded)
};

/* Checks `count` elements of two outputs of one reduction of `type` with `op` over `inputs.size()` ranks: element
 * i's addends are inputs[r][i] for every rank r (for a ReduceScatter's rank-k output, pass each rank's input
 * offset to block k). Buffers are byte buffers without alignment needs. An invalid type checks nothing. */
ReorderingVerdict check_reordering_bound(ncclDataType_t type, const ReductionOp& op,
                                         const std::vector<const void*>& inputs, std::size_t count,
                                         const void* output_a, const void* output_b);

}  // namespace detnccl::numerics

#endif  // DETNCCL_NUMERICS_REORDERING_BOUND_H
