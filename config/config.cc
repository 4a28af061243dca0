// detnccl: parsing and printing the DETNCCL_* configuration (see config.h).
#include "config/config.h"

#include <algorithm>
#include <array>
#include <limits>
#include <new>
#include <utility>

#include "config/value_kinds.h"

namespace detnccl::config {
namespace {

using parsing::closest_name;
using parsing::edit_distance;
using parsing::equals_ignoring_case;
using parsing::kMaxQuotedBytes;
using parsing::kOpListText;
using parsing::kTracedOpNames;
using parsing::Problem;
using parsing::quoted;

// RATIONALE: environment values come from users and launchers and may be anything; this cap (and those of
// value_kinds.h) keep every parse linear and bounded in memory whatever they hold.
constexpr std::size_t kMaxValueBytes = 1 << 20;
constexpr std::string_view kPrefix = "DETNCCL_";
// No value may start or end with one of these (one rule for every variable): at the ends of a value, white space is
// almost always a quoting slip ("DETNCCL_DIR= /x", "$STEPS ") that would otherwise be silently taken literally by
// some variables and dropped by others.
constexpr std::string_view kValueWhiteSpace = " \t\n\r\v\f";

constexpr std::array<EnvVarInfo, kEnvVarCount> kEnvVars = {{
#define DETNCCL_ENV_VAR_INFO(id, name, kind, field, refines, shown, default_text, accepted_text, description) \
  {EnvVar::id,                                                                                                \
   name,                                                                                                      \
   default_text,                                                                                              \
   accepted_text,                                                                                             \
   description,                                                                                               \
   Refines::refines,                                                                                          \
   std::string_view(#shown) == "diagnostic"},
    DETNCCL_ENV_VARS(DETNCCL_ENV_VAR_INFO)
#undef DETNCCL_ENV_VAR_INFO
}};

// Every Config field has its row: the rows name their fields (a row without one does not compile), and Config has as
// many fields as there are rows. RATIONALE: an aggregate's field count is the most initializers it accepts; a value
// that converts to any type stands for each.
struct AnyField {
  template <typename T>
  operator T() const;  // never defined: only used unevaluated
};
template <typename Aggregate, typename... Fields>
constexpr std::size_t field_count() {
  if constexpr (requires { Aggregate{Fields{}..., AnyField{}}; }) {
    return field_count<Aggregate, Fields..., AnyField>();
  } else {
    return sizeof...(Fields);
  }
}
static_assert(field_count<Config>() == kEnvVarCount,
              "every Config field needs its row in config/env_vars.h (and every row its own field)");

// Parses one known variable's (non-empty) value into config. Returns the problem, if any.
Problem parse_value(EnvVar id, std::string_view value, Config& config) {
  switch (id) {
#define DETNCCL_ENV_VAR_PARSE(id, name, kind, field, ...) \
  case EnvVar::id:                                        \
    return kinds::kind::parse(value, config.field);
    DETNCCL_ENV_VARS(DETNCCL_ENV_VAR_PARSE)
#undef DETNCCL_ENV_VAR_PARSE
  }
  return std::string("unhandled variable");
}

// A variable's value in config, canonical and escaped (what DETNCCL_PRINT_CONFIG prints).
std::string formatted_value(EnvVar id, const Config& config) {
  switch (id) {
#define DETNCCL_ENV_VAR_FORMAT(id, name, kind, field, ...) \
  case EnvVar::id:                                         \
    return kinds::kind::format(config.field);
    DETNCCL_ENV_VARS(DETNCCL_ENV_VAR_FORMAT)
#undef DETNCCL_ENV_VAR_FORMAT
  }
  return "?";
}

// Whether a variable's value in config is other than its default.
bool differs_from_default(EnvVar id, const Config& config) {
  const Config defaults;
  switch (id) {
#define DETNCCL_ENV_VAR_DIFFERS(id, name, kind, field, ...) \
  case EnvVar::id:                                          \
    return !(config.field == defaults.field);
    DETNCCL_ENV_VARS(DETNCCL_ENV_VAR_DIFFERS)
#undef DETNCCL_ENV_VAR_DIFFERS
  }
  return false;
}

std::optional<EnvVar> known_variable(std::string_view name) noexcept {
  for (const EnvVarInfo& info : kEnvVars) {
    if (info.name == name) return info.id;
  }
  return std::nullopt;
}

// Every known name, for messages: "DETNCCL_DIR, DETNCCL_RUN, ...".
std::string known_names() {
  std::string out;
  for (const EnvVarInfo& info : kEnvVars) {
    if (!out.empty()) out += ", ";
    out += info.name;
  }
  return out;
}

// The known variable an environment name outside the DETNCCL_ prefix was probably meant to be: a near miss of the
// prefix followed by a known suffix ("DETNCL_DIR", "DTNCCL_DIR", "DETNCCLDIR", "detncl_dir"), or a name a couple of
// edits from a known one. RATIONALE: two edits from the 8-byte prefix, or from a full name of 11 bytes or more, reach
// no variable of NCCL, CUDA, PyTorch, Slurm, Open MPI, PMI or hostnccl (tests/test_config.cc checks a realistic list):
// NCCL_ is three edits from DETNCCL_, HOSTNCCL_ three.
std::optional<std::string_view> near_miss_of_known_name(std::string_view name) {
  constexpr std::size_t kMaxEdits = 2;
  if (name.size() > 64 || name.size() + kMaxEdits < kPrefix.size() + 3) return std::nullopt;
  std::optional<std::string_view> best;
  std::size_t best_distance = kMaxEdits + 1;
  for (const EnvVarInfo& info : kEnvVars) {
    // More than kMaxEdits bytes longer or shorter: too far, without computing how far.
    std::size_t distance = name.size() + kMaxEdits >= info.name.size() && info.name.size() + kMaxEdits >= name.size()
                               ? edit_distance(name, info.name, kMaxEdits)
                               : kMaxEdits + 1;
    const std::string_view suffix = info.name.substr(kPrefix.size());
    if (name.size() > suffix.size() && equals_ignoring_case(name.substr(name.size() - suffix.size()), suffix)) {
      distance = std::min(distance, edit_distance(name.substr(0, name.size() - suffix.size()), kPrefix, kMaxEdits));
    }
    if (distance < best_distance) {
      best = info.name;
      best_distance = distance;
    }
  }
  return best;
}

// A setting that has no effect with the rest of the configuration (a non-default value of a variable that refines a
// feature that is off), and the variable whose value makes it so.
struct Ineffective {
  EnvVar variable;
  EnvVar because_of;  // DETNCCL_TRACE (tracing level), DETNCCL_DETERMINISTIC or DETNCCL_CAPTURE
  std::string reason;
};

// Why a setting that refines `refines` has no effect with config, or nullopt when the feature it refines is on.
std::optional<std::string_view> feature_off(Refines refines, const Config& config) {
  TraceLevel needed = TraceLevel::kOff;
  switch (refines) {
    case Refines::kNothing:
      return std::nullopt;
    case Refines::kDeterministic:
      if (config.deterministic_mode()) return std::nullopt;
      return "deterministic mode is off";
    case Refines::kCapture:
      if (config.capture) return std::nullopt;
      return "capture is off (DETNCCL_CAPTURE is not 1)";
    case Refines::kTracing:
      needed = TraceLevel::kMeta;
      break;
    case Refines::kFingerprints:
      needed = TraceLevel::kSteps;
      break;
    case Refines::kSegments:
      needed = TraceLevel::kSegments;
      break;
  }
  if (config.trace >= needed) return std::nullopt;
  if (config.trace == TraceLevel::kOff) {
    return config.dir.empty() ? "tracing is off (DETNCCL_DIR is not set)" : "tracing is off (DETNCCL_TRACE=off)";
  }
  if (config.trace == TraceLevel::kMeta) {
    return refines == Refines::kSegments ? "DETNCCL_TRACE=meta records no segment digests"
                                         : "DETNCCL_TRACE=meta records no fingerprints";
  }
  return "segment digests are recorded only at DETNCCL_TRACE=segments";
}

// Every setting of config that has no effect, in table order.
std::vector<Ineffective> find_ineffective(const Config& config) {
  std::vector<Ineffective> found;
  for (const EnvVarInfo& info : kEnvVars) {
    const std::optional<std::string_view> reason = feature_off(info.refines, config);
    if (!reason || !differs_from_default(info.id, config)) continue;
    const EnvVar because_of = info.refines == Refines::kDeterministic ? EnvVar::kDeterministic
                              : info.refines == Refines::kCapture     ? EnvVar::kCapture
                                                                      : EnvVar::kTrace;
    found.push_back({info.id, because_of, std::string(*reason)});
  }
  return found;
}

// "NAME=value" for a message: the canonical value, escaped, and shortened (with its length) when long.
std::string setting_text(EnvVar id, const Config& config) {
  std::string out(kEnvVars[static_cast<std::size_t>(id)].name);
  out += '=';
  const std::string value = formatted_value(id, config);
  if (value.size() > kMaxQuotedBytes) {
    out.append(value, 0, kMaxQuotedBytes).append("... (").append(std::to_string(value.size())).append(" bytes)");
  } else {
    out += value;
  }
  return out;
}

void parse_into(std::span<const std::string_view> environment, Config& config, std::vector<ConfigError>& errors) {
  std::array<bool, kEnvVars.size()> seen{};
  std::array<bool, kEnvVars.size()> given{};  // set to a non-empty value (valid or not)
  for (std::string_view entry : environment) {
    const std::size_t equals = entry.find('=');
    if (equals == std::string_view::npos) continue;
    const std::string_view name = entry.substr(0, equals);
    const std::string_view value = entry.substr(equals + 1);
    if (name.size() < kPrefix.size() || !equals_ignoring_case(name.substr(0, kPrefix.size()), kPrefix)) {
      // Not ours, unless it is a near miss of one of ours: a setting under a mistyped prefix would be lost silently.
      if (auto near = near_miss_of_known_name(name)) {
        std::string message;
        append_escaped(message, name);
        message.append(" looks like a mistyped detnccl variable; did you mean ")
            .append(*near)
            .append("? (rename or unset it: detnccl stops rather than lose a setting)");
        errors.push_back({std::string(name), std::move(message)});
      }
      continue;
    }

    const std::optional<EnvVar> id = known_variable(name);
    if (!id) {
      std::string message;
      append_escaped(message, name.substr(0, kMaxQuotedBytes));
      message += " is not a detnccl variable";
      std::array<std::string_view, kEnvVars.size()> names;
      std::transform(kEnvVars.begin(), kEnvVars.end(), names.begin(), [](const EnvVarInfo& i) { return i.name; });
      if (auto near = closest_name(name, names, kPrefix.size())) {
        message += "; did you mean " + std::string(*near) + "?";
      } else {
        message.append(" (the known ones, described in docs/configuration.md: ").append(known_names()).append(")");
      }
      errors.push_back({std::string(name.substr(0, kMaxQuotedBytes)), std::move(message)});
      continue;
    }
    const auto index = static_cast<std::size_t>(*id);
    if (seen[index]) continue;  // as getenv(): the first occurrence wins
    seen[index] = true;
    if (value.empty()) continue;  // empty means unset
    given[index] = true;

    const EnvVarInfo& info = kEnvVars[index];
    Problem problem;
    if (value.size() > kMaxValueBytes) {
      problem = "longer than " + std::to_string(kMaxValueBytes) + " bytes";
    } else if (kValueWhiteSpace.find(value.front()) != std::string_view::npos ||
               kValueWhiteSpace.find(value.back()) != std::string_view::npos) {
      problem = "it starts or ends with white space";
    } else {
      problem = parse_value(*id, value, config);
    }
    if (problem) {
      errors.push_back({std::string(info.name), std::string(info.name) + "=" + quoted(value) + " is not valid (" +
                                                    *problem + "); accepted: " + std::string(info.accepted_text) +
                                                    "."});
    }
  }
  const bool trace_given = given[static_cast<std::size_t>(EnvVar::kTrace)];
  if (!trace_given) {
    config.trace = config.dir.empty() ? TraceLevel::kOff : TraceLevel::kHash;
  } else if (config.tracing() && config.dir.empty()) {
    errors.push_back({"DETNCCL_TRACE", "DETNCCL_TRACE=" + kinds::trace_level::format(config.trace) +
                                           " needs DETNCCL_DIR (the directory the logs go to); set DETNCCL_DIR, or "
                                           "set DETNCCL_TRACE=off."});
    return;  // the settings below would only repeat it
  }

  // A setting that has no effect stops the job when the feature it refines is off by default (the user most likely
  // forgot to turn it on: a run that traced nothing, or was not deterministic, costs more than a restart). When the
  // feature was turned off explicitly (DETNCCL_TRACE=off or meta, DETNCCL_DETERMINISTIC=0) the setting is a
  // deliberate leftover: the shim warns at start (ineffective_settings()).
  for (const Ineffective& ineffective : find_ineffective(config)) {
    if (given[static_cast<std::size_t>(ineffective.because_of)]) continue;
    const std::string_view name = kEnvVars[static_cast<std::size_t>(ineffective.variable)].name;
    std::string message = setting_text(ineffective.variable, config);
    message.append(" has no effect: ").append(ineffective.reason).append("; ");
    if (ineffective.because_of == EnvVar::kDeterministic) {
      message.append("set DETNCCL_DETERMINISTIC=1 (or warn), or unset ")
          .append(name)
          .append(" (DETNCCL_DETERMINISTIC=0 keeps it, unused, with a warning).");
    } else if (ineffective.because_of == EnvVar::kCapture) {
      message.append("set DETNCCL_CAPTURE=1, or unset ")
          .append(name)
          .append(" (DETNCCL_CAPTURE=0 keeps it, unused, with a warning).");
    } else if (config.tracing()) {
      message.append("set DETNCCL_TRACE=segments, or unset ").append(name).append(".");
    } else {
      message.append("set DETNCCL_DIR to trace, or unset ")
          .append(name)
          .append(" (DETNCCL_TRACE=off keeps it, unused, with a warning).");
    }
    errors.push_back({std::string(name), std::move(message)});
  }

  // A boundary names how to number steps, and DETNCCL_STEP_INFERENCE=off says not to: one of them is a mistake.
  if (config.step_boundary.enabled() && config.step_inference == StepInferenceMode::kOff) {
    errors.push_back({"DETNCCL_STEP_BOUNDARY", setting_text(EnvVar::kStepBoundary, config) +
                                                   " has no effect: DETNCCL_STEP_INFERENCE=off numbers no steps; "
                                                   "unset one of them."});
  }

  // A rank window is checked against the job's size when the launcher tells it (WORLD_SIZE, ...): a window that
  // holds no rank of the job fingerprints nothing, and `detnccl diff` would then compare metadata only.
  if (config.trace >= TraceLevel::kSteps) {
    if (const auto world = world_size_from_environment(environment)) {
      if (auto problem = rank_window_problem(config, *world)) errors.push_back({"DETNCCL_RANKS", std::move(*problem)});
    }
  }
}

}  // namespace

std::span<const EnvVarInfo> env_vars() noexcept { return kEnvVars; }

const EnvVarInfo& env_var_info(EnvVar id) noexcept { return kEnvVars[static_cast<std::size_t>(id)]; }

std::string_view traced_op_name(TracedOp op) noexcept {
  const auto index = static_cast<std::size_t>(op);
  return index < kTracedOpNames.size() ? kTracedOpNames[index] : std::string_view("?");
}

std::optional<TracedOp> traced_op_from_name(std::string_view name) noexcept {
  for (std::size_t i = 0; i < kTracedOpNames.size(); ++i) {
    if (equals_ignoring_case(name, kTracedOpNames[i])) return static_cast<TracedOp>(i);
  }
  return std::nullopt;
}

IntervalSet IntervalSet::of(std::vector<Interval> intervals) {
  std::erase_if(intervals, [](const Interval& i) { return i.first > i.last; });
  std::sort(intervals.begin(), intervals.end(), [](const Interval& a, const Interval& b) { return a.first < b.first; });
  IntervalSet set;
  set.everything_ = false;
  for (const Interval& interval : intervals) {
    // Merge overlapping and adjacent intervals; last + 1 cannot overflow unless last is the maximum, which
    // already covers everything after it.
    if (!set.intervals_.empty() && (set.intervals_.back().last == std::numeric_limits<std::uint64_t>::max() ||
                                    interval.first <= set.intervals_.back().last + 1)) {
      set.intervals_.back().last = std::max(set.intervals_.back().last, interval.last);
    } else {
      set.intervals_.push_back(interval);
    }
  }
  return set;
}

bool IntervalSet::contains(std::uint64_t value) const noexcept {
  if (everything_) return true;
  // The first interval that starts after value; the one before it is the only candidate.
  auto after = std::upper_bound(intervals_.begin(), intervals_.end(), value,
                                [](std::uint64_t v, const Interval& i) { return v < i.first; });
  return after != intervals_.begin() && value <= std::prev(after)->last;
}

OpSet OpSet::of(std::span<const TracedOp> ops) noexcept {
  OpSet set;
  set.bits_ = 0;
  for (TracedOp op : ops) set.bits_ |= std::uint32_t{1} << static_cast<unsigned>(op);
  return set;
}

std::string ParsedConfig::error_text() const {
  std::string text;
  for (const ConfigError& error : errors_) {
    if (!text.empty()) text += '\n';
    text += error.message;
  }
  return text;
}

ParsedConfig parse_config(std::span<const std::string_view> environment) noexcept {
  ParsedConfig result;
  try {
    parse_into(environment, result.config_, result.errors_);
  } catch (const std::bad_alloc&) {
    result.errors_.clear();
    result.errors_.push_back({"DETNCCL_*", "out of memory while parsing the DETNCCL_* variables"});
  }
  return result;
}

ParsedConfig config_from_environment() noexcept {
  try {
    const std::vector<std::string_view> environment = process_environment();
    return parse_config(environment);
  } catch (const std::bad_alloc&) {
    ParsedConfig result;
    result.errors_.push_back({"DETNCCL_*", "out of memory while reading the environment"});
    return result;
  }
}

std::string format_config(const Config& config) {
  std::string out;
  for (const EnvVarInfo& info : kEnvVars) {
    out += info.name;
    out += '=';
    out += formatted_value(info.id, config);
    out += '\n';
  }
  return out;
}

std::vector<ConfigError> ineffective_settings(const Config& config) {
  std::vector<ConfigError> warnings;
  for (const Ineffective& ineffective : find_ineffective(config)) {
    const std::string_view name = kEnvVars[static_cast<std::size_t>(ineffective.variable)].name;
    warnings.push_back({std::string(name),
                        setting_text(ineffective.variable, config) + " has no effect: " + ineffective.reason + "."});
  }
  return warnings;
}

std::optional<std::string> rank_window_problem(const Config& config, std::uint32_t world_size) {
  if (config.ranks.is_everything() || world_size == 0) return std::nullopt;
  if (!config.ranks.intervals().empty() && config.ranks.intervals().front().first < world_size) return std::nullopt;
  const std::string size = std::to_string(world_size);
  std::string message = setting_text(EnvVar::kRanks, config);
  message.append(" selects no rank of this job, which has ").append(size);
  if (world_size == 1) {
    message.append(" rank (0)");
  } else {
    message.append(" ranks (0 to ").append(std::to_string(world_size - 1)).append(")");
  }
  message.append(": nothing would be fingerprinted; select ranks below ")
      .append(size)
      .append(", or unset DETNCCL_RANKS.");
  return message;
}

std::string config_reference_markdown() {
  std::string out =
      "| Variable | Default | Accepted values | Description |\n"
      "| --- | --- | --- | --- |\n";
  for (const EnvVarInfo& info : kEnvVars) {
    out += "| `" + std::string(info.name) + "` | " + std::string(info.default_text) + " | " +
           std::string(info.accepted_text) + " | " + std::string(info.description) + " |\n";
  }
  return out;
}

}  // namespace detnccl::config
