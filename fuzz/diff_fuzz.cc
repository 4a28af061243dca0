// Fuzz target: `detnccl diff` (analysis::diff_runs) on two runs built from the input, and `detnccl check`
// (analysis::check_run) on run B.
//
// The input is a list of log files separated by kSeparator: parts 0, 2, 4... are ranks 0, 1, 2... of run A, parts
// 1, 3, 5... the same ranks of run B (at most kMaxRanks ranks). The seeds are pairs of real runs, one perturbed, so
// mutations start from logs the analysis understands. The runs are read from memory (analysis::run_in_memory): no
// file, directory or process per input. Checked, beyond "no crash": the verdict is consistent
// (an error, or ranks sorted and unique; "identical" means no divergence), and a run compared with itself is
// identical unless it is unusable or undecided, with each set of options (whole runs, a step range, --infer-steps).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cli/analysis/run_check.h"
#include "cli/analysis/run_diff.h"
#include "cli/analysis/run_logs.h"
#include "fuzz/log_mutator.h"
#include "records/log_format.h"

namespace {

namespace analysis = detnccl::analysis;

constexpr std::string_view kSeparator = "@@DNC-NEXT-LOG@@";
constexpr std::size_t kMaxRanks = 4;

void require(bool condition) {
  if (!condition) std::abort();
}

// A run of the given logs, read from memory: ranks 0, 1, 2... in order.
analysis::RunLogs memory_run(const char* name, const std::vector<std::string_view>& logs) {
  std::vector<std::span<const std::byte>> bytes;
  bytes.reserve(logs.size());
  for (const std::string_view log : logs) bytes.push_back(std::as_bytes(std::span(log.data(), log.size())));
  return analysis::run_in_memory(name, bytes);
}

void check_diff(const analysis::RunDiff& diff) {
  if (!diff.error.empty()) return;
  for (std::size_t i = 1; i < diff.ranks.size(); ++i) require(diff.ranks[i - 1].rank < diff.ranks[i].rank);
  if (diff.identical()) require(!diff.first.has_value() && diff.config_differences.empty());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> a_logs, b_logs;
  for (std::size_t part = 0; part < 2 * kMaxRanks; ++part) {
    const std::size_t end = input.find(kSeparator);
    (part % 2 == 0 ? a_logs : b_logs).push_back(input.substr(0, end));
    if (end == std::string_view::npos) break;
    input.remove_prefix(end + kSeparator.size());
  }
  const analysis::RunLogs a = memory_run("a", a_logs);
  const analysis::RunLogs b = memory_run("b", b_logs);

  // One set of options per input, chosen by its length (mutations reach each): the whole runs, a step range, or
  // the steps numbered by --infer-steps. RATIONALE: each diff costs the fuzzer as much as all its bookkeeping for the
  // input; two per input (a with b, a with itself) keep it fast, and the corpus still covers every option.
  analysis::DiffOptions options;
  options.threads = 1;
  const std::size_t variant = size % 3;
  if (variant == 1) {
    options.from_step = 1;
    options.to_step = 2;
  } else if (variant == 2) {
    options.step_numbering.infer = true;
  }
  check_diff(analysis::diff_runs(a, b, options));
  const analysis::RunDiff self = analysis::diff_runs(a, a, options);
  check_diff(self);
  if (self.error.empty() && !self.undecided) {
    // A run compared with itself: every call matches itself, so no divergence can be found.
    require(!self.first.has_value());
  }

  if (variant == 0) {
    analysis::CheckOptions check_options;
    check_options.threads = 1;
    check_options.calls_per_round = 3;  // small rounds: more matching boundaries per input
    const analysis::CheckResult check = analysis::check_run(b, check_options);
    if (check.error.empty()) require(check.ranks <= b.logs.size());
  }
  return 0;
}

#ifdef DETNCCL_LIBFUZZER
extern "C" std::size_t LLVMFuzzerMutate(std::uint8_t* data, std::size_t size, std::size_t max_size);

// libFuzzer's mutations, then the checksums of each log of the input fixed up (fuzz/log_mutator.h), so that mutated
// records reach the comparison.
extern "C" std::size_t LLVMFuzzerCustomMutator(std::uint8_t* data, std::size_t size, std::size_t max_size,
                                               unsigned int seed) {
  size = LLVMFuzzerMutate(data, size, max_size);
  if (!detnccl::fuzz::fix_checksums_this_time(seed)) return size;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::size_t start = 0;
  while (start <= size) {
    const std::size_t end = std::min(input.find(kSeparator, start), size);
    detnccl::fuzz::fix_log_checksums(data + start, end - start);
    start = end + kSeparator.size();
  }
  return size;
}
#endif
