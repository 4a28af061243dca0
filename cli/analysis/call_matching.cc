// detnccl analysis: matching calls across the ranks of a run (see call_matching.h).
#include "cli/analysis/call_matching.h"

namespace detnccl::analysis {

std::string rank_list(const std::vector<std::uint32_t>& ranks, std::size_t shown) {
  std::string text;
  for (std::size_t i = 0; i < ranks.size() && i < shown; ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > shown) text += " and " + std::to_string(ranks.size() - shown) + " more";
  return text;
}

}  // namespace detnccl::analysis
