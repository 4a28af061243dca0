// PyTorch steps with no code change (docs/python.md), end to end: tests/autostep_job.py, a PyTorch training job on
// hostnccl with no detnccl code in it, runs under `detnccl run` (around hostnccl-run and inside it), and each record's
// step, read back with `detnccl dump --format jsonl`, is what the rule gives for what the job says it did (its events:
// optimizers constructed and stepped, marks, NCCL calls). Also: a job that never imports torch, the settings that
// turn the hook off, and a sitecustomize of the job's own. Debian's python3-torch is required: without it these tests
// fail, saying to run scripts/install-deps.sh.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_support.h"

namespace {

namespace fs = std::filesystem;
using detnccl::test::CommandResult;
using detnccl::test::TempDir;

const std::string kPython = DETNCCL_TEST_PYTHON;
const std::string kJob = kPython + " " DETNCCL_AUTOSTEP_JOB " --nccl " DETNCCL_HOSTNCCL_LIBRARY;
const std::string kLauncher = DETNCCL_LAUNCHER " --timeout 120 --grace 1";
constexpr int kRanks = 2;
// An optimizer leaves the minimum once another has taken more than this many steps since its last (docs/python.md).
constexpr std::uint64_t kStaleAfterSteps = 64;

// Runs a command through the shell with a clean environment for detnccl and Python (no preload, no PYTHONPATH, no
// step setting inherited from whoever runs the tests); stdout and stderr together.
CommandResult run(const std::string& command) {
  return detnccl::test::run_command(
      "unset LD_PRELOAD PYTHONPATH DETNCCL_STEP_INFERENCE DETNCCL_STEP_BOUNDARY; export HOSTNCCL_TIMEOUT_S=20 "
      "PYTHONDONTWRITEBYTECODE=1; (" +
      command + ") 2>&1");
}

// These tests are about PyTorch: a Python without it fails them, never skips them.
::testing::AssertionResult torch_is_importable() {
  static const CommandResult probe = run(kPython + " -c 'import torch'");
  if (probe.exit_code == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << kPython << " cannot import torch: run scripts/install-deps.sh (it installs "
                                       << "python3-torch). " << probe.output;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream stream(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  return lines;
}

// What a call's record must say, from the job's events.
struct ExpectedCall {
  std::uint64_t step = 0;
  std::string source;  // "marked", "optimizer", or empty: neither (the shim's own numbering, whatever it is)
  int iteration = -1;  // the job's iteration (-1: before the first)
  std::uint64_t steps_before = 0;  // optimizer.step() calls of any optimizer before the call
};

// The rule of docs/python.md, the plain way: the step is the minimum count over the optimizers that have stepped,
// leaving out each one another optimizer has taken more than 64 steps since; 0 from the first construction; the
// job's own marks win.
std::vector<ExpectedCall> expected_calls(const std::vector<std::string>& events) {
  std::optional<std::uint64_t> mark, optimizer_step;
  std::map<std::string, std::uint64_t> counts;
  std::map<std::string, std::map<std::string, std::uint64_t>> seen;  // every count, at each optimizer's last step
  int iteration = -1;
  std::uint64_t steps = 0;
  std::vector<ExpectedCall> calls;
  for (const std::string& line : events) {
    std::istringstream words(line);
    std::string kind, name;
    words >> kind >> name;
    if (kind == "construct") {
      if (!optimizer_step) optimizer_step = 0;
    } else if (kind == "step") {
      ++steps;
      ++counts[name];
      seen[name] = counts;
      std::uint64_t minimum = std::numeric_limits<std::uint64_t>::max();
      for (const auto& [optimizer, count] : counts) {
        bool stale = false;
        for (const auto& [other, other_count] : counts) {
          const auto then = seen[optimizer].find(other);
          stale = stale || other_count - (then == seen[optimizer].end() ? 0 : then->second) > kStaleAfterSteps;
        }
        if (!stale) minimum = std::min(minimum, count);
      }
      optimizer_step = minimum;
    } else if (kind == "mark") {
      mark = std::stoull(name);
    } else if (kind == "iteration") {
      iteration = std::stoi(name);
    } else if (kind == "call") {
      ExpectedCall call;
      call.step = mark ? *mark : optimizer_step.value_or(0);
      call.source = mark ? "marked" : optimizer_step ? "optimizer" : "";
      call.iteration = iteration;
      call.steps_before = steps;
      calls.push_back(call);
    }
  }
  return calls;
}

// The call records of one rank's log, as `detnccl dump --format jsonl` shows them.
std::vector<nlohmann::json> dumped_calls(const std::string& run_dir, int rank) {
  const CommandResult dump =
      detnccl::test::run_command(DETNCCL_CLI " dump --format jsonl --rank " + std::to_string(rank) + " " + run_dir);
  EXPECT_EQ(dump.exit_code, 0) << dump.output;
  std::vector<nlohmann::json> calls;
  std::istringstream lines(dump.output);
  for (std::string line; std::getline(lines, line);) {
    nlohmann::json record = nlohmann::json::parse(line);
    if (record["type"] == "call") calls.push_back(record);
  }
  return calls;
}

// Every rank's records carry the steps the rule gives for its events; returns each rank's expected calls.
std::vector<std::vector<ExpectedCall>> expect_steps(const TempDir& dir, const std::string& run_name) {
  std::vector<std::vector<ExpectedCall>> all;
  for (int rank = 0; rank < kRanks; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const std::vector<ExpectedCall> expected = expected_calls(read_lines(dir / ("events-" + std::to_string(rank))));
    const std::vector<nlohmann::json> calls = dumped_calls(dir / run_name, rank);
    EXPECT_GT(expected.size(), 0u);
    EXPECT_EQ(calls.size(), expected.size()) << "the job's calls and the log's records";
    for (std::size_t i = 0; i < std::min(calls.size(), expected.size()); ++i) {
      SCOPED_TRACE("call " + std::to_string(i) + ": " + calls[i].dump());
      if (expected[i].source.empty()) {
        EXPECT_NE(calls[i]["step_source"], "optimizer");
        EXPECT_NE(calls[i]["step_source"], "marked");
      } else {
        EXPECT_EQ(calls[i]["step_source"], expected[i].source);
        EXPECT_EQ(calls[i]["step"], expected[i].step);
      }
    }
    all.push_back(expected);
  }
  return all;
}

// The job, traced by `detnccl run --dir DIR --run NAME` around hostnccl-run (inside = false) or inside it.
CommandResult run_job(const TempDir& dir, const std::string& run_name, const std::string& job_arguments,
                      bool inside = false, const std::string& environment = "") {
  const std::string traced = DETNCCL_CLI " run --dir " + dir.path() + " --run " + run_name + " -- ";
  const std::string job = kJob + " --events " + (dir / "events") + " " + job_arguments;
  const std::string launched = inside ? kLauncher + " -n 2 -- " + traced + job : traced + kLauncher + " -n 2 -- " + job;
  return run(environment + launched);
}

TEST(Autostep, ATrainingLoopsStepsAreItsOptimizerStepsWithNoCodeChange) {
  ASSERT_TRUE(torch_is_importable());
  TempDir dir;
  const CommandResult job = run_job(dir, "plain", "--mode plain --iterations 6");
  ASSERT_EQ(job.exit_code, 0) << job.output;
  for (const std::vector<ExpectedCall>& calls : expect_steps(dir, "plain")) {
    ASSERT_EQ(calls.size(), 4u + 6u) << "a broadcast per parameter, then one AllReduce per iteration";
    for (const ExpectedCall& call : calls) {
      EXPECT_EQ(call.source, "optimizer");
      EXPECT_EQ(call.step, call.steps_before) << "the number of optimizer.step() calls before the call";
      EXPECT_EQ(call.step, static_cast<std::uint64_t>(std::max(call.iteration, 0)));
    }
  }
}

// hostnccl-run starting `detnccl run` on each rank; four micro-batches per optimizer.step(), one AllReduce each.
TEST(Autostep, GradientAccumulationIsOneStepPerOptimizerStep) {
  ASSERT_TRUE(torch_is_importable());
  TempDir dir;
  const CommandResult job = run_job(dir, "accumulate", "--mode accumulate --iterations 5", /*inside=*/true);
  ASSERT_EQ(job.exit_code, 0) << job.output;
  for (const std::vector<ExpectedCall>& calls : expect_steps(dir, "accumulate")) {
    ASSERT_EQ(calls.size(), 4u + 5u * 4u);
    for (const ExpectedCall& call : calls) {
      EXPECT_EQ(call.step, call.steps_before);
      EXPECT_EQ(call.step, static_cast<std::uint64_t>(std::max(call.iteration, 0)));
    }
  }
}

// A generator, a critic stepping three times per generator step, and a helper optimizer stepped once and then
// forgotten: the minimum rule on every call, and once the critic has taken more than 64 steps since the helper's,
// iteration K's calls carry step K.
TEST(Autostep, SeveralOptimizersGiveTheMinimumOfTheLiveOnesSteps) {
  ASSERT_TRUE(torch_is_importable());
  TempDir dir;
  constexpr int kIterations = 25;  // the critic's 65th step is in iteration 21
  const CommandResult job = run_job(dir, "gan", "--mode gan --iterations " + std::to_string(kIterations));
  ASSERT_EQ(job.exit_code, 0) << job.output;
  for (const std::vector<ExpectedCall>& calls : expect_steps(dir, "gan")) {
    int late = 0;
    for (const ExpectedCall& call : calls) {
      EXPECT_EQ(call.source, "optimizer");
      if (call.iteration >= 1 && call.iteration < 21) {
        EXPECT_EQ(call.step, 1u) << "the helper holds the minimum";
      }
      if (call.iteration >= 22) {
        EXPECT_EQ(call.step, static_cast<std::uint64_t>(call.iteration));
        ++late;
      }
    }
    EXPECT_EQ(late, 3 * 4);
  }
}

TEST(Autostep, TheJobsOwnMarksWin) {
  ASSERT_TRUE(torch_is_importable());
  TempDir dir;
  const CommandResult job =
      run_job(dir, "marked", "--mode marked --iterations 4 --helper-dir " DETNCCL_PYTHON_HELPER_DIR);
  ASSERT_EQ(job.exit_code, 0) << job.output;
  for (const std::vector<ExpectedCall>& calls : expect_steps(dir, "marked")) {
    ASSERT_EQ(calls.size(), 4u + 4u);
    for (const ExpectedCall& call : calls) {
      EXPECT_EQ(call.source, "marked");
      EXPECT_EQ(call.step, call.iteration < 0 ? 500u : 1000u + 7u * static_cast<std::uint64_t>(call.iteration));
    }
  }
}

TEST(Autostep, AJobThatNeverImportsTorchIsLeftAlone) {
  TempDir dir;
  const CommandResult job = run_job(dir, "notorch", "--mode notorch --iterations 3");
  ASSERT_EQ(job.exit_code, 0) << job.output;
  EXPECT_EQ(job.output.find("detnccl:"), std::string::npos) << job.output;
  for (const std::vector<ExpectedCall>& calls : expect_steps(dir, "notorch")) {
    EXPECT_EQ(calls.size(), 3u);
    for (const ExpectedCall& call : calls) EXPECT_EQ(call.source, "");
  }
  for (int rank = 0; rank < kRanks; ++rank) {
    const std::vector<std::string> events = read_lines(dir / ("events-" + std::to_string(rank)));
    EXPECT_NE(std::find(events.begin(), events.end(), "torch-imported 0"), events.end()) << rank;
    EXPECT_NE(std::find(events.begin(), events.end(), "hook-armed 1"), events.end())
        << rank << ": the hook waits for torch (so this test would see it, were it to import torch)";
  }
}

// Whether detnccl's import hook is armed in a Python started by `detnccl run` with `environment`.
std::string hook_armed(const std::string& environment, const std::string& run_options = "") {
  const CommandResult probe =
      run(environment + " " DETNCCL_CLI " run " + run_options + " -- " + kPython +
          " -c 'import sys; print(any(type(f).__name__ == \"DetncclOptimizerImportHook\" for f in sys.meta_path))'");
  EXPECT_EQ(probe.exit_code, 0) << probe.output;
  return probe.output;
}

// The user chose another numbering: the call pattern (calls), none (off), or a boundary call.
TEST(Autostep, StepSettingsThatChooseAnotherNumberingLeaveTorchAlone) {
  EXPECT_EQ(hook_armed(""), "True\n");
  EXPECT_EQ(hook_armed("DETNCCL_STEP_INFERENCE=auto"), "True\n");
  EXPECT_EQ(hook_armed("DETNCCL_STEP_INFERENCE=Calls"), "False\n");
  EXPECT_EQ(hook_armed("DETNCCL_STEP_INFERENCE=OFF"), "False\n");
  EXPECT_EQ(hook_armed("DETNCCL_STEP_BOUNDARY=AllReduce,count=8"), "False\n");
  EXPECT_EQ(hook_armed(""), "True\n");
  EXPECT_EQ(hook_armed("", "--no-python-steps"), "False\n");
  // Without the shim in the process: nothing, even with the folder on PYTHONPATH.
  const CommandResult plain = run("PYTHONPATH=" DETNCCL_AUTOSTEP_DIR " " + kPython +
                                  " -c 'import sys; print(sorted(type(f).__name__ for f in sys.meta_path))'");
  EXPECT_EQ(plain.output.find("Detnccl"), std::string::npos) << plain.output;
  EXPECT_EQ(plain.exit_code, 0) << plain.output;
}

// A second copy of the hook's folder on PYTHONPATH (an installed one after the build tree's): ours runs it, as the
// sitecustomize it hides, and it arms no second hook.
TEST(Autostep, ASecondCopyOfTheHookArmsNoSecondHook) {
  TempDir dir;
  fs::copy(DETNCCL_AUTOSTEP_DIR, dir / "copy");
  const CommandResult probe =
      run("PYTHONPATH=" + (dir / "copy") + " " DETNCCL_CLI " run -- " + kPython +
          " -c 'import sys; print(sum(type(f).__name__ == \"DetncclOptimizerImportHook\" for f in sys.meta_path), "
          "sys.modules[\"sitecustomize\"]._shadowed_sitecustomize.__file__)'");
  EXPECT_EQ(probe.output, "1 " + (dir / "copy/sitecustomize.py") + "\n");
}

// A failure of ours (here: the hook's module is missing from its folder) is one line on stderr, and the job goes on.
TEST(Autostep, AFailureOfTheHookIsOneLineAndTheJobGoesOn) {
  ASSERT_TRUE(torch_is_importable());
  TempDir dir;
  fs::create_directory(dir / "broken");
  fs::copy_file(DETNCCL_AUTOSTEP_DIR "/sitecustomize.py", dir / "broken/sitecustomize.py");
  const CommandResult job = run("PYTHONPATH=" + (dir / "broken") + " LD_PRELOAD=" DETNCCL_SHIM_PATH " " + kPython +
                                " -c 'import torch; torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1); "
                                "print(\"went on\")'");
  EXPECT_EQ(job.exit_code, 0) << job.output;
  const std::size_t line = job.output.find("detnccl: PyTorch optimizer steps are not tracked (FileNotFoundError: ");
  EXPECT_EQ(line, 0u) << job.output;
  EXPECT_EQ(job.output.substr(job.output.find('\n') + 1), "went on\n") << job.output;
}

// A sitecustomize of the job's own, on its PYTHONPATH, still runs (ours runs it), and the steps still come from
// the optimizer.
TEST(Autostep, TheJobsOwnSitecustomizeStillRuns) {
  ASSERT_TRUE(torch_is_importable());
  TempDir dir;
  fs::create_directory(dir / "site");
  std::ofstream(dir / "site/sitecustomize.py") << "import os\nopen(os.environ['SITE_MARK'] + os.environ['RANK'], "
                                                  "'w').write(__name__ + ' ' + __file__)\n";
  const CommandResult job = run_job(dir, "site", "--mode plain --iterations 2", /*inside=*/false,
                                    "export PYTHONPATH=" + (dir / "site") + " SITE_MARK=" + (dir / "ran-") + "; ");
  ASSERT_EQ(job.exit_code, 0) << job.output;
  for (int rank = 0; rank < kRanks; ++rank) {
    EXPECT_EQ(read_lines(dir / ("ran-" + std::to_string(rank))),
              std::vector<std::string>{"sitecustomize " + (dir / "site/sitecustomize.py")});
  }
  expect_steps(dir, "site");
  // One that fails is reported as Python reports it, and the job goes on.
  std::ofstream(dir / "site/sitecustomize.py") << "raise RuntimeError('the job\\'s own failure')\n";
  const CommandResult failing =
      run("PYTHONPATH=" + (dir / "site") + " " DETNCCL_CLI " run -- " + kPython + " -c 'print(\"went on\")'");
  EXPECT_EQ(failing.exit_code, 0) << failing.output;
  EXPECT_EQ(failing.output,
            "Error in sitecustomize; set PYTHONVERBOSE for traceback:\nRuntimeError: the job's own failure\nwent on\n");
}

}  // namespace
