// detnccl analysis: the pictures of `detnccl report`, computed from diff's and check's own results (never by comparing
// logs again): the rank x step map of where a divergence starts and spreads (or where check's findings are), the
// communicators that group ranks, a rank's calls around its first divergence per communicator, and the command to run
// next.
#ifndef DETNCCL_CLI_ANALYSIS_RUN_MAP_H
#define DETNCCL_CLI_ANALYSIS_RUN_MAP_H

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli/analysis/divergence_magnitude.h"
#include "cli/analysis/run_check.h"
#include "cli/analysis/run_diff.h"
#include "cli/analysis/run_stats.h"

namespace detnccl::analysis {

// What one (rank, step) cell of the map shows. The numbers are the page's colour indexes: append, never renumber.
enum class CellStatus : std::uint8_t {
  kNotTraced = 0,     // neither run has a call (or a step digest) of this rank at this step
  kIdentical = 1,     // compared, no difference (diff); no finding (check)
  kUnverified = 2,    // compared by metadata only: the rank's calls had no fingerprint in both runs
  kOrigin = 3,        // the rank's first divergence, where the difference starts (check: a rank a finding names)
  kReceiver = 4,      // the rank's first divergence, data received from another rank
  kUndetermined = 5,  // the rank's first divergence; the records cannot tell its role
  kDiverged = 6,      // after the rank's first divergence, a step with a divergent call
  kMissing = 7,       // one run has calls of the rank at this step and the other has none (check: did not join)
  kNotCompared = 8,   // not compared: the other run's log was truncated there, or diff stopped reading before it
};
inline constexpr std::uint8_t kCellStatusCount = 9;

// "not_traced", "identical", "unverified", "origin", "receiver", "undetermined", "diverged", "missing",
// "not_compared".
std::string_view cell_status_name(CellStatus status) noexcept;

// Consecutive steps of one rank with one status.
struct CellRun {
  CellStatus status = CellStatus::kNotTraced;
  std::uint64_t steps = 0;
  friend bool operator==(const CellRun&, const CellRun&) = default;
};

// One rank's row, from StepMap::first_step to last_step (the runs' step counts add up to the map's width).
struct RankCells {
  std::uint32_t rank = 0;
  std::vector<CellRun> runs;
};

// The rank x step map. Empty (no steps) when no rank has a call or digest in the range.
struct StepMap {
  std::optional<std::uint64_t> first_step;
  std::optional<std::uint64_t> last_step;
  std::vector<RankCells> ranks;  // sorted by rank
  // The status of a cell (kNotTraced outside the map). For tests and tools; the page decodes the runs itself.
  CellStatus at(std::uint32_t rank, std::uint64_t step) const;
};

// The map of a diff: per rank, the steps either run has (calls, or step digests) within [from_step, to_step]:
// identical (or unverified) before the rank's first divergence, its role at that step, after it diverged at the
// steps of its divergent calls and identical between them (as far as diff kept and read them, else not compared);
// missing where one run has no call (no log, stopped, resumed later), not compared after a truncation marker of the
// other run or after diff stopped reading (RankDiff::read_through_step, the step-index shortcut).
StepMap diff_step_map(const RunDiff& diff, std::optional<std::uint64_t> from_step,
                      std::optional<std::uint64_t> to_step);

// The map of a check: per rank, the steps its log has (stats): identical where no finding names it, origin where
// one does (a rank at fault), missing where a "not all ranks joined" finding names it (that outranks the others).
StepMap check_step_map(const CheckResult& check, const RunStats& stats);

// A communicator over the run: its members' global ranks by communicator rank (kUnknownMember where no log says).
struct CommunicatorMembers {
  static constexpr std::uint32_t kUnknownMember = 0xffffffffu;
  std::uint64_t id = 0;
  std::uint32_t nranks = 0;
  std::vector<std::uint32_t> members;  // nranks entries
};

// The communicators the logs name, by id, from each rank's communicator records (rank, records).
std::vector<CommunicatorMembers> communicator_members(
    const std::vector<std::pair<std::uint32_t, const std::vector<records::CommunicatorRecord>*>>& ranks);

// One communicator's calls of a rank around the rank's first divergence, by the communicator's call number
// (comm_seq). Each slot's verdict: '=' no difference found (the calls before a rank's first divergence all matched
// by fingerprint or were unverified; between later divergent calls, likewise), 'i' input fingerprint differs, 'o'
// output differs, 'b' both, 'm' metadata differ or the call is missing in a run, '?' not known (diff kept no more
// divergent calls of this rank, or stopped reading), ' ' before the communicator's first call.
struct CommunicatorTimeline {
  std::uint64_t comm_id = 0;
  std::uint64_t first_comm_seq = 0;  // the comm_seq of verdicts[0]
  std::string verdicts;
  std::vector<std::uint64_t> steps;  // the step of each divergent slot's call, 0 elsewhere (same length)
};

// The timelines of a rank's communicators that hold a divergent call: `before` calls before its first divergent call
// on that communicator, and up to `after` from it on. Empty for a rank that did not diverge.
std::vector<CommunicatorTimeline> rank_timelines(const RankDiff& rank, std::size_t before, std::size_t after);

// The command to run next about a diff, by the first divergence's kind and role (docs/cli.md "What to do next"):
// `detnccl replay RUN_A --rank R --seq S` for an output divergence of a reduction whose every member's input run A
// captured (`first_magnitude`, what diff measured of diff.first, says so: its reordering verdict was computed from
// those inputs), else the narrow re-trace (`detnccl run --trace segments --steps S --ranks R -- JOB`),
// deterministic mode, the log to look at, or the step-digest re-trace (rerun_settings). Empty when the runs are
// identical.
struct NextCommand {
  std::string command;  // one line to paste (JOB stands for the training command)
  std::string why;      // one sentence
};
NextCommand next_command(const RunDiff& diff, const std::string& run_a, const std::string& run_b,
                         const MagnitudeOutcome* first_magnitude = nullptr);

}  // namespace detnccl::analysis

#endif  // DETNCCL_CLI_ANALYSIS_RUN_MAP_H
