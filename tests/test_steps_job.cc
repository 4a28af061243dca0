// End-to-end tests of step numbering for jobs that mark no steps: unmarked_job (a parameter broadcast, then
// iterations of three gradient buckets, a Send/Recv ring, logging and evaluation extras) under hostnccl-run with the
// shim, its logs read back directly and through `detnccl dump`, `diff` and `stats`. Each rank's job writes what
// iteration each of its calls belongs to (--plan), which is what the records must say.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "records/log_reader.h"
#include "tests/test_support.h"

namespace {

using detnccl::test::CommandResult;
using detnccl::test::TempDir;
using json = nlohmann::json;

constexpr int kRanks = 4;
constexpr int kIterations = 12;
// The job's first iteration has the logging extra and its second not: the rule confirms its template by the end of
// the third (steps/step_inference.h), and numbers exactly from there.
constexpr std::uint64_t kLearnedBy = 2;

CommandResult run(const std::string& command) {
  return detnccl::test::run_command("unset LD_PRELOAD; export HOSTNCCL_TIMEOUT_S=20; (" + command + ") 2>&1");
}

// Runs unmarked_job traced into DIR/RUN with the extra environment and job arguments; each rank's plan goes to
// DIR/RUN.plan.RANK.
void run_job(const TempDir& dir, const std::string& run_name, const std::string& environment = "",
             const std::string& job_arguments = "") {
  const CommandResult job =
      run("env LD_PRELOAD=" DETNCCL_SHIM_PATH " DETNCCL_DIR=" + dir.path() + " DETNCCL_RUN=" + run_name + " " +
          environment + " " DETNCCL_LAUNCHER " --timeout 120 --grace 1 -n " + std::to_string(kRanks) +
          " -- " DETNCCL_UNMARKED_JOB " --iterations " + std::to_string(kIterations) + " --plan " +
          dir / (run_name + ".plan") + " " + job_arguments);
  ASSERT_EQ(job.exit_code, 0) << job.output;
}

struct PlannedCall {
  std::uint64_t iteration = 0;
  std::string op;
};

std::vector<PlannedCall> read_plan(const TempDir& dir, const std::string& run_name, int rank) {
  std::ifstream in(dir / (run_name + ".plan." + std::to_string(rank)));
  std::vector<PlannedCall> plan;
  PlannedCall call;
  while (in >> call.iteration >> call.op) plan.push_back(call);
  return plan;
}

// One rank's call records, in file order (the job is single-threaded: the order it made them).
std::vector<detnccl::records::CallFields> read_calls(const TempDir& dir, const std::string& run_name, int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "/rank-%05d.dnc", rank);
  auto opened = detnccl::records::LogReader::open_file(dir.run(run_name) + name);
  EXPECT_TRUE(opened.reader) << opened.error;
  std::vector<detnccl::records::CallFields> calls;
  if (!opened.reader) return calls;
  detnccl::records::LogRecord record;
  while (opened.reader->next(record)) {
    if (const auto* call = std::get_if<detnccl::records::CallRecord>(&record.record)) calls.push_back(*call);
  }
  return calls;
}

// The records of a rank are the plan's calls, with the rule's steps: 0 while learning, then their iteration.
void expect_inferred_steps(const std::vector<detnccl::records::CallFields>& calls,
                           const std::vector<PlannedCall>& plan) {
  ASSERT_EQ(calls.size(), plan.size());
  std::size_t confirmed = 0;
  while (confirmed < calls.size() && calls[confirmed].step == 0 && plan[confirmed].iteration <= kLearnedBy) {
    ++confirmed;
  }
  EXPECT_GT(confirmed, 0u);
  for (std::size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(detnccl::records::op_name(calls[i].op), plan[i].op) << "call " << i;
    EXPECT_EQ(calls[i].step_source, detnccl::records::StepSource::kInferred) << "call " << i;
    if (i >= confirmed) {
      EXPECT_EQ(calls[i].step, plan[i].iteration) << "call " << i << ", learned at " << confirmed;
    }
  }
}

json diff_json(const std::string& a, const std::string& b, const std::string& options = "") {
  const CommandResult diff =
      detnccl::test::run_command(DETNCCL_CLI " diff --json " + options + " " + a + " " + b + " 2>/dev/null");
  try {
    json out = json::parse(diff.output);
    out["exit_code"] = diff.exit_code;
    return out;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "diff output is not JSON (" << e.what() << "): " << diff.output;
    return json::object();
  }
}

TEST(StepsOfAnUnmarkedJob, AreItsIterationsOnEveryRank) {
  TempDir dir;
  run_job(dir, "a");
  for (int rank = 0; rank < kRanks; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    expect_inferred_steps(read_calls(dir, "a", rank), read_plan(dir, "a", rank));
  }
}

// hostnccl adds in arrival order, as NCCL's choices would: deterministic mode makes unperturbed runs identical.
TEST(StepsOfAnUnmarkedJob, NameThePerturbedIterationAndRankInDiff) {
  TempDir dir;
  run_job(dir, "a", "DETNCCL_DETERMINISTIC=1");
  run_job(dir, "b", "DETNCCL_DETERMINISTIC=1");
  run_job(dir, "c", "DETNCCL_DETERMINISTIC=1", "--perturb-rank 2 --perturb-iteration 6");
  const json same = diff_json(dir.run("a"), dir.run("b"));
  EXPECT_EQ(same["exit_code"], 0) << same.dump(2);
  EXPECT_EQ(same["verdict"], "identical") << same.dump(2);
  const json differs = diff_json(dir.run("a"), dir.run("c"));
  EXPECT_EQ(differs["exit_code"], 1) << differs.dump(2);
  const json& first = differs["first_divergence"];
  EXPECT_EQ(first["rank"], 2) << differs.dump(2);
  EXPECT_EQ(first["step"], 6) << differs.dump(2);
  EXPECT_EQ(first["kind"], "input") << differs.dump(2);
  EXPECT_EQ(first["op"], "AllReduce") << differs.dump(2);
  EXPECT_EQ(first["count"], 4096) << differs.dump(2);
  EXPECT_EQ(differs["step_sources"]["a"], json::array({"inferred"})) << differs.dump(2);
  EXPECT_EQ(differs["steps_comparable"], true) << differs.dump(2);
  const CommandResult text = run(DETNCCL_CLI " diff " + dir.run("a") + " " + dir.run("c"));
  EXPECT_NE(text.output.find("first divergence at step 6 (inferred) on rank 2"), std::string::npos) << text.output;
}

TEST(StepsOfAnUnmarkedJob, AStepWindowFingerprintsExactlyThatIteration) {
  TempDir dir;
  run_job(dir, "w", "DETNCCL_STEPS=6");
  for (int rank = 0; rank < kRanks; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const auto calls = read_calls(dir, "w", rank);
    const auto plan = read_plan(dir, "w", rank);
    ASSERT_EQ(calls.size(), plan.size());
    std::size_t fingerprinted = 0;
    for (std::size_t i = 0; i < calls.size(); ++i) {
      const bool has =
          (calls[i].flags & (detnccl::records::kCallInputFingerprint | detnccl::records::kCallOutputFingerprint)) != 0;
      EXPECT_EQ(has, plan[i].iteration == 6) << "call " << i << " of iteration " << plan[i].iteration;
      fingerprinted += has ? 1 : 0;
    }
    EXPECT_EQ(fingerprinted, 6u) << "iteration 6: three buckets, Send, Recv, the logging AllReduce";
  }
}

TEST(StepsOfAnUnmarkedJob, ABoundaryNumbersFromTheFirstIteration) {
  TempDir dir;
  run_job(dir, "boundary", "DETNCCL_STEP_BOUNDARY=AllReduce,count=4096");
  for (int rank = 0; rank < kRanks; ++rank) {
    const auto calls = read_calls(dir, "boundary", rank);
    const auto plan = read_plan(dir, "boundary", rank);
    ASSERT_EQ(calls.size(), plan.size());
    for (std::size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(calls[i].step, plan[i].iteration) << "rank " << rank << " call " << i;
      EXPECT_EQ(calls[i].step_source, detnccl::records::StepSource::kInferred);
    }
  }
}

TEST(StepsOfAnUnmarkedJob, InferenceOffLeavesEveryCallAtStepZero) {
  TempDir dir;
  run_job(dir, "off", "DETNCCL_STEP_INFERENCE=off");
  for (const auto& call : read_calls(dir, "off", 1)) {
    EXPECT_EQ(call.step, 0u);
    EXPECT_EQ(call.step_source, detnccl::records::StepSource::kNone);
  }
}

// Logs written without numbering (as by an older detnccl) get the shim's numbering from the CLI.
TEST(StepsOfAnUnmarkedJob, OfflineInferenceNumbersOldLogsAsTheShimDoes) {
  TempDir dir;
  run_job(dir, "online");
  run_job(dir, "old", "DETNCCL_STEP_INFERENCE=off DETNCCL_DETERMINISTIC=1");
  run_job(dir, "old-perturbed", "DETNCCL_STEP_INFERENCE=off DETNCCL_DETERMINISTIC=1",
          "--perturb-rank 3 --perturb-iteration 5");
  for (int rank = 0; rank < kRanks; ++rank) {
    const CommandResult dump = detnccl::test::run_command(DETNCCL_CLI " dump --infer-steps --format jsonl --rank " +
                                                          std::to_string(rank) + " " + dir.run("old"));
    ASSERT_EQ(dump.exit_code, 0) << dump.output;
    std::vector<std::uint64_t> dumped;
    std::istringstream lines(dump.output);
    for (std::string line; std::getline(lines, line);) {
      const json record = json::parse(line);
      if (!record.contains("step")) continue;  // the header, communicators, the end
      EXPECT_EQ(record["step_source"], "inferred");
      dumped.push_back(record["step"].get<std::uint64_t>());
    }
    std::vector<std::uint64_t> online;
    for (const auto& call : read_calls(dir, "online", rank)) online.push_back(call.step);
    EXPECT_EQ(dumped, online) << "rank " << rank;
  }
  const json unnumbered = diff_json(dir.run("old"), dir.run("old-perturbed"));
  EXPECT_EQ(unnumbered["first_divergence"]["step"], 0) << unnumbered.dump(2);
  const json numbered = diff_json(dir.run("old"), dir.run("old-perturbed"), "--infer-steps");
  EXPECT_EQ(numbered["first_divergence"]["rank"], 3) << numbered.dump(2);
  EXPECT_EQ(numbered["first_divergence"]["step"], 5) << numbered.dump(2);
  const CommandResult stats = detnccl::test::run_command(DETNCCL_CLI " stats --json --infer-steps " + dir.run("old"));
  ASSERT_EQ(stats.exit_code, 0) << stats.output;
  const json counted = json::parse(stats.output);
  EXPECT_EQ(counted["last_step"], kIterations - 1) << stats.output;
  EXPECT_EQ(counted["step_sources"], json::array({"inferred"})) << stats.output;
  const CommandResult plain = detnccl::test::run_command(DETNCCL_CLI " stats --json " + dir.run("old"));
  EXPECT_EQ(json::parse(plain.output)["step_sources"], json::array({"none"})) << plain.output;
  const CommandResult bad =
      run(DETNCCL_CLI " diff --step-boundary AllReduce,count=x " + dir.run("old") + " " + dir.run("old-perturbed"));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--step-boundary"), std::string::npos) << bad.output;
}

// A run whose job marks its steps against one whose steps were inferred: diff says so, compares the calls without
// their steps, and refuses a step range (which would select different iterations in each).
TEST(StepsOfAnUnmarkedJob, MarkedAgainstInferredStepsAreNotComparedSilently) {
  TempDir dir;
  run_job(dir, "marked", "DETNCCL_DETERMINISTIC=1", "--mark-steps");
  run_job(dir, "inferred", "DETNCCL_DETERMINISTIC=1");
  const auto marked = read_calls(dir, "marked", 0);
  const auto plan = read_plan(dir, "marked", 0);
  ASSERT_EQ(marked.size(), plan.size());
  for (std::size_t i = 2; i < marked.size(); ++i) {  // after the set-up broadcasts, which come before the first mark
    EXPECT_EQ(marked[i].step_source, detnccl::records::StepSource::kMarked) << "call " << i;
    EXPECT_EQ(marked[i].step, plan[i].iteration) << "call " << i;
  }
  const json diff = diff_json(dir.run("marked"), dir.run("inferred"));
  EXPECT_EQ(diff["exit_code"], 0) << diff.dump(2);
  EXPECT_EQ(diff["steps_comparable"], false) << diff.dump(2);
  EXPECT_EQ(diff["step_sources"]["a"], json::array({"marked", "inferred"})) << diff.dump(2);
  EXPECT_EQ(diff["step_sources"]["b"], json::array({"inferred"})) << diff.dump(2);
  bool noted = false;
  for (const auto& note : diff["notes"])
    noted = noted || note.get<std::string>().find("may name different") != std::string::npos;
  EXPECT_TRUE(noted) << diff.dump(2);
  const CommandResult ranged = run(DETNCCL_CLI " diff --from-step 3 " + dir.run("marked") + " " + dir.run("inferred"));
  EXPECT_EQ(ranged.exit_code, 2) << ranged.output;
  EXPECT_NE(ranged.output.find("cannot compare by step"), std::string::npos) << ranged.output;
}

// DETNCCL_TRACE=steps: logs of communicator records and step digests only.
std::vector<detnccl::records::StepDigestRecord> read_digests(const TempDir& dir, const std::string& run_name, int rank,
                                                             std::uint64_t* calls = nullptr) {
  char name[32];
  std::snprintf(name, sizeof name, "/rank-%05d.dnc", rank);
  auto opened = detnccl::records::LogReader::open_file(dir.run(run_name) + name);
  EXPECT_TRUE(opened.reader) << opened.error;
  if (!opened.reader) return {};
  detnccl::records::LogRecord record;
  std::uint64_t call_records = 0;
  while (opened.reader->next(record)) {
    call_records += std::holds_alternative<detnccl::records::CallRecord>(record.record) ? 1 : 0;
  }
  if (calls != nullptr) *calls = call_records;
  return opened.reader->step_digests();
}

TEST(StepDigests, AreEqualOnIdenticalRunsAndDifferExactlyAtThePerturbedStep) {
  TempDir dir;
  const std::string steps_level = "DETNCCL_TRACE=steps DETNCCL_DETERMINISTIC=1";
  run_job(dir, "a", steps_level, "--mark-steps");
  run_job(dir, "b", steps_level, "--mark-steps");
  run_job(dir, "c", steps_level, "--mark-steps --perturb-rank 1 --perturb-iteration 7");
  for (int rank = 0; rank < kRanks; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    std::uint64_t calls = 0;
    const auto a = read_digests(dir, "a", rank, &calls);
    EXPECT_EQ(calls, 0u) << "no call records at DETNCCL_TRACE=steps";
    const auto b = read_digests(dir, "b", rank);
    const auto c = read_digests(dir, "c", rank);
    ASSERT_EQ(a.size(), static_cast<std::size_t>(kIterations)) << "one communicator, one digest per step";
    EXPECT_EQ(a, b);
    ASSERT_EQ(c.size(), a.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].step, i);
      const bool perturbed = rank == 1 && a[i].step == 7;  // rank 1's gradient input at iteration 7
      EXPECT_EQ(a[i].input_digest != c[i].input_digest, perturbed) << "step " << a[i].step;
      EXPECT_EQ(a[i].output_digest, c[i].output_digest) << "the one-ulp change is lost in the sum";
      EXPECT_EQ(a[i].calls, c[i].calls);
    }
  }
  const json same = diff_json(dir.run("a"), dir.run("b"));
  EXPECT_EQ(same["exit_code"], 0) << same.dump(2);
  EXPECT_EQ(same["steps_matching"], kRanks * kIterations) << same.dump(2);
  const json differs = diff_json(dir.run("a"), dir.run("c"));
  EXPECT_EQ(differs["exit_code"], 1) << differs.dump(2);
  EXPECT_EQ(differs["first_step_divergence"]["rank"], 1) << differs.dump(2);
  EXPECT_EQ(differs["first_step_divergence"]["step"], 7) << differs.dump(2);
  EXPECT_EQ(differs["first_step_divergence"]["kind"], "input") << differs.dump(2);
  EXPECT_EQ(differs["first_step_divergence"]["role"], "origin") << differs.dump(2);
  EXPECT_EQ(differs["rerun"], "DETNCCL_TRACE=hash DETNCCL_STEPS=7 DETNCCL_RANKS=1") << differs.dump(2);
  const CommandResult text = run(DETNCCL_CLI " diff " + dir.run("a") + " " + dir.run("c"));
  EXPECT_NE(text.output.find("first divergence at step 7 on rank 1"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("trace it      DETNCCL_TRACE=hash DETNCCL_STEPS=7 DETNCCL_RANKS=1"), std::string::npos)
      << text.output;

  // check matches calls across ranks: logs of digests only leave it nothing to check, and it says so (exit 2).
  const CommandResult check = run(DETNCCL_CLI " check " + dir.run("a"));
  EXPECT_EQ(check.exit_code, 2) << check.output;
  EXPECT_NE(check.output.find("UNDECIDED: the logs hold step digests only"), std::string::npos) << check.output;

  // The settings diff names find the call: the AllReduce of bucket 0 on rank 1, its input.
  run_job(dir, "a7", "DETNCCL_DETERMINISTIC=1 DETNCCL_TRACE=hash DETNCCL_STEPS=7 DETNCCL_RANKS=1", "--mark-steps");
  run_job(dir, "c7", "DETNCCL_DETERMINISTIC=1 DETNCCL_TRACE=hash DETNCCL_STEPS=7 DETNCCL_RANKS=1",
          "--mark-steps --perturb-rank 1 --perturb-iteration 7");
  const json detailed = diff_json(dir.run("a7"), dir.run("c7"));
  EXPECT_EQ(detailed["first_divergence"]["rank"], 1) << detailed.dump(2);
  EXPECT_EQ(detailed["first_divergence"]["step"], 7) << detailed.dump(2);
  EXPECT_EQ(detailed["first_divergence"]["kind"], "input") << detailed.dump(2);
  EXPECT_EQ(detailed["first_divergence"]["count"], 4096) << detailed.dump(2);
}

// A rank killed at the start of an iteration never wrote its last step's digest: diff reports that step on that rank
// as missing in the killed run, never as equal; the steps before it match.
TEST(StepDigests, ATornLastStepIsMissingNotEqual) {
  TempDir dir;
  const std::string steps_level = "DETNCCL_TRACE=steps DETNCCL_DETERMINISTIC=1";
  run_job(dir, "full", steps_level, "--mark-steps");
  const CommandResult killed =
      run("env LD_PRELOAD=" DETNCCL_SHIM_PATH " DETNCCL_DIR=" + dir.path() + " DETNCCL_RUN=killed " + steps_level +
          " " DETNCCL_LAUNCHER " --timeout 120 --grace 1 -n 4 -- " DETNCCL_UNMARKED_JOB " --iterations " +
          std::to_string(kIterations) + " --mark-steps --die-rank 2 --die-iteration 5");
  EXPECT_EQ(killed.exit_code, 128 + 9) << killed.output;
  const auto digests = read_digests(dir, "killed", 2);
  ASSERT_EQ(digests.size(), 4u) << "steps 0-3: step 4's digest is written only when step 5 begins";
  const json diff = diff_json(dir.run("full"), dir.run("killed"));
  EXPECT_EQ(diff["exit_code"], 1) << diff.dump(2);
  EXPECT_EQ(diff["first_step_divergence"]["step"], 4) << diff.dump(2);
  EXPECT_EQ(diff["first_step_divergence"]["kind"], "missing") << diff.dump(2);
  // The other ranks may have been stopped before their first call of step 5 too: rank 2 is among the ranks named.
  bool named = false;
  for (const json& rank : diff["first_step_ranks"]) named = named || rank == 2;
  EXPECT_TRUE(named) << diff.dump(2);
  const CommandResult text = run(DETNCCL_CLI " diff --verbose " + dir.run("full") + " " + dir.run("killed"));
  EXPECT_NE(text.output.find("rank 2: step 4, communicator 0 (4 digests equal before)"), std::string::npos)
      << text.output;
}

}  // namespace
