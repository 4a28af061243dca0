// detnccl analysis: comparison of two runs (see run_diff.h).
#include "cli/analysis/run_diff.h"

#include <algorithm>
#include <exception>
#include <map>
#include <tuple>
#include <unordered_map>

#include "abi/nccl_abi.h"
#include "cli/analysis/call_matching.h"
#include "cli/analysis/parallel.h"
#include "cli/analysis/run_jobs.h"

namespace detnccl::analysis {
namespace {

using records::CallFields;
using records::LogEndKind;
using records::OpId;

// ---------------------------------------------------------------------------------------------------------------
// Headers

// "NAME=value\n" lines as a map from name to value.
std::map<std::string, std::string> parse_lines(std::string_view text) {
  std::map<std::string, std::string> values;
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(at, end - at);
    at = end + 1;
    if (line.empty()) continue;
    const std::size_t equals = line.find('=');
    values[std::string(line.substr(0, equals))] =
        equals == std::string_view::npos ? std::string() : std::string(line.substr(equals + 1));
  }
  return values;
}

void compare_lines(std::string_view a_text, std::string_view b_text, std::vector<ConfigDifference>& out) {
  const auto a = parse_lines(a_text);
  const auto b = parse_lines(b_text);
  // RATIONALE: the log directory and the run name always differ between two runs; they explain nothing.
  const auto ignored = [](const std::string& name) { return name == "DETNCCL_DIR" || name == "DETNCCL_RUN"; };
  for (const auto& [name, value] : a) {
    if (ignored(name)) continue;
    const auto other = b.find(name);
    if (other == b.end()) {
      out.push_back({name, value, "(unset)", 0, 1});
    } else if (other->second != value) {
      out.push_back({name, value, other->second, 0, 1});
    }
  }
  for (const auto& [name, value] : b) {
    if (!ignored(name) && a.find(name) == a.end()) out.push_back({name, "(unset)", value, 0, 1});
  }
}

// ---------------------------------------------------------------------------------------------------------------
// One rank's two logs

struct AlignKey {
  std::uint64_t ordinal;
  std::uint64_t relative_seq;
  friend bool operator==(const AlignKey&, const AlignKey&) = default;
};
struct AlignKeyHash {
  std::size_t operator()(const AlignKey& key) const noexcept {
    return std::hash<std::uint64_t>()(key.ordinal * 0x9E3779B97F4A7C15ull ^ key.relative_seq);
  }
};

// One run's log of the rank being compared.
struct Side {
  std::unique_ptr<RankLogStream> stream;
  bool done = true;
  std::unordered_map<std::uint64_t, std::uint64_t> base;  // ordinal -> comm_seq of its first call in range
  std::unordered_map<AlignKey, CallInRun, AlignKeyHash> pending;
  std::uint64_t calls = 0;
  std::optional<std::uint64_t> first_step;  // over every call of the log, in range or not
  std::optional<std::uint64_t> last_step;
  std::optional<std::uint64_t> segment_bytes;
  std::uint32_t fingerprint_version = 0;
  // The step the other run's log starts at, when that is after --from-step and after this run's log starts: this
  // run's calls in the range before it have no counterpart there and are not aligned (RankDiff::late_start_a/b).
  std::optional<std::uint64_t> align_from;
};

// The step of the first call in a log (nullopt: it holds none, or cannot be read).
std::optional<std::uint64_t> first_call_step(const RankLogFile& file) {
  std::string error;
  const auto stream = RankLogStream::open(file, error);
  CallInRun call;
  if (!stream || !stream->next(call)) return std::nullopt;
  return call.call.step;
}

CallSide side_of(const CallInRun& call) {
  CallSide side;
  side.present = true;
  side.fields = call.call;
  side.communicator = call.communicator;
  side.collective_index = call.collective_index;
  side.pair_index = call.pair_index;
  return side;
}

template <typename T>
void note_difference(std::vector<std::string>& out, std::string_view what, const T& a, const T& b) {
  if (a != b) out.push_back(std::string(what) + " " + a + " vs " + b);
}

// A call's result as the comparison sees it. RATIONALE: on a non-blocking communicator NCCL may return
// ncclInProgress or ncclSuccess for the same call from one run to the next (it depends on how fast the enqueue
// finished), and a record without output fingerprints keeps what the call returned: neither is a failure.
std::int32_t compared_result(std::int32_t result) { return result == ncclInProgress ? ncclSuccess : result; }

class RankComparison {
 public:
  RankComparison(RankDiff& result, const DiffOptions& options) : result_(result), options_(options) {}

  void run(const RankLogFile* a_file, const RankLogFile* b_file) {
    if (!open(a_file, a_, result_.no_header_a) || !open(b_file, b_, result_.no_header_b)) return;
    result_.in_a = a_.stream != nullptr;
    result_.in_b = b_.stream != nullptr;
    if (options_.from_step && a_.stream && b_.stream) {
      // RATIONALE: a run resumed at step S compared from an earlier step K would otherwise align its step-S calls
      // with the other run's step-K calls and report "different calls"; its log simply starts later. Only the log
      // that starts strictly later is taken for one: two logs that start at the same step are aligned as usual.
      const std::optional<std::uint64_t> start_a = first_call_step(*a_file);
      const std::optional<std::uint64_t> start_b = first_call_step(*b_file);
      if (start_a && start_b && *start_b > *options_.from_step && *start_b > *start_a) a_.align_from = start_b;
      if (start_a && start_b && *start_a > *options_.from_step && *start_a > *start_b) b_.align_from = start_a;
    }
    fingerprints_comparable_ = !a_.stream || !b_.stream || a_.fingerprint_version == b_.fingerprint_version;
    CallInRun call;
    while (!a_.done || !b_.done) {
      if (!a_.done) {
        if (read_in_range(a_, call)) {
          take(a_, b_, call, /*from_a=*/true);
        } else {
          a_.done = true;
        }
      }
      if (!b_.done) {
        if (read_in_range(b_, call)) {
          take(b_, a_, call, /*from_a=*/false);
        } else {
          b_.done = true;
        }
      }
    }
    // What is left pending was never matched: the other run has no such call.
    for (auto& [key, pending] : a_.pending) unmatched(pending, b_, /*from_a=*/true);
    for (auto& [key, pending] : b_.pending) unmatched(pending, a_, /*from_a=*/false);
    finish();
  }

 private:
  bool open(const RankLogFile* file, Side& side, std::string& no_header_note) {
    if (file == nullptr) return true;
    std::string error;
    bool no_header = false;
    side.stream = RankLogStream::open(*file, error, &no_header);
    if (!side.stream) {
      if (no_header) {
        no_header_note = std::move(error);  // no records: compared as a rank this run has no log for
        return true;
      }
      result_.unusable = error;
      return false;
    }
    side.done = false;
    side.segment_bytes = segment_bytes_from_config(side.stream->header().config_text);
    side.fingerprint_version = side.stream->header().fingerprint_version;
    return true;
  }

  bool read_in_range(Side& side, CallInRun& call) {
    while (side.stream->next(call)) {
      const std::uint64_t step = call.call.step;
      side.first_step = std::min(side.first_step.value_or(step), step);
      side.last_step = std::max(side.last_step.value_or(step), step);
      if (options_.from_step && step < *options_.from_step) continue;
      if (options_.to_step && step > *options_.to_step) continue;
      if (side.align_from && step < *side.align_from) {
        ++side.calls;  // before the other run's log starts: never aligned (take() reports it missing there)
        return true;
      }
      const auto [base, inserted] = side.base.try_emplace(call.call.comm_ordinal, call.call.comm_seq);
      (void)inserted;
      if (call.call.comm_seq < base->second) continue;  // a step marked out of order: outside the range
      ++side.calls;
      return true;
    }
    return false;
  }

  AlignKey key_of(const Side& side, const CallInRun& call) const {
    return {call.call.comm_ordinal, call.call.comm_seq - side.base.at(call.call.comm_ordinal)};
  }

  void take(Side& self, Side& other, const CallInRun& call, bool from_a) {
    if (self.align_from && call.call.step < *self.align_from) {
      (from_a ? result_.late_start_b : result_.late_start_a) = self.align_from;
      unmatched(call, other, from_a);
      return;
    }
    const AlignKey key = key_of(self, call);
    if (const auto match = other.pending.find(key); match != other.pending.end()) {
      if (from_a) {
        compare(call, match->second);
      } else {
        compare(match->second, call);
      }
      other.pending.erase(match);
    } else if (other.done) {
      unmatched(call, other, from_a);
    } else {
      self.pending.emplace(key, call);
    }
  }

  // A call of one run that the other run does not have.
  void unmatched(const CallInRun& call, const Side& other, bool from_a) {
    if (other.stream && other.stream->end().kind == LogEndKind::kTruncated) {
      ++result_.not_compared;  // tracing stopped in the other run: unknown, not missing
      return;
    }
    (from_a ? result_.missing_in_b : result_.missing_in_a) += 1;
    CallDivergence divergence;
    divergence.kind = DivergenceKind::kMissing;
    divergence.rank = result_.rank;
    (from_a ? divergence.a : divergence.b) = side_of(call);
    record(std::move(divergence), call);
  }

  void compare(const CallInRun& a, const CallInRun& b) {
    const CallFields& x = a.call;
    const CallFields& y = b.call;
    CallDivergence divergence;
    divergence.rank = result_.rank;
    auto& meta = divergence.metadata_differences;
    note_difference(meta, "op", std::string(records::op_name(x.op)), std::string(records::op_name(y.op)));
    note_difference(meta, "count", std::to_string(x.count), std::to_string(y.count));
    note_difference(meta, "datatype", std::string(records::datatype_name(x.datatype)),
                    std::string(records::datatype_name(y.datatype)));
    note_difference(meta, "reduction", std::string(records::redop_name(x.redop)),
                    std::string(records::redop_name(y.redop)));
    note_difference(meta, is_point_to_point(x.op) ? "peer" : "root", std::to_string(x.peer), std::to_string(y.peer));
    note_difference(meta, "step", std::to_string(x.step), std::to_string(y.step));
    note_difference(meta, "communicator size", std::to_string(a.communicator.nranks),
                    std::to_string(b.communicator.nranks));
    note_difference(meta, "rank in communicator", std::to_string(a.communicator.rank),
                    std::to_string(b.communicator.rank));
    if (compared_result(x.result) != compared_result(y.result)) {
      meta.push_back("result " + std::string(records::result_name(x.result)) + " vs " +
                     std::string(records::result_name(y.result)));
    }
    if ((x.flags & records::kCallPreMulSumScalar) != 0 && (y.flags & records::kCallPreMulSumScalar) != 0) {
      note_difference(meta, "PreMulSum scalar", std::to_string(x.premulsum_scalar), std::to_string(y.premulsum_scalar));
    }
    if (!meta.empty()) {
      divergence.kind = DivergenceKind::kMetadata;
      divergence.a = side_of(a);
      divergence.b = side_of(b);
      ++result_.differing;
      record(std::move(divergence), a);
      return;
    }
    const bool inputs = fingerprints_comparable_ && (x.flags & records::kCallInputFingerprint) != 0 &&
                        (y.flags & records::kCallInputFingerprint) != 0;
    const bool outputs = fingerprints_comparable_ && (x.flags & records::kCallOutputFingerprint) != 0 &&
                         (y.flags & records::kCallOutputFingerprint) != 0;
    divergence.input_differs = inputs && x.input_fingerprint != y.input_fingerprint;
    divergence.output_differs = outputs && x.output_fingerprint != y.output_fingerprint;
    if (!divergence.input_differs && !divergence.output_differs) {
      ++(inputs || outputs ? result_.matching : result_.unverified);
      return;
    }
    ++result_.differing;
    divergence.kind = divergence.input_differs ? DivergenceKind::kInput : DivergenceKind::kOutput;
    divergence.a = side_of(a);
    divergence.b = side_of(b);
    const std::uint64_t element = datatype_bytes(x.datatype);
    const std::uint64_t segment =
        a_.segment_bytes.value_or(0) == b_.segment_bytes.value_or(0) ? a_.segment_bytes.value_or(0) : 0;
    const std::uint32_t nranks = a.communicator.nranks;
    if (divergence.input_differs) {
      divergence.input_ranges =
          differing_ranges(a.call.input_segments, b.call.input_segments, segment,
                           saturating_product(input_elements(x, nranks, a.communicator.rank), element), element);
      divergence.input_blocks = differing_blocks(a.call.input_blocks, b.call.input_blocks);
    }
    if (divergence.output_differs) {
      divergence.output_ranges =
          differing_ranges(a.call.output_segments, b.call.output_segments, segment,
                           saturating_product(output_elements(x, nranks, a.communicator.rank), element), element);
      divergence.output_blocks = differing_blocks(a.call.output_blocks, b.call.output_blocks);
    }
    record(std::move(divergence), a);
  }

  void record(CallDivergence divergence, const CallInRun& call) {
    if (result_.divergent.size() < options_.divergent_calls_kept) {
      DivergentCallBrief brief;
      brief.rank = result_.rank;
      brief.comm_id = call.communicator.id;
      brief.comm_rank = call.communicator.rank;
      brief.collective_index = call.collective_index;
      brief.pair_index = call.pair_index;
      brief.op = call.call.op;
      brief.peer = call.call.peer;
      brief.step = call.call.step;
      brief.seq = call.call.seq;
      brief.comm_seq = call.call.comm_seq;
      brief.input_differs = divergence.input_differs;
      brief.output_differs = divergence.output_differs;
      result_.divergent.push_back(brief);
    } else {
      result_.divergent_capped = true;
    }
    const auto order = [](const CallDivergence& d) { return std::make_tuple(d.step(), d.seq()); };
    if (!result_.first || order(divergence) < order(*result_.first)) result_.first = std::move(divergence);
  }

  void finish() {
    result_.calls_a = a_.calls;
    result_.calls_b = b_.calls;
    result_.first_step_a = a_.first_step;
    result_.last_step_a = a_.last_step;
    result_.first_step_b = b_.first_step;
    result_.last_step_b = b_.last_step;
    std::sort(result_.divergent.begin(), result_.divergent.end(),
              [](const DivergentCallBrief& x, const DivergentCallBrief& y) {
                return std::tie(x.step, x.seq) < std::tie(y.step, y.seq);
              });
    for (auto [side, end, message, communicators, world_size, unknown] :
         {std::tuple{&a_, &result_.end_a, &result_.end_message_a, &result_.communicators_a, &result_.world_size_a,
                     &result_.unknown_records_a},
          std::tuple{&b_, &result_.end_b, &result_.end_message_b, &result_.communicators_b, &result_.world_size_b,
                     &result_.unknown_records_b}}) {
      if (!side->stream) continue;
      *end = side->stream->end().kind;
      *message = side->stream->end().message;
      *unknown = side->stream->unknown_records_skipped();
      *communicators = side->stream->communicators();
      *world_size = side->stream->header().world_size;
      if (log_end_is_unusable(side->stream->end())) {
        result_.unusable = side->stream->path() + ": " + side->stream->end().message;
      }
    }
  }

  RankDiff& result_;
  const DiffOptions& options_;
  Side a_;
  Side b_;
  bool fingerprints_comparable_ = true;
};

// ---------------------------------------------------------------------------------------------------------------
// Across ranks

SourceCall source_of(const DivergentCallBrief& brief) {
  return {brief.rank, brief.op, brief.step, brief.seq, brief.comm_seq};
}

class Classifier {
 public:
  explicit Classifier(std::vector<RankDiff>& ranks) : ranks_(ranks) {
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      const RankDiff& rank = ranks_[i];
      if (rank.divergent_capped) capped_ranks_.push_back(rank.rank);
      for (const auto& communicator : rank.communicators_a)
        global_rank_[{communicator.id, communicator.rank}] = rank.rank;
      for (const auto& communicator : rank.communicators_b) {
        global_rank_b_[{communicator.id, communicator.rank}] = rank.rank;
      }
      if (rank.first && rank.first->kind == DivergenceKind::kMissing) stopped_.push_back(&rank);
      for (const DivergentCallBrief& brief : rank.divergent) {
        if (!brief.input_differs) continue;
        if (brief.op == OpId::kSend) {
          sends_.emplace(pair_key(brief.comm_id, brief.op, brief.comm_rank, static_cast<std::uint32_t>(brief.peer),
                                  brief.pair_index),
                         &brief);
        } else if (!is_point_to_point(brief.op)) {
          collectives_[{brief.comm_id, brief.collective_index}].push_back(&brief);
        }
      }
    }
  }

  void classify(RankDiff& rank) const {
    if (!rank.first) return;
    CallDivergence& call = *rank.first;
    const CallSide& side = call.present_side();
    const std::string where = "rank " + std::to_string(rank.rank);
    switch (call.kind) {
      case DivergenceKind::kConfig:
        return;
      case DivergenceKind::kMetadata:
        if (failed_because_a_member_stopped(rank, call)) return;
        call.role = DivergenceRole::kOrigin;
        call.cause = "the two runs made different calls here on " + where + ": the control flow diverged";
        return;
      case DivergenceKind::kMissing: {
        call.role = DivergenceRole::kOrigin;
        const bool only_a = call.a.present;
        call.cause = missing_cause(rank, call, only_a, where);
        return;
      }
      case DivergenceKind::kInput:
      case DivergenceKind::kOutput:
        break;
    }
    if (call.input_differs) {
      call.kind = DivergenceKind::kInput;
      call.role = DivergenceRole::kOrigin;
      call.cause = "its input differs while every earlier call on " + where +
                   " matched: the computation on this rank before this call is where the runs part";
      if (rank.unverified > 0) {
        call.cause += " (some calls on this rank were compared without fingerprints)";
      }
      return;
    }
    // The output alone differs: did another rank feed it different data?
    if (side.fields.op == OpId::kRecv) {
      classify_receive(rank, call, side);
      return;
    }
    const auto members = collectives_.find({side.communicator.id, side.collective_index});
    std::vector<std::uint32_t> senders;
    const DivergentCallBrief* earliest = nullptr;
    if (members != collectives_.end()) {
      for (const DivergentCallBrief* member : members->second) {
        if (member->rank == rank.rank) continue;
        senders.push_back(member->rank);
        if (earliest == nullptr || member->rank < earliest->rank) earliest = member;
      }
    }
    std::sort(senders.begin(), senders.end());
    if (earliest != nullptr) {
      call.kind = DivergenceKind::kInput;
      call.role = DivergenceRole::kReceiver;
      call.source = source_of(*earliest);
      call.cause = "its own input matches, but the input of rank" + std::string(senders.size() > 1 ? "s " : " ") +
                   rank_list(senders) + " to this " + std::string(records::op_name(side.fields.op)) +
                   " differs: " + where + " receives the difference";
      return;
    }
    if (!capped_ranks_.empty()) {
      call.kind = DivergenceKind::kOutput;
      call.role = DivergenceRole::kUndetermined;
      call.cause = "the output differs with the same input on " + where +
                   "; the inputs of other members could not all be checked (ranks " + rank_list(capped_ranks_) +
                   " have too many divergent calls)";
      return;
    }
    call.kind = DivergenceKind::kOutput;
    call.role = DivergenceRole::kOrigin;
    call.cause = "every member's input matches (where fingerprinted) but the output differs: the " +
                 std::string(records::op_name(side.fields.op)) +
                 " itself is nondeterministic; a deterministic reduction (DETNCCL_DETERMINISTIC) removes this";
  }

 private:
  // A call that succeeded in one run and failed in the other, nothing else different, while another member of its
  // communicator stopped (its log ends) by then in the failing run: the failure is the consequence of that rank
  // dying, not a divergence of its own. Marks the call a receiver of that stop and returns true.
  bool failed_because_a_member_stopped(const RankDiff& rank, CallDivergence& call) const {
    if (call.metadata_differences.size() != 1 || !call.metadata_differences.front().starts_with("result ")) {
      return false;
    }
    const bool failed_in_b = compared_result(call.a.fields.result) == 0 && compared_result(call.b.fields.result) != 0;
    const bool failed_in_a = compared_result(call.b.fields.result) == 0 && compared_result(call.a.fields.result) != 0;
    if (!failed_in_a && !failed_in_b) return false;
    // Communicator ids are run-local: look the members up in the run where both calls exist (the other one).
    const CallSide& reference = failed_in_b ? call.a : call.b;
    const auto& members = failed_in_b ? global_rank_ : global_rank_b_;
    for (const RankDiff* other : stopped_) {
      const CallDivergence& missing = *other->first;
      // The stopped rank's first missing call is in the failing run's gap: present only in the other run.
      if (other == &rank ||
          (failed_in_b ? !missing.a.present || missing.b.present : !missing.b.present || missing.a.present)) {
        continue;
      }
      if (missing.step() > call.step()) continue;
      bool member = false;
      for (std::uint32_t k = 0; k < reference.communicator.nranks && !member; ++k) {
        const auto found = members.find({reference.communicator.id, k});
        member = found != members.end() && found->second == other->rank;
      }
      if (!member) continue;
      const CallSide& failing = failed_in_b ? call.b : call.a;
      call.role = DivergenceRole::kReceiver;
      call.source = SourceCall{other->rank, missing.present_side().fields.op, missing.step(), missing.seq(),
                               missing.present_side().fields.comm_seq};
      call.cause = "the call failed in run " + std::string(failed_in_b ? "B" : "A") + " (" +
                   std::string(records::result_name(failing.fields.result)) + ") because rank " +
                   std::to_string(other->rank) + ", a member of its communicator, stopped before it (its log ends " +
                   "at step " + std::to_string(missing.step()) + "): a consequence, not a divergence of its own";
      return true;
    }
    return false;
  }

  void classify_receive(const RankDiff& rank, CallDivergence& call, const CallSide& side) const {
    const auto sender = static_cast<std::uint32_t>(side.fields.peer);
    const auto send =
        sends_.find(pair_key(side.communicator.id, side.fields.op, side.communicator.rank, sender, side.pair_index));
    const auto sender_rank = global_rank_.find({side.communicator.id, sender});
    const std::string sender_name = sender_rank != global_rank_.end() ? "rank " + std::to_string(sender_rank->second)
                                                                      : "peer " + std::to_string(sender);
    const std::string nth = "Send #" + std::to_string(side.pair_index);
    if (send != sends_.end()) {
      call.kind = DivergenceKind::kInput;
      call.role = DivergenceRole::kReceiver;
      call.source = source_of(*send->second);
      call.cause = "the data received differs because " + sender_name + "'s matching " + nth + " to it (step " +
                   std::to_string(send->second->step) + ", seq " + std::to_string(send->second->seq) +
                   ") sent different data";
      return;
    }
    const bool sender_checked =
        sender_rank != global_rank_.end() &&
        std::find(capped_ranks_.begin(), capped_ranks_.end(), sender_rank->second) == capped_ranks_.end();
    if (sender_checked) {
      call.kind = DivergenceKind::kOutput;
      call.role = DivergenceRole::kOrigin;
      call.cause = "the data received on rank " + std::to_string(rank.rank) + " differs although " + sender_name +
                   "'s matching " + nth + " shows no difference: the data changed in transit";
    } else {
      call.kind = DivergenceKind::kInput;
      call.role = DivergenceRole::kUndetermined;
      call.cause = "the data received differs; " + sender_name + "'s matching " + nth + " could not be checked";
    }
  }

  // Why the other run lacks a call: no log, a log that stops (killed: torn tail), a log closed cleanly before the
  // call's step (the run made fewer calls), or a clean log that goes on past it (this call alone is absent).
  static std::string missing_cause(const RankDiff& rank, const CallDivergence& call, bool only_a,
                                   const std::string& where) {
    const char* run = only_a ? "B" : "A";
    const std::optional<std::uint64_t>& late_start = only_a ? rank.late_start_b : rank.late_start_a;
    if (late_start && call.step() < *late_start) {
      // The earliest missing call of this rank is the first of those before the other log's start.
      std::string text = "run ";
      text += run;
      text += call.step() + 1 == *late_start ? " has no calls at step " : " has no calls at steps ";
      text += std::to_string(call.step());
      if (call.step() + 1 != *late_start) {
        text += '-';
        text += std::to_string(*late_start - 1);
      }
      text += " on ";
      text += where;
      text += ": its log starts at step ";
      text += std::to_string(*late_start);
      text += " (a run resumed from a checkpoint?), after the compared range begins; --from-step ";
      text += std::to_string(*late_start);
      text += " compares the steps both runs have";
      return text;
    }
    std::string cause = "run ";
    cause += run;
    cause += " has no such call on ";
    cause += where;
    if (!(only_a ? rank.no_header_b : rank.no_header_a).empty()) {
      return cause +
             ": its log for this rank has no header (the writer was killed before writing it) and holds no "
             "records";
    }
    if (!(only_a ? rank.in_b : rank.in_a)) return cause + ": it has no log for this rank";
    const std::string& message = only_a ? rank.end_message_b : rank.end_message_a;
    if ((only_a ? rank.end_b : rank.end_a) != LogEndKind::kClosed) {
      return cause + ": it stops early (crash or hang); its log: " + message;
    }
    const std::optional<std::uint64_t>& last = only_a ? rank.last_step_b : rank.last_step_a;
    std::string text = "run ";
    text += run;
    if (!last) return text + "'s log holds no call on " + where + " (" + message + "): it made fewer calls";
    if (*last < call.step()) {
      text += "'s log ends (closed cleanly) after step ";
      text += std::to_string(*last);
      text += " on ";
      text += where;
      return text + ": it made fewer calls";
    }
    cause += ", although its log goes on to step ";
    cause += std::to_string(*last);
    return cause + " and was closed cleanly: this call is absent from the middle of the log";
  }

  std::vector<RankDiff>& ranks_;
  std::vector<std::uint32_t> capped_ranks_;
  GlobalRanks global_rank_;               // run A's (communicator id, rank in it) -> global rank
  GlobalRanks global_rank_b_;             // the same for run B
  std::vector<const RankDiff*> stopped_;  // ranks whose first divergence is a missing call
  std::unordered_map<PairKey, const DivergentCallBrief*, CallKeyHash> sends_;
  std::unordered_map<CollectiveKey, std::vector<const DivergentCallBrief*>, CallKeyHash> collectives_;
};

// "1000 to the end", "0 to 5", "3 to 3".
std::string step_range_text(const DiffOptions& options) {
  return (options.from_step ? std::to_string(*options.from_step) : "0") + " to " +
         (options.to_step ? std::to_string(*options.to_step) : "the end");
}

// "run A has steps 0-39", "run B has no calls".
std::string run_steps_text(const std::vector<RankDiff>& ranks, bool run_a) {
  std::optional<std::uint64_t> first, last;
  for (const RankDiff& rank : ranks) {
    const auto& f = run_a ? rank.first_step_a : rank.first_step_b;
    const auto& l = run_a ? rank.last_step_a : rank.last_step_b;
    if (f) first = std::min(first.value_or(*f), *f);
    if (l) last = std::max(last.value_or(*l), *l);
  }
  std::string text = run_a ? "run A " : "run B ";
  if (!first) return text + "has no calls";
  if (*first == *last) return text + "has step " + std::to_string(*first);
  return text + "has steps " + std::to_string(*first) + "-" + std::to_string(*last);
}

int role_order(DivergenceRole role) {
  switch (role) {
    case DivergenceRole::kOrigin:
      return 0;
    case DivergenceRole::kUndetermined:
      return 1;
    case DivergenceRole::kReceiver:
      return 2;
  }
  return 3;
}

}  // namespace

std::string_view divergence_kind_name(DivergenceKind kind) noexcept {
  switch (kind) {
    case DivergenceKind::kConfig:
      return "config";
    case DivergenceKind::kMetadata:
      return "metadata";
    case DivergenceKind::kInput:
      return "input";
    case DivergenceKind::kOutput:
      return "output";
    case DivergenceKind::kMissing:
      return "missing";
  }
  return "?";
}

std::string_view divergence_role_name(DivergenceRole role) noexcept {
  switch (role) {
    case DivergenceRole::kOrigin:
      return "origin";
    case DivergenceRole::kReceiver:
      return "receiver";
    case DivergenceRole::kUndetermined:
      return "undetermined";
  }
  return "?";
}

bool RunDiff::metadata_only() const noexcept {
  std::uint64_t matching = 0;
  std::uint64_t unverified = 0;
  for (const RankDiff& rank : ranks) {
    matching += rank.matching;
    unverified += rank.unverified;
  }
  return error.empty() && !undecided && identical() && matching == 0 && unverified > 0;
}

std::vector<ConfigDifference> compare_headers(const records::LogHeader& a, const records::LogHeader& b) {
  std::vector<ConfigDifference> out;
  const auto number = [&](const char* field, std::uint64_t x, std::uint64_t y) {
    if (x != y) out.push_back({field, std::to_string(x), std::to_string(y), 0, 1});
  };
  number("nccl_version", a.nccl_version, b.nccl_version);
  number("fingerprint_version", a.fingerprint_version, b.fingerprint_version);
  number("detnccl_version", a.detnccl_version, b.detnccl_version);
  number("world_size", a.world_size, b.world_size);
  number("format_version", a.format_version, b.format_version);
  compare_lines(a.config_text, b.config_text, out);
  compare_lines(a.nccl_environment, b.nccl_environment, out);
  return out;
}

RunDiff diff_runs(const RunLogs& a, const RunLogs& b, const DiffOptions& options) {
  RunDiff diff;
  try {
    if (!a.error.empty()) {
      diff.error = a.error;
      return diff;
    }
    if (!b.error.empty()) {
      diff.error = b.error;
      return diff;
    }
    for (const RunLogs* run : {&a, &b}) {
      if (std::string refused = refuse_single_file(*run, "diff"); !refused.empty()) {
        diff.error = std::move(refused);
        return diff;
      }
    }
    // Every rank either run has, with its file in each.
    std::map<std::uint32_t, std::pair<const RankLogFile*, const RankLogFile*>> files;
    for (const RankLogFile& file : a.logs) files[file.rank].first = &file;
    for (const RankLogFile& file : b.logs) files[file.rank].second = &file;
    std::vector<std::pair<const RankLogFile*, const RankLogFile*>> pairs;
    diff.ranks.resize(files.size());
    for (const auto& [rank, pair] : files) {
      diff.ranks[pairs.size()].rank = rank;
      pairs.push_back(pair);
    }

    parallel_for(
        pairs.size(), options.threads,
        [&](std::size_t i) {
          try {
            RankComparison(diff.ranks[i], options).run(pairs[i].first, pairs[i].second);
          } catch (const std::exception& e) {
            diff.ranks[i].unusable =
                std::string("comparing rank ") + std::to_string(diff.ranks[i].rank) + ": " + e.what();
          }
        },
        options.ranks_done);

    for (const RankDiff& rank : diff.ranks) {
      if (!rank.unusable.empty()) {
        diff.error = rank.unusable;
        return diff;
      }
    }
    // A run directory holding the ranks of two jobs cannot be compared with anything.
    for (const RunLogs* run : {&a, &b}) {
      std::vector<RankJobEvidence> jobs;
      for (const RankDiff& rank : diff.ranks) {
        if (run == &a ? rank.in_a : rank.in_b) {
          jobs.push_back({rank.rank, run == &a ? rank.world_size_a : rank.world_size_b,
                          run == &a ? rank.communicators_a : rank.communicators_b});
        }
      }
      if (const JobGroups groups = group_logs_by_job(jobs); groups.mixed()) {
        diff.error = run->path + ": " + describe_job_groups(groups);
        return diff;
      }
    }

    // Headers: compare each rank's pair; report each distinct difference once.
    std::map<std::tuple<std::string, std::string, std::string>, ConfigDifference> config;
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      if (!diff.ranks[i].in_a || !diff.ranks[i].in_b) continue;  // no log, or one without a header
      std::string error;
      const auto stream_a = RankLogStream::open(*pairs[i].first, error);
      const auto stream_b = RankLogStream::open(*pairs[i].second, error);
      if (!stream_a || !stream_b) {
        diff.error = error;
        return diff;
      }
      for (ConfigDifference& difference : compare_headers(stream_a->header(), stream_b->header())) {
        auto [entry, inserted] = config.try_emplace({difference.field, difference.a, difference.b}, difference);
        if (inserted) {
          entry->second.first_rank = diff.ranks[i].rank;
        } else {
          ++entry->second.rank_count;
        }
      }
    }
    for (auto& [key, difference] : config) {
      (is_diagnostic_setting(difference.field) ? diff.config_notes : diff.config_differences)
          .push_back(std::move(difference));
    }

    // A step range that holds no call of either run compares nothing: say so rather than "identical".
    if (options.from_step || options.to_step) {
      bool any = false;
      for (const RankDiff& rank : diff.ranks) any = any || rank.calls_a > 0 || rank.calls_b > 0;
      if (!any) {
        diff.nothing_in_range = true;
        diff.error = "nothing to compare: no call of either run is in steps " + step_range_text(options) + " (" +
                     run_steps_text(diff.ranks, /*run_a=*/true) + ", " + run_steps_text(diff.ranks, false) + ")";
        return diff;
      }
    }

    // Classify each rank's first divergence across ranks, then pick the earliest origin.
    const Classifier classifier(diff.ranks);
    for (RankDiff& rank : diff.ranks) classifier.classify(rank);
    const RankDiff* first = nullptr;
    const auto order = [](const RankDiff& rank) {
      return std::make_tuple(rank.first->step(), role_order(rank.first->role), rank.first->seq(), rank.rank);
    };
    for (const RankDiff& rank : diff.ranks) {
      if (rank.first && (first == nullptr || order(rank) < order(*first))) first = &rank;
    }
    if (first != nullptr) {
      diff.first = *first->first;
      if (diff.first->kind == DivergenceKind::kMissing) {
        for (const RankDiff& rank : diff.ranks) {
          if (rank.first && rank.first->kind == DivergenceKind::kMissing && rank.first->step() == diff.first->step()) {
            diff.stopped.push_back(rank.rank);
          }
        }
      }
    }
    std::vector<const RankDiff*> receivers;
    for (const RankDiff& rank : diff.ranks) {
      if (rank.first && rank.first->role == DivergenceRole::kReceiver) receivers.push_back(&rank);
    }
    std::sort(receivers.begin(), receivers.end(), [](const RankDiff* x, const RankDiff* y) {
      return std::make_tuple(x->first->step(), x->rank) < std::make_tuple(y->first->step(), y->rank);
    });
    for (const RankDiff* rank : receivers) diff.receivers.push_back(rank->rank);

    // Notes: what was not compared, and how the logs end.
    std::uint64_t unverified = 0;
    std::uint64_t not_compared = 0;
    std::vector<std::uint32_t> truncated;
    for (const RankDiff& rank : diff.ranks) {
      unverified += rank.unverified;
      not_compared += rank.not_compared;
      if (rank.end_a == LogEndKind::kTruncated || rank.end_b == LogEndKind::kTruncated) truncated.push_back(rank.rank);
    }
    if (unverified > 0) {
      diff.notes.push_back(std::to_string(unverified) +
                           " aligned calls had equal metadata but no fingerprint computed by both runs (trace level "
                           "meta, windows or device buffers): their contents were not compared");
    }
    for (const ConfigDifference& note : diff.config_notes) {
      std::string text = note.field;
      text += " differs (";
      text += note.a.empty() ? "empty" : note.a;
      text += " in A, ";
      text += note.b.empty() ? "empty" : note.b;
      text += " in B, on ";
      text += std::to_string(note.rank_count);
      text += note.rank_count == 1 ? " rank" : " ranks";
      text += "): it cannot change any call, only what is logged or fingerprinted";
      diff.notes.push_back(std::move(text));
    }
    // Ranks whose log has no header (killed as it was created): compared as ranks without a log.
    constexpr std::size_t kNoHeaderNotes = 8;
    std::size_t no_header = 0;
    for (const RankDiff& rank : diff.ranks) {
      for (const bool run_a : {true, false}) {
        const std::string& message = run_a ? rank.no_header_a : rank.no_header_b;
        if (message.empty() || ++no_header > kNoHeaderNotes) continue;
        std::string note = "rank " + std::to_string(rank.rank);
        note += run_a ? " of run A: " : " of run B: ";
        note += message;
        note += "; compared as a rank without a log";
        diff.notes.push_back(std::move(note));
      }
    }
    if (no_header > kNoHeaderNotes) {
      diff.notes.push_back(std::to_string(no_header - kNoHeaderNotes) +
                           " more logs have no header (their writers were killed before writing it)");
    }
    // Logs that start after --from-step (resumed runs): the other run's calls before that step are missing.
    std::map<std::pair<bool, std::uint64_t>, std::vector<std::uint32_t>> late_starts;  // (run B, step) -> ranks
    for (const RankDiff& rank : diff.ranks) {
      if (rank.late_start_a) late_starts[{false, *rank.late_start_a}].push_back(rank.rank);
      if (rank.late_start_b) late_starts[{true, *rank.late_start_b}].push_back(rank.rank);
    }
    for (const auto& [key, ranks] : late_starts) {
      std::string note = key.first ? "run B's log" : "run A's log";
      note += ranks.size() > 1 ? "s of ranks " : " of rank ";
      note += rank_list(ranks);
      note += ranks.size() > 1 ? " start" : " starts";
      note += " at step ";
      note += std::to_string(key.second);
      note += ", after --from-step ";
      note += std::to_string(options.from_step.value_or(0));
      note += ": run ";
      note += key.first ? "A" : "B";
      if (options.to_step && *options.to_step < key.second) {
        note += "'s calls in the compared range are all missing there (the range ends before that step)";
      } else {
        note += "'s calls before that step are missing there, and the calls from it on are aligned; --from-step ";
        note += std::to_string(key.second);
        note += " compares the steps both runs have";
      }
      diff.notes.push_back(std::move(note));
    }
    // Ranks killed (or cut) in either run: the records before the tear are compared, the rest is missing.
    std::vector<std::string> torn;
    for (const RankDiff& rank : diff.ranks) {
      for (const bool run_a : {true, false}) {
        if ((run_a ? rank.end_a : rank.end_b) != LogEndKind::kTornTail) continue;
        std::string note = "rank " + std::to_string(rank.rank);
        note += run_a ? " of run A: " : " of run B: ";
        note += run_a ? rank.end_message_a : rank.end_message_b;
        torn.push_back(std::move(note));
      }
    }
    constexpr std::size_t kTornNotes = 8;
    for (std::size_t i = 0; i < torn.size() && i < kTornNotes; ++i) diff.notes.push_back(std::move(torn[i]));
    if (torn.size() > kTornNotes) {
      diff.notes.push_back(std::to_string(torn.size() - kTornNotes) +
                           " more logs end without an end marker (the writer was killed or crashed)");
    }
    if (!truncated.empty()) {
      diff.notes.push_back("the logs of rank" + std::string(truncated.size() > 1 ? "s " : " ") + rank_list(truncated) +
                           " were truncated (tracing stopped early, e.g. disk full); " + std::to_string(not_compared) +
                           " calls after the truncation were not compared");
      // RATIONALE: a configuration difference is a divergence found before the truncation, like a call's.
      if (diff.identical()) diff.undecided = true;
    }
    // Records a newer detnccl wrote: skipped, so whatever they hold was not compared.
    for (const bool run_a : {true, false}) {
      std::uint64_t skipped = 0;
      std::vector<std::uint32_t> ranks;
      for (const RankDiff& rank : diff.ranks) {
        const std::uint64_t count = run_a ? rank.unknown_records_a : rank.unknown_records_b;
        skipped += count;
        if (count > 0) ranks.push_back(rank.rank);
      }
      if (skipped == 0) continue;
      diff.unknown_records += skipped;
      diff.notes.push_back(std::to_string(skipped) + (skipped == 1 ? " record" : " records") +
                           " of a type this detnccl does not know skipped in run " + (run_a ? "A" : "B") + " (rank" +
                           (ranks.size() == 1 ? " " : "s ") + rank_list(ranks) +
                           "; written by a newer detnccl?): what they hold was not compared");
    }
    if (options.from_step || options.to_step) {
      diff.notes.push_back("compared steps " + step_range_text(options) +
                           "; calls are aligned per communicator from the first call of that range");
    }
    if (diff.first && diff.first->kind == DivergenceKind::kMetadata && diff.first->metadata_differences.size() == 1 &&
        diff.first->metadata_differences.front().starts_with("step ") && !options.from_step) {
      diff.notes.push_back("the runs number their steps differently from the first call (" +
                           diff.first->metadata_differences.front() +
                           "): if one run resumed from a checkpoint, compare with --from-step " +
                           std::to_string(std::max(diff.first->a.fields.step, diff.first->b.fields.step)));
    }
    for (const ConfigDifference& difference : diff.config_differences) {
      if (difference.field == "fingerprint_version") {
        diff.notes.push_back("the fingerprint versions differ: only metadata was compared");
        break;
      }
    }
  } catch (const std::exception& e) {
    diff.error = std::string("diff failed: ") + e.what();
  }
  return diff;
}

}  // namespace detnccl::analysis
