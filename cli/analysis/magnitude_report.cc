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

// "1 element", "12 elements".
std::string elements_text(std::uint64_t count) {
  return std::to_string(count) + (count == 1 ? " element" : " elements");
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
  // RATIONALE: the verdict follows the count directly ("... in E elements — within the reordering bound: ..."), the
  // words issue #18 gives; where and how large come after it.
  std::string text = what + " differ by at most " + ulp_text(g.max_ulp) + " in " + elements_text(g.elements_differing);
  if (m.reordering) {
    const numerics::ReorderingVerdict& v = *m.reordering;
    if (v.within_reordering_bound) {
      text += " \u2014 within the reordering bound: summation order, not corruption";
    } else {
      text += " \u2014 beyond the reordering bound: not summation order (" + std::to_string(v.elements_beyond) +
              " beyond it, the first at " + std::to_string(v.first_beyond_index) + ", the worst " +
              short_number(v.worst_ratio) + "x the bound)";
    }
  }
  text += "; of " + std::to_string(g.elements_compared) + ", first at " + std::to_string(g.first_index) +
          ", worst at " + std::to_string(g.worst_index) + " (abs " + short_number(g.max_abs_error) + ", rel " +
          short_number(g.max_rel_error) + ")";
  return text;
}

}  // namespace detnccl::analysis
