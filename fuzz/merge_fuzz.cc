// Fuzz target: `detnccl merge` (analysis::read_partial_diff, analysis::merge_partial_diffs) on partial results
// built from the input.
//
// The input is a list of partial-result documents separated by kSeparator (at most kMaxParts). The seeds
// (fuzz/corpus/merge/) are the parts `detnccl diff --partial` wrote for split diffs of 4-rank synthetic runs
// (tests/test_cli_synthetic_run.h: identical, an input perturbed with receivers, a killed rank, a metadata and a
// configuration divergence with a truncated log, an unusable run, overlapping and missing ranges), so mutations start
// from documents the reader accepts; write them again when kPartialDiffVersion changes. Checked, beyond
// "no crash": a part that reads writes back to a document that reads to the same text (nothing read is lost), and a
// merge that is not refused holds every rank of the runs once, in order, or an error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "cli/analysis/partial_diff.h"

namespace {

namespace analysis = detnccl::analysis;

constexpr std::string_view kSeparator = "@@DNC-NEXT-PART@@";
constexpr std::size_t kMaxParts = 4;

void require(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<analysis::PartialDiff> parts;
  std::vector<std::string> names;
  for (std::size_t i = 0; i < kMaxParts; ++i) {
    const std::size_t end = input.find(kSeparator);
    analysis::PartialDiff part;
    if (analysis::read_partial_diff(input.substr(0, end), part).empty()) {
      const std::string written = analysis::write_partial_diff(part);
      analysis::PartialDiff again;
      require(analysis::read_partial_diff(written, again).empty());
      require(analysis::write_partial_diff(again) == written);
      parts.push_back(std::move(part));
      names.push_back("part-" + std::to_string(i));
    }
    if (end == std::string_view::npos) break;
    input.remove_prefix(end + kSeparator.size());
  }
  if (parts.empty()) return 0;
  std::vector<std::uint32_t> run_ranks = parts.front().result.run_ranks;
  const analysis::MergedDiff merged = analysis::merge_partial_diffs(std::move(parts), names);
  if (merged.refused.empty() && merged.diff.error.empty()) {
    require(merged.diff.ranks.size() == run_ranks.size());
    for (std::size_t i = 0; i < run_ranks.size(); ++i) require(merged.diff.ranks[i].rank == run_ranks[i]);
  }
  return 0;
}
