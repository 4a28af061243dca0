// detnccl: the effective DETNCCL_* configuration, parsed once from the environment.
//
// parse_config() turns a list of "NAME=value" strings (the process environment, or a test's or fuzzer's list) into
// a Config, or into errors that name the variable, the accepted values and, for a mistyped name, the closest known
// one. Nothing here throws, reads files, or logs: the shim decides what to print and whether to stop the job.
// The variables themselves are listed once, in config/env_vars.h.
#ifndef DETNCCL_CONFIG_CONFIG_H
#define DETNCCL_CONFIG_CONFIG_H

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "abi/nccl_api_table.h"
#include "abi/traced_ops.h"
#include "collectives/algorithm_names.h"
#include "config/env_vars.h"
#include "steps/step_boundary.h"

namespace detnccl::config {

// ---------------------------------------------------------------------------------------------------------------
// Variables

// One enumerator per row of DETNCCL_ENV_VARS, in table order.
enum class EnvVar : std::uint8_t {
#define DETNCCL_ENV_VAR_ENUMERATOR(id, name, kind, field, refines, shown, default_text, accepted_text, description) id,
  DETNCCL_ENV_VARS(DETNCCL_ENV_VAR_ENUMERATOR)
#undef DETNCCL_ENV_VAR_ENUMERATOR
};

// Number of DETNCCL_* variables.
inline constexpr std::size_t kEnvVarCount = 0
#define DETNCCL_ENV_VAR_COUNT(id, name, kind, field, refines, shown, default_text, accepted_text, description) +1
    DETNCCL_ENV_VARS(DETNCCL_ENV_VAR_COUNT)
#undef DETNCCL_ENV_VAR_COUNT
    ;

// The feature a variable refines: without it, a value other than the default has no effect (ineffective_settings).
enum class Refines : std::uint8_t {
  kNothing,        // always has an effect
  kTracing,        // DETNCCL_TRACE at meta or above (DETNCCL_RUN)
  kFingerprints,   // DETNCCL_TRACE at hash or above (the windows)
  kSegments,       // DETNCCL_TRACE=segments (DETNCCL_SEGMENT_BYTES)
  kDeterministic,  // DETNCCL_DETERMINISTIC=1 or warn (DETNCCL_ALGO, DETNCCL_ACCUMULATE)
  kCapture,        // DETNCCL_CAPTURE=1 (DETNCCL_CAPTURE_BYTES)
};

// What the table says about one variable.
struct EnvVarInfo {
  EnvVar id;
  std::string_view name;
  std::string_view default_text;
  std::string_view accepted_text;
  std::string_view description;
  Refines refines;
  bool diagnostic;  // `detnccl diff` and `check` show a difference in it as a note (its row's `shown` is diagnostic)
};

// Every DETNCCL_* variable, in table order.
std::span<const EnvVarInfo> env_vars() noexcept;

// The table row of one variable.
const EnvVarInfo& env_var_info(EnvVar id) noexcept;

// ---------------------------------------------------------------------------------------------------------------
// Operations that DETNCCL_OPS can name

// The collective and point-to-point calls of abi/nccl_api_table.h (kind coll or p2p), in table order. Enumerators
// are the NCCL function names, so code generated from the same table can write TracedOp::name. The values are only
// meaningful inside one process: the log stores records::OpId, whose numbers are stable.
//
// The rows are picked with abi/traced_ops.h's DETNCCL_IF_TRACED_KIND_<kind>.

enum class TracedOp : std::uint8_t {
#define DETNCCL_TRACED_OP_ENUMERATOR(ret, name, params, args, kind, need) DETNCCL_IF_TRACED_KIND_##kind(name, )
  DETNCCL_NCCL_API(DETNCCL_TRACED_OP_ENUMERATOR)
#undef DETNCCL_TRACED_OP_ENUMERATOR
};

// Number of TracedOp values.
inline constexpr std::size_t kTracedOpCount = 0
#define DETNCCL_TRACED_OP_COUNT(ret, name, params, args, kind, need) DETNCCL_IF_TRACED_KIND_##kind(+1)
    DETNCCL_NCCL_API(DETNCCL_TRACED_OP_COUNT)
#undef DETNCCL_TRACED_OP_COUNT
    ;

// The name DETNCCL_OPS uses for an operation: the NCCL function name without "nccl" ("AllReduce").
std::string_view traced_op_name(TracedOp op) noexcept;

// The operation a DETNCCL_OPS name denotes, compared without regard to case; nullopt for anything else.
std::optional<TracedOp> traced_op_from_name(std::string_view name) noexcept;

// ---------------------------------------------------------------------------------------------------------------
// Value types

// DETNCCL_TRACE: what the log holds. Ordered by what is computed: meta records calls without fingerprints; steps
// fingerprints them like hash but writes only each step's digests per communicator (records/step_digest.h), no call
// records; hash writes call records with fingerprints, segments adds per-segment digests.
enum class TraceLevel : std::uint8_t { kOff, kMeta, kSteps, kHash, kSegments };

// DETNCCL_LOG_LEVEL, in increasing severity (the setting's accepted names).
enum class LogLevel : std::uint8_t { kTrace, kDebug, kInfo, kWarn, kError, kOff };

// DETNCCL_DETERMINISTIC: off, on (stop the job at a call that cannot be made deterministic) or warn (warn once and
// run such a call as is).
enum class DeterministicMode : std::uint8_t { kOff, kOn, kWarn };

// DETNCCL_STEP_INFERENCE: how steps are numbered when the job marks none (docs/steps.md).
enum class StepInferenceMode : std::uint8_t {
  kAuto,   // the PyTorch hook's optimizer steps when it reports them, else the call pattern
  kCalls,  // the call pattern only (the PyTorch hook stays out)
  kOff,    // no numbering: every unmarked call at step 0
};

// DETNCCL_ALGO: which deterministic algorithm to use. The algorithms and their names are collectives/'s, listed once
// in collectives/algorithm_names.h (a header of the standard library only).
using DeterministicAlgo = collectives::Algorithm;

// DETNCCL_ACCUMULATE: how deterministic mode adds narrow floats (collectives/algorithm_names.h).
using Accumulate = collectives::Accumulate;

// An inclusive range of unsigned integers.
struct Interval {
  std::uint64_t first = 0;
  std::uint64_t last = 0;
  friend bool operator==(const Interval&, const Interval&) = default;
};

// A set of unsigned integers (steps, ranks) kept as sorted, disjoint, non-adjacent intervals. A default-constructed
// set contains every number, which is what an unset window variable means.
class IntervalSet {
 public:
  // The set of every number.
  IntervalSet() = default;

  // The union of the given intervals (any order, overlaps allowed; an interval with first > last is ignored).
  static IntervalSet of(std::vector<Interval> intervals);

  // Whether the set has every number (the variable was unset or "all").
  bool is_everything() const noexcept { return everything_; }

  // Whether value is in the set: a binary search over the intervals.
  bool contains(std::uint64_t value) const noexcept;

  // The normalised intervals (empty when is_everything()).
  const std::vector<Interval>& intervals() const noexcept { return intervals_; }

  friend bool operator==(const IntervalSet&, const IntervalSet&) = default;

 private:
  bool everything_ = true;
  std::vector<Interval> intervals_;
};

// A set of TracedOp values as a bitmask. A default-constructed set contains every operation.
class OpSet {
 public:
  // The set of every operation.
  OpSet() = default;

  // The set of exactly the given operations.
  static OpSet of(std::span<const TracedOp> ops) noexcept;

  // Whether op is in the set: one bit test.
  bool contains(TracedOp op) const noexcept { return (bits_ >> static_cast<unsigned>(op)) & 1u; }

  // Whether the set has every operation.
  bool is_everything() const noexcept { return bits_ == kAll; }

  friend bool operator==(const OpSet&, const OpSet&) = default;

 private:
  static constexpr std::uint32_t kAll = (std::uint32_t{1} << kTracedOpCount) - 1;
  static_assert(kTracedOpCount < 32, "OpSet keeps one bit per operation in 32 bits");
  std::uint32_t bits_ = kAll;
};

// ---------------------------------------------------------------------------------------------------------------
// The configuration

// Segment sizes are multiples of this (the fingerprint kernels work in 16 KiB tiles).
inline constexpr std::uint64_t kSegmentGranule = 16 * 1024;

// The effective value of every DETNCCL_* variable. Plain values, copyable; the defaults are the values of an
// empty environment.
struct Config {
  std::string dir;  // DETNCCL_DIR; empty: no tracing
  std::string run;  // DETNCCL_RUN; empty: derive it (run_name_from_environment)
  TraceLevel trace = TraceLevel::kOff;
  std::uint64_t segment_bytes = 1024 * 1024;
  IntervalSet steps;  // every step by default
  IntervalSet ranks;  // every rank by default
  OpSet ops;          // every operation by default
  std::uint64_t min_bytes = 0;
  bool capture = false;                                  // DETNCCL_CAPTURE
  std::uint64_t capture_bytes = std::uint64_t{1} << 30;  // DETNCCL_CAPTURE_BYTES
  StepInferenceMode step_inference = StepInferenceMode::kAuto;
  steps::StepBoundary step_boundary;  // no rule by default
  LogLevel log_level = LogLevel::kWarn;
  std::string log_file;  // empty: standard error
  bool print_config = false;
  DeterministicMode deterministic = DeterministicMode::kOff;
  DeterministicAlgo algo = DeterministicAlgo::kAuto;
  Accumulate accumulate = Accumulate::kNative;

  // Whether floating-point reductions are substituted by detnccl's fixed-order ones.
  bool deterministic_mode() const noexcept { return deterministic != DeterministicMode::kOff; }

  // Whether logs are written at all.
  bool tracing() const noexcept { return trace != TraceLevel::kOff; }

  // Whether call records are written (every level but off and steps).
  bool call_records() const noexcept { return trace != TraceLevel::kOff && trace != TraceLevel::kSteps; }

  // Whether one call's buffers are fingerprinted: tracing at hash level or above, and the call inside every window
  // (step, global rank, operation, bytes moved). Calls outside still get a record, so sequence numbers stay aligned
  // between runs with different windows.
  bool fingerprints(std::uint64_t step, std::uint64_t global_rank, TracedOp op, std::uint64_t bytes) const noexcept {
    return trace >= TraceLevel::kSteps && bytes >= min_bytes && ops.contains(op) && steps.contains(step) &&
           ranks.contains(global_rank);
  }

  friend bool operator==(const Config&, const Config&) = default;
};

// One problem with one variable. message is a complete sentence for the user: it names the variable, quotes the
// value (escaped and shortened if need be), lists the accepted values, and suggests the closest name for a typo.
struct ConfigError {
  std::string variable;
  std::string message;
};

// What parse_config() returns: a Config, or every error found (never both).
class ParsedConfig {
 public:
  // Whether parsing succeeded.
  bool ok() const noexcept { return errors_.empty(); }

  // The configuration. Only meaningful when ok(); otherwise it holds the defaults of the variables in error.
  const Config& config() const noexcept { return config_; }

  // The errors, in environment order; empty when ok().
  const std::vector<ConfigError>& errors() const noexcept { return errors_; }

  // All error messages, one per line, for a single log line or exception text.
  std::string error_text() const;

 private:
  friend ParsedConfig parse_config(std::span<const std::string_view> environment) noexcept;
  friend ParsedConfig config_from_environment() noexcept;
  Config config_;
  std::vector<ConfigError> errors_;
};

// Parses the DETNCCL_* entries of an environment given as "NAME=value" strings. A name that looks like ours
// (DETNCCL_ in any case) but is not in the table is an error, and so is a near miss of a known name under another
// prefix (DETNCL_DIR, DTNCCL_DIR, DETNCCLDIR); other entries are ignored, except that the world size
// (world_size_from_environment) is checked against DETNCCL_RANKS. A value that starts or ends with white space is
// an error, in every variable. So is a setting with no effect because its feature is off by default (see
// ineffective_settings). When a name occurs twice, the first occurrence wins, as with getenv(). Never throws: an
// allocation failure comes back as an error too.
ParsedConfig parse_config(std::span<const std::string_view> environment) noexcept;

// parse_config() over this process's environment (environ).
ParsedConfig config_from_environment() noexcept;

// The settings of a configuration that have no effect, one warning each ("DETNCCL_STEPS=3 has no effect: tracing is
// off (DETNCCL_TRACE=off)."): a value other than the default of a variable that refines a feature that is off
// (DETNCCL_RUN, DETNCCL_SEGMENT_BYTES and the windows without tracing or fingerprints, DETNCCL_ALGO and
// DETNCCL_ACCUMULATE without deterministic mode). parse_config() refuses such a setting when the feature is off only
// by default (it was never turned on); when it was turned off explicitly the setting is accepted and the shim prints
// these warnings at start. Empty for a configuration where every setting counts.
std::vector<ConfigError> ineffective_settings(const Config& config);

// Why config.ranks selects no rank of a job of world_size ranks (0 to world_size - 1), as a message naming
// DETNCCL_RANKS; nullopt when it selects one, or selects every rank, or world_size is 0 (unknown). parse_config()
// applies it with the world size of the environment (world_size_from_environment); a shim that learns the size
// only from a communicator can apply it then.
std::optional<std::string> rank_window_problem(const Config& config, std::uint32_t world_size);

// The effective configuration as "DETNCCL_NAME=value" lines, one per variable in table order, each ending in '\n'.
// Values are canonical (windows normalised, "all" for an unrestricted window) and parse back to the same Config;
// bytes outside printable ASCII are written as \xNN. Used by DETNCCL_PRINT_CONFIG and the log header.
std::string format_config(const Config& config);

// Appends `text` to `out` with every byte outside printable ASCII written as \xNN, so that a hostile value cannot put
// control characters or invalid UTF-8 on a terminal or in a log header. format_config, nccl_variables and the error
// messages write values this way.
void append_escaped(std::string& out, std::string_view text);

// The Markdown table of every variable (name, default, accepted values, description) that docs/configuration.md
// embeds between its "generated" markers.
std::string config_reference_markdown();

// ---------------------------------------------------------------------------------------------------------------
// The process environment beyond DETNCCL_*

// Every NCCL_* entry of an environment, sorted by name, as "NAME=value\n" lines (for the log header). Bytes outside
// printable ASCII are written as \xNN.
std::string nccl_variables(std::span<const std::string_view> environment);

// Where a global rank came from.
struct GlobalRank {
  std::uint32_t rank = 0;
  std::string_view source;  // the variable's name
};

// The global rank from RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID or PMI_RANK (first valid one, in that order);
// nullopt when none holds a valid number. The fallbacks that need a communicator (the rank in the first
// communicator that spans the world, then the pid) are the shim's to apply.
std::optional<GlobalRank> global_rank_from_environment(std::span<const std::string_view> environment) noexcept;

// The world size from WORLD_SIZE, OMPI_COMM_WORLD_SIZE, SLURM_NTASKS or PMI_SIZE; nullopt when none is valid.
std::optional<std::uint32_t> world_size_from_environment(std::span<const std::string_view> environment) noexcept;

// The run name: config.run when set, else TORCHELASTIC_RUN_ID (unless "none"; "-restartN" appended when
// TORCHELASTIC_RESTART_COUNT is N > 0), else SLURM_JOB_ID (".SLURM_STEP_ID" appended when set). Characters a run
// name may not hold become '_'. nullopt when none applies: the shim must then agree on a name across ranks
// (run_name_from_time() on one rank, say), since every rank must write into the same run directory.
std::optional<std::string> run_name_from_environment(const Config& config,
                                                     std::span<const std::string_view> environment);

// A run name made from a wall-clock time (seconds since the epoch, UTC): "run-YYYYMMDD-HHMMSS".
std::string run_name_from_time(std::int64_t unix_seconds);

// Whether a string is a valid run name (what DETNCCL_RUN accepts).
bool is_valid_run_name(std::string_view name) noexcept;

// This process's environment (environ) as a list of views, for the functions above. The views point into environ
// and stay valid until the environment is changed.
std::vector<std::string_view> process_environment();

}  // namespace detnccl::config

#endif  // DETNCCL_CONFIG_CONFIG_H
