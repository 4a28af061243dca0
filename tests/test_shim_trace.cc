// End-to-end tests of the shim's tracing: trace_job runs under hostnccl-run with libdetnccl.so preloaded, and the
// logs it leaves are read back with the records reader. Every recorded fingerprint is compared with the fingerprint
// this test computes itself of the buffer the script says the call read or wrote.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "hash/fingerprint.h"
#include "records/log_reader.h"
#include "tests/job_support.h"
#include "tests/test_support.h"
#include "tests/trace_job_log_checks.h"
#include "tests/trace_job_script.h"

namespace {

namespace fs = std::filesystem;
using detnccl::records::CallRecord;
using detnccl::records::CommunicatorRecord;
using detnccl::records::LogReader;
using detnccl::records::LogRecord;

using detnccl::test::CommandResult;
using detnccl::test::TempDir;
using namespace detnccl::test::trace_job_logs;

// Runs a command; its output holds stdout and stderr together.
CommandResult run(const std::string& command) { return detnccl::test::run_command(command + " 2>&1"); }

// Runs trace_job on n ranks with the shim preloaded and the given extra environment ("A=1 B=2").
CommandResult run_traced_job(int nranks, const std::string& environment, const std::string& job_arguments = "") {
  return run("env HOSTNCCL_TIMEOUT_S=20 " + environment + " " DETNCCL_LAUNCHER " -n " + std::to_string(nranks) +
             " --timeout 120 -- env LD_PRELOAD=" DETNCCL_SHIM_PATH " " DETNCCL_TRACE_JOB " " + job_arguments);
}

class ShimTrace : public ::testing::TestWithParam<int> {};

TEST_P(ShimTrace, RecordsEveryCallWithTheFingerprintsOfItsBuffers) {
  const int nranks = GetParam();
  const int steps = 2;
  TempDir dir;
  const CommandResult job =
      run_traced_job(nranks, "DETNCCL_DIR=" + dir.path() + " DETNCCL_RUN=r1", "--steps " + std::to_string(steps));
  ASSERT_EQ(job.exit_code, 0) << job.output;
  for (int rank = 0; rank < nranks; ++rank) {
    const RankLog log = read_log(rank_log(dir.path(), "r1", rank));
    check_against_script(log, rank, nranks, steps, /*fingerprints_expected=*/true);
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, ShimTrace, ::testing::Values(1, 2, 3, 4, 8));

TEST(ShimTraceWindows, StepAndOpWindowsSelectWhatIsHashedButEveryCallIsCounted) {
  TempDir dir;
  const CommandResult job = run_traced_job(
      3, "DETNCCL_DIR=" + dir.path() + " DETNCCL_RUN=w DETNCCL_STEPS=1 DETNCCL_OPS=AllReduce,Recv", "--steps 3");
  ASSERT_EQ(job.exit_code, 0) << job.output;
  const RankLog log = read_log(rank_log(dir.path(), "w", 2));
  const std::size_t per_step = detnccl::test::script_step(2, 3, 0).size();
  ASSERT_EQ(log.calls.size(), 3 * per_step);
  for (const CallRecord& call : log.calls) {
    const bool selected =
        call.step == 1 && (call.op == detnccl::records::OpId::kAllReduce || call.op == detnccl::records::OpId::kRecv);
    const bool hashed =
        (call.flags & (detnccl::records::kCallInputFingerprint | detnccl::records::kCallOutputFingerprint)) != 0;
    EXPECT_EQ(hashed, selected) << "seq " << call.seq;
  }
}

// DETNCCL_TRACE=segments keeps each per-peer block digest (AllGather, AlltoAll, Gather, Scatter) beside their fold;
// the hash level (the test above) records the fold only.
TEST(ShimTraceWindows, SegmentsLevelRecordsThePerPeerBlocksBesideTheirFold) {
  TempDir dir;
  const CommandResult job = run_traced_job(3, "DETNCCL_DIR=" + dir.path() + " DETNCCL_RUN=s DETNCCL_TRACE=segments");
  ASSERT_EQ(job.exit_code, 0) << job.output;
  for (int rank = 0; rank < 3; ++rank) {
    const RankLog log = read_log(rank_log(dir.path(), "s", rank));
    ASSERT_NE(log.header.config_text.find("DETNCCL_TRACE=segments\n"), std::string::npos) << log.header.config_text;
    check_against_script(log, rank, 3, 2, /*fingerprints_expected=*/true);
    std::size_t listed = 0;
    for (const CallRecord& call : log.calls) listed += call.input_blocks.size() + call.output_blocks.size();
    EXPECT_GT(listed, 0u);
  }
}

TEST(ShimTraceWindows, MetaLevelRecordsCallsWithoutFingerprints) {
  TempDir dir;
  const CommandResult job = run_traced_job(2, "DETNCCL_DIR=" + dir.path() + " DETNCCL_RUN=m DETNCCL_TRACE=meta");
  ASSERT_EQ(job.exit_code, 0) << job.output;
  for (int rank = 0; rank < 2; ++rank) {
    const RankLog log = read_log(rank_log(dir.path(), "m", rank));
    check_against_script(log, rank, 2, 2, /*fingerprints_expected=*/false);
  }
}

// trace_job --wide-allreduce's values per element (kWideCount of them per rank and step).
constexpr std::size_t kWideCount = 4096;

// The fingerprint of the fp32 sum of the ranks' --wide-allreduce inputs at `step`, added in `order` as one left fold
// (((x[order[0]] + x[order[1]]) + x[order[2]]) + ...): hostnccl's arithmetic, and with order 0, 1, ..., n-1 its
// HOSTNCCL_REDUCE_ORDER=rank.
uint64_t wide_sum_fingerprint(const std::vector<int>& order, int step) {
  std::vector<float> sum = detnccl::test::wide_magnitude_values(order[0], step, kWideCount);
  for (std::size_t k = 1; k < order.size(); ++k) {
    const std::vector<float> values = detnccl::test::wide_magnitude_values(order[k], step, kWideCount);
    for (std::size_t i = 0; i < kWideCount; ++i) sum[i] += values[i];
  }
  return detnccl::hash::fingerprint(sum.data(), sum.size() * sizeof(float));
}

// Checks that the inputs of `step` make the order of addition visible: every order of the n ranks gives other bits
// than rank order, except the one that only swaps the first two (x0 + x1 == x1 + x0). So a backend that adds in
// arrival order, or in any fixed order but rank order, cannot give rank order's bits by luck.
void expect_only_rank_order_gives_its_bits(int nranks, int step) {
  ASSERT_GE(nranks, 3) << "with two ranks every order associates alike";
  std::vector<int> identity(static_cast<std::size_t>(nranks));
  std::iota(identity.begin(), identity.end(), 0);
  const uint64_t rank_order = wide_sum_fingerprint(identity, step);
  std::vector<int> order = identity;
  std::size_t differing = 0, orders = 0;
  do {
    ++orders;
    // x0 + x1 == x1 + x0: an order that only swaps the first two associates as rank order does.
    if (std::equal(order.begin() + 2, order.end(), identity.begin() + 2)) {
      EXPECT_EQ(wide_sum_fingerprint(order, step), rank_order);
    } else if (wide_sum_fingerprint(order, step) != rank_order) {
      ++differing;
    } else {
      ADD_FAILURE() << "step " << step << ": an order other than rank order gives rank order's bits";
    }
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(differing, orders - 2) << "step " << step;
}

// Checks every AllReduce of a `--wide-allreduce` run traced in rank order: its output is the rank-order sum,
// computed here, on every rank.
void expect_rank_order_sums(const std::string& dir, const std::string& run, int nranks, std::size_t calls_per_rank) {
  for (int rank = 0; rank < nranks; ++rank) {
    const RankLog log = read_log(rank_log(dir, run, rank));
    std::vector<int> order(static_cast<std::size_t>(nranks));
    std::iota(order.begin(), order.end(), 0);
    std::size_t checked = 0;
    for (const CallRecord& call : log.calls) {
      if (call.op != detnccl::records::OpId::kAllReduce) continue;
      ASSERT_TRUE(call.flags & detnccl::records::kCallOutputFingerprint) << "rank " << rank << " seq " << call.seq;
      EXPECT_EQ(call.output_fingerprint, wide_sum_fingerprint(order, static_cast<int>(call.step)))
          << run << ": rank " << rank << " seq " << call.seq << " step " << call.step
          << ": not the sum in rank order (does the backend ignore HOSTNCCL_REDUCE_ORDER=rank?)";
      ++checked;
    }
    EXPECT_EQ(checked, calls_per_rank) << run << " rank " << rank;
  }
}

// Two runs in rank order record the same calls, bit for bit: the script's calls (small integers, exact in any
// order) and wide-magnitude AllReduces, whose sums hold rank order's bits only when the backend adds in rank order.
TEST(ShimTraceRuns, TwoRunsInRankOrderGiveIdenticalCallRecords) {
  TempDir dir;
  constexpr int kRanks = 4, kWideSteps = 3;
  for (int step = 0; step < kWideSteps; ++step) expect_only_rank_order_gives_its_bits(kRanks, step);
  const std::string wide_job = "--steps " + std::to_string(kWideSteps) + " --wide-allreduce --wide-grouped";
  for (const auto& [prefix, job_arguments] :
       {std::pair<std::string, std::string>{"", "--steps 2"}, {"wide-", wide_job}}) {
    for (const std::string& run_name : {prefix + "a", prefix + "b"}) {
      const CommandResult job = run_traced_job(
          kRanks, "HOSTNCCL_REDUCE_ORDER=rank DETNCCL_DIR=" + dir.path() + " DETNCCL_RUN=" + run_name, job_arguments);
      ASSERT_EQ(job.exit_code, 0) << job.output;
    }
    for (int rank = 0; rank < kRanks; ++rank) {
      const RankLog a = read_log(rank_log(dir.path(), prefix + "a", rank));
      const RankLog b = read_log(rank_log(dir.path(), prefix + "b", rank));
      ASSERT_EQ(a.calls.size(), b.calls.size());
      for (std::size_t i = 0; i < a.calls.size(); ++i) {
        // group ids are process-local counters, equal here because both runs made the same calls
        EXPECT_EQ(static_cast<const detnccl::records::CallFields&>(a.calls[i]),
                  static_cast<const detnccl::records::CallFields&>(b.calls[i]))
            << prefix << "rank " << rank << " call " << i;
      }
    }
  }
  // Two AllReduces per step (one plain, one in a group).
  for (const char* run_name : {"wide-a", "wide-b"})
    expect_rank_order_sums(dir.path(), run_name, kRanks, 2 * kWideSteps);
}

TEST(ShimTraceRuns, AKilledRankLeavesAReadableLog) {
  TempDir dir;
  const CommandResult job =
      run_traced_job(3, "DETNCCL_DIR=" + dir.path() + " DETNCCL_RUN=k", "--steps 4 --die-at-step 2");
  EXPECT_NE(job.exit_code, 0) << job.output;
  // Rank 1 killed itself with SIGKILL at step 2: its log holds every call of steps 0 and 1, intact, and a torn tail.
  const RankLog log = read_log(rank_log(dir.path(), "k", 1));
  const std::size_t per_step = detnccl::test::script_step(1, 3, 0).size();
  EXPECT_EQ(log.calls.size(), 2 * per_step);
  EXPECT_EQ(log.end, detnccl::records::LogEndKind::kTornTail);
  for (std::size_t i = 0; i < log.calls.size(); ++i) EXPECT_EQ(log.calls[i].seq, i);
}

// Runs trace_threads_job with the shim preloaded and checks its log: every call of every thread recorded once, as a
// call of its own round's communicator, in per-communicator order, with the fingerprints of its buffers.
void check_threads_job(int ranks, int calls, int rounds) {
  TempDir dir;
  const CommandResult job =
      run("env DETNCCL_DIR=" + dir.path() + " DETNCCL_RUN=t LD_PRELOAD=" DETNCCL_SHIM_PATH " " DETNCCL_THREADS_JOB " " +
          std::to_string(ranks) + " " + std::to_string(calls) + " " + std::to_string(rounds));
  ASSERT_EQ(job.exit_code, 0) << job.output;
  const RankLog log = read_log(rank_log(dir.path(), "t", 0));
  ASSERT_EQ(log.communicators.size(), static_cast<std::size_t>(ranks * rounds));
  ASSERT_EQ(log.calls.size(), static_cast<std::size_t>(ranks * calls * rounds));
  std::map<uint64_t, uint32_t> rank_of_ordinal;
  for (const auto& comm : log.communicators) {
    EXPECT_EQ(comm.origin, detnccl::records::CommOrigin::kInitAll);
    // The communicators of one ncclCommInitAll share an id; each round's call makes a new one.
    const std::size_t first_of_round = comm.ordinal / ranks * ranks;
    EXPECT_EQ(comm.id, log.communicators[first_of_round].id) << "ordinal " << comm.ordinal;
    if (first_of_round != 0) {
      EXPECT_NE(comm.id, log.communicators[0].id) << "ordinal " << comm.ordinal;
    }
    rank_of_ordinal[comm.ordinal] = comm.rank;
  }
  std::vector<bool> seen(log.calls.size(), false);
  std::map<uint64_t, uint64_t> next_comm_seq;
  std::vector<CallRecord> sorted = log.calls;
  std::sort(sorted.begin(), sorted.end(), [](const CallRecord& a, const CallRecord& b) { return a.seq < b.seq; });
  for (const CallRecord& call : sorted) {
    ASSERT_LT(call.seq, seen.size());
    EXPECT_FALSE(seen[call.seq]) << "sequence number used twice";
    seen[call.seq] = true;
    const uint64_t c = next_comm_seq[call.comm_ordinal]++;
    EXPECT_EQ(call.comm_seq, c) << "per-communicator order";
    const int r = static_cast<int>(rank_of_ordinal.at(call.comm_ordinal));
    std::vector<float> in(513), out(513);
    for (std::size_t i = 0; i < in.size(); ++i) {
      in[i] = static_cast<float>((r + 3 * static_cast<int>(c) + static_cast<int>(i)) % 97);
      out[i] = 0;
      for (int q = 0; q < ranks; ++q)
        out[i] += static_cast<float>((q + 3 * static_cast<int>(c) + static_cast<int>(i)) % 97);
    }
    EXPECT_EQ(call.input_fingerprint, detnccl::hash::fingerprint(in.data(), in.size() * sizeof(float)));
    EXPECT_EQ(call.output_fingerprint, detnccl::hash::fingerprint(out.data(), out.size() * sizeof(float)));
    EXPECT_EQ(call.group_id != 0, c % 2 == 1);
  }
  // Every communicator, of every round, got exactly its own calls.
  ASSERT_EQ(next_comm_seq.size(), log.communicators.size());
  for (const auto& [ordinal, count] : next_comm_seq) EXPECT_EQ(count, static_cast<uint64_t>(calls)) << ordinal;
}

// One process, four ranks on four threads calling at once: every call of every thread is in the log, intact, in
// per-communicator order, with the right fingerprints.
TEST(ShimTraceThreads, ThreadsDrivingDifferentCommunicatorsAreAllRecorded) { check_threads_job(4, 25, 1); }

// The same threads through several generations of communicators: a communicator created after a destroyed one (and
// perhaps given its handle back) is the one the next calls are recorded under, on every thread.
TEST(ShimTraceThreads, CallsAfterDestroyAndRecreateAreRecordedUnderTheNewCommunicator) { check_threads_job(4, 6, 4); }

// The pure-Python helper stamps steps through the shim's C API, and does nothing without the shim.
TEST(ShimStepHelper, PythonHelperMarksStepsOnTheRecords) {
  TempDir dir;
  const std::string python =
      "env PYTHONPATH=" DETNCCL_PYTHON_HELPER_DIR " python3 " DETNCCL_STEP_HELPER_JOB " " DETNCCL_HOSTNCCL_LIBRARY;
  const CommandResult plain = run(python);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_NE(plain.output.find("shim active: False"), std::string::npos) << plain.output;

  const CommandResult traced =
      run("env DETNCCL_DIR=" + dir.path() + " DETNCCL_RUN=py LD_PRELOAD=" DETNCCL_SHIM_PATH " " + python);
  ASSERT_EQ(traced.exit_code, 0) << traced.output;
  EXPECT_NE(traced.output.find("shim active: True"), std::string::npos) << traced.output;
  const RankLog log = read_log(rank_log(dir.path(), "py", 0));
  ASSERT_EQ(log.calls.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(log.calls[i].step, 3 + i);
    EXPECT_EQ(log.calls[i].op, detnccl::records::OpId::kAllReduce);
  }
}

TEST(ShimStepHelper, StepWindowWithoutStepMarkersWarnsAtExit) {
  TempDir dir;
  // trace_threads_job never marks a step, and its threads' calls come in any order: no numbering either.
  const CommandResult job =
      run("env DETNCCL_DIR=" + dir.path() +
          " DETNCCL_RUN=s DETNCCL_STEPS=2-3 DETNCCL_STEP_INFERENCE=off LD_PRELOAD=" DETNCCL_SHIM_PATH
          " " DETNCCL_THREADS_JOB " 2 2");
  ASSERT_EQ(job.exit_code, 0) << job.output;
  EXPECT_NE(job.output.find("DETNCCL_STEPS is set but every call was at step 0"), std::string::npos) << job.output;
}

// Output fingerprints of every AllReduce of a run, by (rank, seq).
std::map<std::pair<int, uint64_t>, uint64_t> allreduce_outputs(const std::string& dir, const std::string& run,
                                                               int nranks, bool expect_deterministic) {
  std::map<std::pair<int, uint64_t>, uint64_t> outputs;
  for (int rank = 0; rank < nranks; ++rank) {
    const RankLog log = read_log(rank_log(dir, run, rank));
    for (const CallRecord& call : log.calls) {
      if (call.op != detnccl::records::OpId::kAllReduce) continue;
      EXPECT_TRUE(call.flags & detnccl::records::kCallOutputFingerprint);
      EXPECT_EQ((call.flags & detnccl::records::kCallDeterministic) != 0, expect_deterministic) << "seq " << call.seq;
      if (expect_deterministic) {
        EXPECT_NE(call.algorithm, 0) << "the algorithm that ran is recorded";
      }
      outputs[{rank, call.seq}] = call.output_fingerprint;
    }
  }
  return outputs;
}

// The heart of deterministic mode, end to end through the shim: wide-magnitude fp32 AllReduces (plain and inside a
// group) over hostnccl in arrival order give different bits from run to run without detnccl, and the same bits —
// equal to a rank-order run's and equal on every rank — with DETNCCL_DETERMINISTIC=1.
TEST(ShimDeterministic, ArrivalOrderRunsBecomeBitwiseIdentical) {
  TempDir dir;
  constexpr int kRanks = 4;
  const std::string job = "--steps 6 --wide-allreduce --wide-grouped";
  const auto traced = [&](const std::string& run_name, const std::string& extra) {
    const CommandResult result =
        run_traced_job(kRanks, "DETNCCL_DIR=" + dir.path() + " DETNCCL_RUN=" + run_name + " " + extra, job);
    EXPECT_EQ(result.exit_code, 0) << result.output;
  };
  traced("det1", "DETNCCL_DETERMINISTIC=1 HOSTNCCL_REDUCE_ORDER=arrival");
  traced("det2", "DETNCCL_DETERMINISTIC=1 HOSTNCCL_REDUCE_ORDER=arrival");
  traced("det3", "DETNCCL_DETERMINISTIC=1 HOSTNCCL_REDUCE_ORDER=rank DETNCCL_ALGO=one_shot");
  const auto det1 = allreduce_outputs(dir.path(), "det1", kRanks, true);
  ASSERT_EQ(det1.size(), static_cast<std::size_t>(kRanks * 6 * 2));
  EXPECT_EQ(det1, allreduce_outputs(dir.path(), "det2", kRanks, true));
  EXPECT_EQ(det1, allreduce_outputs(dir.path(), "det3", kRanks, true)) << "another algorithm, the same bits";
  for (const auto& [key, fingerprint] : det1) {
    EXPECT_EQ(fingerprint, det1.at({0, key.second})) << "every rank gets the same bits";
  }
  // Without deterministic mode the same job's arrival-order sums vary (bounded retries: it is a race).
  bool varied = false;
  for (int attempt = 0; attempt < 6 && !varied; ++attempt) {
    const std::string a = "plain" + std::to_string(attempt) + "a", b = "plain" + std::to_string(attempt) + "b";
    traced(a, "HOSTNCCL_REDUCE_ORDER=arrival");
    traced(b, "HOSTNCCL_REDUCE_ORDER=arrival");
    varied = allreduce_outputs(dir.path(), a, kRanks, false) != allreduce_outputs(dir.path(), b, kRanks, false);
  }
  EXPECT_TRUE(varied) << "arrival order never changed a sum: the comparison above proves nothing";
}

TEST(ShimDeterministic, WorksWithoutTracing) {
  const CommandResult result =
      run_traced_job(3, "DETNCCL_DETERMINISTIC=1", "--steps 2 --wide-allreduce --wide-grouped");
  EXPECT_EQ(result.exit_code, 0) << result.output;
}

TEST(ShimDeterministic, CallsNcclRefusesGoToNcclUnchanged) {
  // Reductions NCCL's own argument check refuses (an operator nobody created or one already destroyed, on a float or
  // an integer type; an invalid datatype; an invalid root): nothing is reduced, so no determinism is at stake, and
  // the job gets NCCL's own ncclInvalidArgument and ncclGetLastError text, output untouched (trace_job checks each),
  // with =1 as with =warn and without the shim — never a stop, never a "not deterministic" warning.
  for (const char* mode : {"DETNCCL_DETERMINISTIC=1", "DETNCCL_DETERMINISTIC=warn", "DETNCCL_DETERMINISTIC=0"}) {
    const CommandResult job = run_traced_job(2, mode, "--steps 1 --unknown-op");
    EXPECT_EQ(job.exit_code, 0) << mode << "\n" << job.output;
    EXPECT_EQ(job.output.find("NOT deterministic"), std::string::npos) << mode << "\n" << job.output;
    EXPECT_EQ(job.output.find("cannot honour"), std::string::npos) << mode << "\n" << job.output;
  }
}

TEST(ShimDeterministic, AReductionOnACommunicatorNotCreatedYetIsRefusedAsNcclDoes) {
  // An AllReduce inside the group that creates its communicator: NCCL refuses it (ncclCommEnsureReady:
  // ncclInvalidArgument). hostnccl would queue it, and deterministic mode must neither run it through NCCL (not
  // deterministic) nor fake a success.
  const CommandResult job =
      run_traced_job(2, "DETNCCL_DETERMINISTIC=1", "--steps 1 --group-init --reduce-in-init-group");
  EXPECT_EQ(job.exit_code, 0) << job.output;
  const std::string refused = "AllReduce inside the creating group returned " + std::to_string(ncclInvalidArgument);
  EXPECT_NE(job.output.find("[rank 0] " + refused), std::string::npos) << job.output;
  EXPECT_NE(job.output.find("[rank 1] " + refused), std::string::npos) << job.output;
}

TEST(ShimDeterministic, OneThreadDrivingSeveralRanksOfACommunicatorInAGroupIsRecognised) {
  // ncclCommInitAll, then one group per call with an AllReduce on every rank from the main thread. Deterministic
  // reductions deferred to ncclGroupEnd run one communicator after another, so the first would wait for ranks the
  // same thread has not driven yet: =1 stops the job naming the pattern, =warn hands them to NCCL (right sums).
  // The same on the children of splits made in one group (--one-thread-split), which NCCL hands over only at the
  // group's end: the shim learns that they are ranks of one communicator when it reads their handles there.
  for (const std::string pattern : {"--one-thread", "--one-thread-split"}) {
    const auto one_thread = [&](const std::string& mode) {
      return run("env HOSTNCCL_TIMEOUT_S=10 " + mode +
                 " LD_PRELOAD=" DETNCCL_SHIM_PATH " timeout 60 " DETNCCL_THREADS_JOB " 3 4 " + pattern);
    };
    const CommandResult stopped = one_thread("DETNCCL_DETERMINISTIC=1");
    EXPECT_EQ(stopped.exit_code, 78) << pattern << "\n" << stopped.output;
    EXPECT_NE(stopped.output.find("two ranks of one communicator"), std::string::npos) << pattern << "\n"
                                                                                       << stopped.output;
    const CommandResult warned = one_thread("DETNCCL_DETERMINISTIC=warn");
    EXPECT_EQ(warned.exit_code, 0) << pattern << "\n" << warned.output;
    EXPECT_NE(warned.output.find("NOT deterministic"), std::string::npos) << pattern << "\n" << warned.output;
    EXPECT_NE(warned.output.find("every output as expected"), std::string::npos) << pattern << "\n" << warned.output;
  }
  // One thread per rank of the same ncclCommInitAll, each grouping its own calls, is not that pattern.
  const CommandResult threads = run("env HOSTNCCL_TIMEOUT_S=10 DETNCCL_DETERMINISTIC=1 LD_PRELOAD=" DETNCCL_SHIM_PATH
                                    " timeout 60 " DETNCCL_THREADS_JOB " 3 6");
  EXPECT_EQ(threads.exit_code, 0) << threads.output;
  EXPECT_EQ(threads.output.find("cannot honour"), std::string::npos) << threads.output;
}

TEST(ShimDeterministic, ARankThatOptedOutOfASplitStillRecognisesItsSiblingsInLaterSplits) {
  // Every rank of a parent calls ncclCommSplit, and one that passes NCCL_SPLIT_NOCOLOR gets no child: the parent's
  // splits still count alike on all its ranks only if that split counts too. Here rank 0 of 2 opts out of a first
  // split, and then both ranks split again into one child, which one thread drives in one group: deterministic mode
  // must see that the two children are ranks of one communicator (=1 stops, =warn hands them to NCCL), or the first
  // deferred reduction would wait for good for the second.
  const auto one_thread = [&](const std::string& mode) {
    return run("env HOSTNCCL_TIMEOUT_S=10 " + mode +
               " LD_PRELOAD=" DETNCCL_SHIM_PATH " timeout 60 " DETNCCL_THREADS_JOB
               " 2 3 --one-thread-split-after-nocolor");
  };
  const CommandResult stopped = one_thread("DETNCCL_DETERMINISTIC=1");
  EXPECT_EQ(stopped.exit_code, 78) << stopped.output;
  EXPECT_NE(stopped.output.find("two ranks of one communicator"), std::string::npos) << stopped.output;
  const CommandResult warned = one_thread("DETNCCL_DETERMINISTIC=warn");
  EXPECT_EQ(warned.exit_code, 0) << warned.output;
  EXPECT_NE(warned.output.find("NOT deterministic"), std::string::npos) << warned.output;
  EXPECT_NE(warned.output.find("every output as expected"), std::string::npos) << warned.output;
}

// Non-blocking communicators (ncclConfig_t.blocking = 0): hostnccl then returns ncclInProgress and moves the data on
// a background thread, like NCCL's own. Deterministic mode waits for each exchange, and the tracer fingerprints
// outputs only once the call is enqueued, so a non-blocking run records the blocking run's bits.
TEST(ShimDeterministic, NonBlockingCommunicatorsGetTheBlockingBits) {
  TempDir dir;
  constexpr int kRanks = 4;
  const auto traced = [&](const std::string& run_name, const std::string& extra) {
    const CommandResult result = run_traced_job(kRanks,
                                                "DETNCCL_DIR=" + dir.path() + " DETNCCL_RUN=" + run_name +
                                                    " DETNCCL_DETERMINISTIC=1 HOSTNCCL_REDUCE_ORDER=arrival",
                                                "--steps 4 --wide-allreduce --wide-grouped" + extra);
    EXPECT_EQ(result.exit_code, 0) << result.output;
  };
  traced("blocking", "");
  traced("nonblocking", " --nonblocking");
  const auto blocking = allreduce_outputs(dir.path(), "blocking", kRanks, true);
  ASSERT_EQ(blocking.size(), static_cast<std::size_t>(kRanks * 4 * 2));
  EXPECT_EQ(blocking, allreduce_outputs(dir.path(), "nonblocking", kRanks, true));
}

TEST(ShimTrace, NonBlockingCallsAreFingerprintedOnceEnqueued) {
  TempDir dir;
  constexpr int kRanks = 3;
  const auto traced = [&](const std::string& run_name, const std::string& extra) {
    const CommandResult result =
        run_traced_job(kRanks, "DETNCCL_DIR=" + dir.path() + " DETNCCL_RUN=" + run_name + " HOSTNCCL_REDUCE_ORDER=rank",
                       "--steps 4 --wide-allreduce --wide-grouped" + extra);
    EXPECT_EQ(result.exit_code, 0) << result.output;
  };
  traced("blocking", "");
  traced("nonblocking", " --nonblocking");
  for (int step = 0; step < 4; ++step) expect_only_rank_order_gives_its_bits(kRanks, step);
  expect_rank_order_sums(dir.path(), "blocking", kRanks, 4 * 2);
  const auto blocking = allreduce_outputs(dir.path(), "blocking", kRanks, false);
  ASSERT_EQ(blocking.size(), static_cast<std::size_t>(kRanks * 4 * 2));
  EXPECT_EQ(blocking, allreduce_outputs(dir.path(), "nonblocking", kRanks, false));
}

// A communicator NCCL finishes creating only later — a non-blocking one (its init returns ncclInProgress and
// completes in the background) or one created inside a group (at the outermost ncclGroupEnd) — cannot be queried
// before: NCCL 2.28 (and hostnccl, which copies it) then fails ncclCommCount / UserRank / CuDevice and sets its last
// error. The shim records such a communicator once it is ready, with its real size and rank, so that per-rank blocks
// are fingerprinted whole and `detnccl check` finds the run consistent; and its queries never fail.
class ShimTraceLateCommunicator : public ::testing::TestWithParam<const char*> {};

TEST_P(ShimTraceLateCommunicator, IsRecordedOnceReadyWithItsSizeAndRank) {
  constexpr int kRanks = 3, kSteps = 2;
  const std::string how = GetParam();
  TempDir dir;
  const CommandResult job = run_traced_job(
      kRanks, "NCCL_DEBUG=WARN HOSTNCCL_REDUCE_ORDER=rank DETNCCL_DIR=" + dir.path() + " DETNCCL_RUN=late",
      "--steps " + std::to_string(kSteps) + " " + how);
  ASSERT_EQ(job.exit_code, 0) << job.output;
  EXPECT_EQ(job.output.find("hostnccl WARN"), std::string::npos) << "no query failed:\n" << job.output;
  EXPECT_EQ(job.output.find("not traced"), std::string::npos) << job.output;
  for (int rank = 0; rank < kRanks; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const RankLog log = read_log(rank_log(dir.path(), "late", rank));
    check_against_script(log, rank, kRanks, kSteps, /*fingerprints_expected=*/true,
                         how.find("--nonblocking") != std::string::npos);
    if (!log.communicators.empty()) {
      EXPECT_EQ(log.communicators[0].device, rank) << "ncclCommCuDevice answered (hostnccl-run sets LOCAL_RANK)";
    }
  }
  const CommandResult check = run(DETNCCL_CLI " check " + dir.path() + "/late");
  EXPECT_EQ(check.exit_code, 0) << check.output;
  EXPECT_NE(check.output.find("CONSISTENT"), std::string::npos) << check.output;
}

INSTANTIATE_TEST_SUITE_P(Creation, ShimTraceLateCommunicator,
                         ::testing::Values("--nonblocking", "--group-init", "--nonblocking --group-init"),
                         [](const ::testing::TestParamInfo<const char*>& param) {
                           const std::string how = param.param;
                           if (how == "--nonblocking") return std::string("NonBlockingInit");
                           if (how == "--group-init") return std::string("InitInsideAGroup");
                           return std::string("NonBlockingInitInsideAGroup");
                         });

// The communicator-level API through the shim: results unchanged (the job checks them), and the records say how each
// communicator came to be, with ids equal on exactly the members of each.
// Each call record says where its step came from: a job that marks its steps (trace_job calls detnccl_set_step
// before each step's calls) has every call "marked"; one that never marks (the API tour) has every call "inferred"
// (detnccl numbers its iterations), or "none" at step 0 with DETNCCL_STEP_INFERENCE=off.
TEST(ShimTraceSteps, RecordsSayWhetherTheJobMarkedTheirStep) {
  TempDir dir;
  const CommandResult marked = run_traced_job(2, "DETNCCL_DIR=" + dir.path() + " DETNCCL_RUN=marked", "--steps 3");
  ASSERT_EQ(marked.exit_code, 0) << marked.output;
  const CommandResult unmarked =
      run("env HOSTNCCL_TIMEOUT_S=20 DETNCCL_DIR=" + dir.path() + " DETNCCL_RUN=unmarked " +
          DETNCCL_LAUNCHER " -n 4 --timeout 120 -- env LD_PRELOAD=" DETNCCL_SHIM_PATH " " DETNCCL_API_TOUR_JOB);
  ASSERT_EQ(unmarked.exit_code, 0) << unmarked.output;
  const CommandResult unnumbered = run(
      "env HOSTNCCL_TIMEOUT_S=20 DETNCCL_DIR=" + dir.path() + " DETNCCL_RUN=unnumbered DETNCCL_STEP_INFERENCE=off " +
      DETNCCL_LAUNCHER " -n 4 --timeout 120 -- env LD_PRELOAD=" DETNCCL_SHIM_PATH " " DETNCCL_API_TOUR_JOB);
  ASSERT_EQ(unnumbered.exit_code, 0) << unnumbered.output;
  for (int rank = 0; rank < 2; ++rank) {
    const RankLog log = read_log(rank_log(dir.path(), "marked", rank));
    ASSERT_FALSE(log.calls.empty());
    for (const CallRecord& call : log.calls) {
      EXPECT_EQ(call.step_source, detnccl::records::StepSource::kMarked) << "rank " << rank << " seq " << call.seq;
    }
  }
  for (int rank = 0; rank < 4; ++rank) {
    const RankLog log = read_log(rank_log(dir.path(), "unmarked", rank));
    ASSERT_FALSE(log.calls.empty());
    for (const CallRecord& call : log.calls) {
      EXPECT_EQ(call.step_source, detnccl::records::StepSource::kInferred) << "rank " << rank << " seq " << call.seq;
    }
    const RankLog off = read_log(rank_log(dir.path(), "unnumbered", rank));
    ASSERT_FALSE(off.calls.empty());
    for (const CallRecord& call : off.calls) {
      EXPECT_EQ(call.step_source, detnccl::records::StepSource::kNone) << "rank " << rank << " seq " << call.seq;
      EXPECT_EQ(call.step, 0u);
    }
  }
}

TEST(ShimApiTour, SplitsPreMulSumAndQueriesAreRecordedFaithfully) {
  TempDir dir;
  constexpr int kRanks = 4;
  const CommandResult job =
      run("env HOSTNCCL_TIMEOUT_S=20 DETNCCL_DIR=" + dir.path() + " DETNCCL_RUN=tour " +
          DETNCCL_LAUNCHER " -n 4 --timeout 120 -- env LD_PRELOAD=" DETNCCL_SHIM_PATH " " DETNCCL_API_TOUR_JOB);
  ASSERT_EQ(job.exit_code, 0) << job.output;
  std::map<uint64_t, std::vector<int>> members_by_id;  // communicator id -> global ranks
  for (int rank = 0; rank < kRanks; ++rank) {
    const RankLog log = read_log(rank_log(dir.path(), "tour", rank));
    const bool last = rank == kRanks - 1;
    ASSERT_EQ(log.communicators.size(), last ? 3u : 4u) << "the last rank opted out of the second split";
    const CommunicatorRecord& world = log.communicators[0];
    EXPECT_EQ(world.origin, detnccl::records::CommOrigin::kInitRank);
    EXPECT_EQ(world.parent_ordinal, detnccl::records::kNoParent);
    const CommunicatorRecord& halves = log.communicators[1];
    EXPECT_EQ(halves.origin, detnccl::records::CommOrigin::kSplit);
    EXPECT_EQ(halves.parent_ordinal, world.ordinal);
    EXPECT_EQ(halves.parent_id, world.id);
    EXPECT_EQ(halves.split_color, rank % 2);
    EXPECT_EQ(halves.split_key, -rank);
    EXPECT_EQ(halves.nranks, 2u);
    EXPECT_EQ(halves.rank, rank < 2 ? 1u : 0u) << "keys reversed: the higher rank comes first";
    for (const CommunicatorRecord& comm : log.communicators) members_by_id[comm.id].push_back(rank);
    // PreMulSum calls carry their scalar: 0.5 at creation, 2.0 through the pointer.
    std::vector<uint64_t> scalars;
    for (const CallRecord& call : log.calls) {
      if (call.flags & detnccl::records::kCallPreMulSumScalar) scalars.push_back(call.premulsum_scalar);
    }
    const float half = 0.5f, two = 2.0f;
    uint32_t half_bits = 0, two_bits = 0;
    std::memcpy(&half_bits, &half, 4);
    std::memcpy(&two_bits, &two, 4);
    EXPECT_EQ(scalars, (std::vector<uint64_t>{half_bits, two_bits}));
  }
  // World and the all-ranks split: 4 members each; the halves: {0,2} and {1,3}; the second split: {0,1,2}.
  std::vector<std::vector<int>> groups;
  for (const auto& [id, members] : members_by_id) groups.push_back(members);
  std::sort(groups.begin(), groups.end());
  EXPECT_EQ(groups, (std::vector<std::vector<int>>{{0, 1, 2}, {0, 1, 2, 3}, {0, 1, 2, 3}, {0, 2}, {1, 3}}));
}

// A split whose child NCCL hands over late: inside a group (NCCL 2.28 stores the child in *newcomm at the outermost
// ncclGroupEnd) or on a non-blocking parent (the split returns ncclInProgress; the child is stored before the parent's
// async error leaves ncclInProgress). The shim records the child once it is there — when the job polls the parent, or
// at the first call on the child — with its origin, parent, color, key, size and rank, and then the AllReduce the job
// runs on it, with the fingerprints of its buffers.
class ShimTraceLateSplit : public ::testing::TestWithParam<const char*> {};

TEST_P(ShimTraceLateSplit, RecordsTheChildAndItsCalls) {
  constexpr int kRanks = 4;
  constexpr std::size_t kCount = 33;  // late_split_job's AllReduce: kCount floats, all rank + 1
  TempDir dir;
  const CommandResult job = run("env HOSTNCCL_TIMEOUT_S=20 DETNCCL_DIR=" + dir.path() +
                                " DETNCCL_RUN=split " DETNCCL_LAUNCHER " -n 4 --timeout 120 -- env LD_PRELOAD=" +
                                DETNCCL_SHIM_PATH " " DETNCCL_LATE_SPLIT_JOB " " + GetParam());
  ASSERT_EQ(job.exit_code, 0) << job.output;
  EXPECT_EQ(job.output.find("not traced"), std::string::npos) << job.output;
  std::map<uint64_t, std::vector<int>> members_by_child_id;
  for (int rank = 0; rank < kRanks; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const RankLog log = read_log(rank_log(dir.path(), "split", rank));
    ASSERT_EQ(log.communicators.size(), 2u) << "the world and the split's child";
    const CommunicatorRecord& world = log.communicators[0];
    const CommunicatorRecord& child = log.communicators[1];
    EXPECT_EQ(world.origin, detnccl::records::CommOrigin::kInitRank);
    EXPECT_EQ(child.origin, detnccl::records::CommOrigin::kSplit);
    EXPECT_EQ(child.parent_ordinal, world.ordinal);
    EXPECT_EQ(child.parent_id, world.id);
    EXPECT_EQ(child.split_color, rank % 2);
    EXPECT_EQ(child.split_key, rank);
    EXPECT_EQ(child.nranks, 2u);
    EXPECT_EQ(child.rank, static_cast<uint32_t>(rank / 2)) << "members in key order: {0, 2} and {1, 3}";
    members_by_child_id[child.id].push_back(rank);
    ASSERT_EQ(log.calls.size(), 1u) << "the AllReduce on the child";
    const CallRecord& call = log.calls[0];
    EXPECT_EQ(call.comm_ordinal, child.ordinal);
    EXPECT_EQ(call.comm_seq, 0u);
    EXPECT_EQ(call.op, detnccl::records::OpId::kAllReduce);
    EXPECT_EQ(call.count, kCount);
    EXPECT_EQ(call.result, 0);
    const auto bytes_of = [](float value) {
      std::vector<std::byte> bytes(kCount * sizeof(float));
      for (std::size_t i = 0; i < kCount; ++i) std::memcpy(bytes.data() + i * sizeof(float), &value, sizeof value);
      return bytes;
    };
    const float sum = rank % 2 == 0 ? 1.0f + 3.0f : 2.0f + 4.0f;
    ASSERT_TRUE(call.flags & detnccl::records::kCallInputFingerprint);
    ASSERT_TRUE(call.flags & detnccl::records::kCallOutputFingerprint);
    EXPECT_EQ(call.input_fingerprint, fingerprint_of(bytes_of(static_cast<float>(rank + 1))));
    EXPECT_EQ(call.output_fingerprint, fingerprint_of(bytes_of(sum)));
    EXPECT_EQ(log.end, detnccl::records::LogEndKind::kClosed);
  }
  EXPECT_EQ(members_by_child_id.size(), 2u) << "one id per color, the same on its members";
  for (const auto& [id, members] : members_by_child_id) EXPECT_EQ(members.size(), 2u) << "child " << id;
  const CommandResult check = run(DETNCCL_CLI " check " + dir.path() + "/split");
  EXPECT_EQ(check.exit_code, 0) << check.output;
  EXPECT_NE(check.output.find("CONSISTENT"), std::string::npos) << check.output;
}

INSTANTIATE_TEST_SUITE_P(Split, ShimTraceLateSplit,
                         ::testing::Values("--in-group", "--nonblocking", "--nonblocking --in-group",
                                           "--nonblocking --wait-on-child"),
                         [](const ::testing::TestParamInfo<const char*>& param) {
                           const std::string how = param.param;
                           if (how == "--in-group") return std::string("InsideAGroup");
                           if (how == "--nonblocking") return std::string("OfANonBlockingParent");
                           if (how == "--nonblocking --wait-on-child") {
                             return std::string("OfANonBlockingParentFirstSeenAtACallOnTheChild");
                           }
                           return std::string("OfANonBlockingParentInsideAGroup");
                         });

TEST(ShimDeterministic, ALateSplitChildFirstUsedByAnotherThreadIsReducedDeterministically) {
  // The child of a non-blocking parent's split, whose handle NCCL stores late, first named by a reduction on another
  // thread than the one that split (which never polled the parent before): deterministic mode still finds it (its
  // size and rank; without them it would refuse the AllReduce as one on a communicator NCCL has not finished).
  TempDir dir;
  for (const char* tracing : {"", "DETNCCL_DIR="}) {
    const std::string trace =
        *tracing == '\0' ? std::string() : std::string(tracing) + dir.path() + " DETNCCL_RUN=other ";
    const CommandResult job =
        run("env HOSTNCCL_TIMEOUT_S=20 DETNCCL_DETERMINISTIC=1 " + trace +
            DETNCCL_LAUNCHER " -n 4 --timeout 120 -- env LD_PRELOAD=" +
            DETNCCL_SHIM_PATH " " DETNCCL_LATE_SPLIT_JOB " --nonblocking --wait-on-child --on-another-thread");
    EXPECT_EQ(job.exit_code, 0) << trace << "\n" << job.output;
    EXPECT_EQ(job.output.find("refused"), std::string::npos) << trace << "\n" << job.output;
    EXPECT_EQ(job.output.find("cannot honour"), std::string::npos) << trace << "\n" << job.output;
  }
}

TEST(ShimDeterministic, LateChildrenDrivenByAThreadThatDidNotSplitAreRecognisedAsOneCommunicator) {
  // Two threads each create a rank of one non-blocking communicator and split it; NCCL stores the children late, on
  // its own thread, and the splitting threads only watch their variables. The main thread, which split nothing, then
  // drives both children in one group: deterministic mode must read the late handles it did not see stored and know
  // them for two ranks of one communicator (=1 stops, =warn hands them to NCCL), or the first deferred reduction would
  // wait for good for the second.
  const auto elsewhere = [&](const std::string& mode) {
    return run("env HOSTNCCL_TIMEOUT_S=10 " + mode +
               " LD_PRELOAD=" DETNCCL_SHIM_PATH " timeout 60 " DETNCCL_THREADS_JOB " 2 3 --late-children-elsewhere");
  };
  const CommandResult stopped = elsewhere("DETNCCL_DETERMINISTIC=1");
  EXPECT_EQ(stopped.exit_code, 78) << stopped.output;
  EXPECT_NE(stopped.output.find("two ranks of one communicator"), std::string::npos) << stopped.output;
  const CommandResult warned = elsewhere("DETNCCL_DETERMINISTIC=warn");
  EXPECT_EQ(warned.exit_code, 0) << warned.output;
  EXPECT_NE(warned.output.find("NOT deterministic"), std::string::npos) << warned.output;
  EXPECT_NE(warned.output.find("every output as expected"), std::string::npos) << warned.output;
}

TEST(ShimTrace, GroupSimulateEndClosesTheShimsGroupToo) {
  // NCCL's ncclGroupSimulateEnd ends the group (hostnccl lacks it: a stand-in preloaded after the shim does what NCCL
  // does). If the shim kept counting the group as open, every later call of the thread would be taken as inside it:
  // deterministic reductions deferred for good (wrong outputs: trace_job checks them) and no record written.
  TempDir dir;
  const CommandResult job =
      run("env HOSTNCCL_TIMEOUT_S=20 DETNCCL_DETERMINISTIC=1 DETNCCL_DIR=" + dir.path() +
          " DETNCCL_RUN=sim " DETNCCL_LAUNCHER " -n 2 --timeout 120 -- env LD_PRELOAD=" DETNCCL_SHIM_PATH
          ":" DETNCCL_SIMULATE_END_STUB " " DETNCCL_TRACE_JOB " --steps 2 --simulated-group");
  ASSERT_EQ(job.exit_code, 0) << job.output;
  const std::size_t per_step = detnccl::test::script_step(0, 2, 0).size();
  for (int rank = 0; rank < 2; ++rank) {
    const RankLog log = read_log(rank_log(dir.path(), "sim", rank));
    EXPECT_EQ(log.calls.size(), 2 * per_step) << "rank " << rank;
    EXPECT_EQ(log.end, detnccl::records::LogEndKind::kClosed) << "rank " << rank;
  }
}

TEST(ShimConfiguration, AnInvalidSettingStopsTheJobWithAMessageNamingIt) {
  TempDir dir;
  const CommandResult bad_value = run_traced_job(1, "DETNCCL_DIR=" + dir.path() + " DETNCCL_TRACE=everything");
  EXPECT_NE(bad_value.exit_code, 0);
  EXPECT_NE(bad_value.output.find("DETNCCL_TRACE"), std::string::npos) << bad_value.output;
  EXPECT_NE(bad_value.output.find("segments"), std::string::npos) << "accepted values are listed: " << bad_value.output;
  EXPECT_NE(bad_value.output.find("exit status 78"), std::string::npos) << bad_value.output;

  const CommandResult typo = run_traced_job(1, "DETNCCL_DIR=" + dir.path() + " DETNCCL_STPES=1");
  EXPECT_NE(typo.exit_code, 0);
  EXPECT_NE(typo.output.find("DETNCCL_STEPS"), std::string::npos) << "the closest name is suggested: " << typo.output;
}

TEST(ShimConfiguration, AnUnusableDirectoryWarnsOnceAndTheJobGoesOn) {
  TempDir dir;
  const std::string file = dir.path() + "/not-a-directory";
  std::FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  const CommandResult job = run_traced_job(2, "DETNCCL_DIR=" + file + "/sub DETNCCL_RUN=x");
  EXPECT_EQ(job.exit_code, 0) << job.output;
  EXPECT_NE(job.output.find("tracing is off"), std::string::npos) << job.output;
}

TEST(ShimConfiguration, TheLogFileIsPrivateAndNoDirectoryIsCreatedForIt) {
  TempDir dir;
  // A missing directory is not created (it would be 0755): one warning, messages go to stderr, the job goes on.
  const std::string missing = dir.path() + "/no/such";
  const CommandResult refused =
      run_traced_job(2, "DETNCCL_DETERMINISTIC=1 DETNCCL_LOG_FILE=" + missing + "/detnccl.log");
  EXPECT_EQ(refused.exit_code, 0) << refused.output;
  EXPECT_NE(refused.output.find("cannot log to DETNCCL_LOG_FILE"), std::string::npos) << refused.output;
  EXPECT_FALSE(fs::exists(dir.path() + "/no")) << "a directory was created for the log file";
  // An existing directory: the file is created 0600 whatever the umask, and receives the messages.
  const std::string log = dir.path() + "/detnccl.log";
  const CommandResult logged = run_traced_job(
      2, "DETNCCL_LOG_LEVEL=info DETNCCL_LOG_FILE=" + log + " DETNCCL_DIR=" + dir.path() + " DETNCCL_RUN=l",
      "--steps 1");
  EXPECT_EQ(logged.exit_code, 0) << logged.output;
  ASSERT_TRUE(fs::exists(log)) << logged.output;
  EXPECT_EQ(fs::status(log).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("tracing to"), std::string::npos) << text;
}

// set_step refuses what is not a step (bool, float, str, None, negative, 2^64 and up) the same way with and without the
// shim, and a refused value leaves the step as it was: 2**64 + 5 is never recorded as step 5, nor 1.7 as step 1.
TEST(ShimStepHelper, PythonHelperChecksStepsAlikeWithAndWithoutTheShim) {
  const std::pair<std::string, std::string> expected[] = {
      {"-1", "ValueError"},
      {"-18446744073709551616", "ValueError"},
      {"None", "TypeError"},
      {"'abc'", "TypeError"},
      {"'3'", "TypeError"},
      {"nan", "TypeError"},
      {"inf", "TypeError"},
      {"1.7", "TypeError"},
      {"2.0", "TypeError"},
      {"True", "TypeError"},
      {"False", "TypeError"},
      {"18446744073709551616", "ValueError"},
      {"18446744073709551621", "ValueError"},
      {"[]", "TypeError"},
      {"b'1'", "TypeError"},
      {"0", "ok"},
      {"7", "ok"},
      {"18446744073709551615", "ok"},
      {"Indexable()", "ok"},
  };
  const auto step_lines = [](const std::string& output) {
    std::vector<std::string> lines;
    for (std::size_t start = 0; start < output.size();) {
      const std::size_t end = std::min(output.find('\n', start), output.size());
      const std::string line = output.substr(start, end - start);
      if (line.rfind("step ", 0) == 0) lines.push_back(line);
      start = end + 1;
    }
    return lines;
  };
  std::vector<std::string> expected_lines;
  for (const auto& [value, outcome] : expected)
    expected_lines.push_back(std::string("step ").append(value).append(": ").append(outcome));

  TempDir dir;
  const std::string python = "env PYTHONPATH=" DETNCCL_PYTHON_HELPER_DIR " python3 " DETNCCL_STEP_HELPER_JOB
                             " " DETNCCL_HOSTNCCL_LIBRARY " --check-steps";
  const CommandResult plain = run(python);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_NE(plain.output.find("shim active: False"), std::string::npos) << plain.output;
  EXPECT_EQ(step_lines(plain.output), expected_lines) << "without the shim:\n" << plain.output;

  const CommandResult traced =
      run("env DETNCCL_DIR=" + dir.path() + " DETNCCL_RUN=steps LD_PRELOAD=" DETNCCL_SHIM_PATH " " + python);
  ASSERT_EQ(traced.exit_code, 0) << traced.output;
  EXPECT_NE(traced.output.find("shim active: True"), std::string::npos) << traced.output;
  EXPECT_EQ(step_lines(traced.output), expected_lines) << "with the shim:\n" << traced.output;
  const RankLog log = read_log(rank_log(dir.path(), "steps", 0));
  ASSERT_EQ(log.calls.size(), 3u);
  EXPECT_EQ(log.calls[0].step, 4u) << "refused values left step 4 in place";
  EXPECT_EQ(log.calls[1].step, ~uint64_t{0});
  EXPECT_EQ(log.calls[2].step, 0u);
}

}  // namespace
