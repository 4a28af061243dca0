// The shim over a process's life: fork() and the tracer's own failures (tests/shim_process_job.cc, shim preloaded,
// over hostnccl).
//   - A fork()ed child never writes into its parent's log and runs none of the parent's exit work, but keeps the shim:
//     the ranks a parent forks after making the unique id are traced into logs of their own, and deterministic.
//   - When the tracer turns tracing off after a failure of its own (here: out of memory while tracing a group), the
//     log ends with a truncation marker naming it, never with the normal end marker: readers know records are missing.
//   - When the CUDA driver cannot say where a buffer lives, neither the tracer nor deterministic mode guesses.
//   - When the CUDA driver is too old for the CUDA runtime the shim links, deterministic mode stops the job at its
//     start and tracing says once that device fingerprints are off — never an error at each call.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "records/log_reader.h"
#include "records/record_writer.h"
#include "tests/log_support.h"
#include "tests/test_support.h"

namespace {

using detnccl::records::CallRecord;
using detnccl::records::LogEndKind;
using detnccl::test::environment_with;
using detnccl::test::occurrences;
using detnccl::test::ProcessOutcome;
using detnccl::test::run_process;
using detnccl::test::TempDir;

constexpr std::chrono::seconds kDeadline{120};

using detnccl::test::Log;
using detnccl::test::rank_log;
using detnccl::test::read_log;

ProcessOutcome process_job(const TempDir& scratch, const std::vector<std::string>& arguments,
                           const std::vector<std::string>& environment) {
  std::vector<std::string> argv = {DETNCCL_SHIM_PROCESS_JOB};
  argv.insert(argv.end(), arguments.begin(), arguments.end());
  std::vector<std::string> extra = {"HOSTNCCL_TIMEOUT_S=30"};
  const bool own_preload = std::any_of(environment.begin(), environment.end(),
                                       [](const std::string& entry) { return entry.rfind("LD_PRELOAD=", 0) == 0; });
  if (!own_preload) extra.push_back("LD_PRELOAD=" DETNCCL_SHIM_PATH);
  extra.insert(extra.end(), environment.begin(), environment.end());
  // RANK and WORLD_SIZE of an enclosing launcher would name the parent's log: the parent sets its own.
  return run_process(argv, environment_with(extra, {"RANK", "WORLD_SIZE"}), scratch / "job-output.txt", kDeadline);
}

// A parent makes its own communicator, then the unique id, then forks the ranks (and a helper child that exits at
// once). Each child traces its calls into a log of its own, in deterministic mode; the parent's log holds the
// parent's calls only, and ends normally; and no child prints the parent's end-of-job warning.
TEST(ShimFork, ChildrenOfAParentThatMadeTheIdAreTracedIntoTheirOwnLogsAndDeterministic) {
  TempDir scratch("detnccl-process");
  constexpr int kRanks = 3, kSteps = 4;
  const ProcessOutcome job = process_job(
      scratch, {"fork-ranks", std::to_string(kRanks), std::to_string(kSteps)},
      {"DETNCCL_DIR=" + scratch.path(), "DETNCCL_RUN=fork", "DETNCCL_DETERMINISTIC=1", "DETNCCL_STEPS=0-9", "RANK=9"});
  ASSERT_EQ(job.exit_code, 0) << job.output;
  // The helper child never marked a step; the warning about that is the parent's, which marked one.
  EXPECT_EQ(occurrences(job.output, "every call was at step 0"), 0u) << job.output;
  EXPECT_EQ(occurrences(job.output, "warning"), 0u) << job.output;

  const std::string run_dir = scratch / "fork";
  const Log parent = read_log(rank_log(run_dir, 9));
  ASSERT_TRUE(parent.error.empty()) << parent.error;
  EXPECT_EQ(parent.end.kind, LogEndKind::kClosed) << parent.end.message;
  ASSERT_EQ(parent.communicators.size(), 1u);
  EXPECT_EQ(parent.communicators[0].nranks, 1u);
  EXPECT_EQ(parent.calls.size(), 4u) << "the parent's own calls, before and after the fork, and nothing else";
  for (std::size_t i = 0; i < parent.calls.size(); ++i) EXPECT_EQ(parent.calls[i].seq, i);

  std::map<std::uint64_t, std::uint64_t> output_of_step;
  for (std::uint32_t rank = 0; rank < kRanks; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const Log child = read_log(rank_log(run_dir, rank));
    ASSERT_TRUE(child.error.empty()) << child.error;
    EXPECT_EQ(child.end.kind, LogEndKind::kClosed) << child.end.message;
    ASSERT_EQ(child.communicators.size(), 1u);
    EXPECT_EQ(child.communicators[0].ordinal, 0u) << "the child numbers its own communicators";
    EXPECT_EQ(child.communicators[0].nranks, static_cast<std::uint32_t>(kRanks));
    EXPECT_EQ(child.communicators[0].rank, rank);
    EXPECT_EQ(child.communicators[0].id, read_log(rank_log(run_dir, 0)).communicators.at(0).id);
    ASSERT_EQ(child.calls.size(), static_cast<std::size_t>(kSteps));
    for (std::size_t i = 0; i < child.calls.size(); ++i) {
      const CallRecord& call = child.calls[i];
      EXPECT_EQ(call.seq, i);
      EXPECT_EQ(call.step, i);
      EXPECT_EQ(call.comm_ordinal, 0u);
      EXPECT_EQ(call.op, detnccl::records::OpId::kAllReduce);
      EXPECT_NE(call.flags & detnccl::records::kCallDeterministic, 0u) << "deterministic mode stays on in the child";
      EXPECT_NE(call.algorithm, 0);
      ASSERT_NE(call.flags & detnccl::records::kCallOutputFingerprint, 0u);
      const auto [known, inserted] = output_of_step.try_emplace(call.step, call.output_fingerprint);
      EXPECT_EQ(known->second, call.output_fingerprint) << "every rank gets the same bits";
    }
  }
}

// The tracer runs out of memory while tracing a group (every allocation of 64 KiB or more fails): one warning,
// tracing stops, the job goes on with its own results, and the log ends with a truncation marker naming the failure.
TEST(ShimTracerStop, OutOfMemoryInAGroupEndsTheLogWithATruncationMarker) {
  TempDir scratch("detnccl-process");
  constexpr int kCalls = 5;
  const ProcessOutcome job = process_job(scratch, {"oom-in-group", std::to_string(kCalls)},
                                         {"DETNCCL_DIR=" + scratch.path(), "DETNCCL_RUN=oom"});
  ASSERT_EQ(job.exit_code, 0) << job.output;
  EXPECT_EQ(occurrences(job.output, "tracing is off"), 1u) << "one warning\n" << job.output;
  EXPECT_NE(job.output.find("out of memory while tracing a group"), std::string::npos) << job.output;
  EXPECT_NE(job.output.find("marked truncated"), std::string::npos) << job.output;

  const Log log = read_log(rank_log(scratch / "oom", 0));
  ASSERT_TRUE(log.error.empty()) << log.error;
  EXPECT_EQ(log.end.kind, LogEndKind::kTruncated) << "not closed: records are missing\n" << log.end.message;
  EXPECT_EQ(log.end.truncation.reason, detnccl::records::TruncationReason::kTracerStopped);
  EXPECT_NE(std::string(log.end.truncation.text).find("out of memory while tracing a group"), std::string::npos)
      << log.end.truncation.text;
  ASSERT_EQ(log.communicators.size(), 1u);
  ASSERT_EQ(log.calls.size(), static_cast<std::size_t>(kCalls)) << "the calls before the failure, intact";
  for (std::size_t i = 0; i < log.calls.size(); ++i) EXPECT_EQ(log.calls[i].seq, i);
}

TEST(ShimWatchdog, AnAbortFromAnotherThreadEndsABlockedDeterministicCall) {
  // A framework watchdog aborts a communicator while a deterministic AllReduce is blocked on it (its peer never
  // joins): the call fails, the abort returns, and the scratch the blocked call uses is freed only after the call
  // has let go of it (under ASan a use after free stops the job).
  TempDir scratch;
  for (const std::string mode : {"DETNCCL_DETERMINISTIC=1", "DETNCCL_DETERMINISTIC=0"}) {
    const ProcessOutcome job = process_job(
        scratch, {"watchdog-abort"}, {mode, "DETNCCL_DIR=" + (scratch / "logs"), "DETNCCL_RUN=" + mode.substr(22)});
    EXPECT_EQ(job.exit_code, 0) << mode << "\n" << job.output;
    EXPECT_NE(job.output.find("the abort 0"), std::string::npos) << mode << "\n" << job.output;
  }
}

// The CUDA driver is loaded but cannot say where the buffers live (a stand-in driver answers cuPointerGetAttribute
// with CUDA_ERROR_INVALID_CONTEXT): reading device memory on the CPU would crash, and a kernel reading pageable host
// memory would end the job's CUDA context, so nothing guesses. Tracing records the calls without fingerprints (one
// warning); DETNCCL_DETERMINISTIC=1 stops the job naming the driver's answer; =warn lets NCCL run the reductions.
// A driver nobody initialised (CUDA_ERROR_NOT_INITIALIZED) means no CUDA memory exists — except in a fork()ed child.
TEST(ShimBufferLocation, ADriverThatCannotSayWhereABufferLivesIsNeverGuessed) {
  TempDir scratch("detnccl-process");
  constexpr int kRanks = 2, kSteps = 2;
  const std::vector<std::string> job = {"fork-ranks", std::to_string(kRanks), std::to_string(kSteps)};
  const auto with_driver = [&](const std::string& status, const std::string& run,
                               std::vector<std::string> environment) {
    environment.insert(environment.end(), {"LD_PRELOAD=" DETNCCL_FAKE_CUDA_DRIVER ":" DETNCCL_SHIM_PATH,
                                           "FAKE_CUDA_POINTER_STATUS=" + status, "DETNCCL_DIR=" + scratch.path(),
                                           "DETNCCL_RUN=" + run, "RANK=9"});
    return process_job(scratch, job, environment);
  };
  const auto calls_of_rank_0 = [&](const std::string& run) {
    const Log log = read_log(rank_log(scratch / run, 0));
    EXPECT_TRUE(log.error.empty()) << log.error;
    EXPECT_EQ(log.calls.size(), static_cast<std::size_t>(kSteps));
    return log.calls;
  };

  const ProcessOutcome traced = with_driver("201", "traced", {});
  ASSERT_EQ(traced.exit_code, 0) << traced.output;
  EXPECT_NE(traced.output.find("cannot say whether a buffer is device or host memory (cuPointerGetAttribute "
                               "returned 201): such buffers are recorded without fingerprints"),
            std::string::npos)
      << traced.output;
  for (const CallRecord& call : calls_of_rank_0("traced")) {
    EXPECT_EQ(call.flags & (detnccl::records::kCallInputFingerprint | detnccl::records::kCallOutputFingerprint), 0u);
  }

  const ProcessOutcome stopped = with_driver("201", "stopped", {"DETNCCL_DETERMINISTIC=1"});
  EXPECT_EQ(stopped.exit_code, 78) << stopped.output;
  EXPECT_NE(stopped.output.find("DETNCCL_DETERMINISTIC=1 cannot honour this call"), std::string::npos)
      << stopped.output;
  EXPECT_NE(stopped.output.find("cuPointerGetAttribute returned 201"), std::string::npos) << stopped.output;

  const ProcessOutcome warned = with_driver("201", "warned", {"DETNCCL_DETERMINISTIC=warn"});
  ASSERT_EQ(warned.exit_code, 0) << warned.output;
  EXPECT_NE(warned.output.find("NOT deterministic (the CUDA driver cannot say"), std::string::npos) << warned.output;
  for (const CallRecord& call : calls_of_rank_0("warned")) {
    EXPECT_EQ(call.flags & detnccl::records::kCallDeterministic, 0u) << "NCCL ran it";
  }

  // The parent (log rank 9) has no CUDA memory: its buffers are host memory. Its fork()ed ranks could hold a CUDA
  // parent's device pointers, for which a child's driver says "not initialised" too: not guessed either.
  const ProcessOutcome uninitialised = with_driver("3", "uninitialised", {});
  ASSERT_EQ(uninitialised.exit_code, 0) << uninitialised.output;
  const Log parent = read_log(rank_log(scratch / "uninitialised", 9));
  ASSERT_EQ(parent.calls.size(), 4u) << parent.error;
  for (const CallRecord& call : parent.calls) {
    EXPECT_NE(call.flags & detnccl::records::kCallOutputFingerprint, 0u) << "host memory, fingerprinted";
  }
  for (const CallRecord& call : calls_of_rank_0("uninitialised")) {
    EXPECT_EQ(call.flags & detnccl::records::kCallOutputFingerprint, 0u) << "a fork()ed child: not guessed";
  }
  EXPECT_NE(uninitialised.output.find("cuPointerGetAttribute returned 3"), std::string::npos) << uninitialised.output;
}

// The CUDA driver is older than the CUDA runtime the shim links (the stand-in says 12.4; a CUDA build links the CUDA
// 13 runtime): the shim's device code cannot run. DETNCCL_DETERMINISTIC=1 stops the job at its first communicator
// (exit 78), naming both versions, before any reduction; =warn says so once and NCCL reduces the device buffers; the
// tracer says once that fingerprints of device buffers are off and records the calls without them. (The stand-in
// cannot say where buffers live, as in ShimBufferLocation: hostnccl could not run on buffers it called device memory.
// That a device buffer's reduction then goes to NCCL is a GPU row, bench/gpu.)
TEST(ShimDriverVersion, ADriverTooOldForTheShimsRuntimeIsRefusedAtStartNotAtEachCall) {
#ifndef DETNCCL_TEST_HAVE_CUDA
  GTEST_SKIP() << "a build without CUDA has no device code: it needs no driver";
#else
  TempDir scratch("detnccl-process");
  constexpr int kRanks = 2, kSteps = 2;
  const std::vector<std::string> job = {"fork-ranks", std::to_string(kRanks), std::to_string(kSteps)};
  const auto with_old_driver = [&](const std::string& run, std::vector<std::string> environment) {
    environment.insert(environment.end(), {"LD_PRELOAD=" DETNCCL_FAKE_CUDA_DRIVER ":" DETNCCL_SHIM_PATH,
                                           "FAKE_CUDA_DRIVER_VERSION=12040", "FAKE_CUDA_POINTER_STATUS=201",
                                           "DETNCCL_DIR=" + scratch.path(), "DETNCCL_RUN=" + run, "RANK=9"});
    return process_job(scratch, job, environment);
  };

  const ProcessOutcome stopped = with_old_driver("stopped", {"DETNCCL_DETERMINISTIC=1"});
  EXPECT_EQ(stopped.exit_code, 78) << stopped.output;
  EXPECT_EQ(occurrences(stopped.output, "DETNCCL_DETERMINISTIC=1 cannot run its reductions of device buffers"), 1u)
      << stopped.output;
  EXPECT_NE(stopped.output.find("version 12.4, but detnccl's device code needs 13.0 or newer"), std::string::npos)
      << stopped.output;
  EXPECT_NE(stopped.output.find("at its first communicator"), std::string::npos) << stopped.output;
  EXPECT_EQ(stopped.output.find("cannot honour this call"), std::string::npos) << "refused at start, not at a call";

  const ProcessOutcome warned = with_old_driver("warned", {"DETNCCL_DETERMINISTIC=warn"});
  ASSERT_EQ(warned.exit_code, 0) << warned.output;
  EXPECT_EQ(occurrences(warned.output, "reductions of device buffers run as NCCL does, NOT deterministic"), 1u)
      << warned.output;
  EXPECT_EQ(warned.output.find("unhandled cuda error"), std::string::npos) << warned.output;
  for (const CallRecord& call : read_log(rank_log(scratch / "warned", 0)).calls) {
    EXPECT_EQ(call.flags & detnccl::records::kCallDeterministic, 0u) << "NCCL ran it";
  }

  const ProcessOutcome traced = with_old_driver("traced", {"DETNCCL_TRACE=hash"});
  ASSERT_EQ(traced.exit_code, 0) << traced.output;
  EXPECT_EQ(occurrences(traced.output,
                        "fingerprints of device buffers are off: the CUDA driver of this process is "
                        "version 12.4"),
            1u)
      << traced.output;
  const Log log = read_log(rank_log(scratch / "traced", 0));
  EXPECT_TRUE(log.error.empty()) << log.error;
  EXPECT_EQ(log.calls.size(), static_cast<std::size_t>(kSteps));
  for (const CallRecord& call : log.calls) {
    EXPECT_EQ(call.flags & (detnccl::records::kCallInputFingerprint | detnccl::records::kCallOutputFingerprint), 0u);
  }
#endif
}

}  // namespace
