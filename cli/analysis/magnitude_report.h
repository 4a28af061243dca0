// detnccl analysis: the magnitude of one call's divergence, from the two runs' buffers (issue #18), as diff and
// replay show it: how many elements differ, by how many ULPs and how much, and for an output divergence of a
// reduction whether summation order explains it (numerics/reordering_bound.h, docs/magnitudes.md).
#ifndef DETNCCL_CLI_ANALYSIS_MAGNITUDE_REPORT_H
#define DETNCCL_CLI_ANALYSIS_MAGNITUDE_REPORT_H

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "abi/nccl_abi.h"
#include "numerics/magnitude.h"
#include "numerics/reordering_bound.h"

namespace detnccl::analysis {

struct DivergenceMagnitude {
  numerics::Magnitude magnitude;
  // Only for an output divergence of a reduction whose inputs are equal in both runs, computed from every member's
  // input (run A's capture).
  std::optional<numerics::ReorderingVerdict> reordering;
};

/* Measures `count` elements of `type`: `a` against `b` (a is the reference). With `member_inputs` (every member's
 * input of the call, in rank order, each offset so that element i of each is an addend of output element i), the
 * reordering verdict of `op` too. */
DivergenceMagnitude measure_divergence(ncclDataType_t type, const void* a, const void* b, std::size_t count,
                                       const numerics::ReductionOp& op,
                                       const std::vector<const void*>* member_inputs = nullptr);

/* One line: "outputs differ by at most K ulp in E elements — within the reordering bound: summation order, not
 * corruption; of N, first at F, worst at W (abs X, rel Y)" (or "— beyond the reordering bound: not summation order
 * (B beyond it, the first at I, the worst Rx the bound); ...", or no verdict at all without one), `what` being
 * "outputs" or "inputs". */
std::string magnitude_sentence(const DivergenceMagnitude& m, const std::string& what);

}  // namespace detnccl::analysis

#endif  // DETNCCL_CLI_ANALYSIS_MAGNITUDE_REPORT_H
