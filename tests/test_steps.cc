// Tests of steps/: the iteration numbering from the call pattern (step_inference.h) on call sequences built here
// with the iteration each call belongs to, the boundary rule and its text (step_boundary.h), and the settings
// that choose them (DETNCCL_STEP_INFERENCE, DETNCCL_STEP_BOUNDARY).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "config/config.h"
#include "records/log_format.h"
#include "steps/step_boundary.h"
#include "steps/step_inference.h"

namespace {

using detnccl::records::CallFields;
using detnccl::records::OpId;
using detnccl::steps::BoundarySide;
using detnccl::steps::InferencePhase;
using detnccl::steps::StepBoundary;
using detnccl::steps::StepInference;

constexpr std::int32_t kFloat32 = 7;
constexpr std::int32_t kInt32 = 2;

// A job's calls, each with the iteration it belongs to (set-up calls: iteration 0, which they share with the
// first iteration).
class Sequence {
 public:
  void add(std::uint64_t iteration, OpId op, std::uint64_t count, std::int32_t peer = -1, std::uint64_t comm = 0,
           std::int32_t datatype = kFloat32) {
    CallFields call;
    call.seq = calls_.size();
    call.comm_ordinal = comm;
    call.op = op;
    call.count = count;
    call.datatype = static_cast<std::uint16_t>(datatype);
    call.redop = op == OpId::kAllReduce ? 0 : -1;
    call.peer = peer;
    calls_.push_back(call);
    iterations_.push_back(iteration);
  }

  // The steps `inference` gives each call, as rank `rank` of `nranks`.
  std::vector<std::uint64_t> steps(StepInference& inference, std::uint32_t rank = 0, std::uint32_t nranks = 4) const {
    std::vector<std::uint64_t> out;
    for (const CallFields& call : calls_) out.push_back(inference.next(call, rank, nranks));
    return out;
  }

  const std::vector<std::uint64_t>& iterations() const { return iterations_; }
  std::size_t size() const { return calls_.size(); }

 private:
  std::vector<CallFields> calls_;
  std::vector<std::uint64_t> iterations_;
};

// The rule's promise: step 0 while learning, then from the confirming call on exactly the iteration; learning ends
// by the end of iteration `learned_by` (the sequences below say when, from the rule).
void expect_exact_after_learning(const std::vector<std::uint64_t>& steps, const std::vector<std::uint64_t>& iterations,
                                 std::uint64_t learned_by) {
  ASSERT_EQ(steps.size(), iterations.size());
  std::size_t confirmed = 0;
  while (confirmed < steps.size() && steps[confirmed] == 0 && iterations[confirmed] <= learned_by) ++confirmed;
  for (std::size_t i = confirmed; i < steps.size(); ++i) {
    ASSERT_EQ(steps[i], iterations[i]) << "call " << i << " (learning ended at call " << confirmed << ")";
  }
  EXPECT_GT(confirmed, 0u);
}

// The job of the issue: parameter broadcasts, then per iteration three gradient buckets of different sizes, a
// Send/Recv ring, a logging AllReduce every third iteration (from iteration 0) and an evaluation every fourth.
Sequence data_parallel_job(int iterations, std::uint32_t rank, std::uint32_t nranks) {
  Sequence job;
  job.add(0, OpId::kBroadcast, 4096, 0);
  job.add(0, OpId::kBroadcast, 1024, 0);
  const auto next = static_cast<std::int32_t>((rank + 1) % nranks);
  const auto previous = static_cast<std::int32_t>((rank + nranks - 1) % nranks);
  for (int i = 0; i < iterations; ++i) {
    const auto it = static_cast<std::uint64_t>(i);
    job.add(it, OpId::kAllReduce, 4096);
    job.add(it, OpId::kAllReduce, 1024);
    job.add(it, OpId::kAllReduce, 300);
    job.add(it, OpId::kSend, 64, next);
    job.add(it, OpId::kRecv, 64, previous);
    if (i % 3 == 0) job.add(it, OpId::kAllReduce, 1);
    if (i % 4 == 3) job.add(it, OpId::kAllGather, 8);
  }
  return job;
}

TEST(StepInference, NumbersEveryIterationOfADataParallelJobOnceLearned) {
  const Sequence job = data_parallel_job(40, 0, 4);
  StepInference inference;
  // Iteration 0 has the logging AllReduce, iteration 1 not: the template is confirmed by the end of iteration 2.
  expect_exact_after_learning(job.steps(inference), job.iterations(), 2);
  EXPECT_EQ(inference.phase(), InferencePhase::kTracking);
  EXPECT_EQ(inference.template_length(), 5u) << "three buckets and the ring; logging and evaluation are extras";
}

TEST(StepInference, EveryRankOfARingNumbersTheSame) {
  for (std::uint32_t rank = 0; rank < 8; ++rank) {
    const Sequence job = data_parallel_job(25, rank, 8);
    StepInference inference;
    SCOPED_TRACE("rank " + std::to_string(rank));
    expect_exact_after_learning(job.steps(inference, rank, 8), job.iterations(), 2);
  }
}

TEST(StepInference, TwoRunsOfTheSameJobNumberAlike) {
  const Sequence job = data_parallel_job(30, 2, 4);
  StepInference first;
  StepInference second;
  EXPECT_EQ(job.steps(first, 2), job.steps(second, 2));
}

// Buckets of equal size (a transformer's identical layers): the iteration is the whole run of them and what follows.
TEST(StepInference, EqualBucketsInOneIterationAreOneIteration) {
  Sequence job;
  job.add(0, OpId::kBroadcast, 512, 0);
  for (std::uint64_t i = 0; i < 20; ++i) {
    for (int bucket = 0; bucket < 4; ++bucket) job.add(i, OpId::kAllReduce, 1000);
    job.add(i, OpId::kAllReduce, 77);
  }
  StepInference inference;
  expect_exact_after_learning(job.steps(inference), job.iterations(), 1);
  EXPECT_EQ(inference.template_length(), 5u);
}

// A periodic extra in the very first iteration (logging at iteration 0) must not become part of the iteration.
TEST(StepInference, AnExtraCallInTheFirstIterationIsNotPartOfTheTemplate) {
  Sequence job;
  for (std::uint64_t i = 0; i < 30; ++i) {
    job.add(i, OpId::kAllReduce, 100);
    job.add(i, OpId::kReduceScatter, 50);
    job.add(i, OpId::kAllGather, 50);
    if (i % 5 == 0) job.add(i, OpId::kAllReduce, 1, -1, 0, kInt32);
  }
  StepInference inference;
  expect_exact_after_learning(job.steps(inference), job.iterations(), 2);
  EXPECT_EQ(inference.template_length(), 3u);
}

// An evaluation block of several calls every M iterations, placed between iterations.
TEST(StepInference, AnEvaluationBlockBetweenIterationsStaysInItsIteration) {
  Sequence job;
  for (std::uint64_t i = 0; i < 24; ++i) {
    job.add(i, OpId::kAllReduce, 100);
    job.add(i, OpId::kAllReduce, 200);
    if (i % 6 == 5) {
      for (int k = 0; k < 3; ++k) job.add(i, OpId::kAllGather, 16);
      job.add(i, OpId::kAllReduce, 2);
    }
  }
  StepInference inference;
  expect_exact_after_learning(job.steps(inference), job.iterations(), 1);
}

// Two communicators (data-parallel and tensor-parallel): calls of equal shape on different communicators differ.
TEST(StepInference, CallsOnOtherCommunicatorsAreOtherCalls) {
  Sequence job;
  for (std::uint64_t i = 0; i < 15; ++i) {
    job.add(i, OpId::kAllReduce, 256, -1, 1);
    job.add(i, OpId::kAllReduce, 256, -1, 2);
    job.add(i, OpId::kAllReduce, 256, -1, 1);
    job.add(i, OpId::kAllReduce, 4096, -1, 0);
  }
  StepInference inference;
  expect_exact_after_learning(job.steps(inference), job.iterations(), 1);
}

// One call per iteration: no run of equal calls ever ends, so learning takes kLongestRun of them as iterations
// and numbers exactly from then on.
TEST(StepInference, OneCallIterationsAreNumberedOnceTheRunIsLongEnough) {
  Sequence job;
  job.add(0, OpId::kBroadcast, 10, 0);
  for (std::uint64_t i = 0; i < 100; ++i) job.add(i, OpId::kAllReduce, 1000);
  StepInference inference;
  const std::vector<std::uint64_t> steps = job.steps(inference);
  constexpr std::uint64_t kRun = StepInference::kLongestRun;
  for (std::size_t call = 1; call < job.size(); ++call) {
    const std::uint64_t iteration = job.iterations()[call];
    EXPECT_EQ(steps[call], iteration + 1 < kRun ? 0 : iteration) << "call " << call;
  }
}

// An iteration that skips its tail (a conditional call absent) starts the next step at its unique first call.
TEST(StepInference, AnIterationThatEndsEarlyStillEndsAtTheNextFirstCall) {
  Sequence job;
  for (std::uint64_t i = 0; i < 20; ++i) {
    job.add(i, OpId::kAllReduce, 10);
    job.add(i, OpId::kAllReduce, 20);
    if (i != 9) job.add(i, OpId::kAllReduce, 30);
  }
  StepInference inference;
  expect_exact_after_learning(job.steps(inference), job.iterations(), 1);
}

// A sequence without repetition: learning gives up once it has seen kMaxLearningSignatures different calls, and
// the step stays where it was.
TEST(StepInference, GivesUpOnASequenceThatNeverRepeats) {
  StepInference inference;
  CallFields call;
  call.op = OpId::kAllReduce;
  call.datatype = kFloat32;
  for (std::uint64_t i = 0; i <= StepInference::kMaxLearningSignatures; ++i) {
    EXPECT_EQ(inference.phase(), InferencePhase::kLearning) << "call " << i;
    call.count = i + 1;
    ASSERT_EQ(inference.next(call, 0, 2), 0u) << "call " << i;
  }
  EXPECT_EQ(inference.phase(), InferencePhase::kGaveUp);
  call.count = 1;
  EXPECT_EQ(inference.next(call, 0, 2), 0u);
}

// Few calls but never twice in the same order (each call a new pair of them): learning gives up after
// kMaxLearningCalls calls.
TEST(StepInference, GivesUpAfterItsBudgetOfCalls) {
  StepInference inference;
  CallFields call;
  call.op = OpId::kAllReduce;
  call.datatype = kFloat32;
  // A square-free sequence over three calls (the Thue-Morse difference sequence) repeats no block twice in a row,
  // so no candidate is ever confirmed.
  for (std::uint64_t i = 0; i < StepInference::kMaxLearningCalls; ++i) {
    const int ones_before = __builtin_popcountll(i) & 1;
    const int ones_after = __builtin_popcountll(i + 1) & 1;
    call.count = static_cast<std::uint64_t>(1 + ones_after - ones_before + 1);  // 1, 2 or 3
    ASSERT_EQ(inference.next(call, 0, 2), 0u) << "call " << i;
  }
  EXPECT_EQ(inference.phase(), InferencePhase::kGaveUp);
}

TEST(StepBoundary, StartsAStepAtEachMatchingCall) {
  const Sequence job = data_parallel_job(12, 1, 4);
  StepBoundary boundary;
  ASSERT_FALSE(detnccl::steps::parse_step_boundary("AllReduce,count=4096", boundary));
  StepInference inference(boundary);
  EXPECT_EQ(inference.phase(), InferencePhase::kBoundary);
  EXPECT_EQ(job.steps(inference, 1), job.iterations());
}

TEST(StepBoundary, AtEndStartsAStepAfterEachMatchingCall) {
  Sequence job;
  for (std::uint64_t i = 0; i < 10; ++i) {
    job.add(i, OpId::kAllReduce, 5);
    job.add(i, OpId::kAllReduce, 5);
    job.add(i, OpId::kBroadcast, 1, 0, 3);  // the iteration's last call, on communicator 3
  }
  StepBoundary boundary;
  ASSERT_FALSE(detnccl::steps::parse_step_boundary("broadcast,comm=3,at=end", boundary));
  EXPECT_EQ(boundary.side, BoundarySide::kEnd);
  StepInference inference(boundary);
  EXPECT_EQ(job.steps(inference), job.iterations());
}

TEST(StepBoundary, ParsesAndPrintsItsText) {
  StepBoundary boundary;
  ASSERT_FALSE(detnccl::steps::parse_step_boundary("ALLREDUCE,Count=1,datatype=BFloat16,comm=2,at=end", boundary));
  EXPECT_EQ(detnccl::steps::format_step_boundary(boundary), "AllReduce,count=1,datatype=bfloat16,comm=2,at=end");
  EXPECT_TRUE(boundary.matches(static_cast<std::uint16_t>(OpId::kAllReduce), 1, 9, 2));
  EXPECT_FALSE(boundary.matches(static_cast<std::uint16_t>(OpId::kAllReduce), 2, 9, 2));
  EXPECT_FALSE(boundary.matches(static_cast<std::uint16_t>(OpId::kAllReduce), 1, 7, 2));
  EXPECT_FALSE(boundary.matches(static_cast<std::uint16_t>(OpId::kAllReduce), 1, 9, 0));
  EXPECT_FALSE(boundary.matches(static_cast<std::uint16_t>(OpId::kReduce), 1, 9, 2));
  StepBoundary again;
  ASSERT_FALSE(detnccl::steps::parse_step_boundary(detnccl::steps::format_step_boundary(boundary), again));
  EXPECT_EQ(again, boundary);
  for (const char* bad : {"", "AllReduces", "AllReduce,", ",count=1", "AllReduce,count=x", "AllReduce,count=",
                          "AllReduce,datatype=float", "AllReduce,at=middle", "AllReduce,color=1", "AllReduce,count",
                          "AllReduce,count=1,count=2", "AllReduce,comm=-1", "AllReduce,count=99999999999999999999"}) {
    StepBoundary untouched;
    EXPECT_TRUE(detnccl::steps::parse_step_boundary(bad, untouched).has_value()) << "'" << bad << "'";
    EXPECT_FALSE(untouched.enabled()) << "'" << bad << "'";
  }
}

detnccl::config::ParsedConfig parse(std::vector<std::string_view> environment) {
  return detnccl::config::parse_config(environment);
}

TEST(StepSettings, ChooseTheNumbering) {
  const auto defaults = parse({"DETNCCL_DIR=/d"});
  ASSERT_TRUE(defaults.ok()) << defaults.error_text();
  EXPECT_EQ(defaults.config().step_inference, detnccl::config::StepInferenceMode::kAuto);
  EXPECT_FALSE(defaults.config().step_boundary.enabled());
  const auto boundary = parse({"DETNCCL_DIR=/d", "DETNCCL_STEP_BOUNDARY=Send,count=64"});
  ASSERT_TRUE(boundary.ok()) << boundary.error_text();
  EXPECT_EQ(boundary.config().step_boundary.op, static_cast<std::uint16_t>(OpId::kSend));
  EXPECT_EQ(boundary.config().step_boundary.count, 64u);
  const auto calls = parse({"DETNCCL_DIR=/d", "DETNCCL_STEP_INFERENCE=Calls"});
  ASSERT_TRUE(calls.ok()) << calls.error_text();
  EXPECT_EQ(calls.config().step_inference, detnccl::config::StepInferenceMode::kCalls);
}

TEST(StepSettings, RefuseABoundaryThatCannotApplyAndNameTheVariable) {
  const auto conflict = parse({"DETNCCL_DIR=/d", "DETNCCL_STEP_INFERENCE=off", "DETNCCL_STEP_BOUNDARY=AllReduce"});
  ASSERT_FALSE(conflict.ok());
  EXPECT_NE(conflict.error_text().find("DETNCCL_STEP_BOUNDARY=AllReduce has no effect"), std::string::npos)
      << conflict.error_text();
  const auto bad = parse({"DETNCCL_DIR=/d", "DETNCCL_STEP_BOUNDARY=AllReduce,count=many"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error_text().find("DETNCCL_STEP_BOUNDARY"), std::string::npos) << bad.error_text();
  EXPECT_NE(bad.error_text().find("at=start or end"), std::string::npos) << "the accepted values";
  const auto bad_mode = parse({"DETNCCL_DIR=/d", "DETNCCL_STEP_INFERENCE=maybe"});
  ASSERT_FALSE(bad_mode.ok());
  EXPECT_NE(bad_mode.error_text().find("auto, calls or off"), std::string::npos) << bad_mode.error_text();
}

}  // namespace
