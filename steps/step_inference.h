// detnccl steps: numbering a job's iterations from the pattern of its NCCL calls, for jobs that never mark a step.
//
// One rule, used by the shim while the job runs (DETNCCL_STEP_INFERENCE) and by the offline tools over logs written
// without marks (`--infer-steps`), so both number a log the same way. It is a pure function of the sequence of call
// signatures (communicator, operation, datatype, reduction, count, root or relative peer): the same in every run of
// the same job, and on every rank of a data-parallel group (their sequences have the same shape). docs/steps.md
// states the rule for users; in short:
//   1. Learning. Each call that begins a run of equal signatures, when that signature began earlier runs, opens a
//      candidate per earlier run (the 8 latest): the template is everything from that earlier call up to this one.
//      A candidate is confirmed when the calls that follow repeat its template once in full, and dropped at the
//      first call that does not; the first confirmed wins (the shortest when several end together). Calls carry
//      step 0 while learning. A run of kLongestRun equal calls is taken as one-call iterations.
//   2. Numbering. At confirmation the template is replayed over the calls seen so far: its first call starts step
//      0 (the calls before are the set-up, such as parameter broadcasts), and every later start of the template
//      the next step. So from the confirming call on, iteration k carries step k; the calls of the learning window
//      (usually the first two or three iterations) stay at step 0.
//   3. Tracking. The template is followed call by call: a call equal to the next expected one moves on; once the
//      template is complete, a call equal to its first call starts the next step; any other call is an extra of
//      the current step (a logging AllReduce every N steps, an evaluation every M). When the template's first call
//      is unique in it, seeing it early also starts the next step (the iteration skipped its tail).
//   4. A boundary rule (DETNCCL_STEP_BOUNDARY) replaces all of it: each matching call starts an iteration (the
//      first one iteration 0), or with at=end the call after each matching call does.
// Limits, stated in the docs: a block of calls repeated back to back inside one iteration, with nothing between
// the blocks (kLongestRun identical calls, or the same tensor-parallel pair per layer twice in a row before
// anything else), is taken for the iteration; an iteration whose first call also occurs as an extra between
// iterations starts a step there. Name the boundary for such jobs. Learning gives up after kMaxLearningCalls calls
// without a confirmed template, or once it has seen kMaxLearningSignatures different calls (the steps stay 0).
#ifndef DETNCCL_STEPS_STEP_INFERENCE_H
#define DETNCCL_STEPS_STEP_INFERENCE_H

#include <array>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "records/log_format.h"
#include "steps/step_boundary.h"

namespace detnccl::steps {

// What identifies a call for the pattern: communicator ordinal, operation, datatype, reduction operator, count, and
// the root (rooted collectives) or the peer relative to the caller's rank (point-to-point, so that a ring exchange
// has the same signature on every rank). rank and nranks are the caller's in the call's communicator (nranks 0:
// unknown, the peer is then taken as it is).
std::uint64_t call_signature(const records::CallFields& call, std::uint32_t rank, std::uint32_t nranks) noexcept;

// Where the numbering stands.
enum class InferencePhase : std::uint8_t {
  kLearning,  // no template confirmed yet
  kTracking,  // following a confirmed template
  kBoundary,  // a boundary rule numbers the steps
  kGaveUp,    // no template within kMaxLearningCalls: the step stays where it is
};

// The numbering of one process's (one log's) calls, fed in the job's call order. Not thread-safe: the shim calls it
// under a lock.
class StepInference {
 public:
  // Calls learning keeps before it gives up (2 MiB of signatures), and distinct signatures (a few MiB of run
  // starts): bounds on the shim's memory for a job that never repeats.
  static constexpr std::size_t kMaxLearningCalls = std::size_t{1} << 18;
  static constexpr std::size_t kMaxLearningSignatures = std::size_t{1} << 15;
  // Equal calls in one run after which learning takes them as one-call iterations.
  static constexpr std::uint64_t kLongestRun = 16;
  // Earlier runs of a signature that each open a candidate.
  static constexpr std::size_t kCandidateStarts = 8;

  // Numbering from the call pattern, or by `boundary` when it names a call.
  explicit StepInference(const StepBoundary& boundary = {});

  // The step of the next call of the sequence.
  std::uint64_t next(const records::CallFields& call, std::uint32_t rank, std::uint32_t nranks);

  InferencePhase phase() const noexcept { return phase_; }
  // The confirmed template's length in calls, and the number of calls before its first instance (set-up); 0 while
  // learning.
  std::size_t template_length() const noexcept { return template_.size(); }
  std::uint64_t setup_calls() const noexcept { return setup_calls_; }
  // Calls numbered so far, and the step of the last one.
  std::uint64_t calls() const noexcept { return calls_; }
  std::uint64_t step() const noexcept { return step_; }

 private:
  std::uint64_t learn(std::uint64_t signature);
  std::uint64_t track(std::uint64_t signature);
  std::uint64_t by_boundary(const records::CallFields& call);

  StepBoundary boundary_;
  InferencePhase phase_ = InferencePhase::kLearning;
  std::uint64_t step_ = 0;
  std::uint64_t calls_ = 0;

  // Learning: every signature so far, the latest run starts of each, the open candidates.
  struct Candidate {
    std::uint64_t start = 0;     // index in seen_ of the template's first call
    std::uint64_t length = 0;    // calls in the template
    std::uint64_t verified = 0;  // calls of its second instance matched so far
  };
  std::vector<std::uint64_t> seen_;
  struct RunStarts {
    std::array<std::uint64_t, kCandidateStarts> latest{};  // latest first
    std::size_t count = 0;
  };
  std::unordered_map<std::uint64_t, RunStarts> run_starts_;
  std::vector<Candidate> candidates_;
  void confirm(std::uint64_t start, std::uint64_t length);

  // Tracking.
  std::vector<std::uint64_t> template_;
  std::size_t position_ = 0;  // calls of the current iteration's template matched
  bool started_ = false;      // the template's first call has been seen (it started step 0)
  bool first_call_unique_ = false;
  std::uint64_t setup_calls_ = 0;

  // Boundary: the previous call ended an iteration (at=end); a matching call was seen (at=start).
  bool boundary_pending_ = false;
  bool boundary_seen_ = false;
};

}  // namespace detnccl::steps

#endif  // DETNCCL_STEPS_STEP_INFERENCE_H
