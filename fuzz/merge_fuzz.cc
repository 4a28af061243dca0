// Fuzz target: `detnccl merge` (analysis::read_partial_diff, merge_partial_diffs; read_partial_check,
// merge_partial_checks) on partial results built from the input.
//
// The input is a list of partial-result documents separated by kSeparator (at most kMaxParts); each is read as a
// part of a check when it says so ("command": "check"), else as a part of a diff, and the parts of each kind are
// merged. The seeds (fuzz/corpus/merge/) are the parts `detnccl diff --partial` wrote for split diffs of 4-rank
// synthetic runs (tests/test_cli_synthetic_run.h: identical, an input perturbed with receivers, a killed rank, a
// metadata and a configuration divergence with a truncated log, an unusable run, overlapping and missing ranges), and
// those `detnccl check --partial` wrote for split checks of 6-rank ones (check-*: consistent, corrupted with
// sub-communicators, a truncated log with a desync, overlapping and missing ranges), so mutations start from documents
// the reader accepts; write them again when kPartialDiffVersion or kPartialCheckVersion changes. Checked, beyond
// "no crash": a part that reads writes back to a document that reads to the same text (nothing read is lost), a diff
// merge that is not refused holds every rank of the runs once, in order, or an error, and a check merge no more ranks
// than the run has and no more findings than are kept.
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
  std::vector<analysis::PartialCheck> check_parts;
  std::vector<std::string> check_names;
  for (std::size_t i = 0; i < kMaxParts; ++i) {
    const std::size_t end = input.find(kSeparator);
    const std::string_view text = input.substr(0, end);
    if (analysis::partial_result_command(text) == "check") {
      analysis::PartialCheck part;
      if (analysis::read_partial_check(text, part).empty()) {
        const std::string written = analysis::write_partial_check(part);
        analysis::PartialCheck again;
        require(analysis::read_partial_check(written, again).empty());
        require(analysis::write_partial_check(again) == written);
        check_parts.push_back(std::move(part));
        check_names.push_back("part-" + std::to_string(i));
      }
    } else {
      analysis::PartialDiff part;
      if (analysis::read_partial_diff(text, part).empty()) {
        const std::string written = analysis::write_partial_diff(part);
        analysis::PartialDiff again;
        require(analysis::read_partial_diff(written, again).empty());
        require(analysis::write_partial_diff(again) == written);
        parts.push_back(std::move(part));
        names.push_back("part-" + std::to_string(i));
      }
    }
    if (end == std::string_view::npos) break;
    input.remove_prefix(end + kSeparator.size());
  }
  if (!check_parts.empty()) {
    const std::size_t run_ranks = check_parts.front().result.run_ranks.size();
    const std::uint64_t kept = check_parts.front().findings_kept;
    const analysis::MergedCheck merged = analysis::merge_partial_checks(std::move(check_parts), check_names);
    if (merged.refused.empty() && merged.check.error.empty()) {
      require(merged.check.ranks <= run_ranks);
      require(merged.check.findings.size() <= kept);
    }
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
