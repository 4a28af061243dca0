// detnccl analysis: partial results of a split diff or check, written, read and merged (see partial_diff.h).
#include "cli/analysis/partial_diff.h"

#include <algorithm>
#include <concepts>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace detnccl::analysis {
namespace {

using nlohmann::json;

// ---------------------------------------------------------------------------------------------------------------
// The members of each struct, listed once for the writer and the reader. RATIONALE: one list per struct, so that
// what is written is what is read; a member missing here is lost by a merge (the tests compare merged and
// one-process answers field by field).

template <class S, class T>
concept Is = std::same_as<std::remove_const_t<S>, T>;

template <class V, Is<records::CallFields> S>
void members(V& v, S& f) {
  v("seq", f.seq);
  v("comm_ordinal", f.comm_ordinal);
  v("comm_seq", f.comm_seq);
  v("count", f.count);
  v("step", f.step);
  v("group_id", f.group_id);
  v("input_fingerprint", f.input_fingerprint);
  v("output_fingerprint", f.output_fingerprint);
  v("premulsum_scalar", f.premulsum_scalar);
  v("op", f.op);
  v("datatype", f.datatype);
  v("redop", f.redop);
  v("peer", f.peer);
  v("result", f.result);
  v("flags", f.flags);
  v("algorithm", f.algorithm);
  v("input_block_count", f.input_block_count);
  v("output_block_count", f.output_block_count);
  v("input_segment_count", f.input_segment_count);
  v("output_segment_count", f.output_segment_count);
  v("reserved", f.reserved);
  v("step_source", f.step_source);
  v("reserved_2", f.reserved_2);
  v("input_blocks_digest", f.input_blocks_digest);
  v("output_blocks_digest", f.output_blocks_digest);
}
// RATIONALE: a member appended to CallFields changes its size; this fails until it is listed above.
static_assert(sizeof(records::CallFields) == 136, "list the new CallFields member in members() above");

template <class V, Is<records::CommunicatorRecord> S>
void members(V& v, S& c) {
  v("ordinal", c.ordinal);
  v("id", c.id);
  v("parent_ordinal", c.parent_ordinal);
  v("parent_id", c.parent_id);
  v("nranks", c.nranks);
  v("rank", c.rank);
  v("device", c.device);
  v("split_color", c.split_color);
  v("split_key", c.split_key);
  v("origin", c.origin);
  v("reserved", c.reserved);
}
static_assert(sizeof(records::CommunicatorRecord) == 56, "list the new CommunicatorRecord member in members() above");

template <class V, Is<records::StepDigestRecord> S>
void members(V& v, S& d) {
  v("comm_ordinal", d.comm_ordinal);
  v("step", d.step);
  v("calls", d.calls);
  v("input_digest", d.input_digest);
  v("output_digest", d.output_digest);
}
static_assert(sizeof(records::StepDigestRecord) == 40, "list the new StepDigestRecord member in members() above");

template <class V, Is<CommunicatorInfo> S>
void members(V& v, S& c) {
  v("id", c.id);
  v("nranks", c.nranks);
  v("rank", c.rank);
  v("known", c.known);
}

template <class V, Is<CallSide> S>
void members(V& v, S& s) {
  v("present", s.present);
  v("fields", s.fields);
  v("communicator", s.communicator);
  v("collective_index", s.collective_index);
  v("pair_index", s.pair_index);
}

template <class V, Is<SourceCall> S>
void members(V& v, S& s) {
  v("rank", s.rank);
  v("op", s.op);
  v("step", s.step);
  v("seq", s.seq);
  v("comm_seq", s.comm_seq);
}

template <class V, Is<DifferingRange> S>
void members(V& v, S& r) {
  v("first_byte", r.first_byte);
  v("end_byte", r.end_byte);
  v("first_element", r.first_element);
  v("end_element", r.end_element);
}

template <class V, Is<CallDivergence> S>
void members(V& v, S& d) {
  v("kind", d.kind);
  v("role", d.role);
  v("rank", d.rank);
  v("a", d.a);
  v("b", d.b);
  v("metadata_differences", d.metadata_differences);
  v("input_differs", d.input_differs);
  v("output_differs", d.output_differs);
  v("input_ranges", d.input_ranges);
  v("output_ranges", d.output_ranges);
  v("input_blocks", d.input_blocks);
  v("output_blocks", d.output_blocks);
  v("cause", d.cause);
  v("source", d.source);
}

template <class V, Is<DivergentCallBrief> S>
void members(V& v, S& b) {
  v("rank", b.rank);
  v("comm_id", b.comm_id);
  v("comm_rank", b.comm_rank);
  v("collective_index", b.collective_index);
  v("pair_index", b.pair_index);
  v("op", b.op);
  v("peer", b.peer);
  v("step", b.step);
  v("seq", b.seq);
  v("comm_seq", b.comm_seq);
  v("input_differs", b.input_differs);
  v("output_differs", b.output_differs);
}

template <class V, Is<StepDivergence> S>
void members(V& v, S& s) {
  v("rank", s.rank);
  v("step", s.step);
  v("comm_ordinal", s.comm_ordinal);
  v("comm_id", s.comm_id);
  v("in_a", s.in_a);
  v("in_b", s.in_b);
  v("a", s.a);
  v("b", s.b);
  v("input_differs", s.input_differs);
  v("output_differs", s.output_differs);
  v("role", s.role);
}

template <class V, Is<ConfigDifference> S>
void members(V& v, S& c) {
  v("field", c.field);
  v("a", c.a);
  v("b", c.b);
  v("first_rank", c.first_rank);
  v("rank_count", c.rank_count);
}

template <class V, Is<RankDiff> S>
void members(V& v, S& r) {
  v("rank", r.rank);
  v("in_a", r.in_a);
  v("in_b", r.in_b);
  v("calls_a", r.calls_a);
  v("calls_b", r.calls_b);
  v("matching", r.matching);
  v("differing", r.differing);
  v("unverified", r.unverified);
  v("missing_in_a", r.missing_in_a);
  v("missing_in_b", r.missing_in_b);
  v("not_compared", r.not_compared);
  v("first_step_a", r.first_step_a);
  v("last_step_a", r.last_step_a);
  v("first_step_b", r.first_step_b);
  v("last_step_b", r.last_step_b);
  v("step_sources_a", r.step_sources_a);
  v("step_sources_b", r.step_sources_b);
  v("first", r.first);
  v("digests_compared", r.digests_compared);
  v("steps_matching", r.steps_matching);
  v("first_step", r.first_step);
  v("first_digest_step_a", r.first_digest_step_a);
  v("last_digest_step_a", r.last_digest_step_a);
  v("first_digest_step_b", r.first_digest_step_b);
  v("last_digest_step_b", r.last_digest_step_b);
  v("digest_shortcut", r.digest_shortcut);
  v("calls_matched_by_digest", r.calls_matched_by_digest);
  v("calls_not_read", r.calls_not_read);
  v("read_through_step", r.read_through_step);
  v("calls_read", r.calls_read);
  v("divergent", r.divergent);
  v("divergent_capped", r.divergent_capped);
  v("communicators_a", r.communicators_a);
  v("communicators_b", r.communicators_b);
  v("world_size_a", r.world_size_a);
  v("world_size_b", r.world_size_b);
  v("end_a", r.end_a);
  v("end_b", r.end_b);
  v("end_message_a", r.end_message_a);
  v("end_message_b", r.end_message_b);
  v("unknown_records_a", r.unknown_records_a);
  v("unknown_records_b", r.unknown_records_b);
  v("unusable", r.unusable);
  v("no_header_a", r.no_header_a);
  v("no_header_b", r.no_header_b);
  v("late_start_a", r.late_start_a);
  v("late_start_b", r.late_start_b);
  v("header_differences", r.header_differences);
  v("header_error", r.header_error);
}

template <class V, Is<CheckFinding> S>
void members(V& v, S& f) {
  v("kind", f.kind);
  v("comm_id", f.comm_id);
  v("index", f.index);
  v("count", f.count);
  v("op", f.op);
  v("step", f.step);
  v("ranks", f.ranks);
  v("message", f.message);
}

template <class V, Is<CheckedRank> S>
void members(V& v, S& r) {
  v("rank", r.rank);
  v("has_header", r.has_header);
  v("no_header", r.no_header);
  v("calls", r.calls);
  v("unknown_records", r.unknown_records);
  v("step_digests", r.step_digests);
  v("end", r.end);
  v("end_message", r.end_message);
}

template <class V, Is<CheckTally> S>
void members(V& v, S& t) {
  v("collectives", t.collectives);
  v("point_to_point_pairs", t.point_to_point_pairs);
  v("content_checks", t.content_checks);
  v("content_unchecked", t.content_unchecked);
  v("folded_blocks_unchecked", t.folded_blocks_unchecked);
  v("not_checked", t.not_checked);
  v("finding_counts", t.finding_counts);
  v("findings", t.findings);
}

// Structs written as arrays of their members' values (many per rank: keys would be most of the bytes).
template <class T>
constexpr bool kCompact = std::is_same_v<T, records::CallFields> || std::is_same_v<T, records::CommunicatorRecord> ||
                          std::is_same_v<T, DivergentCallBrief> || std::is_same_v<T, records::StepDigestRecord>;

// The largest valid value of the enums whose names are looked up by switch (others: any value of their type).
constexpr std::uint64_t enum_max(DivergenceKind) { return static_cast<std::uint64_t>(DivergenceKind::kMissing); }
constexpr std::uint64_t enum_max(CheckFindingKind) {
  return static_cast<std::uint64_t>(CheckFindingKind::kCommSizeMismatch);
}
constexpr std::uint64_t enum_max(DivergenceRole) { return static_cast<std::uint64_t>(DivergenceRole::kUndetermined); }
constexpr std::uint64_t enum_max(records::LogEndKind) {
  return static_cast<std::uint64_t>(records::LogEndKind::kCorrupt);
}
template <class E>
constexpr std::uint64_t enum_max(E) {
  return std::numeric_limits<std::underlying_type_t<E>>::max();
}

// ---------------------------------------------------------------------------------------------------------------
// Writing

json encode(const std::string& value) { return value; }
template <class T>
requires std::is_arithmetic_v<T> json encode(T value) { return value; }
template <class T>
requires std::is_enum_v<T> json encode(T value) { return static_cast<std::underlying_type_t<T>>(value); }
template <class T>
json encode(const std::optional<T>& value);
template <class T>
json encode(const std::vector<T>& values);
// Finding counts: a list of [kind, count] pairs.
json encode(const std::map<CheckFindingKind, std::uint64_t>& counts) {
  json list = json::array();
  for (const auto& [kind, count] : counts) list.push_back({static_cast<std::uint8_t>(kind), count});
  return list;
}
template <class T>
requires std::is_class_v<T> json encode(const T& value);

template <class T>
json encode(const std::optional<T>& value) {
  return value ? encode(*value) : json(nullptr);
}
template <class T>
json encode(const std::vector<T>& values) {
  json list = json::array();
  for (const T& value : values) list.push_back(encode(value));
  return list;
}

struct Writer {
  json out;
  template <class T>
  void operator()(const char* key, const T& value) {
    if (out.is_array()) {
      out.push_back(encode(value));
    } else {
      out[key] = encode(value);
    }
  }
};

template <class T>
requires std::is_class_v<T> json encode(const T& value) {
  Writer writer{kCompact<T> ? json::array() : json::object()};
  members(writer, value);
  return std::move(writer.out);
}

// ---------------------------------------------------------------------------------------------------------------
// Reading

// What is wrong with a part, at which field.
struct BadPart : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw BadPart((path.empty() ? std::string("the document") : path) + ": " + what);
}

void decode(const json& j, std::string& value, const std::string& path) {
  if (!j.is_string()) bad(path, "expected a string");
  value = j.get<std::string>();
}
void decode(const json& j, bool& value, const std::string& path) {
  if (!j.is_boolean()) bad(path, "expected true or false");
  value = j.get<bool>();
}
template <class T>
requires std::is_integral_v<T>
void decode(const json& j, T& value, const std::string& path) {
  if (j.is_number_unsigned()) {
    const std::uint64_t number = j.get<std::uint64_t>();
    if (number > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) bad(path, "number out of range");
    value = static_cast<T>(number);
    return;
  }
  if (j.is_number_integer()) {
    const std::int64_t number = j.get<std::int64_t>();
    if constexpr (std::is_unsigned_v<T>) {
      bad(path, "number out of range");
    } else {
      if (number < static_cast<std::int64_t>(std::numeric_limits<T>::min()) ||
          number > static_cast<std::int64_t>(std::numeric_limits<T>::max())) {
        bad(path, "number out of range");
      }
      value = static_cast<T>(number);
    }
    return;
  }
  bad(path, "expected a whole number");
}
template <class T>
requires std::is_enum_v<T>
void decode(const json& j, T& value, const std::string& path) {
  std::underlying_type_t<T> number{};
  decode(j, number, path);
  if (static_cast<std::uint64_t>(number) > enum_max(T{})) bad(path, "unknown value " + std::to_string(number));
  value = static_cast<T>(number);
}
template <class T>
void decode(const json& j, std::optional<T>& value, const std::string& path);
template <class T>
void decode(const json& j, std::vector<T>& values, const std::string& path);
void decode(const json& j, std::map<CheckFindingKind, std::uint64_t>& counts, const std::string& path) {
  if (!j.is_array()) bad(path, "expected a list");
  counts.clear();
  for (std::size_t i = 0; i < j.size(); ++i) {
    const std::string at = path + "[" + std::to_string(i) + "]";
    if (!j[i].is_array() || j[i].size() != 2) bad(at, "expected a list of 2 values");
    CheckFindingKind kind{};
    std::uint64_t count = 0;
    decode(j[i][0], kind, at + "[0]");
    decode(j[i][1], count, at + "[1]");
    if (count == 0) bad(at + "[1]", "a count of 0");
    if (!counts.emplace(kind, count).second) bad(at + "[0]", "a kind listed twice");
  }
}
template <class T>
requires std::is_class_v<T>
void decode(const json& j, T& value, const std::string& path);

template <class T>
void decode(const json& j, std::optional<T>& value, const std::string& path) {
  if (j.is_null()) {
    value.reset();
    return;
  }
  decode(j, value.emplace(), path);
}
template <class T>
void decode(const json& j, std::vector<T>& values, const std::string& path) {
  if (!j.is_array()) bad(path, "expected a list");
  values.clear();
  values.reserve(j.size());
  for (std::size_t i = 0; i < j.size(); ++i) decode(j[i], values.emplace_back(), path + "[" + std::to_string(i) + "]");
}

// Counts a struct's members (the length of its compact form).
struct Counter {
  std::size_t count = 0;
  template <class T>
  void operator()(const char*, const T&) {
    ++count;
  }
};

struct Reader {
  const json& in;
  std::string path;
  std::size_t next = 0;  // compact form: the next element
  template <class T>
  void operator()(const char* key, T& value) {
    if (in.is_array()) {
      decode(in[next], value, path + "[" + std::to_string(next) + "]");
      ++next;
      return;
    }
    const auto found = in.find(key);
    if (found == in.end()) bad(path, std::string("missing \"") + key + "\"");
    decode(*found, value, path.empty() ? std::string(key) : path + "." + key);
  }
};

template <class T>
requires std::is_class_v<T>
void decode(const json& j, T& value, const std::string& path) {
  if constexpr (kCompact<T>) {
    Counter counter;
    members(counter, value);
    if (!j.is_array() || j.size() != counter.count) {
      bad(path, "expected a list of " + std::to_string(counter.count) + " values");
    }
  } else if (!j.is_object()) {
    bad(path, "expected an object");
  }
  Reader reader{j, path};
  members(reader, value);
}

// The checks a rank's comparison must pass to be merged: what the run-level half relies on.
void check_rank(const RankDiff& rank, const std::string& path) {
  if (rank.first && rank.first->rank != rank.rank) bad(path + ".first.rank", "not the rank's own");
  if (rank.first_step && rank.first_step->rank != rank.rank) bad(path + ".first_step.rank", "not the rank's own");
  for (std::size_t i = 0; i < rank.divergent.size(); ++i) {
    if (rank.divergent[i].rank != rank.rank) {
      bad(path + ".divergent[" + std::to_string(i) + "]", "a call of another rank");
    }
  }
}

// "0-303", "7".
std::string range_text(const RankRange& range) {
  return range.first == range.last ? std::to_string(range.first)
                                   : std::to_string(range.first) + "-" + std::to_string(range.last);
}

// Ranks as consecutive ranges: "304-607, 912"; beyond 16 ranges, " and N more ranks".
std::string ranges_text(const std::vector<std::uint32_t>& ranks) {
  std::string text;
  std::size_t ranges = 0;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (ranges == 16) return text + " and " + std::to_string(ranks.size() - i) + " more ranks";
    text += (ranges++ == 0 ? "" : ", ") + range_text({ranks[i], ranks[j]});
    i = j + 1;
  }
  return text;
}

// Checks the ranks a part holds: `run_ranks` sorted and distinct, `held` (by rank()) the run's ranks in the range, in
// order. Throws BadPart.
template <class Rank>
void check_held_ranks(const std::vector<std::uint32_t>& run_ranks, const RankRange& range,
                      const std::vector<Rank>& held, std::uint32_t (*rank_of)(const Rank&)) {
  if (std::adjacent_find(run_ranks.begin(), run_ranks.end(), std::greater_equal<>()) != run_ranks.end()) {
    bad("run_ranks", "not sorted and distinct");
  }
  std::vector<std::uint32_t> expected;
  for (const std::uint32_t rank : run_ranks) {
    if (range.contains(rank)) expected.push_back(rank);
  }
  if (held.size() != expected.size()) {
    bad("results", "holds " + std::to_string(held.size()) + " ranks, the range " + range_text(range) +
                       " of the run's ranks has " + std::to_string(expected.size()));
  }
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (rank_of(held[i]) != expected[i]) {
      bad("results[" + std::to_string(i) + "].rank", "expected rank " + std::to_string(expected[i]));
    }
  }
}

// The order of the parts by their first rank (`order`), or why they cannot be merged: ranges that overlap.
std::string order_ranges(const std::vector<RankRange>& ranges, const std::vector<std::string>& names,
                         std::vector<std::size_t>& order) {
  order.resize(ranges.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t x, std::size_t y) { return ranges[x].first < ranges[y].first; });
  for (std::size_t k = 1; k < order.size(); ++k) {
    const RankRange& previous = ranges[order[k - 1]];
    const RankRange& next = ranges[order[k]];
    if (next.first <= previous.last) {
      return "the rank ranges of " + names[order[k - 1]] + " (" + range_text(previous) + ") and " + names[order[k]] +
             " (" + range_text(next) + ") overlap";
    }
  }
  return {};
}

// Why the ranges do not cover the run's ranks (`what`: "runs", "run"), or empty.
std::string uncovered_ranks(const std::vector<std::uint32_t>& run_ranks, const std::vector<RankRange>& ranges,
                            const char* what) {
  std::vector<std::uint32_t> missing;
  for (const std::uint32_t rank : run_ranks) {
    if (std::none_of(ranges.begin(), ranges.end(), [&](const RankRange& range) { return range.contains(rank); })) {
      missing.push_back(rank);
    }
  }
  if (missing.empty()) return {};
  return "no part holds rank" + std::string(missing.size() > 1 ? "s " : " ") + ranges_text(missing) + " of the " +
         what + " (" + (std::string(what) == "runs" ? "they have " : "it has ") + std::to_string(run_ranks.size()) +
         " ranks); merge the parts of every range";
}

}  // namespace

std::string write_partial_diff(const PartialDiff& part) {
  json out = {{"partial_version", kPartialDiffVersion},
              {"command", "diff"},
              {"run_a", part.run_a},
              {"run_b", part.run_b},
              {"options",
               {{"from_step", encode(part.from_step)},
                {"to_step", encode(part.to_step)},
                {"infer_steps", part.infer_steps},
                {"step_boundary", encode(part.step_boundary)},
                {"all_records", !part.use_step_index},
                {"divergent_calls_kept", part.divergent_calls_kept}}},
              {"ranks", {{"first", part.range.first}, {"last", part.range.last}}},
              {"error", part.result.error},
              {"run_ranks", part.result.run_ranks},
              {"results", encode(part.result.ranks)}};
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string read_partial_diff(std::string_view text, PartialDiff& part) {
  const json document = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) return "not a partial result: not a JSON document";
  if (!document.is_object() || !document.contains("partial_version")) {
    return "not a partial result of detnccl diff (no \"partial_version\")";
  }
  try {
    std::uint32_t version = 0;
    decode(document["partial_version"], version, "partial_version");
    if (version != kPartialDiffVersion) {
      return "partial result format version " + std::to_string(version) + ", this detnccl reads version " +
             std::to_string(kPartialDiffVersion) + " (written by another detnccl?)";
    }
    std::string command;
    Reader reader{document, ""};
    reader("command", command);
    if (command != "diff") return "a partial result of `detnccl " + command.substr(0, 40) + "`, not of diff";
    PartialDiff read;
    reader("run_a", read.run_a);
    reader("run_b", read.run_b);
    const json* options = document.contains("options") ? &document["options"] : nullptr;
    if (options == nullptr || !options->is_object()) bad("options", "expected an object");
    Reader option{*options, "options"};
    option("from_step", read.from_step);
    option("to_step", read.to_step);
    option("infer_steps", read.infer_steps);
    option("step_boundary", read.step_boundary);
    bool all_records = false;
    option("all_records", all_records);
    read.use_step_index = !all_records;
    option("divergent_calls_kept", read.divergent_calls_kept);
    const json* range = document.contains("ranks") ? &document["ranks"] : nullptr;
    if (range == nullptr || !range->is_object()) bad("ranks", "expected an object");
    Reader ranks{*range, "ranks"};
    ranks("first", read.range.first);
    ranks("last", read.range.last);
    if (read.range.first > read.range.last) bad("ranks", "the first rank is after the last");
    reader("error", read.result.error);
    reader("run_ranks", read.result.run_ranks);
    reader("results", read.result.ranks);
    // What the merge relies on: sorted, distinct ranks; each result one of the run's ranks in the part's range.
    check_held_ranks<RankDiff>(read.result.run_ranks, read.range, read.result.ranks,
                               [](const RankDiff& rank) { return rank.rank; });
    for (std::size_t i = 0; i < read.result.ranks.size(); ++i) {
      check_rank(read.result.ranks[i], "results[" + std::to_string(i) + "]");
    }
    if (!read.result.error.empty() && !read.result.ranks.empty()) bad("error", "set, yet ranks were compared");
    part = std::move(read);
  } catch (const BadPart& e) {
    return std::string("not a valid partial result: ") + e.what();
  } catch (const json::exception& e) {
    return std::string("not a valid partial result: ") + e.what();
  }
  return {};
}

MergedDiff merge_partial_diffs(std::vector<PartialDiff> parts, const std::vector<std::string>& names) {
  MergedDiff merged;
  if (parts.empty() || names.size() != parts.size()) {
    merged.refused = "no partial results to merge";
    return merged;
  }
  // One comparison: the same runs and options in every part.
  const PartialDiff& first = parts.front();
  const auto same_comparison = [&](const PartialDiff& part) -> std::string {
    if (part.run_a != first.run_a) return "RUN_A " + part.run_a + " vs " + first.run_a;
    if (part.run_b != first.run_b) return "RUN_B " + part.run_b + " vs " + first.run_b;
    if (part.from_step != first.from_step || part.to_step != first.to_step) return "another step range";
    if (part.infer_steps != first.infer_steps || part.step_boundary != first.step_boundary) {
      return "another step numbering (--infer-steps, --step-boundary)";
    }
    if (part.use_step_index != first.use_step_index) return "--all-records in one only";
    if (part.divergent_calls_kept != first.divergent_calls_kept) return "another number of divergent calls kept";
    if (part.result.error.empty() && first.result.error.empty() && part.result.run_ranks != first.result.run_ranks) {
      return "the run directories listed other ranks (did they change between the parts?)";
    }
    return {};
  };
  for (std::size_t i = 1; i < parts.size(); ++i) {
    if (const std::string why = same_comparison(parts[i]); !why.empty()) {
      merged.refused = names[i] + " and " + names[0] + " are parts of different comparisons: " + why;
      return merged;
    }
  }
  // Ranges that do not overlap, in rank order.
  std::vector<RankRange> ranges;
  for (const PartialDiff& part : parts) ranges.push_back(part.range);
  std::vector<std::size_t> order;
  if (std::string overlap = order_ranges(ranges, names, order); !overlap.empty()) {
    merged.refused = std::move(overlap);
    return merged;
  }
  merged.identity = first;
  merged.identity.result = {};
  merged.identity.range = {};
  // A part that could not compare the runs at all: the one-process answer is that error (the first part's, in rank
  // order, as every part lists the same runs).
  for (const std::size_t i : order) {
    if (!parts[i].result.error.empty()) {
      merged.diff.error = parts[i].result.error;
      return merged;
    }
  }
  // Every rank of the runs in some part.
  if (std::string missing = uncovered_ranks(first.result.run_ranks, ranges, "runs"); !missing.empty()) {
    merged.refused = std::move(missing);
    return merged;
  }
  std::vector<RankDiff> ranks;
  ranks.reserve(first.result.run_ranks.size());
  for (const std::size_t i : order) {
    for (RankDiff& rank : parts[i].result.ranks) ranks.push_back(std::move(rank));
  }
  DiffOptions options;
  options.from_step = first.from_step;
  options.to_step = first.to_step;
  options.divergent_calls_kept = first.divergent_calls_kept;
  options.use_step_index = first.use_step_index;
  options.step_numbering.infer = first.infer_steps;
  merged.diff = combine_rank_diffs(std::move(ranks), first.run_a, first.run_b, options);
  return merged;
}

std::string write_partial_check(const PartialCheck& part) {
  json out = {{"partial_version", kPartialCheckVersion},
              {"command", "check"},
              {"run", part.run},
              {"options",
               {{"infer_steps", part.infer_steps},
                {"step_boundary", encode(part.step_boundary)},
                {"findings_kept", part.findings_kept}}},
              {"ranks", {{"first", part.range.first}, {"last", part.range.last}}},
              {"error", part.result.error},
              {"run_ranks", part.result.run_ranks},
              {"configuration", part.result.configuration},
              {"config_notes", part.result.config_notes},
              {"tally", encode(part.result.tally)},
              {"results", encode(part.result.ranks)}};
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string read_partial_check(std::string_view text, PartialCheck& part) {
  const json document = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) return "not a partial result: not a JSON document";
  if (!document.is_object() || !document.contains("partial_version")) {
    return "not a partial result of detnccl check (no \"partial_version\")";
  }
  try {
    std::string command;
    Reader reader{document, ""};
    reader("command", command);
    if (command != "check") return "a partial result of `detnccl " + command.substr(0, 40) + "`, not of check";
    std::uint32_t version = 0;
    decode(document["partial_version"], version, "partial_version");
    if (version != kPartialCheckVersion) {
      return "check partial result format version " + std::to_string(version) + ", this detnccl reads version " +
             std::to_string(kPartialCheckVersion) + " (written by another detnccl?)";
    }
    PartialCheck read;
    reader("run", read.run);
    const json* options = document.contains("options") ? &document["options"] : nullptr;
    if (options == nullptr || !options->is_object()) bad("options", "expected an object");
    Reader option{*options, "options"};
    option("infer_steps", read.infer_steps);
    option("step_boundary", read.step_boundary);
    option("findings_kept", read.findings_kept);
    const json* range = document.contains("ranks") ? &document["ranks"] : nullptr;
    if (range == nullptr || !range->is_object()) bad("ranks", "expected an object");
    Reader ranks{*range, "ranks"};
    ranks("first", read.range.first);
    ranks("last", read.range.last);
    if (read.range.first > read.range.last) bad("ranks", "the first rank is after the last");
    reader("error", read.result.error);
    reader("run_ranks", read.result.run_ranks);
    reader("configuration", read.result.configuration);
    reader("config_notes", read.result.config_notes);
    reader("tally", read.result.tally);
    reader("results", read.result.ranks);
    // What the merge relies on: the run's ranks in the range, in order; no more findings than kept or counted.
    check_held_ranks<CheckedRank>(read.result.run_ranks, read.range, read.result.ranks,
                                  [](const CheckedRank& rank) { return rank.rank; });
    const CheckTally& tally = read.result.tally;
    if (tally.findings.size() > read.findings_kept) bad("tally.findings", "more findings than are kept");
    for (std::size_t i = 0; i < tally.findings.size(); ++i) {
      const CheckFindingKind kind = tally.findings[i].kind;
      const auto counted = tally.finding_counts.find(kind);
      if (counted == tally.finding_counts.end() ||
          counted->second < static_cast<std::uint64_t>(std::count_if(
                                tally.findings.begin(), tally.findings.end(),
                                [kind](const CheckFinding& finding) { return finding.kind == kind; }))) {
        bad("tally.findings[" + std::to_string(i) + "].kind", "more findings of this kind than counted");
      }
    }
    if (!read.result.configuration && !read.result.config_notes.empty()) {
      bad("config_notes", "set in a part that does not hold the configuration");
    }
    if (!read.result.error.empty() && !read.result.ranks.empty()) bad("error", "set, yet ranks were checked");
    part = std::move(read);
  } catch (const BadPart& e) {
    return std::string("not a valid partial result: ") + e.what();
  } catch (const json::exception& e) {
    return std::string("not a valid partial result: ") + e.what();
  }
  return {};
}

MergedCheck merge_partial_checks(std::vector<PartialCheck> parts, const std::vector<std::string>& names) {
  MergedCheck merged;
  if (parts.empty() || names.size() != parts.size()) {
    merged.refused = "no partial results to merge";
    return merged;
  }
  // One check: the same run and options in every part.
  const PartialCheck& first = parts.front();
  const auto same_check = [&](const PartialCheck& part) -> std::string {
    if (part.run != first.run) return "RUN " + part.run + " vs " + first.run;
    if (part.infer_steps != first.infer_steps || part.step_boundary != first.step_boundary) {
      return "another step numbering (--infer-steps, --step-boundary)";
    }
    if (part.findings_kept != first.findings_kept) return "another number of findings kept";
    if (part.result.error.empty() && first.result.error.empty() && part.result.run_ranks != first.result.run_ranks) {
      return "the run directory listed other ranks (did it change between the parts?)";
    }
    return {};
  };
  for (std::size_t i = 1; i < parts.size(); ++i) {
    if (const std::string why = same_check(parts[i]); !why.empty()) {
      merged.refused = names[i] + " and " + names[0] + " are parts of different checks: " + why;
      return merged;
    }
  }
  std::vector<RankRange> ranges;
  for (const PartialCheck& part : parts) ranges.push_back(part.range);
  std::vector<std::size_t> order;
  if (std::string overlap = order_ranges(ranges, names, order); !overlap.empty()) {
    merged.refused = std::move(overlap);
    return merged;
  }
  merged.identity = first;
  merged.identity.result = {};
  merged.identity.range = {};
  CheckOptions options;
  options.findings_kept = first.findings_kept;
  options.step_numbering.infer = first.infer_steps;
  // A part that could not check the run at all: every part read every log, so the first (in rank order) says why.
  for (const std::size_t i : order) {
    if (!parts[i].result.error.empty()) {
      merged.check.error = parts[i].result.error;
      return merged;
    }
  }
  if (std::string missing = uncovered_ranks(first.result.run_ranks, ranges, "run"); !missing.empty()) {
    merged.refused = std::move(missing);
    return merged;
  }
  // The configuration belongs to the part of the lowest rank with a log, and to no other.
  std::optional<std::size_t> holder;
  for (const std::size_t i : order) {
    const auto& held = parts[i].result.ranks;
    if (std::any_of(held.begin(), held.end(), [](const CheckedRank& rank) { return rank.has_header; })) {
      holder = i;
      break;
    }
  }
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].result.configuration != (holder == i)) {
      merged.refused = names[i] + (parts[i].result.configuration ? " holds" : " does not hold") +
                       " the configuration comparison, which belongs to the part of the lowest rank with a log" +
                       (holder ? " (" + names[*holder] + ")" : std::string());
      return merged;
    }
  }
  std::vector<RankRangeCheck> ordered;
  ordered.reserve(parts.size());
  for (const std::size_t i : order) ordered.push_back(std::move(parts[i].result));
  merged.check = combine_rank_checks(std::move(ordered), options);
  return merged;
}

namespace {

// Finds the top-level "command" string of a JSON document and stops there. RATIONALE: merge asks this of every part
// before reading it; a parse into a document would read the whole part twice (fuzz_merge spent as long here as in
// the reader).
class CommandFinder final : public nlohmann::json_sax<json> {
 public:
  std::string command;

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t& text) override {
    if (depth_ == 1 && at_command_) {
      command = text;
      return false;  // found: stop parsing
    }
    return value();
  }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override { return open(/*object=*/true); }
  bool end_object() override {
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override { return open(/*object=*/false); }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool key(string_t& name) override {
    at_command_ = depth_ == 1 && name == "command";
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  std::size_t depth_ = 0;
  bool at_command_ = false;  // the next value at depth 1 is the command's

  // A value other than the command's string: a "command" that is not a string says nothing, so stop.
  bool value() { return !(depth_ == 1 && at_command_); }
  bool open(bool object) {
    if (depth_ == 0 && !object) return false;  // not an object: no command
    if (!value()) return false;
    ++depth_;
    return true;
  }
};

}  // namespace

std::string partial_result_command(std::string_view text) {
  CommandFinder finder;
  json::sax_parse(text, &finder, nlohmann::json::input_format_t::json, /*strict=*/false);
  return finder.command;
}

}  // namespace detnccl::analysis
