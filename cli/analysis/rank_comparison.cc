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
  std::unordered_map<std::uint64_t, std::uint64_t> base;  // ordinal -> comm_seq of its first call in range
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
};

// The step of the first call in a log (nullopt: it holds none, or cannot be read).
std::optional<std::uint64_t> first_call_step(const RankLogFile& file, const StepNumbering& numbering) {
  std::string error;
  const auto stream = RankLogStream::open(file, error);
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

template <typename T>
void note_difference(std::vector<std::string>& out, std::string_view what, const T& a, const T& b) {
  if (a != b) out.push_back(std::string(what) + " " + a + " vs " + b);
}

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
      const std::optional<std::uint64_t> start_a = first_call_step(*a_file, options_.step_numbering);
      const std::optional<std::uint64_t> start_b = first_call_step(*b_file, options_.step_numbering);
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
    side.stream->number_steps(options_.step_numbering);
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
      side.step_sources |= step_source_bit(call.call.step_source);
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
    // RATIONALE: steps from different sources (the job's marks, the optimizer, detnccl's inference) may number the
    // same iteration differently: the run-wide note says so (run_diff.cc), and such steps are not compared.
    if (step_sources_comparable(step_source_bit(x.step_source), step_source_bit(y.step_source))) {
      note_difference(meta, "step", std::to_string(x.step), std::to_string(y.step));
    }
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
    if (!a_.stream || !b_.stream) return;
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
    for (const auto& digest : digests_a) {
      if (in_range(digest.step)) by_communicator[digest.comm_ordinal].first.push_back(&digest);
    }
    for (const auto& digest : digests_b) {
      if (in_range(digest.step)) by_communicator[digest.comm_ordinal].second.push_back(&digest);
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

}  // namespace

void compare_rank_logs(const RankLogFile* a, const RankLogFile* b, const DiffOptions& options, RankDiff& result) {
  RankComparison(result, options).run(a, b);
}

}  // namespace detnccl::analysis
