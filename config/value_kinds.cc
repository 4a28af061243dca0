// detnccl config: parsing and printing the kinds of value (see value_kinds.h).
#include "config/value_kinds.h"

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

namespace detnccl::config {

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

namespace parsing {
namespace {

// Spaces and tabs around the entries of a list ("1-3, 7-") are allowed; config.cc refuses white space at a value's
// ends.
std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

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

// One number of a window: a plain decimal number up to `largest` (`what` names it in the message).
Problem parse_window_number(std::string_view text, std::uint64_t largest, std::string_view what, std::uint64_t& out) {
  if (Problem problem = parse_plain_number(text, out)) return problem;
  if (out > largest) return std::string(what) + " is at most " + std::to_string(largest);
  return std::nullopt;
}

}  // namespace

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

// Levenshtein distance within a band (Ukkonen): a cell more than `limit` off the diagonal is above the limit anyway.
// RATIONALE: the parser asks this of every environment name against every known name (the near-miss check), so it
// costs O(length * limit), allocates nothing for names of usual length, and stops once a row exceeds the limit.
std::size_t edit_distance(std::string_view a, std::string_view b, std::size_t limit) {
  // A common prefix or suffix changes no distance: "DETNCCL_" costs nothing when both names have it.
  while (!a.empty() && !b.empty() && ascii_upper(a.front()) == ascii_upper(b.front())) {
    a.remove_prefix(1);
    b.remove_prefix(1);
  }
  while (!a.empty() && !b.empty() && ascii_upper(a.back()) == ascii_upper(b.back())) {
    a.remove_suffix(1);
    b.remove_suffix(1);
  }
  limit = std::min(limit, std::max(a.size(), b.size()));  // no distance exceeds the longer length
  const std::size_t above_limit = limit + 1;
  const std::size_t length_difference = a.size() > b.size() ? a.size() - b.size() : b.size() - a.size();
  if (length_difference > limit) return above_limit;
  // Each byte of one name that the other lacks altogether costs an edit of its own: more of them than the limit, and
  // the table below is not needed (most names the near-miss check meets end here).
  for (const auto& [one, other] : {std::pair{a, b}, std::pair{b, a}}) {
    std::array<std::uint64_t, 4> present{};
    for (const char c : other) {
      const auto byte = static_cast<unsigned char>(ascii_upper(c));
      present[byte / 64] |= std::uint64_t{1} << (byte % 64);
    }
    std::size_t missing = 0;
    for (const char c : one) {
      const auto byte = static_cast<unsigned char>(ascii_upper(c));
      missing += (present[byte / 64] >> (byte % 64) & 1) == 0 ? 1 : 0;
    }
    if (missing > limit) return above_limit;
  }
  constexpr std::size_t kStackRow = 128;
  std::array<std::size_t, kStackRow> stack_row;
  std::vector<std::size_t> heap_row;
  std::size_t* row = stack_row.data();
  if (b.size() + 1 > kStackRow) {
    heap_row.resize(b.size() + 1);
    row = heap_row.data();
  }
  // row[j] holds the previous row's distance, capped at above_limit; cells never in a band keep above_limit.
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = std::min(j, above_limit);
  for (std::size_t i = 1; i <= a.size(); ++i) {
    const std::size_t low = i > limit ? i - limit : 1;
    const std::size_t high = std::min(b.size(), i + limit);
    std::size_t diagonal = row[low - 1];
    row[low - 1] = low == 1 ? std::min(i, above_limit) : above_limit;  // left of the band: out of reach
    std::size_t row_minimum = row[low - 1];
    for (std::size_t j = low; j <= high; ++j) {
      const std::size_t above = row[j];
      const std::size_t substitute = diagonal + (ascii_upper(a[i - 1]) == ascii_upper(b[j - 1]) ? 0 : 1);
      row[j] = std::min(std::min(above + 1, row[j - 1] + 1), std::min(substitute, above_limit));
      row_minimum = std::min(row_minimum, row[j]);
      diagonal = above;
    }
    if (row_minimum > limit) return above_limit;  // no later row gets below this row's minimum
  }
  return row[b.size()];
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

Problem parse_path(std::string_view text, std::string& out) {
  if (text.size() > kMaxPathBytes) return "longer than " + std::to_string(kMaxPathBytes) + " bytes";
  if (text.find('\0') != std::string_view::npos) return "it holds a NUL byte";
  out.assign(text);
  return std::nullopt;
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

}  // namespace parsing
}  // namespace detnccl::config
