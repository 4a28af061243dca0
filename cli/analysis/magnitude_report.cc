#include "cli/analysis/magnitude_report.h"

#include <cmath>
#include <cstdio>

namespace detnccl::analysis {
namespace {

std::string ulp_text(std::uint64_t ulp) {
  return ulp == numerics::kInfiniteUlp ? std::string("infinitely many ulp (NaN against a number)")
                                       : std::to_string(ulp) + " ulp";
}

std::string short_number(double value) {
  if (std::isinf(value)) return "inf";
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", value);
  return text;
}

}  // namespace

DivergenceMagnitude measure_divergence(ncclDataType_t type, const void* a, const void* b, std::size_t count,
                                       const numerics::ReductionOp& op, const std::vector<const void*>* member_inputs) {
  DivergenceMagnitude result;
  result.magnitude = numerics::compare_buffers(type, a, b, count);
  if (member_inputs != nullptr) {
    result.reordering = numerics::check_reordering_bound(type, op, *member_inputs, count, a, b);
  }
  return result;
}

std::string magnitude_sentence(const DivergenceMagnitude& m, const std::string& what) {
  const numerics::Magnitude& g = m.magnitude;
  if (g.identical()) return what + " are identical";
  std::string text = what + " differ by at most " + ulp_text(g.max_ulp) + " in " +
                     std::to_string(g.elements_differing) + " elements (of " + std::to_string(g.elements_compared) +
                     "; first at " + std::to_string(g.first_index) + ", worst at " + std::to_string(g.worst_index) +
                     ": abs " + short_number(g.max_abs_error) + ", rel " + short_number(g.max_rel_error) + ")";
  if (m.reordering) {
    const numerics::ReorderingVerdict& v = *m.reordering;
    if (v.within_reordering_bound) {
      text += " \u2014 within the reordering bound: summation order, not corruption";
    } else {
      text += " \u2014 beyond the reordering bound (" + std::to_string(v.elements_beyond) + " elements, first at " +
              std::to_string(v.first_beyond_index) + ", worst " + short_number(v.worst_ratio) +
              "x the bound): not summation order";
    }
  }
  return text;
}

}  // namespace detnccl::analysis
