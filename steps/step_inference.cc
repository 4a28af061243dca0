// detnccl steps: the iteration numbering of step_inference.h.
#include "steps/step_inference.h"

#include <algorithm>
#include <optional>

#include "abi/traced_ops.h"

namespace detnccl::steps {
namespace {

// splitmix64's finaliser: mixes each field into the signature so that fields that differ by little still give
// signatures that differ everywhere (an unordered_map key).
std::uint64_t mix(std::uint64_t hash, std::uint64_t value) noexcept {
  std::uint64_t z = hash ^ (value + 0x9e3779b97f4a7c15ull + (hash << 6) + (hash >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

std::uint64_t call_signature(const records::CallFields& call, std::uint32_t rank, std::uint32_t nranks) noexcept {
  std::int64_t peer = call.peer;
  const abi::TracedOpRow* row = abi::traced_op_row(static_cast<std::uint64_t>(call.op));
  if (row != nullptr && row->peer == abi::PeerRole::kPeer && nranks != 0 && peer >= 0) {
    peer = ((peer - static_cast<std::int64_t>(rank)) % nranks + nranks) % nranks;  // a ring's "next" on every rank
  }
  std::uint64_t signature = mix(0, call.comm_ordinal);
  signature = mix(signature, static_cast<std::uint64_t>(call.op));
  signature = mix(signature, call.datatype);
  signature = mix(signature, static_cast<std::uint32_t>(call.redop));
  signature = mix(signature, call.count);
  return mix(signature, static_cast<std::uint64_t>(peer));
}

StepInference::StepInference(const StepBoundary& boundary) : boundary_(boundary) {
  if (boundary_.enabled()) phase_ = InferencePhase::kBoundary;
}

std::uint64_t StepInference::next(const records::CallFields& call, std::uint32_t rank, std::uint32_t nranks) {
  ++calls_;
  switch (phase_) {
    case InferencePhase::kBoundary:
      return by_boundary(call);
    case InferencePhase::kLearning:
      return learn(call_signature(call, rank, nranks));
    case InferencePhase::kTracking:
      return track(call_signature(call, rank, nranks));
    case InferencePhase::kGaveUp:
      break;
  }
  return step_;
}

std::uint64_t StepInference::learn(std::uint64_t signature) {
  const std::uint64_t n = seen_.size();
  seen_.push_back(signature);
  // The open candidates: this call either continues a candidate's second instance or ends it.
  std::optional<Candidate> confirmed;
  std::size_t kept = 0;
  for (Candidate& candidate : candidates_) {
    if (seen_[candidate.start + candidate.verified] != signature) continue;
    if (++candidate.verified == candidate.length && (!confirmed || candidate.length < confirmed->length)) {
      confirmed = candidate;
    }
    candidates_[kept++] = candidate;
  }
  if (confirmed) {
    confirm(confirmed->start, confirmed->length);
    return step_;
  }
  candidates_.resize(kept);

  RunStarts& starts = run_starts_[signature];
  if (n == 0 || seen_[n - 1] != signature) {
    // RATIONALE: every recent earlier run, not only the latest: inside one iteration the same call may recur
    // (A B A C), and after an iteration with an extra call (a logging AllReduce in iteration 0) the template is
    // the iteration that just ended, not the one before it.
    for (std::size_t i = 0; i < starts.count; ++i) candidates_.push_back({starts.latest[i], n - starts.latest[i], 1});
    std::copy_backward(starts.latest.begin(), starts.latest.end() - 1, starts.latest.end());
    starts.latest[0] = n;
    starts.count = std::min(starts.count + 1, kCandidateStarts);
  } else if (n + 1 - starts.latest[0] == kLongestRun) {
    confirm(n, 1);  // one-call iterations
    return step_;
  }
  if (seen_.size() >= kMaxLearningCalls || run_starts_.size() > kMaxLearningSignatures) {
    phase_ = InferencePhase::kGaveUp;
    seen_ = {};
    run_starts_ = {};
    candidates_ = {};
  }
  return step_;
}

void StepInference::confirm(std::uint64_t start, std::uint64_t length) {
  template_.assign(seen_.begin() + static_cast<std::ptrdiff_t>(start),
                   seen_.begin() + static_cast<std::ptrdiff_t>(start + length));
  first_call_unique_ = std::count(template_.begin(), template_.end(), template_.front()) == 1;
  phase_ = InferencePhase::kTracking;
  // Replays the calls seen so far (this one included): the step of this call, and where the template stands.
  step_ = 0;
  position_ = 0;
  started_ = false;
  for (std::uint64_t i = 0; i < seen_.size(); ++i) {
    if (!started_ && seen_[i] == template_.front()) setup_calls_ = i;
    track(seen_[i]);
  }
  seen_ = {};
  run_starts_ = {};
  candidates_ = {};
}

std::uint64_t StepInference::track(std::uint64_t signature) {
  if (!started_) {
    if (signature == template_.front()) {
      started_ = true;  // the first iteration: step 0, with the set-up before it
      position_ = 1;
    }
  } else if (position_ < template_.size() && signature == template_[position_]) {
    ++position_;
  } else if (signature == template_.front() && (position_ == template_.size() || first_call_unique_)) {
    ++step_;
    position_ = 1;
  }
  return step_;  // anything else is an extra call of this iteration
}

std::uint64_t StepInference::by_boundary(const records::CallFields& call) {
  if (boundary_pending_) {
    ++step_;
    boundary_pending_ = false;
  }
  if (boundary_.matches(static_cast<std::uint16_t>(call.op), call.count, call.datatype, call.comm_ordinal)) {
    if (boundary_.side == BoundarySide::kEnd) {
      boundary_pending_ = true;
    } else if (boundary_seen_) {
      ++step_;  // the first matching call starts iteration 0, with the set-up before it
    } else {
      boundary_seen_ = true;
    }
  }
  return step_;
}

}  // namespace detnccl::steps
