// Fuzz target: `detnccl diff` (analysis::diff_runs) on two runs built from the input, and `detnccl check`
// (analysis::check_run) on each.
//
// The input is a list of log files separated by kSeparator: parts 0, 2, 4... are ranks 0, 1, 2... of run A, parts
// 1, 3, 5... the same ranks of run B (at most kMaxRanks ranks). The seeds are pairs of real runs, one perturbed, so
// mutations start from logs the analysis understands. The logs are written to a private temporary directory, since
// the analysis reads runs from files as the command does. Checked, beyond "no crash": the verdict is consistent
// (an error, or ranks sorted and unique; "identical" means no divergence), and a run compared with itself is
// identical unless it is unusable or undecided, also with its steps numbered by --infer-steps.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "cli/analysis/run_check.h"
#include "cli/analysis/run_diff.h"
#include "cli/analysis/run_logs.h"
#include "records/log_format.h"

namespace {

namespace analysis = detnccl::analysis;
namespace fs = std::filesystem;

constexpr std::string_view kSeparator = "@@DNC-NEXT-LOG@@";
constexpr std::size_t kMaxRanks = 4;

void require(bool condition) {
  if (!condition) std::abort();
}

// A directory of this process, removed at exit.
class Workspace {
 public:
  Workspace() {
    std::string pattern = (fs::temp_directory_path() / "detnccl-diff-fuzz-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) std::abort();
    path_ = pattern;
  }
  ~Workspace() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Writes the given logs as the run directory `dir`, replacing what an earlier input left there.
analysis::RunLogs write_run(const fs::path& dir, const std::vector<std::string_view>& logs) {
  std::error_code ignored;
  fs::remove_all(dir, ignored);
  fs::create_directories(dir);
  for (std::size_t rank = 0; rank < logs.size(); ++rank) {
    std::ofstream(dir / detnccl::records::rank_log_file_name(static_cast<std::uint32_t>(rank)), std::ios::binary)
        .write(logs[rank].data(), static_cast<std::streamsize>(logs[rank].size()));
  }
  return analysis::list_run(dir.string());
}

void check_diff(const analysis::RunDiff& diff) {
  if (!diff.error.empty()) return;
  for (std::size_t i = 1; i < diff.ranks.size(); ++i) require(diff.ranks[i - 1].rank < diff.ranks[i].rank);
  if (diff.identical()) require(!diff.first.has_value() && diff.config_differences.empty());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Workspace workspace;
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> a_logs, b_logs;
  for (std::size_t part = 0; part < 2 * kMaxRanks; ++part) {
    const std::size_t end = input.find(kSeparator);
    (part % 2 == 0 ? a_logs : b_logs).push_back(input.substr(0, end));
    if (end == std::string_view::npos) break;
    input.remove_prefix(end + kSeparator.size());
  }
  const analysis::RunLogs a = write_run(workspace.path() / "a", a_logs);
  const analysis::RunLogs b = write_run(workspace.path() / "b", b_logs);

  analysis::DiffOptions options;
  options.threads = 1;
  check_diff(analysis::diff_runs(a, b, options));
  const analysis::RunDiff self = analysis::diff_runs(a, a, options);
  check_diff(self);
  if (self.error.empty() && !self.undecided) {
    // A run compared with itself: every call matches itself, so no divergence can be found.
    require(!self.first.has_value());
  }
  options.from_step = 1;
  options.to_step = 2;
  check_diff(analysis::diff_runs(a, b, options));
  // The step numbering of --infer-steps over whatever the logs hold: a run compared with itself still matches.
  options = {};
  options.threads = 1;
  options.step_numbering.infer = true;
  check_diff(analysis::diff_runs(a, b, options));
  const analysis::RunDiff self_inferred = analysis::diff_runs(a, a, options);
  check_diff(self_inferred);
  if (self_inferred.error.empty() && !self_inferred.undecided) require(!self_inferred.first.has_value());

  analysis::CheckOptions check_options;
  check_options.threads = 1;
  check_options.calls_per_round = 3;  // small rounds: more matching boundaries per input
  const analysis::CheckResult check = analysis::check_run(b, check_options);
  if (check.error.empty()) require(check.ranks <= b.logs.size());
  return 0;
}
