// detnccl analysis: one rank's two logs compared call by call (see rank_comparison.h).
#include "cli/analysis/rank_comparison.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>

#include "cli/analysis/run_jobs.h"
#include "records/block_digests.h"

namespace detnccl::analysis {
namespace {

using records::CallFields;
using records::LogEndKind;

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
  OrdinalMap<std::uint64_t> base;  // ordinal -> comm_seq of its first call in range
  std::unordered_map<AlignKey, CallInRun, AlignKeyHash> pending;
  std::uint64_t calls = 0;
  std::optional<std::uint64_t> first_step;  // over every call of the log, in range or not
  std::optional<std::uint64_t> last_step;
  std::uint32_t step_sources = 0;  // step_source_bit of every call's step source
  std::optional<std::uint64_t> segment_bytes;
  std::uint32_t fingerprint_version = 0;
  // The step the other run's log starts at, when that is after --from-step and after this run's log starts: this
  // run's calls in the range before it have no counterpart there and are not aligned (RankDiff::late_start_a/b).
  std::optional<std::uint64_t> align_from;
  // The step-index shortcut: what the index says of the whole log, and the calls it let us skip.
  std::uint64_t index_calls = 0;    // every call of the log
  std::uint64_t skipped_calls = 0;  // before the first differing group: compared by digest
  std::uint64_t taken = 0;          // calls read and compared one by one
  bool stopped_early = false;       // reading stopped after the window
  std::uint64_t stop_step = 0;      // when stopped early: the step of the call it stopped at (not taken)
};

std::uint32_t step_sources_of(std::uint64_t bits) {
  std::uint32_t sources = 0;
  for (std::uint32_t source = 0; source < 64; ++source) {
    if ((bits >> source & 1u) != 0) sources |= step_source_bit(static_cast<records::StepSource>(source));
  }
  return sources;
}

// "the log was closed cleanly after 3 records", as the reader says it.
std::string closed_message(std::uint64_t records) {
  return "the log was closed cleanly after " + std::to_string(records) + (records == 1 ? " record" : " records");
}

// Whether two index entries say their groups' calls compare equal (where they start in the file aside).
bool same_calls(const records::StepIndexEntry& x, const records::StepIndexEntry& y) {
  return x.comm_ordinal == y.comm_ordinal && x.step == y.step && x.calls == y.calls &&
         x.input_digest == y.input_digest && x.output_digest == y.output_digest &&
         x.fingerprinted_calls == y.fingerprinted_calls && x.collectives_before == y.collectives_before &&
         x.first_comm_seq == y.first_comm_seq && x.step_sources == y.step_sources;
}

// The number of entries of the group starting at entry `at`.
std::size_t group_size(const std::vector<records::StepIndexEntry>& entries, std::size_t at) {
  std::size_t end = at;
  while (end < entries.size() && entries[end].group_offset == entries[at].group_offset) ++end;
  return end - at;
}

// The step of the first call in a log (nullopt: it holds none, or cannot be read).
std::optional<std::uint64_t> first_call_step(const RankLogFile& file, const StepNumbering& numbering) {
  std::string error;
  const auto stream = RankLogStream::open(file, error, nullptr, records::LogAccess::kStreamed);
  CallInRun call;
  if (!stream) return std::nullopt;
  stream->number_steps(numbering);
  if (!stream->next(call)) return std::nullopt;
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

// Notes "what A vs B" when the values differ; the text is made only then (most compared calls are equal).
template <typename T, typename Format>
void note_difference(std::vector<std::string>& out, std::string_view what, const T& a, const T& b, Format format) {
  if (a != b) out.push_back(std::string(what) + " " + format(a) + " vs " + format(b));
}
const auto kNumber = [](auto value) { return std::to_string(value); };

class RankComparison {
 public:
  RankComparison(RankDiff& result, const DiffOptions& options, const RankDigestPlan* plan = nullptr,
                 std::optional<std::uint64_t> read_through = std::nullopt)
      : result_(result), options_(options), plan_(plan), read_through_(read_through) {}

  void run(const RankLogFile* a_file, const RankLogFile* b_file) {
    if (!open(a_file, a_, result_.no_header_a) || !open(b_file, b_, result_.no_header_b)) return;
    result_.in_a = a_.stream != nullptr;
    result_.in_b = b_.stream != nullptr;
    if (plan_ != nullptr && plan_->usable && plan_->differs && a_.stream && b_.stream) start_at_first_difference();
    if (options_.from_step && a_.stream && b_.stream) {
      // RATIONALE: a run resumed at step S compared from an earlier step K would otherwise align its step-S calls
      // with the other run's step-K calls and report "different calls"; its log simply starts later. Only the log
      // that starts strictly later is taken for one: two logs that start at the same step are aligned as usual.
      const std::optional<std::uint64_t> start_a = first_call_step(*a_file, options_.step_numbering);
      const std::optional<std::uint64_t> start_b = first_call_step(*b_file, options_.step_numbering);
      if (start_a && start_b && *start_b > *options_.from_step && *start_b > *start_a) a_.align_from = start_b;
      if (start_a && start_b && *start_a > *options_.from_step && *start_a > *start_b) b_.align_from = start_a;
    }
    fingerprints_comparable_ = !a_.stream || !b_.stream || a_.fingerprint_version == b_.fingerprint_version;
    CallInRun call_a;
    CallInRun call_b;
    while (!a_.done || !b_.done) {
      const bool got_a = next_call(a_, call_a);
      const bool got_b = next_call(b_, call_b);
      // RATIONALE: runs that agree make the same calls in the same order: compared at once, nothing kept pending.
      if (got_a && got_b && a_.pending.empty() && b_.pending.empty() && !a_.align_from && !b_.align_from &&
          key_of(a_, call_a) == key_of(b_, call_b)) {
        compare(call_a, call_b);
        continue;
      }
      if (got_a) take(a_, b_, call_a, /*from_a=*/true);
      if (got_b) take(b_, a_, call_b, /*from_a=*/false);
    }
    // What is left pending was never matched: the other run has no such call (or, when the other run's reading
    // stopped after the window, it was not read). RATIONALE: a log's steps never decrease, so a run that stopped at a
    // call of step S had read all its calls of earlier steps: a pending call of an earlier step is missing there
    // (a call left out in the middle of a log, found after the window only by --all-records otherwise).
    for (const bool from_a : {true, false}) {
      const Side& other = from_a ? b_ : a_;
      for (const auto& [key, pending] : (from_a ? a_ : b_).pending) {
        if (other.stopped_early && pending.call.step >= other.stop_step) {
          ++result_.calls_not_read;
        } else {
          unmatched(pending, other, from_a);
        }
      }
    }
    finish();
  }

 private:
  bool open(const RankLogFile* file, Side& side, std::string& no_header_note) {
    if (file == nullptr) return true;
    std::string error;
    bool no_header = false;
    // RATIONALE: streamed (several times faster than a mapping): what outlives the next call read is the pending
    // calls, whose arrays take() keeps.
    side.stream = RankLogStream::open(*file, error, &no_header, records::LogAccess::kStreamed);
    if (!side.stream) {
      if (no_header) {
        no_header_note = std::move(error);  // no records: compared as a rank this run has no log for
        return true;
      }
      result_.unusable = error;
      return false;
    }
    if (options_.read_window_bytes != 0) side.stream->set_page_release_bytes(options_.read_window_bytes);
    side.stream->number_steps(options_.step_numbering);
    side.done = false;
    side.segment_bytes = segment_bytes_from_config(side.stream->header().config_text);
    side.fingerprint_version = side.stream->header().fingerprint_version;
    return true;
  }

  // The next call of a side to compare, or false when the side is done (its log read, or the window passed).
  bool next_call(Side& side, CallInRun& call) {
    if (side.done) return false;
    if (!read_in_range(side, call)) {
      side.done = true;
      return false;
    }
    if (past_window(call)) {
      side.done = true;
      side.stopped_early = true;
      side.stop_step = call.call.step;
      return false;
    }
    ++side.taken;
    return true;
  }

  // The shortcut: both logs read from their first differing group on, as if everything before it had been read
  // (the groups before it are equal: their digests match).
  void start_at_first_difference() {
    const records::StepIndex* index_a = a_.stream->step_index();
    const records::StepIndex* index_b = b_.stream->step_index();
    if (index_a == nullptr || index_b == nullptr || !a_.stream->seek_to_group(plan_->entry_a) ||
        !b_.stream->seek_to_group(plan_->entry_b)) {
      // RATIONALE: only possible when a log changed between the plan and now; a seek that failed moved nothing, so
      // the other log is read from its start too only if it did not move: fall back by refusing the rank.
      result_.unusable = "the step index of rank " + std::to_string(result_.rank) +
                         " changed while it was read (is a log being rewritten?)";
      return;
    }
    shortcut_ = true;
    result_.digest_shortcut = true;
    for (auto [side, index, first] :
         {std::tuple{&a_, index_a, plan_->entry_a}, std::tuple{&b_, index_b, plan_->entry_b}}) {
      for (std::size_t i = 0; i < index->entries.size(); ++i) {
        const records::StepIndexEntry& entry = index->entries[i];
        bool fresh = false;
        std::uint64_t& base = side->base.get(entry.comm_ordinal, &fresh);
        if (fresh) base = entry.first_comm_seq;
        side->index_calls += entry.calls;
        side->first_step = std::min(side->first_step.value_or(entry.step), entry.step);
        side->last_step = std::max(side->last_step.value_or(entry.step), entry.step);
        side->step_sources |= step_sources_of(entry.step_sources);
        if (i >= first) continue;
        side->skipped_calls += entry.calls;
        if (side == &a_) {
          result_.calls_matched_by_digest += entry.calls;
          result_.matching += entry.fingerprinted_calls;
          result_.unverified += entry.calls - entry.fingerprinted_calls;
        }
      }
    }
  }

  // Whether the shortcut stops reading at this call: a divergence has been found (and the calls for the cross-rank
  // classification kept, or the cap reached) and the call is after the window.
  bool past_window(const CallInRun& call) const {
    if (!shortcut_ || !result_.first) return false;
    return result_.divergent.size() >= options_.divergent_calls_kept ||
           (read_through_ && call.call.step > *read_through_);
  }

  bool read_in_range(Side& side, CallInRun& call) {
    while (side.stream->next(call)) {
      const std::uint64_t step = call.call.step;
      side.first_step = std::min(side.first_step.value_or(step), step);
      side.last_step = std::max(side.last_step.value_or(step), step);
      side.step_sources |= step_source_bit(call.call.step_source);
      if (options_.from_step && step < *options_.from_step) continue;
      if (options_.to_step && step > *options_.to_step) continue;
      if (side.align_from && step < *side.align_from) {
        ++side.calls;  // before the other run's log starts: never aligned (take() reports it missing there)
        return true;
      }
      bool fresh = false;
      std::uint64_t& base = side.base.get(call.call.comm_ordinal, &fresh);
      if (fresh) base = call.call.comm_seq;
      if (call.call.comm_seq < base) continue;  // a step marked out of order: outside the range
      ++side.calls;
      return true;
    }
    return false;
  }

  AlignKey key_of(const Side& side, const CallInRun& call) const {
    return {call.call.comm_ordinal, call.call.comm_seq - *side.base.find(call.call.comm_ordinal)};
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
      CallInRun kept = call;
      kept.keep_arrays();
      self.pending.emplace(key, std::move(kept));
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
    note_difference(meta, "op", x.op, y.op, [](records::OpId op) { return std::string(records::op_name(op)); });
    note_difference(meta, "count", x.count, y.count, kNumber);
    note_difference(meta, "datatype", x.datatype, y.datatype,
                    [](std::uint16_t datatype) { return std::string(records::datatype_name(datatype)); });
    note_difference(meta, "reduction", x.redop, y.redop,
                    [](std::int32_t redop) { return std::string(records::redop_name(redop)); });
    note_difference(meta, is_point_to_point(x.op) ? "peer" : "root", x.peer, y.peer, kNumber);
    // RATIONALE: steps from different sources (the job's marks, the optimizer, detnccl's inference) may number the
    // same iteration differently: the run-wide note says so (run_diff.cc), and such steps are not compared.
    if (x.step != y.step && step_sources_comparable(step_source_bit(x.step_source), step_source_bit(y.step_source))) {
      note_difference(meta, "step", x.step, y.step, kNumber);
    }
    note_difference(meta, "communicator size", a.communicator.nranks, b.communicator.nranks, kNumber);
    note_difference(meta, "rank in communicator", a.communicator.rank, b.communicator.rank, kNumber);
    if (compared_result(x.result) != compared_result(y.result)) {
      meta.push_back("result " + std::string(records::result_name(x.result)) + " vs " +
                     std::string(records::result_name(y.result)));
    }
    if ((x.flags & records::kCallPreMulSumScalar) != 0 && (y.flags & records::kCallPreMulSumScalar) != 0) {
      note_difference(meta, "PreMulSum scalar", x.premulsum_scalar, y.premulsum_scalar, kNumber);
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
      divergence.input_blocks_folded =
          records::input_blocks_folded_only(a.call) || records::input_blocks_folded_only(b.call);
    }
    if (divergence.output_differs) {
      divergence.output_ranges =
          differing_ranges(a.call.output_segments, b.call.output_segments, segment,
                           saturating_product(output_elements(x, nranks, a.communicator.rank), element), element);
      divergence.output_blocks = differing_blocks(a.call.output_blocks, b.call.output_blocks);
      divergence.output_blocks_folded =
          records::output_blocks_folded_only(a.call) || records::output_blocks_folded_only(b.call);
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

  // Step digests: compared when a log holds them but no call records (DETNCCL_TRACE=steps), per communicator in log
  // order, within the step range.
  void compare_step_digests() {
    if (!a_.stream || !b_.stream || shortcut_) return;
    const auto& digests_a = a_.stream->step_digests();
    const auto& digests_b = b_.stream->step_digests();
    const bool digests_only =
        (a_.stream->calls_read() == 0 && !digests_a.empty()) || (b_.stream->calls_read() == 0 && !digests_b.empty());
    if (!digests_only) return;
    result_.digests_compared = true;
    using Sequence = std::vector<const records::StepDigestRecord*>;
    std::map<std::uint64_t, std::pair<Sequence, Sequence>> by_communicator;
    const auto in_range = [&](std::uint64_t step) {
      return (!options_.from_step || step >= *options_.from_step) && (!options_.to_step || step <= *options_.to_step);
    };
    const auto cover = [](std::optional<std::uint64_t>& first, std::optional<std::uint64_t>& last, std::uint64_t step) {
      first = std::min(first.value_or(step), step);
      last = std::max(last.value_or(step), step);
    };
    for (const auto& digest : digests_a) {
      if (!in_range(digest.step)) continue;
      by_communicator[digest.comm_ordinal].first.push_back(&digest);
      cover(result_.first_digest_step_a, result_.last_digest_step_a, digest.step);
    }
    for (const auto& digest : digests_b) {
      if (!in_range(digest.step)) continue;
      by_communicator[digest.comm_ordinal].second.push_back(&digest);
      cover(result_.first_digest_step_b, result_.last_digest_step_b, digest.step);
    }
    for (const auto& [ordinal, sequences] : by_communicator) {
      const auto& [a, b] = sequences;
      for (std::size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
        const records::StepDigestRecord* x = i < a.size() ? a[i] : nullptr;
        const records::StepDigestRecord* y = i < b.size() ? b[i] : nullptr;
        if (x != nullptr && y != nullptr && *x == *y) {
          ++result_.steps_matching;
          continue;
        }
        StepDivergence divergence;
        divergence.rank = result_.rank;
        divergence.step = x != nullptr && y != nullptr ? std::min(x->step, y->step) : (x != nullptr ? x : y)->step;
        divergence.comm_ordinal = ordinal;
        divergence.comm_id = communicator_id(ordinal);
        // RATIONALE: at a step one run has and the other does not, only that run's digest is "there".
        divergence.in_a = x != nullptr && x->step == divergence.step;
        divergence.in_b = y != nullptr && y->step == divergence.step;
        if (divergence.in_a) divergence.a = *x;
        if (divergence.in_b) divergence.b = *y;
        if (divergence.in_a && divergence.in_b) {
          divergence.input_differs = x->calls != y->calls || x->input_digest != y->input_digest;
          divergence.output_differs = x->output_digest != y->output_digest;
        }
        const auto order = [](const StepDivergence& d) { return std::make_tuple(d.step, d.comm_ordinal); };
        if (!result_.first_step || order(divergence) < order(*result_.first_step)) result_.first_step = divergence;
        break;
      }
    }
  }

  std::uint64_t communicator_id(std::uint64_t ordinal) const {
    for (const Side* side : {&a_, &b_}) {
      for (const auto& communicator : side->stream->communicators()) {
        if (communicator.ordinal == ordinal) return communicator.id;
      }
    }
    return 0;
  }

  void finish() {
    compare_step_digests();
    result_.calls_a = a_.calls;
    result_.calls_b = b_.calls;
    if (shortcut_) {
      result_.calls_a = a_.index_calls;
      result_.calls_b = b_.index_calls;
      result_.calls_read = a_.stream->calls_read() + b_.stream->calls_read();
      for (const Side* side : {&a_, &b_})
        result_.calls_not_read += side->index_calls - side->skipped_calls - side->taken;
      if (a_.stopped_early || b_.stopped_early) result_.read_through_step = read_through_.value_or(0);
    } else {
      result_.calls_read = (a_.stream ? a_.stream->calls_read() : 0) + (b_.stream ? b_.stream->calls_read() : 0);
    }
    result_.first_step_a = a_.first_step;
    result_.step_sources_a = a_.step_sources;
    result_.step_sources_b = b_.step_sources;
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
      if (shortcut_) {
        // RATIONALE: reading stopped early or skipped the start: the index says how the log ends and what it holds.
        const records::StepIndex& index = *side->stream->step_index();
        *end = LogEndKind::kClosed;
        *message = closed_message(index.end_marker.records_written);
        *communicators = index.communicators;
      }
      if (log_end_is_unusable(side->stream->end())) {
        result_.unusable = side->stream->path() + ": " + side->stream->end().message;
      }
    }
  }

  RankDiff& result_;
  const DiffOptions& options_;
  const RankDigestPlan* plan_;
  std::optional<std::uint64_t> read_through_;
  bool shortcut_ = false;
  Side a_;
  Side b_;
  bool fingerprints_comparable_ = true;
};

}  // namespace

void compare_rank_logs(const RankLogFile* a, const RankLogFile* b, const DiffOptions& options, RankDiff& result) {
  RankComparison(result, options).run(a, b);
}

void compare_rank_logs(const RankLogFile* a, const RankLogFile* b, const DiffOptions& options,
                       const RankDigestPlan& plan, std::optional<std::uint64_t> read_through, RankDiff& result) {
  if (plan.usable && !plan.differs) return;  // plan_rank_digests filled result
  RankComparison(result, options, &plan, read_through).run(a, b);
}

RankDigestPlan plan_rank_digests(const RankLogFile* a, const RankLogFile* b, const DiffOptions& options,
                                 RankDiff& result) {
  RankDigestPlan plan;
  if (!options.use_step_index || options.from_step || options.to_step || options.step_numbering.infer || a == nullptr ||
      b == nullptr) {
    return plan;
  }
  std::string error;
  // Streamed: no mapping to set up and tear down for a header and a step index.
  const auto stream_a = RankLogStream::open(*a, error, nullptr, records::LogAccess::kStreamed);
  const auto stream_b = RankLogStream::open(*b, error, nullptr, records::LogAccess::kStreamed);
  if (!stream_a || !stream_b || stream_a->header().fingerprint_version != stream_b->header().fingerprint_version) {
    return plan;  // compare_rank_logs reads them, and says what is wrong with them
  }
  const records::StepIndex* x = stream_a->step_index();
  const records::StepIndex* y = stream_b->step_index();
  if (x == nullptr || y == nullptr) return plan;
  // RATIONALE: a communicator's size and the rank's place in it are compared per call but not folded into the
  // digests; communicators that differ so are left to the calls.
  std::map<std::uint64_t, std::pair<std::uint32_t, std::uint32_t>> shapes;
  for (const auto& communicator : x->communicators)
    shapes[communicator.ordinal] = {communicator.nranks, communicator.rank};
  for (const auto& communicator : y->communicators) {
    const auto found = shapes.find(communicator.ordinal);
    if (found != shapes.end() && found->second != std::pair{communicator.nranks, communicator.rank}) return plan;
  }
  plan.usable = true;
  std::size_t i = 0;
  std::size_t j = 0;
  while (i < x->entries.size() || j < y->entries.size()) {
    const std::size_t size_x = i < x->entries.size() ? group_size(x->entries, i) : 0;
    const std::size_t size_y = j < y->entries.size() ? group_size(y->entries, j) : 0;
    bool same = size_x == size_y;
    for (std::size_t k = 0; same && k < size_x; ++k) same = same_calls(x->entries[i + k], y->entries[j + k]);
    if (!same) {
      plan.differs = true;
      plan.entry_a = i;
      plan.entry_b = j;
      plan.step = i < x->entries.size() ? x->entries[i].step : y->entries[j].step;
      return plan;
    }
    i += size_x;
    j += size_y;
  }
  // Equal throughout: the rank's comparison, from the indexes alone.
  result.in_a = result.in_b = true;
  result.digest_shortcut = true;
  for (const records::StepIndexEntry& entry : x->entries) {
    result.calls_a += entry.calls;
    result.matching += entry.fingerprinted_calls;
    result.unverified += entry.calls - entry.fingerprinted_calls;
    result.first_step_a = std::min(result.first_step_a.value_or(entry.step), entry.step);
    result.last_step_a = std::max(result.last_step_a.value_or(entry.step), entry.step);
    result.step_sources_a |= step_sources_of(entry.step_sources);
  }
  result.calls_b = result.calls_a;
  result.calls_matched_by_digest = result.calls_a;
  result.first_step_b = result.first_step_a;
  result.last_step_b = result.last_step_a;
  result.step_sources_b = result.step_sources_a;
  result.communicators_a = x->communicators;
  result.communicators_b = y->communicators;
  result.world_size_a = stream_a->header().world_size;
  result.world_size_b = stream_b->header().world_size;
  result.end_a = result.end_b = LogEndKind::kClosed;
  result.end_message_a = closed_message(x->end_marker.records_written);
  result.end_message_b = closed_message(y->end_marker.records_written);
  return plan;
}

}  // namespace detnccl::analysis
