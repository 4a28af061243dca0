// detnccl config (internal to config/): the kinds of value named by env_vars.h's `kind` column, and the text helpers
// the parser shares (case-insensitive comparison, quoting values in messages, "did you mean").
//
// Each kind is a struct with parse(text, field) -> Problem and format(field) -> std::string, where field is the
// kind's Config member type; config.cc's per-variable switches are generated from the table and call them. A new kind
// of value is one struct here (and its functions in value_kinds.cc); a new choice of names is one table and one
// `using` line.
#ifndef DETNCCL_CONFIG_VALUE_KINDS_H
#define DETNCCL_CONFIG_VALUE_KINDS_H

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "config/config.h"

namespace detnccl::config::parsing {

// RATIONALE: environment values come from users and launchers and may be anything; these caps keep every parse
// linear and bounded in memory whatever they hold (config.cc caps a whole value).
inline constexpr std::size_t kMaxListEntries = 1 << 16;
inline constexpr std::size_t kMaxPathBytes = 4095;
inline constexpr std::size_t kMaxQuotedBytes = 80;
// The largest global rank: ranks are 32-bit everywhere (NCCL's int, the log's rank field).
inline constexpr std::uint64_t kMaxRank = 0xffffffffu;

// What a value parser returns: nullopt on success, else the reason (a phrase, without the variable's name).
using Problem = std::optional<std::string>;

inline constexpr char ascii_upper(char c) noexcept {
  return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c;
}

inline constexpr bool equals_ignoring_case(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (ascii_upper(a[i]) != ascii_upper(b[i])) return false;
  }
  return true;
}

// A value as an error message quotes it: escaped, and shortened (with its length) when long.
std::string quoted(std::string_view value);

// Levenshtein distance, compared without regard to case, when it is at most `limit`; limit + 1 otherwise. Only the
// diagonal band of width 2 * limit + 1 is computed, past any common prefix and suffix; names whose lengths differ by
// more than limit, or with more than limit bytes the other lacks, cost nothing.
std::size_t edit_distance(std::string_view a, std::string_view b, std::size_t limit);

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
    const std::size_t limit = tail.size() >= 10 ? 3 : 2;
    std::size_t distance = edit_distance(typed, name, limit);
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

// "ncclAllReduce" + 4 is "AllReduce": DETNCCL_OPS names drop the prefix.
inline constexpr std::array<std::string_view, kTracedOpCount> kTracedOpNames = {
#define DETNCCL_TRACED_OP_NAME(ret, name, params, args, kind, need) \
  DETNCCL_IF_TRACED_KIND_##kind(std::string_view(#name).substr(4), )
    DETNCCL_NCCL_API(DETNCCL_TRACED_OP_NAME)
#undef DETNCCL_TRACED_OP_NAME
};

// Text assembled at compile time from other tables (so that an accepted-values text cannot miss a name): write(out)
// appends the pieces to `out`, first to count them, then to fill a buffer of exactly that size.
template <std::size_t N>
struct BuiltText {
  std::array<char, N> chars{};
  std::size_t size = 0;
  constexpr void append(std::string_view piece) {
    for (char c : piece) chars[size++] = c;
  }
  constexpr std::string_view view() const { return {chars.data(), size}; }
};

struct TextLength {
  std::size_t size = 0;
  constexpr void append(std::string_view piece) { size += piece.size(); }
};

template <typename Write>
constexpr auto build_text(Write) {
  constexpr std::size_t kSize = [] {
    TextLength length;
    Write{}(length);
    return length.size;
  }();
  BuiltText<kSize> text;
  Write{}(text);
  return text;
}

// DETNCCL_OPS's accepted values: every traced operation, in API-table order.
inline constexpr auto kOpListTextStorage = build_text([](auto& out) {
  out.append("all, or a comma-separated list of ");
  for (std::size_t i = 0; i < kTracedOpNames.size(); ++i) {
    if (i != 0) out.append(", ");
    out.append(kTracedOpNames[i]);
  }
  out.append(" (any case)");
});
inline constexpr std::string_view kOpListText = kOpListTextStorage.view();

// Decimal with an optional K/KiB, M/MiB or G/GiB suffix (any case), in powers of 1024.
Problem parse_byte_count(std::string_view text, std::uint64_t& out);

// "all", or a comma-separated list of N, N-M and N- (N and up) entries, every number at most `largest` (`what`
// names a number in the message: "a rank").
Problem parse_interval_set(std::string_view text, std::uint64_t largest, std::string_view what, IntervalSet& out);

// "all", or a comma-separated list of DETNCCL_OPS names (any case), with "did you mean" for a mistyped one.
Problem parse_op_set(std::string_view text, OpSet& out);

// Any bytes but NUL, at most kMaxPathBytes of them.
Problem parse_path(std::string_view text, std::string& out);

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

inline constexpr std::array<std::pair<std::string_view, TraceLevel>, 5> kTraceLevels = {
    {{"off", TraceLevel::kOff},
     {"meta", TraceLevel::kMeta},
     {"steps", TraceLevel::kSteps},
     {"hash", TraceLevel::kHash},
     {"segments", TraceLevel::kSegments}}};
inline constexpr std::array<std::pair<std::string_view, LogLevel>, 6> kLogLevels = {{{"trace", LogLevel::kTrace},
                                                                                     {"debug", LogLevel::kDebug},
                                                                                     {"info", LogLevel::kInfo},
                                                                                     {"warn", LogLevel::kWarn},
                                                                                     {"error", LogLevel::kError},
                                                                                     {"off", LogLevel::kOff}}};
inline constexpr std::array<std::pair<std::string_view, StepInferenceMode>, 3> kStepInferenceModes = {
    {{"auto", StepInferenceMode::kAuto}, {"calls", StepInferenceMode::kCalls}, {"off", StepInferenceMode::kOff}}};
inline constexpr std::array<std::pair<std::string_view, bool>, 2> kBooleans = {{{"0", false}, {"1", true}}};
inline constexpr std::array<std::pair<std::string_view, DeterministicMode>, 3> kDeterministicModes = {
    {{"0", DeterministicMode::kOff}, {"1", DeterministicMode::kOn}, {"warn", DeterministicMode::kWarn}}};
// The (name, value) pairs of one of collectives/algorithm_names.h's tables, for parse_choice.
template <typename Entry, typename Enum, std::size_t N>
constexpr std::array<std::pair<std::string_view, Enum>, N> choices_of(const Entry (&entries)[N], Enum Entry::*value) {
  std::array<std::pair<std::string_view, Enum>, N> out{};
  for (std::size_t i = 0; i < N; ++i) out[i] = {entries[i].name, entries[i].*value};
  return out;
}
inline constexpr auto kAlgorithms = choices_of(collectives::kAlgorithmNames, &collectives::AlgorithmName::algorithm);
inline constexpr auto kAccumulations =
    choices_of(collectives::kAccumulateNames, &collectives::AccumulateName::accumulate);

// The accepted values of a choice, from its table: "off, meta, hash or segments (any case)".
template <const auto& kChoices>
inline constexpr auto kChoiceTextStorage = build_text([](auto& out) {
  for (std::size_t i = 0; i < kChoices.size(); ++i) {
    if (i != 0) out.append(i + 1 == kChoices.size() ? " or " : ", ");
    out.append(kChoices[i].first);
  }
  out.append(" (any case)");
});

template <typename Enum, std::size_t N>
std::string_view choice_name(const std::array<std::pair<std::string_view, Enum>, N>& choices, Enum value) {
  for (const auto& [name, choice] : choices) {
    if (choice == value) return name;
  }
  return "?";
}

// The canonical texts of values, which parse back to the same value: "1M", "1,5,40-44,100-", "AllReduce,Send".
std::string format_byte_count(std::uint64_t bytes);
std::string format_interval_set(const IntervalSet& set);
std::string format_op_set(const OpSet& ops);

}  // namespace detnccl::config::parsing

namespace detnccl::config {

// The kinds of value (env_vars.h's `kind` column): each parses a (non-empty) value into its Config field, returning
// the problem if any, and prints the field as DETNCCL_PRINT_CONFIG does, in a form that parses back.
namespace kinds {

struct path {
  static parsing::Problem parse(std::string_view text, std::string& out) { return parsing::parse_path(text, out); }
  static std::string format(const std::string& value) {
    std::string out;
    append_escaped(out, value);
    return out;
  }
};

struct run_name {
  static parsing::Problem parse(std::string_view text, std::string& out) {
    if (!is_valid_run_name(text)) return std::string("not a valid run name");
    out.assign(text);
    return std::nullopt;
  }
  static std::string format(const std::string& value) { return path::format(value); }
};

struct byte_count {
  static parsing::Problem parse(std::string_view text, std::uint64_t& out) {
    return parsing::parse_byte_count(text, out);
  }
  static std::string format(std::uint64_t value) { return parsing::format_byte_count(value); }
};

// A byte count that is a whole number of kSegmentGranule tiles, at most 1G.
struct segment_size {
  static parsing::Problem parse(std::string_view text, std::uint64_t& out) {
    std::uint64_t bytes = 0;
    if (parsing::Problem problem = parsing::parse_byte_count(text, bytes)) return problem;
    if (bytes == 0 || bytes % kSegmentGranule != 0) return std::string("not a multiple of 16K");
    if (bytes > (std::uint64_t{1} << 30)) return std::string("larger than 1G");
    out = bytes;
    return std::nullopt;
  }
  static std::string format(std::uint64_t value) { return parsing::format_byte_count(value); }
};

struct step_list {
  static parsing::Problem parse(std::string_view text, IntervalSet& out) {
    return parsing::parse_interval_set(text, std::numeric_limits<std::uint64_t>::max(), "a step", out);
  }
  static std::string format(const IntervalSet& value) { return parsing::format_interval_set(value); }
};

struct rank_list {
  static parsing::Problem parse(std::string_view text, IntervalSet& out) {
    return parsing::parse_interval_set(text, parsing::kMaxRank, "a rank", out);
  }
  static std::string format(const IntervalSet& value) { return parsing::format_interval_set(value); }
};

struct op_list {
  static parsing::Problem parse(std::string_view text, OpSet& out) { return parsing::parse_op_set(text, out); }
  static std::string format(const OpSet& value) { return parsing::format_op_set(value); }
};

struct step_boundary {
  static parsing::Problem parse(std::string_view text, steps::StepBoundary& out) {
    return steps::parse_step_boundary(text, out);
  }
  static std::string format(const steps::StepBoundary& value) { return steps::format_step_boundary(value); }
};

// One of a fixed set of names (any case), from a table of (name, value) pairs.
template <const auto& kChoices>
struct choice {
  template <typename Value>
  static parsing::Problem parse(std::string_view text, Value& out) {
    return parsing::parse_choice(text, kChoices, out);
  }
  template <typename Value>
  static std::string format(Value value) {
    return std::string(parsing::choice_name(kChoices, value));
  }
  // The accepted values, for env_vars.h's accepted_text column: "auto, mixed_radix or one_shot (any case)".
  static constexpr std::string_view kAccepted = parsing::kChoiceTextStorage<kChoices>.view();
};

using trace_level = choice<parsing::kTraceLevels>;
using log_level = choice<parsing::kLogLevels>;
using boolean = choice<parsing::kBooleans>;
using deterministic_mode = choice<parsing::kDeterministicModes>;
using algorithm = choice<parsing::kAlgorithms>;
using accumulation = choice<parsing::kAccumulations>;
using step_inference = choice<parsing::kStepInferenceModes>;

}  // namespace kinds

}  // namespace detnccl::config

#endif  // DETNCCL_CONFIG_VALUE_KINDS_H
