// detnccl: parsing and printing the DETNCCL_* configuration (see config.h).
#include "config/config.h"

#include <algorithm>
#include <array>
#include <limits>
#include <new>
#include <utility>

namespace detnccl::config {
namespace {

// RATIONALE: environment values come from users and launchers and may be anything; these caps keep every parse
// linear and bounded in memory whatever they hold.
constexpr std::size_t kMaxValueBytes = 1 << 20;
constexpr std::size_t kMaxListEntries = 1 << 16;
constexpr std::size_t kMaxPathBytes = 4095;
constexpr std::size_t kMaxQuotedBytes = 80;
constexpr std::string_view kPrefix = "DETNCCL_";
// No value may start or end with one of these (one rule for every variable): at the ends of a value, white space is
// almost always a quoting slip ("DETNCCL_DIR= /x", "$STEPS ") that would otherwise be silently taken literally by
// some variables and dropped by others.
constexpr std::string_view kValueWhiteSpace = " \t\n\r\v\f";
// The largest global rank: ranks are 32-bit everywhere (NCCL's int, the log's rank field).
constexpr std::uint64_t kMaxRank = 0xffffffffu;

constexpr std::array<EnvVarInfo, kEnvVarCount> kEnvVars = {{
#define DETNCCL_ENV_VAR_INFO(id, name, default_text, accepted_text, description) \
  {EnvVar::id, name, default_text, accepted_text, description},
    DETNCCL_ENV_VARS(DETNCCL_ENV_VAR_INFO)
#undef DETNCCL_ENV_VAR_INFO
}};

// "ncclAllReduce" + 4 is "AllReduce": DETNCCL_OPS names drop the prefix.
constexpr std::array<std::string_view, kTracedOpCount> kTracedOpNames = {
#define DETNCCL_TRACED_OP_NAME(ret, name, params, args, kind, need) \
  DETNCCL_TRACED_KIND_##kind(std::string_view(#name).substr(4), )
    DETNCCL_NCCL_API(DETNCCL_TRACED_OP_NAME)
#undef DETNCCL_TRACED_OP_NAME
};

char ascii_upper(char c) noexcept { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c; }

bool equals_ignoring_case(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (ascii_upper(a[i]) != ascii_upper(b[i])) return false;
  }
  return true;
}

// Spaces and tabs around the entries of a list ("1-3, 7-") are allowed; see kValueWhiteSpace for the value's ends.
std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

void append_escaped(std::string& out, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f) {
      out += c;
    } else {
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 0xf];
    }
  }
}

namespace {

// A value as an error message quotes it: escaped, and shortened (with its length) when long.
std::string quoted(std::string_view value) {
  std::string out = "\"";
  append_escaped(out, value.substr(0, kMaxQuotedBytes));
  if (value.size() > kMaxQuotedBytes)
    out += "...\" (" + std::to_string(value.size()) + " bytes)";
  else
    out += '"';
  return out;
}

// Levenshtein distance, bounded: names longer than a known name by a lot are not typos of it.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      const std::size_t substitute = diagonal + (ascii_upper(a[i - 1]) == ascii_upper(b[j - 1]) ? 0 : 1);
      row[j] = std::min({above + 1, row[j - 1] + 1, substitute});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The known name closest to a mistyped one, if it is close enough to be a typo: a few edits away, or one name a
// prefix of the other (DETNCCL_SEGMENT for DETNCCL_SEGMENT_BYTES).
template <typename Names>
std::optional<std::string_view> closest_name(std::string_view typed, const Names& names, std::size_t skip) {
  if (typed.size() > 64) return std::nullopt;
  const std::string_view typed_tail = typed.substr(std::min(skip, typed.size()));
  std::optional<std::string_view> best;
  std::size_t best_distance = std::numeric_limits<std::size_t>::max();
  for (std::string_view name : names) {
    const std::string_view tail = name.substr(std::min(skip, name.size()));
    std::size_t distance = edit_distance(typed, name);
    const std::size_t limit = tail.size() >= 10 ? 3 : 2;
    const std::size_t shorter = std::min(tail.size(), typed_tail.size());
    if (distance > limit && shorter >= 4 &&
        equals_ignoring_case(tail.substr(0, shorter), typed_tail.substr(0, shorter))) {
      distance = limit;
    }
    if (distance <= limit && distance < best_distance) {
      best = name;
      best_distance = distance;
    }
  }
  return best;
}

// What a value parser returns: nullopt on success, else the reason (a phrase, without the variable's name).
using Problem = std::optional<std::string>;

// Why text is not a plain decimal number, in the user's terms: a sign, a fraction or hexadecimal is named as such
// rather than reported as a stray character.
std::string not_a_number(std::string_view text) {
  if (text.empty()) return "no digits";
  if (text.front() == '-') return "negative numbers are not accepted";
  if (text.front() == '+') return "signs are not accepted";
  if (text.size() > 1 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    return "hexadecimal numbers are not accepted";
  }
  const std::size_t dot = text.find('.');
  if (dot != std::string_view::npos && dot + 1 < text.size() && text[dot + 1] >= '0' && text[dot + 1] <= '9') {
    return "fractions are not accepted";
  }
  return "not a decimal number";
}

Problem parse_plain_number(std::string_view text, std::uint64_t& out) {
  if (text.empty()) return "no digits";
  std::uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return not_a_number(text);
    if (__builtin_mul_overflow(value, std::uint64_t{10}, &value) ||
        __builtin_add_overflow(value, static_cast<std::uint64_t>(c - '0'), &value)) {
      return "the number is too large";
    }
  }
  out = value;
  return std::nullopt;
}

// Decimal with an optional K/KiB, M/MiB or G/GiB suffix (any case), in powers of 1024.
Problem parse_byte_count(std::string_view text, std::uint64_t& out) {
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  const std::string_view suffix = text.substr(digits);
  std::uint64_t multiplier = 1;
  if (suffix.empty()) {
    multiplier = 1;
  } else if (equals_ignoring_case(suffix, "K") || equals_ignoring_case(suffix, "KiB")) {
    multiplier = std::uint64_t{1} << 10;
  } else if (equals_ignoring_case(suffix, "M") || equals_ignoring_case(suffix, "MiB")) {
    multiplier = std::uint64_t{1} << 20;
  } else if (equals_ignoring_case(suffix, "G") || equals_ignoring_case(suffix, "GiB")) {
    multiplier = std::uint64_t{1} << 30;
  } else if (const std::string reason = not_a_number(text); reason != "not a decimal number") {
    return reason;  // "-1", "+5", "0x10", "1.5K": a sign, hexadecimal or a fraction, not a suffix
  } else {
    return "unknown suffix (K, M or G expected)";
  }
  std::uint64_t number = 0;
  if (Problem problem = parse_plain_number(text.substr(0, digits), number)) return problem;
  if (__builtin_mul_overflow(number, multiplier, &out)) return "the number is too large";
  return std::nullopt;
}

// One number of a window: a plain decimal number up to `largest` (`what` names it in the message).
Problem parse_window_number(std::string_view text, std::uint64_t largest, std::string_view what, std::uint64_t& out) {
  if (Problem problem = parse_plain_number(text, out)) return problem;
  if (out > largest) return std::string(what) + " is at most " + std::to_string(largest);
  return std::nullopt;
}

// "all", or a comma-separated list of N, N-M and N- (N and up) entries, every number at most `largest`.
Problem parse_interval_set(std::string_view text, std::uint64_t largest, std::string_view what, IntervalSet& out) {
  if (equals_ignoring_case(text, "all")) {
    out = IntervalSet();
    return std::nullopt;
  }
  std::vector<Interval> intervals;
  while (true) {
    const std::size_t comma = text.find(',');
    const std::string_view entry = trim(text.substr(0, comma));
    if (intervals.size() == kMaxListEntries) return "more than " + std::to_string(kMaxListEntries) + " entries";
    if (entry.empty()) return "an entry of the list is empty";
    Interval interval;
    if (entry.front() == '-') {
      const std::string_view rest = trim(entry.substr(1));
      if (!rest.empty() && rest.front() >= '0' && rest.front() <= '9') return "negative numbers are not accepted";
      return "a range has no start (N-M, or N- for N and up)";
    }
    const std::size_t dash = entry.find('-');
    if (Problem problem = parse_window_number(trim(entry.substr(0, dash)), largest, what, interval.first)) {
      return problem;
    }
    if (dash == std::string_view::npos) {
      interval.last = interval.first;
    } else if (trim(entry.substr(dash + 1)).empty()) {
      interval.last = std::numeric_limits<std::uint64_t>::max();  // N-: N and everything after
    } else {
      if (Problem problem = parse_window_number(trim(entry.substr(dash + 1)), largest, what, interval.last)) {
        return problem;
      }
      if (interval.last < interval.first) return "a range ends before it starts";
    }
    intervals.push_back(interval);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  out = IntervalSet::of(std::move(intervals));
  return std::nullopt;
}

Problem parse_op_set(std::string_view text, OpSet& out) {
  if (equals_ignoring_case(text, "all")) {
    out = OpSet();
    return std::nullopt;
  }
  std::vector<TracedOp> ops;
  while (true) {
    const std::size_t comma = text.find(',');
    const std::string_view entry = trim(text.substr(0, comma));
    if (ops.size() == kMaxListEntries) return "more than " + std::to_string(kMaxListEntries) + " entries";
    if (entry.empty()) return "an entry of the list is empty";
    const std::optional<TracedOp> op = traced_op_from_name(entry);
    if (!op) {
      std::string problem = quoted(entry) + " is not an operation";
      if (auto near = closest_name(entry, kTracedOpNames, 0)) problem += " (did you mean " + std::string(*near) + "?)";
      return problem;
    }
    ops.push_back(*op);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  out = OpSet::of(ops);
  return std::nullopt;
}

template <typename Enum, std::size_t N>
Problem parse_choice(std::string_view text, const std::array<std::pair<std::string_view, Enum>, N>& choices,
                     Enum& out) {
  for (const auto& [name, value] : choices) {
    if (equals_ignoring_case(text, name)) {
      out = value;
      return std::nullopt;
    }
  }
  return std::string("not one of the accepted values");
}

Problem parse_path(std::string_view text, std::string& out) {
  if (text.size() > kMaxPathBytes) return "longer than " + std::to_string(kMaxPathBytes) + " bytes";
  if (text.find('\0') != std::string_view::npos) return "it holds a NUL byte";
  out.assign(text);
  return std::nullopt;
}

constexpr std::array<std::pair<std::string_view, TraceLevel>, 4> kTraceLevels = {{{"off", TraceLevel::kOff},
                                                                                  {"meta", TraceLevel::kMeta},
                                                                                  {"hash", TraceLevel::kHash},
                                                                                  {"segments", TraceLevel::kSegments}}};
constexpr std::array<std::pair<std::string_view, LogLevel>, 6> kLogLevels = {{{"trace", LogLevel::kTrace},
                                                                              {"debug", LogLevel::kDebug},
                                                                              {"info", LogLevel::kInfo},
                                                                              {"warn", LogLevel::kWarn},
                                                                              {"error", LogLevel::kError},
                                                                              {"off", LogLevel::kOff}}};
constexpr std::array<std::pair<std::string_view, bool>, 2> kBooleans = {{{"0", false}, {"1", true}}};
constexpr std::array<std::pair<std::string_view, DeterministicMode>, 3> kDeterministicModes = {
    {{"0", DeterministicMode::kOff}, {"1", DeterministicMode::kOn}, {"warn", DeterministicMode::kWarn}}};
constexpr std::array<std::pair<std::string_view, DeterministicAlgo>, 3> kAlgorithms = {
    {{"auto", DeterministicAlgo::kAuto},
     {"mixed_radix", DeterministicAlgo::kMixedRadix},
     {"one_shot", DeterministicAlgo::kOneShot}}};
constexpr std::array<std::pair<std::string_view, Accumulate>, 2> kAccumulations = {
    {{"native", Accumulate::kNative}, {"fp32", Accumulate::kFloat32}}};

template <typename Enum, std::size_t N>
std::string_view choice_name(const std::array<std::pair<std::string_view, Enum>, N>& choices, Enum value) {
  for (const auto& [name, choice] : choices) {
    if (choice == value) return name;
  }
  return "?";
}

// Parses one known variable's (non-empty) value into config. Returns the problem, if any.
Problem parse_value(EnvVar id, std::string_view value, Config& config) {
  switch (id) {
    case EnvVar::kDir:
      return parse_path(value, config.dir);
    case EnvVar::kRun:
      if (!is_valid_run_name(value)) return std::string("not a valid run name");
      config.run.assign(value);
      return std::nullopt;
    case EnvVar::kTrace:
      return parse_choice(value, kTraceLevels, config.trace);
    case EnvVar::kSegmentBytes: {
      std::uint64_t bytes = 0;
      if (Problem problem = parse_byte_count(value, bytes)) return problem;
      if (bytes == 0 || bytes % kSegmentGranule != 0) return std::string("not a multiple of 16K");
      if (bytes > (std::uint64_t{1} << 30)) return std::string("larger than 1G");
      config.segment_bytes = bytes;
      return std::nullopt;
    }
    case EnvVar::kSteps:
      return parse_interval_set(value, std::numeric_limits<std::uint64_t>::max(), "a step", config.steps);
    case EnvVar::kRanks:
      return parse_interval_set(value, kMaxRank, "a rank", config.ranks);
    case EnvVar::kOps:
      return parse_op_set(value, config.ops);
    case EnvVar::kMinBytes:
      return parse_byte_count(value, config.min_bytes);
    case EnvVar::kLogLevel:
      return parse_choice(value, kLogLevels, config.log_level);
    case EnvVar::kLogFile:
      return parse_path(value, config.log_file);
    case EnvVar::kPrintConfig:
      return parse_choice(value, kBooleans, config.print_config);
    case EnvVar::kDeterministic:
      return parse_choice(value, kDeterministicModes, config.deterministic);
    case EnvVar::kAlgo:
      return parse_choice(value, kAlgorithms, config.algo);
    case EnvVar::kAccumulate:
      return parse_choice(value, kAccumulations, config.accumulate);
  }
  return std::string("unhandled variable");
}

std::string format_byte_count(std::uint64_t bytes) {
  if (bytes != 0 && bytes % (std::uint64_t{1} << 30) == 0) return std::to_string(bytes >> 30) + "G";
  if (bytes != 0 && bytes % (std::uint64_t{1} << 20) == 0) return std::to_string(bytes >> 20) + "M";
  if (bytes != 0 && bytes % (std::uint64_t{1} << 10) == 0) return std::to_string(bytes >> 10) + "K";
  return std::to_string(bytes);
}

std::string format_interval_set(const IntervalSet& set) {
  if (set.is_everything()) return "all";
  std::string out;
  for (const Interval& interval : set.intervals()) {
    if (!out.empty()) out += ',';
    out += std::to_string(interval.first);
    if (interval.last == std::numeric_limits<std::uint64_t>::max()) {
      out += '-';
    } else if (interval.last != interval.first) {
      out += '-' + std::to_string(interval.last);
    }
  }
  return out;
}

std::string format_op_set(const OpSet& ops) {
  if (ops.is_everything()) return "all";
  std::string out;
  for (std::size_t i = 0; i < kTracedOpCount; ++i) {
    if (!ops.contains(static_cast<TracedOp>(i))) continue;
    if (!out.empty()) out += ',';
    out += kTracedOpNames[i];
  }
  return out;
}

std::string formatted_value(EnvVar id, const Config& config) {
  std::string out;
  switch (id) {
    case EnvVar::kDir:
      append_escaped(out, config.dir);
      return out;
    case EnvVar::kRun:
      append_escaped(out, config.run);
      return out;
    case EnvVar::kTrace:
      return std::string(choice_name(kTraceLevels, config.trace));
    case EnvVar::kSegmentBytes:
      return format_byte_count(config.segment_bytes);
    case EnvVar::kSteps:
      return format_interval_set(config.steps);
    case EnvVar::kRanks:
      return format_interval_set(config.ranks);
    case EnvVar::kOps:
      return format_op_set(config.ops);
    case EnvVar::kMinBytes:
      return format_byte_count(config.min_bytes);
    case EnvVar::kLogLevel:
      return std::string(choice_name(kLogLevels, config.log_level));
    case EnvVar::kLogFile:
      append_escaped(out, config.log_file);
      return out;
    case EnvVar::kPrintConfig:
      return config.print_config ? "1" : "0";
    case EnvVar::kDeterministic:
      return std::string(choice_name(kDeterministicModes, config.deterministic));
    case EnvVar::kAlgo:
      return std::string(choice_name(kAlgorithms, config.algo));
    case EnvVar::kAccumulate:
      return std::string(choice_name(kAccumulations, config.accumulate));
  }
  return "?";
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
    std::size_t distance = edit_distance(name, info.name);
    const std::string_view suffix = info.name.substr(kPrefix.size());
    if (name.size() > suffix.size() && equals_ignoring_case(name.substr(name.size() - suffix.size()), suffix)) {
      distance = std::min(distance, edit_distance(name.substr(0, name.size() - suffix.size()), kPrefix));
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
  EnvVar because_of;  // DETNCCL_TRACE (tracing level) or DETNCCL_DETERMINISTIC
  std::string reason;
};

std::vector<Ineffective> find_ineffective(const Config& config) {
  const Config defaults;
  std::vector<Ineffective> found;
  const auto is_set = [&](EnvVar id) {
    switch (id) {
      case EnvVar::kRun:
        return !config.run.empty();
      case EnvVar::kSegmentBytes:
        return config.segment_bytes != defaults.segment_bytes;
      case EnvVar::kSteps:
        return !config.steps.is_everything();
      case EnvVar::kRanks:
        return !config.ranks.is_everything();
      case EnvVar::kOps:
        return !config.ops.is_everything();
      case EnvVar::kMinBytes:
        return config.min_bytes != defaults.min_bytes;
      case EnvVar::kAlgo:
        return config.algo != defaults.algo;
      case EnvVar::kAccumulate:
        return config.accumulate != defaults.accumulate;
      default:
        return false;
    }
  };
  const auto add = [&](EnvVar id, EnvVar because_of, std::string_view reason) {
    if (is_set(id)) found.push_back({id, because_of, std::string(reason)});
  };
  constexpr EnvVar kWindows[] = {EnvVar::kSteps, EnvVar::kRanks, EnvVar::kOps, EnvVar::kMinBytes};
  if (config.trace == TraceLevel::kOff) {
    const std::string_view reason =
        config.dir.empty() ? "tracing is off (DETNCCL_DIR is not set)" : "tracing is off (DETNCCL_TRACE=off)";
    add(EnvVar::kRun, EnvVar::kTrace, reason);
    add(EnvVar::kSegmentBytes, EnvVar::kTrace, reason);
    for (EnvVar window : kWindows) add(window, EnvVar::kTrace, reason);
  } else if (config.trace == TraceLevel::kMeta) {
    add(EnvVar::kSegmentBytes, EnvVar::kTrace, "DETNCCL_TRACE=meta records no segment digests");
    for (EnvVar window : kWindows) add(window, EnvVar::kTrace, "DETNCCL_TRACE=meta records no fingerprints");
  } else if (config.trace == TraceLevel::kHash) {
    add(EnvVar::kSegmentBytes, EnvVar::kTrace, "segment digests are recorded only at DETNCCL_TRACE=segments");
  }
  if (!config.deterministic_mode()) {
    const std::string_view reason = "deterministic mode is off";
    add(EnvVar::kAlgo, EnvVar::kDeterministic, reason);
    add(EnvVar::kAccumulate, EnvVar::kDeterministic, reason);
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
    errors.push_back({"DETNCCL_TRACE", "DETNCCL_TRACE=" + std::string(choice_name(kTraceLevels, config.trace)) +
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
    } else if (config.tracing()) {
      message.append("set DETNCCL_TRACE=segments, or unset ").append(name).append(".");
    } else {
      message.append("set DETNCCL_DIR to trace, or unset ")
          .append(name)
          .append(" (DETNCCL_TRACE=off keeps it, unused, with a warning).");
    }
    errors.push_back({std::string(name), std::move(message)});
  }

  // A rank window is checked against the job's size when the launcher tells it (WORLD_SIZE, ...): a window that
  // holds no rank of the job fingerprints nothing, and `detnccl diff` would then compare metadata only.
  if (config.trace >= TraceLevel::kHash) {
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
