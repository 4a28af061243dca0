// End-to-end tests of the `detnccl` command: trace_job runs under hostnccl-run with libdetnccl.so preloaded, and
// the `detnccl` binary reads the logs it leaves (diff, check, dump, stats), as a user would. Situations a real job
// cannot produce under the shim (a Send/Recv content corruption, a metadata desync that hostnccl would refuse or
// hang on) use synthetic logs (tests/test_cli_synthetic_run.h), still read by the binary.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "collectives/dtype_arith.h"
#include "detnccl_version.h"
#include "records/block_digests.h"
#include "records/capture_format.h"
#include "records/capture_reader.h"
#include "records/capture_writer.h"
#include "records/log_reader.h"
#include "tests/job_support.h"
#include "tests/test_cli_synthetic_run.h"
#include "tests/test_support.h"
#include "tests/trace_job_script.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using detnccl::test::CommandResult;
using detnccl::test::TempDir;

CommandResult run(const std::string& command) { return detnccl::test::run_command(command); }

// Runs trace_job on n ranks with the shim preloaded, writing DIR/run_name.
CommandResult traced_job(const TempDir& dir, const std::string& run_name, int nranks, const std::string& arguments,
                         const std::string& environment = "") {
  return run("env HOSTNCCL_TIMEOUT_S=20 " + environment + " " DETNCCL_LAUNCHER " -n " + std::to_string(nranks) +
             " --timeout 120 --grace 1 -- env LD_PRELOAD=" DETNCCL_SHIM_PATH " DETNCCL_DIR=" + dir.path() +
             " DETNCCL_RUN=" + run_name + " " DETNCCL_TRACE_JOB " " + arguments + " 2>&1");
}

// A digest or communicator id as detnccl prints it: 16 lower-case hex digits.
std::string hex_id(std::uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

// Runs the detnccl command; stderr is folded into the output only when asked (JSON tests parse stdout alone).
CommandResult detnccl(const std::string& arguments, bool with_stderr = false) {
  return run("NO_COLOR=1 " DETNCCL_CLI " " + arguments + (with_stderr ? " 2>&1" : " 2>/dev/null"));
}

// The lines of `text` after the first line that starts with `heading`, up to the first empty line or one starting
// with `stop` (the rows of a table).
std::vector<std::string> lines_after(const std::string& text, const std::string& heading, const std::string& stop) {
  std::istringstream in(text);
  std::vector<std::string> lines;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (!inside) {
      inside = line.rfind(heading, 0) == 0;
      continue;
    }
    if (line.empty() || (!stop.empty() && line.rfind(stop, 0) == 0)) break;
    lines.push_back(line);
  }
  return lines;
}

// A pair of runs of the script job over rank-order hostnccl, `environment` added to both (DETNCCL_CAPTURE=1 to
// capture): `clean`, and `faulty`, where element `element` of rank `rank`'s output of step 1's first call (an fp32
// AllReduce) is multiplied by `factor` and the job goes on past it (--keep-going: every rank's log is whole). *seq is
// that call's seq. Callers wrap it in ASSERT_NO_FATAL_FAILURE.
void faulted_pair(const TempDir& dir, const std::string& clean, const std::string& faulty, int steps, int rank,
                  int element, int factor, const std::string& environment, std::size_t* seq) {
  *seq = detnccl::test::script_step(1, 4, 0).size();
  const std::string env = "HOSTNCCL_REDUCE_ORDER=rank " + environment;
  const std::string job = "--steps " + std::to_string(steps);
  ASSERT_EQ(traced_job(dir, clean, 4, job, env).exit_code, 0);
  ASSERT_EQ(traced_job(dir, faulty, 4, job + " --keep-going",
                       env + " HOSTNCCL_CORRUPT=rank:" + std::to_string(rank) + ",call:" + std::to_string(*seq) +
                           ",element:" + std::to_string(element) + ",factor:" + std::to_string(factor))
                .exit_code,
            0);
}

json diff_json(const TempDir& dir, const std::string& a, const std::string& b, const std::string& extra = "") {
  const CommandResult result = detnccl("diff --json " + dir.run(a) + " " + dir.run(b) + " " + extra);
  return json::parse(result.output, nullptr, /*allow_exceptions=*/false);
}

// `detnccl report --json A B` of two runs that differ: exit 1, and the page's data (discarded when not JSON).
json report_json(const TempDir& dir, const std::string& a, const std::string& b) {
  const CommandResult report = detnccl("report --json " + dir.run(a) + " " + dir.run(b));
  EXPECT_EQ(report.exit_code, 1) << report.output;
  const json data = json::parse(report.output, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(data.is_discarded()) << report.output;
  return data;
}

TEST(CliDiff, TwoIdenticalRunsExitZero) {
  TempDir dir;
  for (const char* name : {"a", "b"}) ASSERT_EQ(traced_job(dir, name, 4, "--steps 2").exit_code, 0);
  const CommandResult text = detnccl("diff " + dir.run("a") + " " + dir.run("b"));
  EXPECT_EQ(text.exit_code, 0) << text.output;
  EXPECT_EQ(text.output.rfind("IDENTICAL", 0), 0u) << "the verdict comes first: " << text.output;
  const json result = diff_json(dir, "a", "b");
  ASSERT_FALSE(result.is_discarded());
  EXPECT_EQ(result["verdict"], "identical");
  const std::size_t per_rank = detnccl::test::script_step(0, 4, 0).size() * 2;
  for (const json& rank : result["ranks"]) EXPECT_EQ(rank["matching"], per_rank);
}

TEST(CliDiff, APerturbedInputIsFoundAtItsRankAndStepWithItsReceivers) {
  TempDir dir;
  ASSERT_EQ(traced_job(dir, "a", 4, "--steps 4").exit_code, 0);
  const CommandResult perturbed = traced_job(dir, "b", 4, "--steps 4 --perturb-rank 2 --perturb-step 1");
  ASSERT_EQ(perturbed.exit_code, 0) << perturbed.output;
  const CommandResult text = detnccl("diff " + dir.run("a") + " " + dir.run("b"));
  EXPECT_EQ(text.exit_code, 1) << text.output;
  const json result = diff_json(dir, "a", "b");
  ASSERT_FALSE(result.is_discarded());
  EXPECT_EQ(result["verdict"], "diverged");
  const json& first = result["first_divergence"];
  EXPECT_EQ(first["kind"], "input");
  EXPECT_EQ(first["role"], "origin");
  EXPECT_EQ(first["rank"], 2);
  EXPECT_EQ(first["step"], 1);
  EXPECT_EQ(first["op"], "AllReduce");  // the first call of the step
  EXPECT_EQ(first["seq"], detnccl::test::script_step(2, 4, 0).size());
  // Downstream: rank 3 receives rank 2's Send; every rank gathers rank 2's block in the AllGather.
  std::vector<int> receivers = result["receivers"].get<std::vector<int>>();
  EXPECT_EQ(receivers.size(), 3u) << result.dump(2);
  for (const json& rank : result["ranks"]) {
    if (rank["rank"] == 2) continue;
    ASSERT_FALSE(rank["first"].is_null()) << rank.dump();
    EXPECT_EQ(rank["first"]["role"], "receiver") << rank.dump();
    EXPECT_EQ(rank["first"]["source"]["rank"], 2) << rank.dump();
    EXPECT_EQ(rank["first"]["step"], 1);
  }
  const json& rank3 = result["ranks"][3];
  EXPECT_EQ(rank3["first"]["op"], "Recv");
  EXPECT_EQ(rank3["first"]["source"]["op"], "Send");
}

// HOSTNCCL_CORRUPT numbers calls as the shim's log does: the fault put on rank 1's call S is the divergence diff
// finds, at rank 1, seq S, in the output (docs/hostnccl.md, Fault injection).
TEST(CliDiff, AHostncclFaultIsFoundAtTheCallItNames) {
  TempDir dir;
  ASSERT_EQ(traced_job(dir, "a", 4, "--steps 3", "HOSTNCCL_REDUCE_ORDER=rank").exit_code, 0);
  const std::size_t seq = detnccl::test::script_step(1, 4, 0).size();  // step 1's first call: an fp32 AllReduce
  const CommandResult faulty = traced_job(
      dir, "b", 4, "--steps 3",
      "HOSTNCCL_REDUCE_ORDER=rank HOSTNCCL_CORRUPT=rank:1,call:" + std::to_string(seq) + ",element:0,factor:1001");
  // The job checks its outputs and stops at the wrong one; its log holds the calls up to there.
  EXPECT_NE(faulty.output.find("HOSTNCCL_CORRUPT: call " + std::to_string(seq) +
                               " (ncclAllReduce) of rank 1: output "
                               "element 0 multiplied by 1001"),
            std::string::npos)
      << faulty.output;
  const json result = diff_json(dir, "a", "b");
  ASSERT_FALSE(result.is_discarded());
  EXPECT_EQ(result["verdict"], "diverged");
  const json& first = result["first_divergence"];
  EXPECT_EQ(first["kind"], "output") << first.dump(2);
  EXPECT_EQ(first["rank"], 1) << first.dump(2);
  EXPECT_EQ(first["seq"], seq) << first.dump(2);
  EXPECT_EQ(first["op"], "AllReduce") << first.dump(2);
  EXPECT_EQ(first["step"], 1) << first.dump(2);
}

// Issue #18: with DETNCCL_CAPTURE=1 diff measures the first divergence from the captured buffers. Arrival-order sums
// differ within the reordering bound; a HOSTNCCL_CORRUPT fault of a factor 1001 is beyond it, at its element.
TEST(CliDiffMagnitude, ArrivalOrderIsWithinTheBoundAndAFaultIsBeyond) {
  TempDir dir;
  bool diverged = false;
  for (int attempt = 0; attempt < 5 && !diverged; ++attempt) {
    const std::string a = "a" + std::to_string(attempt), b = "b" + std::to_string(attempt);
    for (const std::string& name : {a, b}) {
      ASSERT_EQ(
          traced_job(dir, name, 4, "--steps 4 --wide-allreduce", "HOSTNCCL_REDUCE_ORDER=arrival DETNCCL_CAPTURE=1")
              .exit_code,
          0);
    }
    const json result = diff_json(dir, a, b, "--verbose");
    ASSERT_FALSE(result.is_discarded());
    if (result["verdict"] != "diverged") continue;
    diverged = true;
    const json& first = result["first_divergence"];
    ASSERT_EQ(first["kind"], "output") << first.dump(2);
    ASSERT_TRUE(first.contains("magnitude")) << first.dump(2);
    const json& m = first["magnitude"];
    EXPECT_GE(m["elements_differing"].get<int>(), 1) << m.dump();
    EXPECT_GE(m["first_index"].get<int>(), 0) << m.dump();
    EXPECT_GE(m["worst_index"].get<int>(), m["first_index"].get<int>()) << m.dump();
    EXPECT_GE(m["max_ulp"].get<int>(), 1) << m.dump();
    EXPECT_EQ(m["within_reordering_bound"], true) << m.dump();
    EXPECT_EQ(m.size(), 7u) << m.dump();
    // Within the bound the fingerprints' explanation stands: the reduction's order, which deterministic mode fixes.
    EXPECT_NE(first["cause"].get<std::string>().find("itself is nondeterministic"), std::string::npos) << first.dump(2);
    for (const json& rank : result["ranks"]) {
      if (!rank["first"].is_null() && rank["first"]["kind"] == "output") {
        EXPECT_TRUE(rank["first"].contains("magnitude")) << "--verbose measures every rank's first: " << rank.dump();
      }
    }
    const CommandResult text = detnccl("diff " + dir.run(a) + " " + dir.run(b));
    EXPECT_EQ(text.exit_code, 1);
    EXPECT_NE(text.output.find("magnitude outputs differ by at most "), std::string::npos) << text.output;
    EXPECT_NE(text.output.find("within the reordering bound: summation order, not corruption"), std::string::npos)
        << text.output;
  }
  EXPECT_TRUE(diverged) << "arrival order never changed a result: the test proves nothing";

  std::size_t seq = 0;
  ASSERT_NO_FATAL_FAILURE(faulted_pair(dir, "clean", "faulty", 3, 1, 17, 1001, "DETNCCL_CAPTURE=1", &seq));
  const json result = diff_json(dir, "clean", "faulty");
  ASSERT_FALSE(result.is_discarded());
  const json& first = result["first_divergence"];
  EXPECT_EQ(first["seq"], seq) << first.dump(2);
  const json& m = first["magnitude"];
  EXPECT_EQ(m["elements_differing"], 1) << m.dump();
  EXPECT_EQ(m["first_index"], 17) << m.dump();
  EXPECT_EQ(m["worst_index"], 17) << m.dump();
  EXPECT_NEAR(m["max_rel_error"].get<double>(), 1000.0, 1e-3) << m.dump();
  EXPECT_EQ(m["within_reordering_bound"], false) << m.dump();
  // Beyond the bound, "why" no longer blames the reduction's nondeterminism (nor sends the user to deterministic mode).
  const std::string cause = first["cause"].get<std::string>();
  EXPECT_NE(cause.find("beyond what any summation order allows"), std::string::npos) << cause;
  EXPECT_EQ(cause.find("itself is nondeterministic"), std::string::npos) << cause;
  const CommandResult text = detnccl("diff " + dir.run("clean") + " " + dir.run("faulty"));
  EXPECT_NE(text.output.find("why       every member's input matches but the output differs beyond what any "
                             "summation order allows"),
            std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find(" in 1 element \u2014 beyond the reordering bound: not summation order (1 beyond it, the "
                             "first at 17, the worst "),
            std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("; of 1031, first at 17, worst at 17 (abs "), std::string::npos) << text.output;
}

TEST(CliDiffMagnitude, WithoutCaptureFilesItSaysNotCapturedAndADamagedOneIsUnusable) {
  TempDir dir;
  std::size_t seq = 0;
  ASSERT_NO_FATAL_FAILURE(faulted_pair(dir, "a", "b", 2, 2, 3, 7, "", &seq));
  const json result = diff_json(dir, "a", "b");
  ASSERT_FALSE(result.is_discarded());
  EXPECT_FALSE(result["first_divergence"].contains("magnitude")) << result["first_divergence"].dump(2);
  const CommandResult text = detnccl("diff " + dir.run("a") + " " + dir.run("b"));
  EXPECT_EQ(text.exit_code, 1);
  EXPECT_NE(text.output.find("magnitude not captured (run A has no capture file for rank 2"), std::string::npos)
      << text.output;

  // Captured runs, then one byte of a blob's data flipped in run B's file for rank 2.
  ASSERT_NO_FATAL_FAILURE(faulted_pair(dir, "ca", "cb", 2, 2, 3, 7, "DETNCCL_CAPTURE=1", &seq));
  ASSERT_EQ(detnccl("diff " + dir.run("ca") + " " + dir.run("cb")).exit_code, 1);
  const std::string capture = dir.run("cb") + "/rank-00002.cap";
  {
    std::fstream file(capture, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(file.is_open()) << capture;
    file.seekg(0, std::ios::end);
    const std::streamoff size = file.tellg();
    ASSERT_GT(size, 400);
    file.seekg(size / 2);
    char byte = 0;
    file.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x5A);
    file.seekp(size / 2);
    file.write(&byte, 1);
  }
  const CommandResult damaged = detnccl("diff " + dir.run("ca") + " " + dir.run("cb"), /*with_stderr=*/true);
  EXPECT_EQ(damaged.exit_code, 2) << damaged.output;
  EXPECT_NE(damaged.output.find("damaged capture file " + capture), std::string::npos) << damaged.output;
}

// `detnccl report`'s data (issue #19) with capture files (issue #18): the first divergence carries diff's magnitude
// object and its sentence, and when every member's input of the diverging reduction was captured the next command is
// `detnccl replay` of that call, which runs. An input divergence, measured too, keeps the narrow re-trace.
TEST(CliReport, ACapturedReductionsOutputDivergenceHasItsMagnitudeAndReplayNext) {
  TempDir dir;
  std::size_t seq = 0;
  ASSERT_NO_FATAL_FAILURE(faulted_pair(dir, "clean", "faulty", 3, 1, 17, 1001, "DETNCCL_CAPTURE=1", &seq));
  const json data = report_json(dir, "clean", "faulty");
  ASSERT_FALSE(data.is_discarded());
  const json& first = data["first"];
  EXPECT_EQ(first["rank"], 1) << first.dump(2);
  EXPECT_EQ(first["seq"], seq) << first.dump(2);
  EXPECT_EQ(first["kind"], "output") << first.dump(2);
  // The magnitude is diff's own, key for key.
  const json diff = diff_json(dir, "clean", "faulty");
  ASSERT_TRUE(diff["first_divergence"].contains("magnitude")) << diff.dump(2);
  EXPECT_EQ(first["magnitude"], diff["first_divergence"]["magnitude"]) << first.dump(2);
  EXPECT_EQ(first["magnitude"]["first_index"], 17) << first.dump(2);
  EXPECT_EQ(first["magnitude"]["within_reordering_bound"], false) << first.dump(2);
  EXPECT_EQ(data["diff"]["first_divergence"]["magnitude"], diff["first_divergence"]["magnitude"]);
  const std::string sentence = first.value("magnitude_text", "");
  EXPECT_EQ(sentence.rfind("outputs differ by at most ", 0), 0u) << sentence;
  EXPECT_NE(sentence.find("ulp in 1 element \u2014 beyond the reordering bound: not summation order (1 beyond it, "
                          "the first at 17"),
            std::string::npos)
      << sentence;
  // The next command is replay of run A's call, and it runs: rank order gives run A's recorded output.
  const std::string replay = "detnccl replay " + dir.run("clean") + " --rank 1 --seq " + std::to_string(seq);
  EXPECT_EQ(data["next"]["command"], replay) << data["next"].dump(2);
  EXPECT_NE(data["next"]["why"].get<std::string>().find("beyond the reordering bound"), std::string::npos);
  const CommandResult replayed = detnccl(replay.substr(std::string("detnccl ").size()));
  EXPECT_EQ(replayed.exit_code, 0) << replayed.output;
  EXPECT_NE(replayed.output.find("rank: 0 elements differ, max 0 ulp, max rel 0  = the recorded output"),
            std::string::npos)
      << replayed.output;

  // A perturbed input, captured in both runs: measured, but its cause is the compute before the call.
  ASSERT_EQ(traced_job(dir, "a", 4, "--steps 3", "DETNCCL_CAPTURE=1").exit_code, 0);
  ASSERT_EQ(traced_job(dir, "b", 4, "--steps 3 --perturb-rank 2 --perturb-step 1", "DETNCCL_CAPTURE=1").exit_code, 0);
  const json input = report_json(dir, "a", "b");
  ASSERT_FALSE(input.is_discarded());
  EXPECT_EQ(input["first"]["kind"], "input") << input["first"].dump(2);
  EXPECT_EQ(input["first"]["rank"], 2) << input["first"].dump(2);
  EXPECT_TRUE(input["first"].contains("magnitude")) << input["first"].dump(2);
  EXPECT_FALSE(input["first"]["magnitude"].contains("within_reordering_bound")) << input["first"].dump(2);
  EXPECT_EQ(input["next"]["command"], "detnccl run --trace segments --steps 1 --ranks 2 -- JOB")
      << input["next"].dump(2);
}

// Without capture files the report says so, has no magnitude object, and names the command it named before #18.
TEST(CliReport, WithoutCaptureFilesThereIsNoMagnitudeAndNoReplay) {
  TempDir dir;
  std::size_t seq = 0;
  ASSERT_NO_FATAL_FAILURE(faulted_pair(dir, "a", "b", 2, 1, 3, 7, "", &seq));
  const json data = report_json(dir, "a", "b");
  ASSERT_FALSE(data.is_discarded());
  const json& first = data["first"];
  EXPECT_EQ(first["kind"], "output") << first.dump(2);
  EXPECT_FALSE(first.contains("magnitude")) << first.dump(2);
  EXPECT_EQ(first.value("magnitude_text", "").rfind("not captured (run A has no capture file for rank 1", 0), 0u)
      << first.dump(2);
  EXPECT_EQ(data["next"]["command"], "detnccl run --deterministic -- JOB") << data["next"].dump(2);
}

// `detnccl replay` (issue #18): the recomputed rank order gives a rank-order run's recorded bits, the deterministic
// order a DETNCCL_DETERMINISTIC=1 run's; without capture, or for a call that is not there, exit 2.
TEST(CliReplay, RankAndDeterministicOrdersGiveTheRecordedOutputs) {
  TempDir dir;
  ASSERT_EQ(traced_job(dir, "rank", 4, "--steps 2 --wide-allreduce", "HOSTNCCL_REDUCE_ORDER=rank DETNCCL_CAPTURE=1")
                .exit_code,
            0);
  ASSERT_EQ(traced_job(dir, "det", 4, "--steps 2 --wide-allreduce",
                       "HOSTNCCL_REDUCE_ORDER=arrival DETNCCL_CAPTURE=1 DETNCCL_DETERMINISTIC=1")
                .exit_code,
            0);
  for (const char* run : {"rank", "det"}) {
    for (const char* rank : {"0", "3"}) {
      const CommandResult result = detnccl("replay " + dir.run(run) + " --rank " + rank + " --seq 1 --json");
      ASSERT_EQ(result.exit_code, 0) << result.output;
      const json out = json::parse(result.output, nullptr, false);
      ASSERT_FALSE(out.is_discarded()) << result.output;
      EXPECT_EQ(out["op"], "AllReduce");
      EXPECT_EQ(out["nranks"], 4);
      ASSERT_GE(out["orders"].size(), 10u);
      EXPECT_EQ(out["orders"][0]["order"], "rank");
      EXPECT_EQ(out["orders"][1]["order"], "deterministic");
      const std::size_t expected = std::string(run) == "rank" ? 0 : 1;
      EXPECT_EQ(out["orders"][expected]["matches_recorded"], true) << run << " rank " << rank << ": " << out.dump(2);
      EXPECT_FALSE(out["recorded"].is_null());
      // The data's sums are not exact in fp32: the distances are measured, not all zero.
      std::uint64_t differing = 0;
      for (const json& order : out["orders"])
        differing += order["from_reference"]["elements_differing"].get<std::uint64_t>();
      EXPECT_GT(differing, 0u) << out.dump(2);
    }
  }
  const CommandResult text = detnccl("replay " + dir.run("rank") + " --rank 2 --seq 0");
  EXPECT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("rank: "), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("= the recorded output"), std::string::npos) << text.output;

  ASSERT_EQ(traced_job(dir, "plain", 4, "--steps 1 --wide-allreduce").exit_code, 0);
  const CommandResult absent = detnccl("replay " + dir.run("plain") + " --rank 0 --seq 0", true);
  EXPECT_EQ(absent.exit_code, 2) << absent.output;
  EXPECT_NE(absent.output.find("not captured"), std::string::npos) << absent.output;
  const CommandResult no_call = detnccl("replay " + dir.run("rank") + " --rank 0 --seq 999", true);
  EXPECT_EQ(no_call.exit_code, 2) << no_call.output;
  EXPECT_NE(no_call.output.find("has no call with seq 999"), std::string::npos) << no_call.output;
}

// The call records of one rank's log, in log order.
std::vector<detnccl::records::CallRecord> call_records(const TempDir& dir, const std::string& run, int rank) {
  std::vector<detnccl::records::CallRecord> calls;
  auto opened = detnccl::records::LogReader::open_file(
      dir.run(run) + "/" + detnccl::records::rank_log_file_name(static_cast<std::uint32_t>(rank)));
  EXPECT_TRUE(opened.reader) << opened.error;
  if (!opened.reader) return calls;
  detnccl::records::LogRecord record;
  while (opened.reader->next(record)) {
    if (const auto* call = std::get_if<detnccl::records::CallRecord>(&record.record)) calls.push_back(*call);
  }
  return calls;
}

// The call record with sequence number `seq`.
const detnccl::records::CallRecord* call_with_seq(const std::vector<detnccl::records::CallRecord>& calls,
                                                  std::uint64_t seq) {
  for (const auto& call : calls) {
    if (call.seq == seq) return &call;
  }
  return nullptr;
}

// Issue #18's tests for a bf16 job (trace_job --wide-allreduce --allreduce-dtype bf16: 4,096 values over 40 orders of
// magnitude per rank, summed in bf16 as hostnccl does: widened to fp32, rounded to bf16 after every addition, which
// docs/magnitudes.md's bound covers). Arrival-order runs differ within the reordering bound; a HOSTNCCL_CORRUPT fault
// of a factor 1001 is beyond it, with the ULPs and errors computed here from the job's inputs.
TEST(CliDiffMagnitude, Bf16ArrivalOrderIsWithinTheBoundAndAFaultIsBeyond) {
  TempDir dir;
  const std::string job = "--steps 2 --wide-allreduce --allreduce-dtype bf16";
  bool diverged = false;
  for (int attempt = 0; attempt < 5 && !diverged; ++attempt) {
    const std::string a = "a" + std::to_string(attempt), b = "b" + std::to_string(attempt);
    for (const std::string& name : {a, b}) {
      ASSERT_EQ(traced_job(dir, name, 4, job, "HOSTNCCL_REDUCE_ORDER=arrival DETNCCL_CAPTURE=1").exit_code, 0);
    }
    const json result = diff_json(dir, a, b);
    ASSERT_FALSE(result.is_discarded());
    if (result["verdict"] != "diverged") continue;
    diverged = true;
    const json& first = result["first_divergence"];
    ASSERT_EQ(first["kind"], "output") << first.dump(2);
    EXPECT_EQ(first["datatype"], "bfloat16") << first.dump(2);
    ASSERT_TRUE(first.contains("magnitude")) << first.dump(2);
    const json& m = first["magnitude"];
    EXPECT_GE(m["elements_differing"].get<int>(), 1) << m.dump();
    EXPECT_GE(m["worst_index"].get<int>(), m["first_index"].get<int>()) << m.dump();
    EXPECT_GE(m["max_ulp"].get<int>(), 1) << m.dump();
    EXPECT_EQ(m["within_reordering_bound"], true) << m.dump();
    const CommandResult text = detnccl("diff " + dir.run(a) + " " + dir.run(b));
    EXPECT_EQ(text.exit_code, 1);
    EXPECT_NE(text.output.find("magnitude outputs differ by at most "), std::string::npos) << text.output;
    EXPECT_NE(text.output.find(" \u2014 within the reordering bound: summation order, not corruption; of 4096, "),
              std::string::npos)
        << text.output;
  }
  EXPECT_TRUE(diverged) << "arrival order never changed a bf16 result: the test proves nothing";

  // The fault, at step 1's AllReduce (seq 1) on rank 1, on the first element whose four addends share a sign: no
  // order can move that sum by more than about 2·3·2^-8 of it (γ_3 in bf16), and the fault multiplies it by 1001.
  constexpr std::size_t kCount = 4096;
  std::vector<std::vector<std::uint16_t>> inputs;
  for (int r = 0; r < 4; ++r) inputs.push_back(detnccl::test::wide_magnitude_bf16(r, 1, kCount));
  std::size_t element = kCount;
  for (std::size_t i = 0; i < kCount && element == kCount; ++i) {
    bool same_sign = true;
    for (int r = 1; r < 4; ++r) same_sign = same_sign && (inputs[r][i] >> 15) == (inputs[0][i] >> 15);
    if (same_sign) element = i;
  }
  ASSERT_LT(element, kCount);
  // hostnccl's rank-order sum (hostnccl/reduce.cc: fp32 addition, rounded to bf16 each time) and its fault
  // (corrupt_element: the product in double, rounded to fp32, then to bf16).
  using detnccl::arith::bf16_to_float;
  using detnccl::arith::float_to_bf16;
  std::uint16_t sum = inputs[0][element];
  for (int r = 1; r < 4; ++r) sum = float_to_bf16(bf16_to_float(sum) + bf16_to_float(inputs[r][element]));
  const std::uint16_t corrupted = float_to_bf16(static_cast<float>(static_cast<double>(bf16_to_float(sum)) * 1001.0));
  ASSERT_EQ(sum >> 15, corrupted >> 15);
  const std::uint64_t ulp = (corrupted & 0x7FFFu) > (sum & 0x7FFFu) ? (corrupted & 0x7FFFu) - (sum & 0x7FFFu)
                                                                    : (sum & 0x7FFFu) - (corrupted & 0x7FFFu);
  const long double abs_error = std::fabs(static_cast<long double>(bf16_to_float(corrupted)) - bf16_to_float(sum));
  const long double rel_error = abs_error / std::fabs(static_cast<long double>(bf16_to_float(sum)));

  ASSERT_EQ(traced_job(dir, "clean", 4, job, "HOSTNCCL_REDUCE_ORDER=rank DETNCCL_CAPTURE=1").exit_code, 0);
  const CommandResult faulty = traced_job(
      dir, "faulty", 4, job,
      "HOSTNCCL_REDUCE_ORDER=rank DETNCCL_CAPTURE=1 HOSTNCCL_CORRUPT=rank:1,call:1,element:" + std::to_string(element) +
          ",factor:1001");
  ASSERT_EQ(faulty.exit_code, 0) << faulty.output;
  const json result = diff_json(dir, "clean", "faulty");
  ASSERT_FALSE(result.is_discarded());
  const json& first = result["first_divergence"];
  EXPECT_EQ(first["kind"], "output") << first.dump(2);
  EXPECT_EQ(first["rank"], 1) << first.dump(2);
  EXPECT_EQ(first["seq"], 1) << first.dump(2);
  EXPECT_EQ(first["datatype"], "bfloat16") << first.dump(2);
  ASSERT_TRUE(first.contains("magnitude")) << first.dump(2);
  const json& m = first["magnitude"];
  EXPECT_EQ(m["elements_differing"], 1) << m.dump();
  EXPECT_EQ(m["first_index"], element) << m.dump();
  EXPECT_EQ(m["worst_index"], element) << m.dump();
  EXPECT_EQ(m["max_ulp"], ulp) << m.dump();
  EXPECT_DOUBLE_EQ(m["max_abs_error"].get<double>(), static_cast<double>(abs_error)) << m.dump();
  EXPECT_DOUBLE_EQ(m["max_rel_error"].get<double>(), static_cast<double>(rel_error)) << m.dump();
  EXPECT_EQ(m["within_reordering_bound"], false) << m.dump();
  const CommandResult text = detnccl("diff " + dir.run("clean") + " " + dir.run("faulty"));
  const std::string where = std::to_string(element);
  EXPECT_NE(text.output.find(" in 1 element \u2014 beyond the reordering bound: not summation order (1 beyond it, the "
                             "first at " +
                             where + ", the worst "),
            std::string::npos)
      << text.output;
}

// A one-ulp change of one input element (trace_job --perturb-element: rank 2, step 1, element 5 of every input): the
// first divergence is an `input` one, one element, one ulp, at that element; its errors are that ulp. An input
// divergence has no reordering verdict, nor do the outputs it changes on the other ranks (their inputs differ).
TEST(CliDiffMagnitude, AOneUlpInputPerturbationIsOneElementOneUlpAtItsIndex) {
  TempDir dir;
  ASSERT_EQ(traced_job(dir, "a", 4, "--steps 3", "HOSTNCCL_REDUCE_ORDER=rank DETNCCL_CAPTURE=1").exit_code, 0);
  const CommandResult perturbed =
      traced_job(dir, "b", 4, "--steps 3 --perturb-rank 2 --perturb-step 1 --perturb-element 5",
                 "HOSTNCCL_REDUCE_ORDER=rank DETNCCL_CAPTURE=1");
  ASSERT_EQ(perturbed.exit_code, 0) << perturbed.output;
  const json result = diff_json(dir, "a", "b", "--verbose");
  ASSERT_FALSE(result.is_discarded());
  EXPECT_EQ(result["verdict"], "diverged");
  const json& first = result["first_divergence"];
  EXPECT_EQ(first["kind"], "input") << first.dump(2);
  EXPECT_EQ(first["rank"], 2) << first.dump(2);
  EXPECT_EQ(first["step"], 1) << first.dump(2);
  EXPECT_EQ(first["seq"], detnccl::test::script_step(2, 4, 0).size()) << first.dump(2);
  EXPECT_EQ(first["op"], "AllReduce") << first.dump(2);
  ASSERT_TRUE(first.contains("magnitude")) << first.dump(2);
  const json& m = first["magnitude"];
  EXPECT_EQ(m["elements_differing"], 1) << m.dump();
  EXPECT_EQ(m["first_index"], 5) << m.dump();
  EXPECT_EQ(m["worst_index"], 5) << m.dump();
  EXPECT_EQ(m["max_ulp"], 1) << m.dump();
  const float value = detnccl::test::script_value(2, 1, 0, 5);
  const double step = static_cast<double>(std::nextafter(value, INFINITY)) - value;
  EXPECT_DOUBLE_EQ(m["max_abs_error"].get<double>(), step) << m.dump();
  EXPECT_DOUBLE_EQ(m["max_rel_error"].get<double>(), step / value) << m.dump();
  EXPECT_FALSE(m.contains("within_reordering_bound")) << "an input divergence has no verdict: " << m.dump();
  // The step's sums round the ulp away (29 + 2^-19 among addends summing to 102); the receivers are the ranks that
  // get rank 2's buffer whole: its block of the AllGather (ranks 0 and 1), its Send (rank 3). Their own inputs match,
  // so their outputs are measured: the same ulp, at element 5 of rank 2's block.
  const std::size_t gathered = 2 * detnccl::test::kScriptCount + 5;
  std::size_t receivers = 0;
  for (const json& rank : result["ranks"]) {
    if (rank["rank"] == 2) continue;
    const json& call = rank["first"];
    ASSERT_FALSE(call.is_null()) << rank.dump();
    EXPECT_EQ(call["role"], "receiver") << call.dump();
    ASSERT_TRUE(call.contains("magnitude")) << call.dump();
    EXPECT_EQ(call["magnitude"]["elements_differing"], 1) << call.dump();
    EXPECT_EQ(call["magnitude"]["max_ulp"], 1) << call.dump();
    EXPECT_EQ(call["magnitude"]["first_index"], call["op"] == "AllGather" ? gathered : 5) << call.dump();
    ++receivers;
  }
  EXPECT_EQ(receivers, 3u);
  const CommandResult text = detnccl("diff --verbose " + dir.run("a") + " " + dir.run("b"));
  EXPECT_EQ(text.exit_code, 1);
  EXPECT_NE(text.output.find("magnitude inputs differ by at most 1 ulp in 1 element; of 1031, first at 5, worst at 5 "
                             "(abs "),
            std::string::npos)
      << text.output;
}

// The reordering verdict is for equal inputs: when a one-ulp input change survives an AllReduce (values over 40
// orders of magnitude, trace_job --wide-allreduce), the other ranks' outputs differ because rank 2's input does, and
// their magnitudes carry no verdict, saying why.
TEST(CliDiffMagnitude, AReceiversReductionOutputHasNoReorderingVerdict) {
  constexpr std::size_t kCount = 4096;
  // An element whose one-ulp change on rank 2 at step 1 changes the rank-order fp32 sum (hostnccl's order here).
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < 4; ++r) inputs.push_back(detnccl::test::wide_magnitude_values(r, 1, kCount));
  const auto rank_order_sum = [&](std::size_t i, bool perturbed) {
    float sum = inputs[0][i];
    for (int r = 1; r < 4; ++r) sum += r == 2 && perturbed ? std::nextafter(inputs[r][i], INFINITY) : inputs[r][i];
    return sum;
  };
  std::size_t element = kCount;
  for (std::size_t i = 0; i < kCount && element == kCount; ++i) {
    if (rank_order_sum(i, false) != rank_order_sum(i, true)) element = i;
  }
  ASSERT_LT(element, kCount);
  TempDir dir;
  const std::string job = "--steps 2 --wide-allreduce";
  ASSERT_EQ(traced_job(dir, "a", 4, job, "HOSTNCCL_REDUCE_ORDER=rank DETNCCL_CAPTURE=1").exit_code, 0);
  ASSERT_EQ(
      traced_job(dir, "b", 4, job + " --perturb-rank 2 --perturb-step 1 --perturb-element " + std::to_string(element),
                 "HOSTNCCL_REDUCE_ORDER=rank DETNCCL_CAPTURE=1")
          .exit_code,
      0);
  const json result = diff_json(dir, "a", "b", "--verbose");
  ASSERT_FALSE(result.is_discarded());
  const json& first = result["first_divergence"];
  EXPECT_EQ(first["kind"], "input") << first.dump(2);
  EXPECT_EQ(first["rank"], 2) << first.dump(2);
  EXPECT_EQ(first["seq"], 1) << first.dump(2);
  EXPECT_EQ(first["magnitude"]["first_index"], element) << first.dump(2);
  EXPECT_EQ(first["magnitude"]["max_ulp"], 1) << first.dump(2);
  for (const json& rank : result["ranks"]) {
    if (rank["rank"] == 2) continue;
    const json& call = rank["first"];
    ASSERT_FALSE(call.is_null()) << rank.dump();
    EXPECT_EQ(call["op"], "AllReduce") << call.dump();
    EXPECT_EQ(call["seq"], 1) << call.dump();
    ASSERT_TRUE(call.contains("magnitude")) << call.dump();
    EXPECT_EQ(call["magnitude"]["first_index"], element) << call.dump();
    EXPECT_FALSE(call["magnitude"].contains("within_reordering_bound")) << call.dump();
  }
  const CommandResult text = detnccl("diff --verbose " + dir.run("a") + " " + dir.run("b"));
  EXPECT_NE(text.output.find("reordering bound not computed: rank 2's input differs between the runs, and the bound "
                             "is for equal inputs"),
            std::string::npos)
      << text.output;
}

// A capture budget spent mid-run (DETNCCL_CAPTURE_BYTES): the jobs complete, the divergent call past the budget is
// "not captured" (its records say capture was skipped), and diff names it from the fingerprints alone.
TEST(CliDiffMagnitude, PastTheCaptureBudgetTheDivergenceIsNotCapturedAndFoundByItsFingerprints) {
  TempDir dir;
  // One AllReduce of 4,096 random floats per step (16 KiB in, 16 KiB out, stored raw: they do not compress): 40,000
  // bytes hold step 0's buffers, not step 1's. The fault is at step 2 (seq 2); the job goes on (its outputs are not
  // checked), so every rank's log is whole.
  const std::string capture = "HOSTNCCL_REDUCE_ORDER=rank DETNCCL_CAPTURE=1 DETNCCL_CAPTURE_BYTES=40000";
  const std::string job = "--steps 3 --wide-allreduce";
  ASSERT_EQ(traced_job(dir, "a", 4, job, capture).exit_code, 0);
  const std::size_t seq = 2;
  const CommandResult faulty =
      traced_job(dir, "b", 4, job, capture + " HOSTNCCL_CORRUPT=rank:1,call:2,element:3,factor:1001");
  ASSERT_EQ(faulty.exit_code, 0) << faulty.output;
  EXPECT_NE(faulty.output.find("HOSTNCCL_CORRUPT: call 2"), std::string::npos) << faulty.output;
  for (const char* run : {"a", "b"}) {
    EXPECT_TRUE(fs::exists(dir.run(run) + "/rank-00001.cap")) << run;
    const auto calls = call_records(dir, run, 1);
    const detnccl::records::CallRecord* call = call_with_seq(calls, seq);
    ASSERT_NE(call, nullptr) << run;
    EXPECT_NE(call->flags & detnccl::records::kCallSaveSkipped, 0) << run << ": the budget should be spent by step 2";
    EXPECT_EQ(call->flags & detnccl::records::kCallOutputSaved, 0) << run;
    EXPECT_NE(calls.front().flags & detnccl::records::kCallInputSaved, 0) << run << ": the first call is captured";
  }
  const json result = diff_json(dir, "a", "b");
  ASSERT_FALSE(result.is_discarded());
  EXPECT_EQ(result["verdict"], "diverged");
  const json& first = result["first_divergence"];
  EXPECT_EQ(first["kind"], "output") << first.dump(2);
  EXPECT_EQ(first["rank"], 1) << first.dump(2);
  EXPECT_EQ(first["seq"], seq) << first.dump(2);
  EXPECT_FALSE(first.contains("magnitude")) << first.dump(2);
  const CommandResult text = detnccl("diff " + dir.run("a") + " " + dir.run("b"), /*with_stderr=*/true);
  EXPECT_EQ(text.exit_code, 1) << text.output;
  EXPECT_NE(text.output.find("magnitude not captured (run A did not capture this buffer of rank 1: its record says "
                             "capture was skipped (the budget DETNCCL_CAPTURE_BYTES was spent"),
            std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("  output    "), std::string::npos) << "the fingerprints are shown: " << text.output;
}

// Hostile capture files (issue #18): cut short inside the blob a call needs or inside the header, a blob whose data
// fails its checksum, a blob of the wrong size for the call. diff (of that divergence) and replay (of that call)
// exit 2 naming the file.
TEST(CliDiffMagnitude, HostileCaptureFilesMakeDiffAndReplayExit2NamingTheFile) {
  namespace records = detnccl::records;
  TempDir dir;
  // One AllReduce per step; the job goes on past the fault (its outputs are not checked), so every log is whole.
  const std::string job = "--steps 2 --wide-allreduce";
  ASSERT_EQ(traced_job(dir, "ca", 4, job, "HOSTNCCL_REDUCE_ORDER=rank DETNCCL_CAPTURE=1").exit_code, 0);
  const std::size_t seq = 1;
  ASSERT_EQ(traced_job(dir, "cb", 4, job,
                       "HOSTNCCL_REDUCE_ORDER=rank DETNCCL_CAPTURE=1 HOSTNCCL_CORRUPT=rank:2,call:1,element:3,factor:7")
                .exit_code,
            0);
  // The untouched files work: diff measures, replay runs.
  ASSERT_EQ(detnccl("diff " + dir.run("ca") + " " + dir.run("cb")).exit_code, 1);
  const std::string replay_call = " --rank 2 --seq " + std::to_string(seq);
  ASSERT_EQ(detnccl("replay " + dir.run("cb") + replay_call).exit_code, 0);

  // Where rank 2's faulty output is in its capture file.
  const auto calls = call_records(dir, "cb", 2);
  const records::CallRecord* call = call_with_seq(calls, seq);
  ASSERT_NE(call, nullptr);
  ASSERT_NE(call->flags & records::kCallOutputSaved, 0);
  const std::string original = dir.run("cb") + "/rank-00002.cap";
  records::OpenedCapture opened = records::CaptureReader::open_file(original);
  ASSERT_NE(opened.reader, nullptr) << opened.error;
  const records::CaptureBlob* blob = nullptr;
  for (const records::CaptureBlob& b : opened.reader->blobs()) {
    if (b.fields.fingerprint == call->output_fingerprint) blob = &b;
  }
  ASSERT_NE(blob, nullptr);
  ASSERT_EQ(blob->fields.raw_bytes, 4096u * 4);
  const std::uint64_t data_offset = blob->offset + sizeof(records::RecordFrame) + sizeof(records::CaptureBlobFields);

  // Each damaged variant is a copy of run cb with only rank 2's capture file changed.
  const auto variant = [&](const std::string& name) {
    fs::copy(dir.run("cb"), dir.run(name), fs::copy_options::recursive);
    return dir.run(name) + "/rank-00002.cap";
  };
  std::vector<std::string> variants;
  {  // cut inside the blob
    const std::string path = variant("cut");
    fs::resize_file(path, data_offset + blob->fields.stored_bytes / 2);
    variants.push_back("cut");
  }
  {  // cut inside the header
    const std::string path = variant("header");
    fs::resize_file(path, 20);
    variants.push_back("header");
  }
  {  // one byte of the blob's data flipped: its record's checksum fails
    const std::string path = variant("flipped");
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    const std::streamoff at = static_cast<std::streamoff>(data_offset + blob->fields.stored_bytes / 2);
    char byte = 0;
    file.seekg(at);
    file.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x5A);
    file.seekp(at);
    file.write(&byte, 1);
    variants.push_back("flipped");
  }
  {  // rewritten, intact, but with the faulty output stored under its fingerprint with half its bytes
    const std::string path = variant("size");
    fs::remove(path);
    records::CreatedCaptureWriter created = records::CaptureWriter::create(dir.run("size"), 2);
    ASSERT_NE(created.writer, nullptr) << created.error;
    for (const records::CaptureBlob& b : opened.reader->blobs()) {
      records::CaptureLookup lookup = opened.reader->find(b.fields.fingerprint, b.fields.raw_bytes);
      ASSERT_EQ(lookup.status, records::CaptureLookupStatus::kFound) << lookup.message;
      if (&b == blob) lookup.bytes.resize(lookup.bytes.size() / 2);
      created.writer->save(b.fields.fingerprint, lookup.bytes);
    }
    created.writer->close();
    records::OpenedCapture reread = records::CaptureReader::open_file(path);
    ASSERT_NE(reread.reader, nullptr) << reread.error;
    EXPECT_EQ(reread.reader->end().kind, records::CaptureEndKind::kClosed) << "a well-formed file";
    variants.push_back("size");
  }
  for (const std::string& name : variants) {
    const std::string path = dir.run(name) + "/rank-00002.cap";
    const CommandResult diff = detnccl("diff " + dir.run("ca") + " " + dir.run(name), /*with_stderr=*/true);
    EXPECT_EQ(diff.exit_code, 2) << name << ": " << diff.output;
    EXPECT_NE(diff.output.find("damaged capture file " + path), std::string::npos) << name << ": " << diff.output;
    const CommandResult replay = detnccl("replay " + dir.run(name) + replay_call, /*with_stderr=*/true);
    EXPECT_EQ(replay.exit_code, 2) << name << ": " << replay.output;
    EXPECT_NE(replay.output.find("damaged capture file " + path), std::string::npos) << name << ": " << replay.output;
  }
  const CommandResult size = detnccl("diff " + dir.run("ca") + " " + dir.run("size"), /*with_stderr=*/true);
  EXPECT_NE(size.output.find("the size does not match the call"), std::string::npos) << size.output;
}

TEST(CliDiff, ArrivalOrderReductionsShowAnOutputDivergenceAtTheFirstAffectedAllReduce) {
  TempDir dir;
  // Arrival order usually changes the sum's bits at the first call; the two runs could still agree by chance, so
  // try a few pairs of runs.
  for (int attempt = 0; attempt < 5; ++attempt) {
    const std::string a = "a" + std::to_string(attempt);
    const std::string b = "b" + std::to_string(attempt);
    for (const std::string& name : {a, b}) {
      ASSERT_EQ(traced_job(dir, name, 4, "--steps 6 --wide-allreduce", "HOSTNCCL_REDUCE_ORDER=arrival").exit_code, 0);
    }
    // The expected answer, read from the logs directly: the first step whose AllReduce output differs on any rank.
    std::optional<std::uint64_t> expected;
    for (int rank = 0; rank < 4; ++rank) {
      std::vector<std::uint64_t> outputs[2];
      for (int side = 0; side < 2; ++side) {
        const std::string path =
            dir.run(side == 0 ? a : b) + "/" + detnccl::records::rank_log_file_name(static_cast<std::uint32_t>(rank));
        auto opened = detnccl::records::LogReader::open_file(path);
        ASSERT_TRUE(opened.reader) << opened.error;
        detnccl::records::LogRecord record;
        while (opened.reader->next(record)) {
          if (const auto* call = std::get_if<detnccl::records::CallRecord>(&record.record)) {
            outputs[side].push_back(call->output_fingerprint);
          }
        }
      }
      ASSERT_EQ(outputs[0].size(), 6u);
      ASSERT_EQ(outputs[1].size(), 6u);
      for (std::uint64_t step = 0; step < 6; ++step) {
        if (outputs[0][step] != outputs[1][step] && (!expected || step < *expected)) expected = step;
      }
    }
    if (!expected) continue;
    const json result = diff_json(dir, a, b);
    ASSERT_FALSE(result.is_discarded());
    EXPECT_EQ(result["verdict"], "diverged");
    EXPECT_EQ(result["first_divergence"]["kind"], "output");
    EXPECT_EQ(result["first_divergence"]["role"], "origin");
    EXPECT_EQ(result["first_divergence"]["step"], *expected);
    EXPECT_EQ(result["first_divergence"]["op"], "AllReduce");
    const CommandResult check = detnccl("check " + dir.run(a));
    EXPECT_EQ(check.exit_code, 0) << "every member got the same (order-dependent) sum: " << check.output;
    return;
  }
  GTEST_SKIP() << "five pairs of arrival-order runs gave identical sums (very unlikely): nothing to diff";
}

TEST(CliDiff, AKilledRankShowsMissing) {
  TempDir dir;
  ASSERT_EQ(traced_job(dir, "a", 3, "--steps 4").exit_code, 0);
  EXPECT_NE(traced_job(dir, "b", 3, "--steps 4 --die-at-step 2").exit_code, 0);
  const json result = diff_json(dir, "a", "b");
  ASSERT_FALSE(result.is_discarded());
  EXPECT_EQ(result["verdict"], "diverged");
  EXPECT_EQ(result["first_divergence"]["kind"], "missing");
  EXPECT_EQ(result["first_divergence"]["step"], 2);
  const auto stopped = result["stopped"].get<std::vector<int>>();
  EXPECT_NE(std::find(stopped.begin(), stopped.end(), 1), stopped.end()) << result.dump(2);
  const json& rank1 = result["ranks"][1];
  EXPECT_EQ(rank1["first"]["kind"], "missing");
  EXPECT_EQ(rank1["first"]["step"], 2);
  EXPECT_EQ(rank1["end_b"], "torn tail");
  EXPECT_EQ(rank1["missing_in_b"], detnccl::test::script_step(1, 3, 0).size() * 2);
}

TEST(CliDiff, AResumedRunMatchesFromItsFirstStep) {
  TempDir dir;
  ASSERT_EQ(traced_job(dir, "full", 2, "--steps 4").exit_code, 0);
  ASSERT_EQ(traced_job(dir, "resumed", 2, "--steps 4 --first-step 2").exit_code, 0);
  const CommandResult matched = detnccl("diff --from-step 2 " + dir.run("full") + " " + dir.run("resumed"));
  EXPECT_EQ(matched.exit_code, 0) << matched.output;
  const CommandResult unaligned = detnccl("diff " + dir.run("full") + " " + dir.run("resumed"));
  EXPECT_EQ(unaligned.exit_code, 1) << unaligned.output;
  EXPECT_NE(unaligned.output.find("--from-step 2"), std::string::npos)
      << "the hint names the option: " << unaligned.output;
  const CommandResult head = detnccl("diff --to-step 1 " + dir.run("full") + " " + dir.run("full"));
  EXPECT_EQ(head.exit_code, 0) << head.output;
}

TEST(CliDiff, UnusableInputExitsTwoNamingTheFile) {
  TempDir dir;
  ASSERT_EQ(traced_job(dir, "a", 2, "--steps 1").exit_code, 0);
  fs::create_directory(dir.run("b"));
  fs::copy_file(dir.run("a") + "/rank-00000.dnc", dir.run("b") + "/rank-00000.dnc");
  std::ofstream(dir.run("b") + "/rank-00001.dnc") << "garbage";
  const CommandResult garbage = detnccl("diff " + dir.run("a") + " " + dir.run("b"), /*with_stderr=*/true);
  EXPECT_EQ(garbage.exit_code, 2);
  EXPECT_NE(garbage.output.find("rank-00001.dnc"), std::string::npos) << garbage.output;
  EXPECT_NE(garbage.output.find("not a detnccl log"), std::string::npos) << garbage.output;
  const CommandResult absent = detnccl("diff " + dir.run("a") + " " + dir.run("nope"), true);
  EXPECT_EQ(absent.exit_code, 2);
  EXPECT_NE(absent.output.find("nope"), std::string::npos) << absent.output;
  const json unusable = diff_json(dir, "a", "nope");
  EXPECT_EQ(unusable["verdict"], "unusable");
  // stats says it in the same words.
  const CommandResult counted = detnccl("stats --json " + dir.run("b"));
  EXPECT_EQ(counted.exit_code, 2) << counted.output;
  const json counted_json = json::parse(counted.output, nullptr, false);
  ASSERT_FALSE(counted_json.is_discarded()) << counted.output;
  EXPECT_EQ(counted_json["verdict"], "unusable") << counted.output;
  EXPECT_NE(counted_json["error"].get<std::string>().find("rank-00001.dnc"), std::string::npos) << counted.output;
  EXPECT_EQ(detnccl("diff --frobnicate " + dir.run("a")).exit_code, 2);
  EXPECT_EQ(detnccl("diff --help").exit_code, 0);
  EXPECT_EQ(detnccl("--help").exit_code, 0);
  EXPECT_EQ(detnccl("").exit_code, 2);
}

TEST(CliCheck, ATracedRunIsConsistent) {
  TempDir dir;
  ASSERT_EQ(traced_job(dir, "a", 4, "--steps 2").exit_code, 0);
  const CommandResult result = detnccl("check --json " + dir.run("a"));
  EXPECT_EQ(result.exit_code, 0) << result.output;
  const json parsed = json::parse(result.output, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded());
  EXPECT_EQ(parsed["verdict"], "consistent");
  const std::size_t per_step = detnccl::test::script_step(0, 4, 0).size();
  EXPECT_EQ(parsed["calls"], 4 * 2 * per_step);
  EXPECT_EQ(parsed["point_to_point_pairs"], 4 * 2);  // one ring Send/Recv per rank per step
  EXPECT_EQ(parsed["collectives"], 2 * (per_step - 2));
  EXPECT_GT(parsed["content_checks"].get<int>(), 0);
}

// Every rank of a run must run with the same DETNCCL_* settings (e.g. deterministic mode on all or none): check names
// the odd rank and the setting. A setting that cannot change any call (a fingerprinting window) is only a note.
// `check` on one run with a HOSTNCCL_CORRUPT fault (issue #18): the members of that AllReduce disagree, and the
// finding names the corrupted rank, at the fault's step; the same run without the fault is consistent.
TEST(CliCheck, AHostncclFaultIsNamedAtTheCorruptedRank) {
  TempDir dir;
  const std::string job = "--steps 3 --wide-allreduce";
  ASSERT_EQ(traced_job(dir, "clean", 4, job, "HOSTNCCL_REDUCE_ORDER=rank").exit_code, 0);
  ASSERT_EQ(traced_job(dir, "faulty", 4, job,
                       "HOSTNCCL_REDUCE_ORDER=rank HOSTNCCL_CORRUPT=rank:2,call:1,element:17,factor:1001")
                .exit_code,
            0);
  EXPECT_EQ(detnccl("check " + dir.run("clean")).exit_code, 0);
  const CommandResult text = detnccl("check " + dir.run("faulty"));
  EXPECT_EQ(text.exit_code, 1) << text.output;
  EXPECT_NE(text.output.find("rank 2 got a result different from 3 other member(s)"), std::string::npos) << text.output;
  const json result = json::parse(detnccl("check --json " + dir.run("faulty")).output, nullptr, false);
  ASSERT_FALSE(result.is_discarded());
  EXPECT_EQ(result["verdict"], "inconsistent");
  ASSERT_EQ(result["findings"].size(), 1u) << result.dump(2);
  const json& finding = result["findings"][0];
  EXPECT_EQ(finding["kind"], "content mismatch") << finding.dump(2);
  EXPECT_EQ(finding["op"], "AllReduce") << finding.dump(2);
  EXPECT_EQ(finding["step"], 1) << finding.dump(2);
  EXPECT_EQ(finding["ranks"], json::array({2})) << finding.dump(2);
}

TEST(CliCheck, FlagsARankWhoseConfigurationDiffers) {
  TempDir dir;
  // Rank 2 alone fingerprints only calls of at least 1 KiB (a window: a note) and accumulates low-precision partial
  // sums in fp32 (which can change results: a finding). Both are harmless to this job, visible in its log header.
  const CommandResult job =
      run("env HOSTNCCL_TIMEOUT_S=20 " DETNCCL_LAUNCHER
          " -n 3 --timeout 120 -- sh -c '"
          "if [ \"$RANK\" = 2 ]; then export DETNCCL_MIN_BYTES=1K DETNCCL_DETERMINISTIC=0 DETNCCL_ACCUMULATE=fp32; fi; "
          "exec env LD_PRELOAD=" DETNCCL_SHIM_PATH " DETNCCL_DIR=" +
          dir.path() + " DETNCCL_RUN=mixed " DETNCCL_TRACE_JOB " --steps 1' 2>&1");
  ASSERT_EQ(job.exit_code, 0) << job.output;
  const CommandResult result = detnccl("check " + dir.run("mixed"));
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("configuration mismatch: DETNCCL_ACCUMULATE=fp32 on rank 2"), std::string::npos)
      << result.output;
  EXPECT_EQ(result.output.find("configuration mismatch: DETNCCL_MIN_BYTES"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("DETNCCL_MIN_BYTES differs between ranks"), std::string::npos) << result.output;
}

TEST(CliCheck, CatchesASendRecvCorruptionAndAMetadataDesync) {
  // Synthetic logs: under the shim both sides of a transfer are fingerprinted from the bytes NCCL moved, and
  // hostnccl refuses or hangs on mismatched counts, so a real job cannot produce these.
  TempDir dir;
  detnccl::test::SyntheticRunSpec corrupted;
  corrupted.hook = [](std::uint32_t rank, detnccl::records::CallFields& call, auto&, auto&, auto&, auto&) {
    if (rank == 1 && call.step == 2 && call.op == detnccl::records::OpId::kRecv) call.output_fingerprint ^= 1;
    return true;
  };
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "corrupt", corrupted), "");
  const CommandResult corrupt = detnccl("check " + dir.run("corrupt"));
  EXPECT_EQ(corrupt.exit_code, 1) << corrupt.output;
  EXPECT_EQ(corrupt.output.rfind("INCONSISTENT", 0), 0u) << corrupt.output;
  // Two ring transfers per step: step 2 holds the pair's Sends #4 and #5.
  EXPECT_NE(corrupt.output.find("rank 0's Send #4 to rank 1"), std::string::npos) << corrupt.output;
  EXPECT_NE(corrupt.output.find("corrupted data"), std::string::npos) << corrupt.output;

  detnccl::test::SyntheticRunSpec desync;
  desync.hook = [](std::uint32_t rank, detnccl::records::CallFields& call, auto&, auto&, auto&, auto&) {
    if (rank == 2 && call.step == 1 && call.op == detnccl::records::OpId::kAllGather) call.datatype = 9;
    return true;
  };
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "desync", desync), "");
  const CommandResult mismatch = detnccl("check --json " + dir.run("desync"));
  EXPECT_EQ(mismatch.exit_code, 1) << mismatch.output;
  const json parsed = json::parse(mismatch.output, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded());
  ASSERT_FALSE(parsed["findings"].empty());
  EXPECT_EQ(parsed["findings"][0]["kind"], "dtype mismatch");
  EXPECT_EQ(parsed["findings"][0]["ranks"], json::array({2}));
  EXPECT_EQ(parsed["findings"][0]["step"], 1);
}

// docs/cli.md: a run whose truncated log hides the rest when nothing diverged before it is "undecided" (exit 2);
// the calls after the marker are not compared, not missing.
TEST(CliDiff, ATruncatedLogWithNothingDivergedBeforeItIsUndecided) {
  TempDir dir;
  detnccl::test::SyntheticRunSpec truncated;
  truncated.truncated_ranks = {1};
  truncated.hook = [](std::uint32_t rank, detnccl::records::CallFields& call, auto&, auto&, auto&, auto&) {
    return !(rank == 1 && call.step >= 2);
  };
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "a", {}), "");
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "b", truncated), "");
  const CommandResult text = detnccl("diff " + dir.run("a") + " " + dir.run("b"));
  EXPECT_EQ(text.exit_code, 2) << text.output;
  EXPECT_EQ(text.output.rfind("UNDECIDED", 0), 0u) << text.output;
  EXPECT_NE(text.output.find("24 calls after the truncation were not compared"), std::string::npos) << text.output;
  const json result = diff_json(dir, "a", "b");
  ASSERT_FALSE(result.is_discarded());
  EXPECT_EQ(result["verdict"], "undecided");
  EXPECT_EQ(result["first_divergence"], nullptr);
  EXPECT_EQ(result["ranks"][1]["not_compared"], 2 * 12);
  EXPECT_EQ(result["ranks"][1]["missing_in_b"], 0);
  EXPECT_EQ(result["ranks"][1]["end_b"], "truncated");
  EXPECT_EQ(result["ranks"][0]["not_compared"], 0);
}

// docs/reliability.md: check checks what the ranks recorded and notes the truncated log; the calls its rank made after
// the marker are not "never made". With nothing inconsistent before it there is no verdict (exit 2, like diff).
TEST(CliCheck, ATruncatedLogIsNotedAndItsUnrecordedCallsAreNotFindings) {
  TempDir dir;
  detnccl::test::SyntheticRunSpec truncated;
  truncated.truncated_ranks = {1};
  truncated.hook = [](std::uint32_t rank, detnccl::records::CallFields& call, auto&, auto&, auto&, auto&) {
    return !(rank == 1 && call.step >= 2);
  };
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "t", truncated), "");
  const CommandResult text = detnccl("check " + dir.run("t"));
  EXPECT_EQ(text.exit_code, 2) << text.output;
  EXPECT_EQ(text.output.rfind("UNDECIDED", 0), 0u) << text.output;
  EXPECT_EQ(text.output.find("never made"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("the log of rank 1 ends with a truncation marker"), std::string::npos) << text.output;
  const CommandResult json_output = detnccl("check --json " + dir.run("t"));
  EXPECT_EQ(json_output.exit_code, 2);
  const json parsed = json::parse(json_output.output, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded());
  EXPECT_EQ(parsed["verdict"], "undecided");
  EXPECT_EQ(parsed["truncated_ranks"], json::array({1}));
  EXPECT_EQ(parsed["not_checked"], 2 * (8 + 4));
  EXPECT_TRUE(parsed["findings"].empty()) << parsed.dump(2);

  // An inconsistency before the truncation still decides.
  detnccl::test::SyntheticRunSpec desync = truncated;
  desync.hook = [](std::uint32_t rank, detnccl::records::CallFields& call, auto&, auto&, auto&, auto&) {
    if (rank == 2 && call.step == 1 && call.op == detnccl::records::OpId::kAllGather) call.datatype = 9;
    return !(rank == 1 && call.step >= 2);
  };
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "d", desync), "");
  const CommandResult decided = detnccl("check " + dir.run("d"));
  EXPECT_EQ(decided.exit_code, 1) << decided.output;
  EXPECT_EQ(decided.output.rfind("INCONSISTENT", 0), 0u) << decided.output;
  EXPECT_EQ(decided.output.find("never made"), std::string::npos) << decided.output;
}

// Two jobs started at once with the same DETNCCL_RUN can each win some rank files. check and diff say so (exit 2)
// instead of reporting the other job's ranks as missing. Here the mix is made by copying the files of two real runs.
TEST(CliCheck, ARunDirectoryHoldingTheRanksOfTwoJobsIsRefusedNamingEachJobsRanks) {
  TempDir dir;
  for (const char* name : {"a", "b"}) ASSERT_EQ(traced_job(dir, name, 4, "--steps 1").exit_code, 0);
  fs::create_directory(dir.run("x"));
  for (int rank = 0; rank < 4; ++rank) {
    const std::string file = "/" + detnccl::records::rank_log_file_name(static_cast<std::uint32_t>(rank));
    fs::copy_file(dir.run(rank < 3 ? "a" : "b") + file, dir.run("x") + file);
  }
  for (const char* name : {"a", "b"}) {
    const CommandResult alone = detnccl("check " + dir.run(name));
    EXPECT_EQ(alone.exit_code, 0) << "each job's own logs are one job: " << alone.output;
  }
  const CommandResult checked = detnccl("check " + dir.run("x"), /*with_stderr=*/true);
  EXPECT_EQ(checked.exit_code, 2) << checked.output;
  EXPECT_NE(checked.output.find("2 different jobs"), std::string::npos) << checked.output;
  EXPECT_NE(checked.output.find("ranks 0, 1, 2 (world communicator"), std::string::npos) << checked.output;
  EXPECT_NE(checked.output.find("rank 3 (world communicator"), std::string::npos) << checked.output;
  EXPECT_EQ(checked.output.find("never made"), std::string::npos) << checked.output;
  const json parsed = json::parse(detnccl("check --json " + dir.run("x")).output, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded());
  EXPECT_EQ(parsed["verdict"], "unusable");
  EXPECT_NE(parsed["error"].get<std::string>().find("2 different jobs"), std::string::npos) << parsed.dump(2);
  const CommandResult compared = detnccl("diff " + dir.run("a") + " " + dir.run("x"), true);
  EXPECT_EQ(compared.exit_code, 2) << compared.output;
  EXPECT_NE(compared.output.find("2 different jobs"), std::string::npos) << compared.output;
  EXPECT_EQ(diff_json(dir, "a", "x")["verdict"], "unusable");
}

// The version is written once, in CMakeLists.txt's project(): the generated header, `detnccl --version` and the log
// header the shim writes all say it (DETNCCL_CMAKE_VERSION is CMake's PROJECT_VERSION, passed by tests/cli.cmake).
TEST(Cli, TheVersionIsCMakesEverywhere) {
  const std::string cmake_version = DETNCCL_CMAKE_VERSION;
  EXPECT_EQ(std::string(DETNCCL_VERSION_TEXT), cmake_version);
  unsigned major = 0, minor = 0, patch = 0;
  ASSERT_EQ(std::sscanf(cmake_version.c_str(), "%u.%u.%u", &major, &minor, &patch), 3) << cmake_version;
  EXPECT_EQ(DETNCCL_VERSION_NUMBER, major * 10000 + minor * 100 + patch);

  const CommandResult version = detnccl("--version");
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.output, "detnccl " + cmake_version + "\n");

  TempDir dir;
  ASSERT_EQ(traced_job(dir, "a", 2, "--steps 1").exit_code, 0);
  auto opened = detnccl::records::LogReader::open_file(dir.run("a") + "/" + detnccl::records::rank_log_file_name(0));
  ASSERT_TRUE(opened.reader) << opened.error;
  EXPECT_EQ(opened.reader->header().detnccl_version_text, cmake_version);
  EXPECT_EQ(opened.reader->header().detnccl_version, major * 10000 + minor * 100 + patch);
}

TEST(CliDump, EveryFormatHasOneLinePerCall) {
  TempDir dir;
  ASSERT_EQ(traced_job(dir, "a", 2, "--steps 1").exit_code, 0);
  const std::size_t calls = detnccl::test::script_step(1, 2, 0).size();
  const CommandResult text = detnccl("dump --rank 1 " + dir.run("a"));
  ASSERT_EQ(text.exit_code, 0);
  std::istringstream lines(text.output);
  std::size_t call_lines = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.find(" step ") != std::string::npos) ++call_lines;
  }
  EXPECT_EQ(call_lines, calls) << text.output;
  EXPECT_NE(text.output.find("# end (closed)"), std::string::npos);

  const CommandResult jsonl = detnccl("dump --rank 1 --format jsonl " + dir.run("a"));
  ASSERT_EQ(jsonl.exit_code, 0);
  std::istringstream json_lines(jsonl.output);
  std::size_t json_calls = 0;
  for (std::string line; std::getline(json_lines, line);) {
    const json parsed = json::parse(line, nullptr, false);
    ASSERT_FALSE(parsed.is_discarded()) << line;
    if (parsed["type"] != "call") continue;
    ++json_calls;
    if (!parsed["input_fingerprint"].is_null()) {
      EXPECT_EQ(parsed["input_fingerprint"].get<std::string>().size(), 16u);
    }
  }
  EXPECT_EQ(json_calls, calls);

  const CommandResult csv = detnccl("dump --format csv " + dir.run("a"));
  ASSERT_EQ(csv.exit_code, 0);
  EXPECT_EQ(static_cast<std::size_t>(std::count(csv.output.begin(), csv.output.end(), '\n')), 1 + 2 * calls);
  EXPECT_EQ(detnccl("dump --format xml " + dir.run("a")).exit_code, 2);
}

// Compact records (DETNCCL_TRACE=hash: per-peer blocks folded, records/block_digests.h) as the binary shows them:
// dump prints each fold (text, JSON lines, CSV) and no list; diff says that the differing peers cannot be named at
// this level; check --json counts the AlltoAlls whose blocks could not be matched.
TEST(Cli, CompactRecordsShowTheirFoldsAndSayWhatTheyCannotName) {
  using detnccl::records::OpId;
  TempDir dir;
  detnccl::test::SyntheticRunSpec a;
  a.fold_blocks = true;
  detnccl::test::SyntheticRunSpec b = a;
  b.hook = [](std::uint32_t rank, detnccl::records::CallFields& call, auto&, auto& output_blocks, auto&, auto&) {
    if (call.step != 2 || call.op != OpId::kAllGather) return true;
    if (rank == 2) call.input_fingerprint ^= 1;
    call.output_fingerprint ^= 1;
    output_blocks[2] ^= 1;
    return true;
  };
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "a", a), "");
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "b", b), "");
  // Run A's first AllGather of step 2 (call 3 of 12 in the step) gathered synthetic_digest(r, 2 * 12 + 3, 1).
  std::vector<std::uint64_t> gathered;
  for (std::uint64_t r = 0; r < 4; ++r) gathered.push_back(detnccl::test::synthetic_digest(r, 2 * 12 + 3, 1));
  const std::string fold = hex_id(detnccl::records::fold_block_digests(gathered));

  const CommandResult jsonl = detnccl("dump --rank 2 --format jsonl " + dir.run("a"));
  ASSERT_EQ(jsonl.exit_code, 0);
  bool seen = false;
  std::istringstream lines(jsonl.output);
  for (std::string line; std::getline(lines, line);) {
    const json parsed = json::parse(line, nullptr, false);
    ASSERT_FALSE(parsed.is_discarded()) << line;
    if (parsed["type"] != "call" || parsed["op"] != "AllGather") continue;
    EXPECT_FALSE(parsed.contains("output_blocks")) << line;
    EXPECT_FALSE(parsed.contains("input_blocks_digest")) << "AllGather's input has no per-peer blocks: " << line;
    if (parsed["seq"] == 2 * 12 + 3) {
      EXPECT_EQ(parsed["output_blocks_digest"], fold) << line;
      seen = true;
    }
  }
  EXPECT_TRUE(seen) << jsonl.output;
  const CommandResult text = detnccl("dump --rank 2 " + dir.run("a"));
  EXPECT_NE(text.output.find("out-blocks " + fold), std::string::npos) << text.output;
  const CommandResult csv = detnccl("dump --rank 2 --format csv " + dir.run("a"));
  EXPECT_NE(csv.output.find(",input_blocks_digest,output_blocks_digest,"), std::string::npos) << csv.output;
  EXPECT_NE(csv.output.find("," + fold + ",0,0,0,0\n"), std::string::npos) << "the fold, and no list: " << csv.output;

  const json result = diff_json(dir, "a", "b");
  ASSERT_FALSE(result.is_discarded());
  const json& first = result["first_divergence"];
  EXPECT_EQ(first["rank"], 2);
  EXPECT_EQ(first["op"], "AllGather");
  EXPECT_EQ(first["kind"], "input");
  EXPECT_EQ(first["role"], "origin");
  EXPECT_EQ(first["output_blocks_folded"], true);
  EXPECT_FALSE(first.contains("output_blocks")) << first.dump();
  EXPECT_EQ(first["a"]["output_blocks_digest"], fold);
  EXPECT_NE(first["b"]["output_blocks_digest"], fold);
  EXPECT_EQ(result["receivers"], json::array({0, 1, 3}));
  const CommandResult diff_text = detnccl("diff " + dir.run("a") + " " + dir.run("b"));
  EXPECT_EQ(diff_text.exit_code, 1);
  EXPECT_NE(diff_text.output.find("the peers whose blocks differ cannot be named; DETNCCL_TRACE=segments names them"),
            std::string::npos)
      << diff_text.output;

  const CommandResult check = detnccl("check --json " + dir.run("a"));
  EXPECT_EQ(check.exit_code, 0) << check.output;
  const json checked = json::parse(check.output, nullptr, false);
  ASSERT_FALSE(checked.is_discarded()) << check.output;
  EXPECT_EQ(checked["verdict"], "consistent");
  EXPECT_EQ(checked["folded_blocks_unchecked"], 2 * a.steps);  // two AlltoAlls per step
}

// The step source of each call (a field appended in format version 2): dump's JSON lines and CSV show it for a log
// that records it ("marked": trace_job marks its steps), and the v1 log fixture test shows that logs written before
// it leave the key out (tests/fixtures/logs-v1/expected).
TEST(CliDump, ShowsWhereEachCallsStepCameFrom) {
  TempDir dir;
  ASSERT_EQ(traced_job(dir, "a", 2, "--steps 2").exit_code, 0);
  const CommandResult jsonl = detnccl("dump --rank 0 --format jsonl " + dir.run("a"));
  ASSERT_EQ(jsonl.exit_code, 0);
  std::istringstream json_lines(jsonl.output);
  std::size_t marked = 0;
  for (std::string line; std::getline(json_lines, line);) {
    const json parsed = json::parse(line, nullptr, false);
    ASSERT_FALSE(parsed.is_discarded()) << line;
    if (parsed["type"] != "call") continue;
    EXPECT_EQ(parsed.value("step_source", ""), "marked") << line;
    ++marked;
  }
  EXPECT_EQ(marked, detnccl::test::script_step(0, 2, 0).size() + detnccl::test::script_step(1, 2, 0).size());
  const CommandResult csv = detnccl("dump --rank 0 --format csv " + dir.run("a"));
  ASSERT_EQ(csv.exit_code, 0);
  std::istringstream csv_lines(csv.output);
  std::string header, first;
  std::getline(csv_lines, header);
  std::getline(csv_lines, first);
  EXPECT_EQ(header.rfind("rank,seq,step,step_source,", 0), 0u) << header;
  EXPECT_NE(first.find(",marked,"), std::string::npos) << first;
}

TEST(CliStats, CountsCallsStepsAndTruncatedLogs) {
  TempDir dir;
  EXPECT_NE(traced_job(dir, "k", 3, "--steps 3 --die-at-step 1").exit_code, 0);
  const CommandResult result = detnccl("stats --json " + dir.run("k"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const json parsed = json::parse(result.output, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded());
  const std::size_t per_step = detnccl::test::script_step(0, 3, 0).size();
  const json& rank1 = parsed["per_rank"][1];
  EXPECT_EQ(rank1["calls"], per_step);  // step 0 only, then SIGKILL
  EXPECT_EQ(rank1["end"], "torn tail");
  EXPECT_EQ(rank1["last_step"], 0);
  // Every rank recorded step 0's AllReduces; ranks 0 and 2 may also have recorded a call of step 1 in progress when the
  // launcher stopped them (how far they got before rank 1's death is timing), so the total is not a multiple of 3.
  std::size_t step0_allreduces = 0;
  for (int rank = 0; rank < 3; ++rank) {
    for (const auto& call : detnccl::test::script_step(rank, 3, 0)) {
      step0_allreduces += call.op == detnccl::records::OpId::kAllReduce ? 1 : 0;
    }
  }
  ASSERT_GT(step0_allreduces, 0u);
  EXPECT_GE(parsed["per_op"]["AllReduce"]["calls"].get<std::size_t>(), step0_allreduces);
}

// Puts `count` records of a type no detnccl knows (as a newer detnccl of the same format version may write) before a
// closed log's end marker, whose record count follows. Returns an error message, empty on success.
std::string insert_unknown_records(const std::string& path, std::uint64_t count) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  constexpr std::size_t kEndBytes = sizeof(detnccl::records::RecordFrame) + sizeof(detnccl::records::EndRecord);
  if (bytes.size() < kEndBytes) return path + " is too short";
  detnccl::records::RecordFrame end_frame;
  detnccl::records::EndRecord end;
  std::memcpy(&end_frame, bytes.data() + bytes.size() - kEndBytes, sizeof(end_frame));
  std::memcpy(&end, bytes.data() + bytes.size() - sizeof(end), sizeof(end));
  if (end_frame.type != static_cast<std::uint16_t>(detnccl::records::RecordType::kEnd)) return path + " is not closed";
  bytes.resize(bytes.size() - kEndBytes);
  const auto append = [&bytes](std::uint16_t type, const void* payload, std::size_t size) {
    detnccl::records::RecordFrame frame{};
    frame.length = static_cast<std::uint32_t>(sizeof(frame) + size);
    frame.type = type;
    frame.checksum = detnccl::records::record_checksum(frame.length, frame.type, 0, payload, size);
    const auto* raw = reinterpret_cast<const char*>(&frame);
    bytes.insert(bytes.end(), raw, raw + sizeof(frame));
    bytes.insert(bytes.end(), static_cast<const char*>(payload), static_cast<const char*>(payload) + size);
  };
  const std::array<std::uint64_t, 2> future_payload = {0x0123456789abcdefull, 42};
  for (std::uint64_t i = 0; i < count; ++i) append(999, future_payload.data(), sizeof(future_payload));
  end.records_written += count;
  append(static_cast<std::uint16_t>(detnccl::records::RecordType::kEnd), &end, sizeof(end));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return out.good() ? std::string() : "cannot write " + path;
}

TEST(CliStats, RecordsOfUnknownTypesAreCountedNotSilentlySkipped) {
  TempDir dir;
  detnccl::test::SyntheticRunSpec spec;
  spec.ranks = 3;
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "newer", spec), "");
  ASSERT_EQ(insert_unknown_records(dir.run("newer") + "/" + detnccl::records::rank_log_file_name(1), 2), "");
  const CommandResult stats = detnccl("stats --json " + dir.run("newer"));
  ASSERT_EQ(stats.exit_code, 0) << stats.output;
  const json parsed = json::parse(stats.output, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded()) << stats.output;
  for (std::uint32_t rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(parsed["per_rank"][rank]["unknown_records"], rank == 1 ? 2 : 0) << rank;
    EXPECT_EQ(parsed["per_rank"][rank]["calls"], spec.steps * spec.calls_per_step) << rank;
    EXPECT_EQ(parsed["per_rank"][rank]["end"], "closed") << rank;
  }
  const CommandResult text = detnccl("stats " + dir.run("newer"));
  EXPECT_NE(text.output.find("2 records of a type this detnccl does not know skipped (rank 1;"), std::string::npos)
      << text.output;
  const CommandResult dump = detnccl("dump " + dir.run("newer"));
  ASSERT_EQ(dump.exit_code, 0) << dump.output;
  EXPECT_EQ(detnccl::test::occurrences(dump.output, "does not know skipped"), 1u) << dump.output;
  EXPECT_NE(dump.output.find("; 2 records of a type this detnccl does not know skipped"), std::string::npos)
      << dump.output;
}

// Records of unknown types are skipped by diff and check as by stats and dump, but never silently: a note says how
// many on which ranks, and the JSON counts them.
TEST(Cli, DiffAndCheckSayWhenTheySkipRecordsOfUnknownTypes) {
  TempDir dir;
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "plain", {}), "");
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "newer", {}), "");
  ASSERT_EQ(insert_unknown_records(dir.run("newer") + "/" + detnccl::records::rank_log_file_name(1), 2), "");
  const CommandResult text = detnccl("diff " + dir.run("plain") + " " + dir.run("newer"));
  EXPECT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("2 records of a type this detnccl does not know skipped in run B (rank 1;"),
            std::string::npos)
      << text.output;
  json compared = diff_json(dir, "plain", "newer");  // not const: a missing key reads as null
  ASSERT_FALSE(compared.is_discarded());
  EXPECT_EQ(compared["verdict"], "identical");
  EXPECT_EQ(compared["unknown_records"], 2);
  for (std::uint32_t rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(compared["ranks"][rank]["unknown_records_a"], 0) << rank;
    EXPECT_EQ(compared["ranks"][rank]["unknown_records_b"], rank == 1 ? 2 : 0) << rank;
  }
  EXPECT_EQ(diff_json(dir, "plain", "plain")["unknown_records"], 0);

  const CommandResult checked = detnccl("check " + dir.run("newer"));
  EXPECT_EQ(checked.exit_code, 0) << checked.output;
  EXPECT_NE(checked.output.find("2 records of a type this detnccl does not know skipped (rank 1;"), std::string::npos)
      << checked.output;
  json check_json = json::parse(detnccl("check --json " + dir.run("newer")).output, nullptr, false);
  ASSERT_FALSE(check_json.is_discarded());
  EXPECT_EQ(check_json["verdict"], "consistent");
  EXPECT_EQ(check_json["unknown_records"], 2);
  EXPECT_EQ(json::parse(detnccl("check --json " + dir.run("plain")).output, nullptr, false)["unknown_records"], 0);
}

// Bad arguments exit with 2 in every command (docs/cli.md), `detnccl fingerprint` included.
// Every subcommand `detnccl --help` lists (the table in cli/commands.h, plus fingerprint) answers --help, refuses an
// unknown option with exit status 2, and has its synopsis line and its section in docs/cli.md: a subcommand added
// to the table without its documentation, or with a broken argument parser, fails here.
TEST(Cli, EverySubcommandTheHelpListsHasHelpRefusesBadOptionsAndIsDocumented) {
  const CommandResult help = detnccl("--help");
  ASSERT_EQ(help.exit_code, 0) << help.output;
  std::vector<std::string> names;
  for (const std::string& row : lines_after(help.output, "Subcommands:", "\x01")) {
    std::istringstream words(row);
    std::string name;
    if (words >> name) names.push_back(name);
  }
  ASSERT_GE(names.size(), 5u) << help.output;
  std::ifstream docs_file(DETNCCL_SOURCE_DIR "/docs/cli.md");
  ASSERT_TRUE(docs_file) << "cannot read docs/cli.md";
  const std::string docs{std::istreambuf_iterator<char>(docs_file), std::istreambuf_iterator<char>()};
  for (const std::string& name : names) {
    const CommandResult own_help = detnccl(name + " --help", /*with_stderr=*/true);
    EXPECT_EQ(own_help.exit_code, 0) << name << ": " << own_help.output;
    EXPECT_NE(own_help.output.find(name), std::string::npos) << name << ": " << own_help.output;
    const CommandResult bad = detnccl(name + " --frobnicate", /*with_stderr=*/true);
    EXPECT_EQ(bad.exit_code, 2) << name << ": " << bad.output;
    EXPECT_NE(docs.find("\ndetnccl " + name + " "), std::string::npos) << "docs/cli.md has no synopsis of " << name;
    if (name == "fingerprint") continue;  // its own page, docs/fingerprint.md
    EXPECT_NE(docs.find("## `" + name + "`"), std::string::npos) << "docs/cli.md has no section on " << name;
  }
  const CommandResult unknown = detnccl("frobnicate", /*with_stderr=*/true);
  EXPECT_EQ(unknown.exit_code, 2);
  for (const std::string& name : names) EXPECT_NE(unknown.output.find(name), std::string::npos) << unknown.output;
}

TEST(Cli, BadArgumentsExitTwoInEveryCommand) {
  TempDir dir;
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "a", {}), "");
  const std::string a = dir.run("a");
  const std::string file = a + "/" + detnccl::records::rank_log_file_name(0);
  for (const std::string& command :
       {"dump --frobnicate " + a, "diff --frobnicate " + a + " " + a, "check --frobnicate " + a,
        "stats --frobnicate " + a, "fingerprint --frobnicate " + file, "fingerprint --segment-bytes 1000 " + file,
        std::string("fingerprint"), std::string("run --frobnicate -- true"), std::string("run"), "run --dir " + a}) {
    const CommandResult result = detnccl(command, /*with_stderr=*/true);
    EXPECT_EQ(result.exit_code, 2) << command << ": " << result.output;
  }
  // What follows `--` is the command's: its --json does not make detnccl's message JSON.
  EXPECT_EQ(detnccl("run --frobnicate -- tool --json").output, "");
  EXPECT_EQ(detnccl("fingerprint " + file).exit_code, 0);
}

// dump prints progress on stderr like diff, check and stats (here: its reader waits, so the dump takes seconds), and
// never into its output: not when stderr is another file, and none at all when stderr is stdout (`2>&1`).
TEST(CliDump, ProgressGoesToStderrAndNeverIntoTheRecords) {
  TempDir dir;
  detnccl::test::SyntheticRunSpec spec;
  spec.ranks = 8;
  spec.steps = 50;  // some 700 KB of text: far more than a pipe holds, so the dump waits for its slow reader
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "a", spec), "");
  const std::string command = "NO_COLOR=1 " DETNCCL_CLI " dump " + dir.run("a");
  const CommandResult fast = detnccl("dump " + dir.run("a"));
  ASSERT_EQ(fast.exit_code, 0);
  ASSERT_GT(fast.output.size(), 256u << 10);

  const std::string errors = dir.path() + "/dump.err";
  const CommandResult slow = run(command + " 2>" + errors + " | { sleep 3; cat; }");
  EXPECT_EQ(slow.output, fast.output) << "the records alone, nothing else";
  std::ifstream error_file(errors);
  const std::string progress((std::istreambuf_iterator<char>(error_file)), std::istreambuf_iterator<char>());
  EXPECT_NE(progress.find("detnccl dump: "), std::string::npos) << progress;
  EXPECT_NE(progress.find(" calls dumped\n"), std::string::npos) << progress;

  const CommandResult shared = run(command + " 2>&1 | { sleep 3; cat; }");
  EXPECT_EQ(shared.output, fast.output) << "no progress line among the records";
}

// Counts from a corrupt or crafted log can sum past 2^64 bytes: stats says the byte count overflowed and never prints
// a wrapped number (a small, plausible total).
TEST(CliStats, ByteCountsThatOverflowAreSaidNeverWrapped) {
  using detnccl::records::OpId;
  TempDir dir;
  detnccl::test::SyntheticRunSpec spec;
  // Rank 1: each AllReduce claims 2^60 float32 elements (2^62 bytes); its 8 AllReduces make 2^65 bytes, which a
  // 64-bit sum wraps to 0. Rank 2: AllGathers of 2^62 elements per rank on 4 ranks, whose element count wraps to 0.
  spec.hook = [](std::uint32_t rank, detnccl::records::CallFields& call, auto&, auto&, auto&, auto&) {
    if (rank == 1 && call.op == OpId::kAllReduce) call.count = std::uint64_t{1} << 60;
    if (rank == 2 && call.op == OpId::kAllGather) call.count = std::uint64_t{1} << 62;
    return true;
  };
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "huge", spec), "");
  // The bytes of an untouched rank, and of every Send (untouched on every rank): a call's bytes are its larger buffer.
  const auto call_bytes = [&](OpId op) {
    return 4 * spec.count * (op == OpId::kAllGather || op == OpId::kAlltoAll ? spec.ranks : 1);
  };
  std::uint64_t rank_bytes = 0;
  std::uint64_t send_bytes = 0;
  for (std::uint64_t i = 0; i < spec.calls_per_step; ++i) {
    rank_bytes += spec.steps * call_bytes(detnccl::test::synthetic_op(i));
    if (detnccl::test::synthetic_op(i) == OpId::kSend) send_bytes += spec.ranks * spec.steps * call_bytes(OpId::kSend);
  }
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();

  const CommandResult result = detnccl("stats --json " + dir.run("huge"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  json parsed = json::parse(result.output, nullptr, false);  // not const: a missing key reads as null
  ASSERT_FALSE(parsed.is_discarded()) << result.output;
  for (std::uint32_t rank = 0; rank < spec.ranks; ++rank) {
    json& entry = parsed["per_rank"][rank];
    const bool overflowed = rank == 1 || rank == 2;
    EXPECT_EQ(entry["bytes_overflowed"], overflowed) << rank;
    EXPECT_EQ(entry["bytes"], overflowed ? kMax : rank_bytes) << rank;
    EXPECT_EQ(entry["calls"], spec.steps * spec.calls_per_step) << rank;
  }
  EXPECT_EQ(parsed["total"]["bytes_overflowed"], true);
  EXPECT_EQ(parsed["total"]["bytes"], kMax);
  EXPECT_EQ(parsed["total"]["calls"], spec.ranks * spec.steps * spec.calls_per_step);
  EXPECT_EQ(parsed["per_op"]["AllReduce"]["bytes_overflowed"], true);
  EXPECT_EQ(parsed["per_op"]["Send"]["bytes_overflowed"], false);
  EXPECT_EQ(parsed["per_op"]["Send"]["bytes"], send_bytes);
  EXPECT_EQ(parsed["per_communicator"][0]["bytes_overflowed"], true);

  const CommandResult text = detnccl("stats " + dir.run("huge"));
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find(", 192 calls, over 16 EiB, steps 0-3,"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("the byte count overflowed 64 bits (ranks 1, 2;"), std::string::npos) << text.output;
  const std::vector<std::string> rows = lines_after(text.output, "Per rank", "");
  ASSERT_EQ(rows.size(), spec.ranks) << text.output;
  for (std::uint32_t rank = 0; rank < spec.ranks; ++rank) {
    EXPECT_EQ(rows[rank].find("over 16 EiB") != std::string::npos, rank == 1 || rank == 2) << rows[rank];
  }
  // diff and check read the same counts without failing: the run is identical to itself, and its ranks disagree on
  // the counts of their collectives.
  EXPECT_EQ(detnccl("diff " + dir.run("huge") + " " + dir.run("huge")).exit_code, 0);
  const CommandResult checked = detnccl("check " + dir.run("huge"));
  EXPECT_EQ(checked.exit_code, 1) << checked.output;
  EXPECT_NE(checked.output.find("size mismatch"), std::string::npos) << checked.output;
}

// The per-rank tables of stats and diff keep their columns in line when numbers outgrow the usual widths: ranks of
// seven digits next to ranks of six, step ranges of 16-digit steps next to single steps.
TEST(Cli, PerRankTablesStayInLineWithLargeNumbers) {
  TempDir dir;
  detnccl::test::SyntheticRunSpec spec;
  spec.first_rank = 999998;  // ranks 999998 to 1000001
  spec.first_step = 1000000000000000;
  spec.steps = spec.first_step + 2;
  const auto drop_last_step = [&spec](std::uint32_t rank, detnccl::records::CallFields& call) {
    return !(rank == 999999 && call.step == spec.steps - 1);
  };
  spec.hook = [drop_last_step](std::uint32_t rank, detnccl::records::CallFields& call, auto&, auto&, auto&, auto&) {
    return drop_last_step(rank, call);
  };
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "a", spec), "");
  detnccl::test::SyntheticRunSpec perturbed = spec;
  perturbed.hook = [drop_last_step, first_step = spec.first_step](
                       std::uint32_t rank, detnccl::records::CallFields& call, auto&, auto&, auto&, auto&) {
    if (rank == 1000000 && call.step == first_step + 1 && call.op == detnccl::records::OpId::kAllReduce) {
      call.input_fingerprint ^= 1;
    }
    return drop_last_step(rank, call);
  };
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "b", perturbed), "");

  const CommandResult stats = detnccl("stats " + dir.run("a"));
  ASSERT_EQ(stats.exit_code, 0) << stats.output;
  const std::vector<std::string> rows = lines_after(stats.output, "Per rank", "");
  ASSERT_EQ(rows.size(), 4u) << stats.output;
  EXPECT_NE(rows[1].find("steps 1000000000000000 "), std::string::npos) << rows[1];
  for (const std::string& row : rows) {
    EXPECT_EQ(row.find(" calls "), rows[0].find(" calls ")) << stats.output;
    EXPECT_EQ(row.find(" steps "), rows[0].find(" steps ")) << stats.output;
    EXPECT_EQ(row.find(" closed"), rows[0].find(" closed")) << stats.output;
  }

  const CommandResult diff = detnccl("diff " + dir.run("a") + " " + dir.run("b"));
  ASSERT_EQ(diff.exit_code, 1) << diff.output;
  const std::vector<std::string> table = lines_after(diff.output, "Per rank", "  total:");
  ASSERT_EQ(table.size(), 5u) << diff.output;  // the heading row and one row per rank
  EXPECT_NE(table[1].find("1000000 "), std::string::npos) << table[1];
  EXPECT_NE(table[1].find("AllReduce step 1000000000000001 seq "), std::string::npos) << table[1];
  // Where the rank column ends, and the row with it: the last column is right-aligned.
  const auto rank_end = [](const std::string& line) { return line.find(' ', line.find_first_not_of(' ')); };
  for (const std::string& line : table) {
    EXPECT_EQ(rank_end(line), rank_end(table[0])) << diff.output;
    EXPECT_EQ(line.size(), table[0].size()) << diff.output;
  }
}

// --from-step and --to-step take a step number: a negative or too large one is a bad argument (exit 2), never
// wrapped to 2^64-1 (which compared nothing and said IDENTICAL).
TEST(CliDiff, StepNumbersOutOfRangeAreBadArguments) {
  TempDir dir;
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "a", {}), "");
  detnccl::test::SyntheticRunSpec perturbed;
  perturbed.hook = [](std::uint32_t rank, detnccl::records::CallFields& call, auto&, auto&, auto&, auto&) {
    if (rank == 1 && call.step == 1 && call.op == detnccl::records::OpId::kAllReduce) call.input_fingerprint ^= 1;
    return true;
  };
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "b", perturbed), "");
  const std::string runs = dir.run("a") + " " + dir.run("b");
  ASSERT_EQ(detnccl("diff " + runs).exit_code, 1);
  const std::string too_large = "18446744073709551616";  // 2^64
  for (const std::string option : {"--from-step", "--to-step"}) {
    for (const std::string& value : {std::string("-1"), too_large, std::string("99999999999999999999")}) {
      const CommandResult result = detnccl("diff " + runs + " " + option + " " + value, /*with_stderr=*/true);
      EXPECT_EQ(result.exit_code, 2) << option << " " << value << ": " << result.output;
      EXPECT_NE(result.output.find("a step must be a whole number"), std::string::npos) << result.output;
    }
  }
  // The largest step is a number like any other: everything up to it is compared.
  EXPECT_EQ(detnccl("diff " + runs + " --to-step 18446744073709551615").exit_code, 1);
  // With --json a tool reads standard output: bad arguments are an "unusable" document there too.
  for (const std::string arguments : {" --json --from-step -1", " --json --from-step 3 --to-step 1", " --json -j x"}) {
    const CommandResult result = detnccl("diff " + runs + arguments);
    EXPECT_EQ(result.exit_code, 2) << arguments << ": " << result.output;
    const json parsed = json::parse(result.output, nullptr, false);
    ASSERT_FALSE(parsed.is_discarded()) << arguments << ": " << result.output;
    EXPECT_EQ(parsed["verdict"], "unusable") << arguments;
    EXPECT_EQ(parsed["error"].get<std::string>().rfind("bad arguments: ", 0), 0u) << parsed.dump();
  }
}

// A step range that selects no call of either run has nothing to compare: exit 2 naming each run's steps, and the
// JSON says so, never "identical".
TEST(CliDiff, AStepRangeWithoutCallsHasNothingToCompare) {
  TempDir dir;
  detnccl::test::SyntheticRunSpec spec;
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "a", spec), "");
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "b", spec), "");
  const std::string past = std::to_string(spec.steps + 100);
  const CommandResult text = detnccl("diff " + dir.run("a") + " " + dir.run("b") + " --from-step " + past, true);
  EXPECT_EQ(text.exit_code, 2) << text.output;
  EXPECT_EQ(text.output.find("IDENTICAL"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("nothing to compare"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("run A has steps 0-" + std::to_string(spec.steps - 1)), std::string::npos) << text.output;
  const json result = diff_json(dir, "a", "b", "--from-step " + past);
  ASSERT_FALSE(result.is_discarded());
  EXPECT_EQ(result["verdict"], "unusable");
  EXPECT_NE(result["error"].get<std::string>().find("nothing to compare"), std::string::npos);
}

// Settings that change no call (log level, NCCL_DEBUG, a fingerprinting window) do not make runs diverge: JSON keeps
// them under config_notes.
TEST(CliDiff, DiagnosticSettingsAreConfigNotesNotDivergences) {
  TempDir dir;
  detnccl::test::SyntheticRunSpec noisy;
  noisy.extra_config = "DETNCCL_LOG_LEVEL=error\n";
  noisy.nccl_environment = "NCCL_DEBUG=INFO\n";
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "a", {}), "");
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "b", noisy), "");
  const CommandResult text = detnccl("diff " + dir.run("a") + " " + dir.run("b"));
  EXPECT_EQ(text.exit_code, 0) << text.output;
  EXPECT_EQ(text.output.rfind("IDENTICAL", 0), 0u) << text.output;
  EXPECT_NE(text.output.find("DETNCCL_LOG_LEVEL differs"), std::string::npos) << text.output;
  const json result = diff_json(dir, "a", "b");
  ASSERT_FALSE(result.is_discarded());
  EXPECT_EQ(result["verdict"], "identical");
  EXPECT_TRUE(result["config_differences"].empty()) << result.dump(2);
  ASSERT_EQ(result["config_notes"].size(), 2u) << result.dump(2);
  EXPECT_EQ(result["config_notes"][0]["field"], "DETNCCL_LOG_LEVEL");
  EXPECT_EQ(result["config_notes"][1]["field"], "NCCL_DEBUG");
  EXPECT_EQ(result["config_notes"][1]["b"], "INFO");
}

// Runs traced without fingerprints agree only on metadata: a verdict of their own in JSON and text, exit 0.
TEST(CliDiff, AMetadataOnlyComparisonHasItsOwnVerdict) {
  TempDir dir;
  detnccl::test::SyntheticRunSpec meta;
  meta.fingerprints = false;
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "a", meta), "");
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "b", meta), "");
  const CommandResult text = detnccl("diff " + dir.run("a") + " " + dir.run("b"));
  EXPECT_EQ(text.exit_code, 0) << text.output;
  EXPECT_EQ(text.output.rfind("IDENTICAL METADATA", 0), 0u) << text.output;
  const json result = diff_json(dir, "a", "b");
  ASSERT_FALSE(result.is_discarded());
  EXPECT_EQ(result["verdict"], "identical_metadata");
  // One fingerprinted run is enough for nothing: only calls fingerprinted in both count.
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "c", {}), "");
  EXPECT_EQ(diff_json(dir, "a", "c")["verdict"], "identical_metadata");
  EXPECT_EQ(diff_json(dir, "c", "c")["verdict"], "identical");
}

// diff's text names the ranks whose logs end with a torn tail (killed), as check and stats do.
TEST(CliDiff, TheTextNotesKilledRanks) {
  TempDir dir;
  detnccl::test::SyntheticRunSpec killed;
  killed.close_logs = false;
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "a", {}), "");
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "b", killed), "");
  const CommandResult text = detnccl("diff " + dir.run("a") + " " + dir.run("b"));
  EXPECT_EQ(text.exit_code, 0) << text.output;
  for (std::uint32_t rank = 0; rank < killed.ranks; ++rank) {
    EXPECT_NE(text.output.find("rank " + std::to_string(rank) + " of run B: the log ends"), std::string::npos)
        << text.output;
  }
}

// check and diff read run directories; a single log file is refused (exit 2), not compared rank by rank with nothing.
TEST(CliCheck, ASingleLogFileIsRefused) {
  TempDir dir;
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "a", {}), "");
  const std::string file = dir.run("a") + "/" + detnccl::records::rank_log_file_name(0);
  const CommandResult checked = detnccl("check " + file, true);
  EXPECT_EQ(checked.exit_code, 2) << checked.output;
  EXPECT_NE(checked.output.find("run directory"), std::string::npos) << checked.output;
  const CommandResult compared = detnccl("diff " + file + " " + dir.run("a"), true);
  EXPECT_EQ(compared.exit_code, 2) << compared.output;
  EXPECT_NE(compared.output.find("run directory"), std::string::npos) << compared.output;
  EXPECT_EQ(detnccl("stats " + file).exit_code, 0);
}

// A communicator whose stated size no NCCL can have (beyond its int) makes the log damaged: check, diff, stats and
// dump name the file and the record, as for any corrupt record. One of a size NCCL allows but that the run's logs
// cannot fill (2^31 - 1 members, 4 logs) is a finding that counts the missing members rather than visiting each: the
// command ends at once (`timeout` turns a loop over 2^31 members into a failure here, not a hung suite).
TEST(CliCheck, ACommunicatorOfForgedSizeIsADamagedLogOrAFindingNeverALoopOverItsSize) {
  TempDir dir;
  detnccl::test::SyntheticRunSpec spec;
  spec.communicator_hook = [](std::uint32_t rank, detnccl::records::CommunicatorRecord& communicator) {
    if (rank == 0) communicator.nranks = std::numeric_limits<std::uint32_t>::max();
  };
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "a", spec), "");
  const std::string damaged = dir.run("a") + "/" + detnccl::records::rank_log_file_name(0);
  const std::string damage = damaged + ": corrupt communicator record at offset ";
  const std::string why = ": its size 4294967295 exceeds NCCL's largest (2147483647)";
  const CommandResult checked = run("NO_COLOR=1 timeout 60 " DETNCCL_CLI " check " + dir.run("a") + " 2>&1");
  EXPECT_EQ(checked.exit_code, 2) << checked.output;
  EXPECT_NE(checked.output.find(damage), std::string::npos) << checked.output;
  EXPECT_NE(checked.output.find(why), std::string::npos) << checked.output;
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "b", {}), "");
  const CommandResult compared =
      run("NO_COLOR=1 timeout 60 " DETNCCL_CLI " diff " + dir.run("b") + " " + dir.run("a") + " 2>&1");
  EXPECT_EQ(compared.exit_code, 2) << compared.output;
  EXPECT_NE(compared.output.find(why), std::string::npos) << compared.output;
  const CommandResult counted = detnccl("stats " + dir.run("a"), true);
  EXPECT_EQ(counted.exit_code, 2) << counted.output;
  EXPECT_NE(counted.output.find(why), std::string::npos) << counted.output;
  const CommandResult dumped = detnccl("dump --rank 0 " + dir.run("a"), true);
  EXPECT_NE(dumped.output.find(why), std::string::npos) << dumped.output;

  // Every member states the largest size NCCL allows.
  spec.communicator_hook = [](std::uint32_t, detnccl::records::CommunicatorRecord& communicator) {
    communicator.nranks = std::numeric_limits<std::int32_t>::max();
  };
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "c", spec), "");
  const CommandResult huge = run("NO_COLOR=1 timeout 60 " DETNCCL_CLI " check " + dir.run("c") + " 2>&1");
  EXPECT_EQ(huge.exit_code, 1) << huge.output;
  // Members 4 to 2^31 - 2 are named by no log: 8 listed, the rest counted.
  const std::uint64_t unnamed = std::numeric_limits<std::int32_t>::max() - std::uint64_t{spec.ranks};
  EXPECT_NE(huge.output.find("not all ranks joined: ranks 4, 5, 6, 7, 8, 9, 10, 11 and " + std::to_string(unnamed - 8) +
                             " more never made"),
            std::string::npos)
      << huge.output;
  // Only rank 0 states it: the members disagree on the size (one finding), which no loop over it can answer.
  spec.communicator_hook = [](std::uint32_t rank, detnccl::records::CommunicatorRecord& communicator) {
    if (rank == 0) communicator.nranks = std::numeric_limits<std::int32_t>::max();
  };
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "d", spec), "");
  const CommandResult one = run("NO_COLOR=1 timeout 60 " DETNCCL_CLI " check " + dir.run("d") + " 2>&1");
  EXPECT_EQ(one.exit_code, 1) << one.output;
  EXPECT_NE(one.output.find("(ranks 1, 2, 3: 4 members; rank 0: 2147483647 members)"), std::string::npos) << one.output;
  EXPECT_EQ(one.output.find("not all ranks joined"), std::string::npos) << one.output;
}

// Members that state different sizes for one communicator (here rank 3 says 8 of a 4-rank one) are one finding naming
// the odd rank and each stated size, not "not all ranks joined" for members 4 to 7 that no log names; in JSON too.
// (CliMergeCheck.CommunicatorSizeMismatch splits it.)
TEST(CliCheck, MembersStatingDifferentSizesForACommunicatorAreOneFindingNamingTheOddRank) {
  TempDir dir;
  detnccl::test::SyntheticRunSpec spec;
  spec.communicator_hook = [](std::uint32_t rank, detnccl::records::CommunicatorRecord& communicator) {
    if (rank == 3) communicator.nranks = 8;
  };
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "a", spec), "");
  const std::string expected = "communicator size mismatch on communicator " +
                               hex_id(detnccl::test::kSyntheticCommunicatorId) +
                               " (ranks 0, 1, 2: 4 members; rank 3: 8 members)";
  const CommandResult checked = detnccl("check " + dir.run("a"), true);
  EXPECT_EQ(checked.exit_code, 1) << checked.output;
  EXPECT_NE(checked.output.find(expected), std::string::npos) << checked.output;
  EXPECT_EQ(checked.output.find("not all ranks joined"), std::string::npos) << checked.output;

  const CommandResult as_json = detnccl("check --json " + dir.run("a"));
  const nlohmann::json document = nlohmann::json::parse(as_json.output, nullptr, false);
  ASSERT_FALSE(document.is_discarded()) << as_json.output;
  EXPECT_EQ(document["finding_counts"], nlohmann::json({{"communicator size mismatch", 1}})) << as_json.output;
  ASSERT_EQ(document["findings"].size(), 1u) << as_json.output;
  EXPECT_EQ(document["findings"][0]["ranks"], nlohmann::json({3})) << as_json.output;
}

// Output that cannot be written (a full disk) is an error (exit 2, said on stderr), not success; a reader that goes
// away (`| head`) is not worth a message.
TEST(Cli, AFailedWriteOfStandardOutputExitsTwo) {
  TempDir dir;
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "a", {}), "");
  const std::string a = dir.run("a");
  for (const std::string& command : {"dump " + a, "stats " + a, "stats --json " + a, "check " + a,
                                     "diff " + a + " " + a, "diff --json " + a + " " + a}) {
    const CommandResult result = run("NO_COLOR=1 " DETNCCL_CLI " " + command + " > /dev/full 2>&1");
    // stderr went to /dev/full too: run again with stderr kept, to see the message.
    const CommandResult said = run("NO_COLOR=1 " DETNCCL_CLI " " + command + " 2>&1 >/dev/full");
    EXPECT_EQ(said.exit_code, 2) << command << ": " << said.output;
    EXPECT_NE(said.output.find("cannot write the output"), std::string::npos) << command << ": " << said.output;
    EXPECT_EQ(result.exit_code, 2) << command;
  }
  // With SIGPIPE ignored a closed pipe is EPIPE: still no message.
  const CommandResult piped = run("sh -c 'trap \"\" PIPE; NO_COLOR=1 " DETNCCL_CLI " dump " + a + " 2>&1 | head -1'");
  EXPECT_EQ(piped.output.find("cannot write"), std::string::npos) << piped.output;
}

TEST(Cli, AnUnknownSubcommandIsNamed) {
  const CommandResult result = detnccl("bogus", true);
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.output.find("unknown subcommand 'bogus'"), std::string::npos) << result.output;
}

// A FIFO named like a rank's log would block a reader forever: every command refuses it at once.
TEST(Cli, AFifoNamedLikeALogIsRefusedAtOnce) {
  TempDir dir;
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "a", {}), "");
  const std::string fifo = dir.run("a") + "/" + detnccl::records::rank_log_file_name(2);
  fs::remove(fifo);
  ASSERT_EQ(run("mkfifo " + fifo).exit_code, 0);
  for (const std::string& command : {std::string("stats"), std::string("check"), std::string("dump")}) {
    const CommandResult result = run("timeout 20 " DETNCCL_CLI " " + command + " " + dir.run("a") + " 2>&1");
    EXPECT_EQ(result.exit_code, 2) << command << " (124: it blocked): " << result.output;
    EXPECT_NE(result.output.find("not a regular file"), std::string::npos) << result.output;
  }
}

// A rank killed between creating its log and writing the header leaves a file of zeros: every command reads the
// other ranks and says, naming the file, that this rank has no records (diff: missing; check: not joined; stats and
// dump: "no header"), rather than refusing the whole run.
TEST(Cli, ALogWithoutAHeaderLeavesTheOtherRanksReadable) {
  TempDir dir;
  const detnccl::test::SyntheticRunSpec spec;
  const std::uint64_t calls = spec.steps * spec.calls_per_step;
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "a", spec), "");
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "b", spec), "");
  const std::string victim = dir.run("b") + "/" + detnccl::records::rank_log_file_name(1);
  std::ofstream(victim, std::ios::binary | std::ios::trunc).close();
  fs::resize_file(victim, 1u << 20);

  const CommandResult text = detnccl("diff " + dir.run("a") + " " + dir.run("b"), true);
  EXPECT_EQ(text.exit_code, 1) << text.output;
  EXPECT_EQ(text.output.rfind("DIVERGED: first divergence at step 0 on rank 1: missing", 0), 0u) << text.output;
  EXPECT_NE(text.output.find("rank 1 of run B: " + victim + ": no header"), std::string::npos) << text.output;
  const json result = diff_json(dir, "a", "b");
  ASSERT_FALSE(result.is_discarded());
  EXPECT_EQ(result["verdict"], "diverged");
  EXPECT_EQ(result["first_divergence"]["kind"], "missing");
  EXPECT_EQ(result["ranks"][1]["end_b"], "no header");
  EXPECT_EQ(result["ranks"][1]["missing_in_b"], calls);
  EXPECT_EQ(result["ranks"][0]["matching"], calls);

  const CommandResult check = detnccl("check " + dir.run("b"), true);
  EXPECT_EQ(check.exit_code, 1) << check.output;
  EXPECT_NE(check.output.find("not all ranks joined: rank 1 never made"), std::string::npos) << check.output;
  EXPECT_NE(check.output.find("rank 1: " + victim + ": no header"), std::string::npos) << check.output;

  const CommandResult stats = detnccl("stats --json " + dir.run("b"));
  EXPECT_EQ(stats.exit_code, 0) << stats.output;
  const json counted = json::parse(stats.output, nullptr, false);
  ASSERT_FALSE(counted.is_discarded()) << stats.output;
  EXPECT_EQ(counted["per_rank"][1]["end"], "no header");
  EXPECT_EQ(counted["per_rank"][1]["calls"], 0);
  EXPECT_EQ(counted["total"]["calls"], (spec.ranks - 1) * calls);

  const CommandResult dump = detnccl("dump " + dir.run("b"), true);
  EXPECT_EQ(dump.exit_code, 0) << dump.output;
  EXPECT_NE(dump.output.find("# rank 1 (" + victim + "): no header\n# end (no header): " + victim), std::string::npos)
      << dump.output;
  std::istringstream lines(dump.output);
  std::size_t call_lines = 0;
  for (std::string line; std::getline(lines, line);) call_lines += line.find(" step ") != std::string::npos;
  EXPECT_EQ(call_lines, (spec.ranks - 1) * calls) << "the other ranks are dumped in full";
  const CommandResult jsonl = detnccl("dump --format jsonl --rank 1 " + dir.run("b"));
  EXPECT_EQ(jsonl.exit_code, 0);
  const json end = json::parse(jsonl.output, nullptr, false);
  ASSERT_FALSE(end.is_discarded()) << jsonl.output;
  EXPECT_EQ(end["type"], "end");
  EXPECT_EQ(end["kind"], "no header");
}

// diff --from-step before the step a resumed run starts at: its missing steps are named, not called a divergence of
// the control flow.
TEST(CliDiff, AResumedRunComparedFromAnEarlierStepSaysWhereItStarts) {
  TempDir dir;
  detnccl::test::SyntheticRunSpec resumed;
  resumed.first_step = 2;
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "full", {}), "");
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "resumed", resumed), "");
  const std::string runs = dir.run("full") + " " + dir.run("resumed");
  const CommandResult text = detnccl("diff --from-step 1 " + runs);
  EXPECT_EQ(text.exit_code, 1) << text.output;
  EXPECT_EQ(text.output.rfind("DIVERGED: first divergence at step 1 on rank 0: missing (origin)", 0), 0u)
      << text.output;
  EXPECT_NE(text.output.find("run B has no calls at step 1 on rank 0: its log starts at step 2"), std::string::npos)
      << text.output;
  EXPECT_EQ(text.output.find("control flow"), std::string::npos) << text.output;
  const json result = diff_json(dir, "full", "resumed", "--from-step 1");
  ASSERT_FALSE(result.is_discarded());
  EXPECT_EQ(result["first_divergence"]["kind"], "missing");
  EXPECT_EQ(result["ranks"][0]["late_start_b"], 2);
  EXPECT_EQ(detnccl("diff --from-step 2 " + runs).exit_code, 0);
}

// ---------------------------------------------------------------------------------------------------------------
// A diff split by rank ranges (diff --ranks A-B --partial, then merge) gives the one-process answer.

// Writes the partial result of ranks `range` of `runs` (with `extra` diff options) to `file`; returns the exit status.
int write_part(const std::string& runs, const std::string& range, const std::string& extra, const std::string& file) {
  return detnccl("diff " + runs + " " + extra + " --partial" + (range.empty() ? "" : " --ranks " + range) + " > " +
                 file)
      .exit_code;
}

// For each split of the ranks (a list of ranges), merges the parts and expects exactly what one diff process prints:
// the parsed --json document, compared field by field, the text (plain and -v) and the exit status. Returns the
// one-process JSON document for the scenario's own checks.
json expect_merges_equal_one_process(const TempDir& dir, const std::string& a, const std::string& b,
                                     const std::vector<std::vector<std::string>>& splits,
                                     const std::string& extra = "") {
  const std::string runs = dir.run(a) + " " + dir.run(b);
  const CommandResult one_json = detnccl("diff --json " + runs + " " + extra);
  const CommandResult one_text = detnccl("diff " + runs + " " + extra);
  const CommandResult one_verbose = detnccl("diff -v " + runs + " " + extra);
  const json expected = json::parse(one_json.output, nullptr, false);
  EXPECT_FALSE(expected.is_discarded()) << one_json.output;
  for (std::size_t s = 0; s < splits.size(); ++s) {
    std::string parts;
    for (std::size_t k = 0; k < splits[s].size(); ++k) {
      const std::string file = dir.path() + "/part-" + a + b + "-" + std::to_string(s) + "-" + std::to_string(k);
      const int status = write_part(runs, splits[s][k], extra, file);
      EXPECT_TRUE(status == 0 || (status == 2 && one_json.exit_code == 2)) << splits[s][k] << ": " << status;
      parts += " " + file;
    }
    const std::string what = "split " + std::to_string(s) + " (" + std::to_string(splits[s].size()) + " parts)";
    const CommandResult merged_json = detnccl("merge --json" + parts);
    const json merged = json::parse(merged_json.output, nullptr, false);
    EXPECT_FALSE(merged.is_discarded()) << what << ": " << merged_json.output;
    EXPECT_EQ(merged_json.exit_code, one_json.exit_code) << what;
    EXPECT_EQ(merged, expected) << what << ": " << json::diff(expected, merged).dump(2);
    const CommandResult merged_text = detnccl("merge" + parts);
    EXPECT_EQ(merged_text.exit_code, one_text.exit_code) << what;
    EXPECT_EQ(merged_text.output, one_text.output) << what;
    const CommandResult merged_verbose = detnccl("merge -v" + parts);
    EXPECT_EQ(merged_verbose.output, one_verbose.output) << what;
  }
  return expected;
}

// Six ranks in two and three parts, unevenly, with ranges that reach past the last rank, and one part of all ranks.
const std::vector<std::vector<std::string>> kSplits = {
    {"0-2", "3-5"}, {"0-1", "2-3", "4-5"}, {"3-100", "0-0", "1-2"}, {""}};

detnccl::test::SyntheticRunSpec six_ranks() {
  detnccl::test::SyntheticRunSpec spec;
  spec.ranks = 6;
  return spec;
}

TEST(CliMerge, IdenticalRuns) {
  TempDir dir;
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "a", six_ranks()), "");
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "b", six_ranks()), "");
  const json expected = expect_merges_equal_one_process(dir, "a", "b", kSplits);
  EXPECT_EQ(expected["verdict"], "identical");
}

// An input perturbed on rank 2 at step 1 whose AllReduce the other ranks receive (but rank 4), and another origin on
// rank 4 at step 3:
// the ranks of every part read their call records through step 3, the last step at which a rank first differs.
TEST(CliMerge, AnInputPerturbationWithReceiversOnOtherRanks) {
  TempDir dir;
  detnccl::test::SyntheticRunSpec spec = six_ranks();
  spec.steps = 6;  // steps 4 and 5 are not read
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "a", spec), "");
  detnccl::test::SyntheticRunSpec perturbed = spec;
  perturbed.hook = [](std::uint32_t rank, detnccl::records::CallFields& call, auto&, auto&, auto&, auto&) {
    if (call.op == detnccl::records::OpId::kAllReduce && call.step == 1 && call.comm_seq % 12 == 0) {
      if (rank == 2) call.input_fingerprint ^= 1;
      if (rank != 4) call.output_fingerprint ^= 1;
    }
    if (rank == 4 && call.step == 3 && call.op == detnccl::records::OpId::kSend) call.input_fingerprint ^= 1;
    return true;
  };
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "b", perturbed), "");
  const json expected = expect_merges_equal_one_process(dir, "a", "b", kSplits);
  EXPECT_EQ(expected["verdict"], "diverged");
  EXPECT_EQ(expected["first_divergence"]["rank"], 2);
  EXPECT_EQ(expected["receivers"], json({0, 1, 3, 5})) << expected.dump(2);
  EXPECT_EQ(expected["step_index"]["read_through_step"], 3) << expected.dump(2);
  // The same with every record read.
  expect_merges_equal_one_process(dir, "a", "b", {{"0-2", "3-5"}}, "--all-records");
}

TEST(CliMerge, AKilledRank) {
  TempDir dir;
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "a", six_ranks()), "");
  detnccl::test::SyntheticRunSpec killed = six_ranks();
  killed.close_logs = false;
  killed.hook = [](std::uint32_t rank, detnccl::records::CallFields& call, auto&, auto&, auto&, auto&) {
    return !(rank == 3 && call.step >= 2);
  };
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "b", killed), "");
  const json expected = expect_merges_equal_one_process(dir, "a", "b", kSplits);
  EXPECT_EQ(expected["first_divergence"]["kind"], "missing");
  EXPECT_EQ(expected["first_divergence"]["rank"], 3);
}

TEST(CliMerge, ATruncatedLog) {
  TempDir dir;
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "a", six_ranks()), "");
  detnccl::test::SyntheticRunSpec truncated = six_ranks();
  truncated.truncated_ranks = {4};
  truncated.hook = [](std::uint32_t rank, detnccl::records::CallFields& call, auto&, auto&, auto&, auto&) {
    return !(rank == 4 && call.step >= 2);
  };
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "b", truncated), "");
  const json expected = expect_merges_equal_one_process(dir, "a", "b", kSplits);
  EXPECT_EQ(expected["verdict"], "undecided");
}

// A metadata divergence on rank 5, configuration differences on every rank (one that can change results, one per
// rank that cannot), and a step range.
TEST(CliMerge, MetadataAndConfigurationDivergences) {
  TempDir dir;
  detnccl::test::SyntheticRunSpec a = six_ranks();
  a.rank_config = [](std::uint32_t rank) { return "DETNCCL_LOG_FILE=a-" + std::to_string(rank) + "\n"; };
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "a", a), "");
  detnccl::test::SyntheticRunSpec b = six_ranks();
  b.extra_config = "DETNCCL_DETERMINISTIC=1\n";
  b.rank_config = [](std::uint32_t rank) { return "DETNCCL_LOG_FILE=b-" + std::to_string(rank) + "\n"; };
  b.hook = [](std::uint32_t rank, detnccl::records::CallFields& call, auto&, auto&, auto&, auto&) {
    if (rank == 5 && call.step == 2 && call.comm_seq % 12 == 3) call.count += 1;
    return true;
  };
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "b", b), "");
  const json expected = expect_merges_equal_one_process(dir, "a", "b", kSplits);
  EXPECT_EQ(expected["first_divergence"]["kind"], "metadata");
  EXPECT_EQ(expected["config_differences"].size(), 1u) << expected.dump(2);
  EXPECT_EQ(expected["config_notes"].size(), 6u) << expected.dump(2);
  expect_merges_equal_one_process(dir, "a", "b", {{"0-3", "4-5"}}, "--from-step 1 --to-step 2");
  // Unusable input is the one-process answer too: a step range without calls, a run that does not exist.
  expect_merges_equal_one_process(dir, "a", "b", {{"0-3", "4-5"}}, "--from-step 10");
  expect_merges_equal_one_process(dir, "a", "missing", {{"0-3", "4-5"}});
}

// Parts that do not make up one diff are refused with exit status 2, naming the file.
TEST(CliMerge, RefusesOverlapsGapsOtherComparisonsAndDamagedParts) {
  TempDir dir;
  for (const char* name : {"a", "b", "c"}) {
    ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), name, six_ranks()), "");
  }
  const std::string ab = dir.run("a") + " " + dir.run("b");
  const auto part = [&](const std::string& runs, const std::string& range, const std::string& name) {
    const std::string file = dir.path() + "/" + name;
    EXPECT_EQ(write_part(runs, range, "", file), 0) << name;
    return file;
  };
  const std::string low = part(ab, "0-2", "low.json");
  const std::string high = part(ab, "3-5", "high.json");
  const std::string middle = part(ab, "2-3", "middle.json");
  const std::string top = part(ab, "5-5", "top.json");
  const std::string other = part(dir.run("a") + " " + dir.run("c"), "3-5", "other.json");
  const std::string ranged = part(ab + " --to-step 2", "3-5", "ranged.json");
  ASSERT_EQ(detnccl("merge " + low + " " + high).exit_code, 0);
  const auto refused = [&](const std::string& parts, const std::vector<std::string>& named) {
    const CommandResult result = detnccl("merge " + parts, /*with_stderr=*/true);
    EXPECT_EQ(result.exit_code, 2) << parts << ": " << result.output;
    for (const std::string& text : named) EXPECT_NE(result.output.find(text), std::string::npos) << result.output;
    const CommandResult as_json = detnccl("merge --json " + parts);
    EXPECT_EQ(as_json.exit_code, 2);
    const json document = json::parse(as_json.output, nullptr, false);
    ASSERT_FALSE(document.is_discarded()) << as_json.output;
    EXPECT_EQ(document["verdict"], "unusable");
  };
  refused(low + " " + middle + " " + high, {"low.json (0-2)", "middle.json (2-3)", "overlap"});
  refused(low + " " + low + " " + high, {"low.json", "overlap"});
  refused(low + " " + top, {"no part holds ranks 3-4"});
  refused(low + " " + other, {"other.json", "low.json", "different comparisons"});
  refused(low + " " + ranged, {"ranged.json", "step range"});
  // Damaged or foreign files.
  std::ifstream in(high);
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const auto write = [&](const std::string& name, const std::string& content) {
    std::ofstream(dir.path() + "/" + name) << content;
    return dir.path() + "/" + name;
  };
  refused(low + " " + write("cut.json", text.substr(0, text.size() / 2)), {"cut.json", "not a JSON document"});
  json newer = json::parse(text);
  newer["partial_version"] = 99;
  refused(low + " " + write("newer.json", newer.dump()), {"newer.json", "format version 99"});
  json wrong = json::parse(text);
  wrong["results"][0]["calls_a"] = -1;
  refused(low + " " + write("wrong.json", wrong.dump()), {"wrong.json", "results[0].calls_a"});
  refused(low + " " + write("empty.json", ""), {"empty.json"});
  refused(low + " " + dir.path() + "/absent.json", {"absent.json"});
  // Arguments: --ranks needs --partial, a range must parse.
  EXPECT_EQ(detnccl("diff " + ab + " --ranks 0-2").exit_code, 2);
  EXPECT_EQ(detnccl("diff " + ab + " --partial --ranks 3-1").exit_code, 2);
  EXPECT_EQ(detnccl("diff " + ab + " --partial --ranks x").exit_code, 2);
  EXPECT_EQ(detnccl("diff " + ab + " --partial --json").exit_code, 2);
}

// ---------------------------------------------------------------------------------------------------------------
// A check split by rank ranges (check --ranks A-B --partial, then merge) gives the one-process answer.

// Writes the check partial result of ranks `range` of `run` (with `extra` check options) to `file`; returns the exit
// status.
int write_check_part(const std::string& run, const std::string& range, const std::string& extra,
                     const std::string& file) {
  return detnccl("check " + run + " " + extra + " --partial" + (range.empty() ? "" : " --ranks " + range) + " > " +
                 file)
      .exit_code;
}

// For each split of the ranks, merges the check parts of `run` and expects exactly what one check process prints:
// the --json document and the text (plain and -v), byte for byte, and the exit status. Returns the one-process JSON
// document for the scenario's own checks.
json expect_check_merges_equal_one_process(const TempDir& dir, const std::string& run,
                                           const std::vector<std::vector<std::string>>& splits,
                                           const std::string& extra = "") {
  const std::string path = dir.run(run);
  const CommandResult one_json = detnccl("check --json " + path + " " + extra);
  const CommandResult one_text = detnccl("check " + path + " " + extra);
  const CommandResult one_verbose = detnccl("check -v " + path + " " + extra);
  const json expected = json::parse(one_json.output, nullptr, false);
  EXPECT_FALSE(expected.is_discarded()) << one_json.output;
  for (std::size_t s = 0; s < splits.size(); ++s) {
    std::string parts;
    for (std::size_t k = 0; k < splits[s].size(); ++k) {
      const std::string file = dir.path() + "/check-part-" + run + "-" + std::to_string(s) + "-" + std::to_string(k);
      const int status = write_check_part(path, splits[s][k], extra, file);
      EXPECT_TRUE(status == 0 || (status == 2 && expected["verdict"] == "unusable")) << splits[s][k] << ": " << status;
      parts += " " + file;
    }
    const std::string what = run + ", split " + std::to_string(s) + " (" + std::to_string(splits[s].size()) + " parts)";
    const CommandResult merged_json = detnccl("merge --json" + parts);
    EXPECT_EQ(merged_json.exit_code, one_json.exit_code) << what;
    EXPECT_EQ(merged_json.output, one_json.output) << what;
    const CommandResult merged_text = detnccl("merge" + parts);
    EXPECT_EQ(merged_text.exit_code, one_text.exit_code) << what;
    EXPECT_EQ(merged_text.output, one_text.output) << what;
    // -v lists what the plain text cuts (findings beyond 20, notes beyond 10): merged again only where it shows more.
    if (one_verbose.output != one_text.output) {
      const CommandResult merged_verbose = detnccl("merge -v" + parts);
      EXPECT_EQ(merged_verbose.exit_code, one_verbose.exit_code) << what;
      EXPECT_EQ(merged_verbose.output, one_verbose.output) << what;
    }
  }
  return expected;
}

// kSplits without the part of all ranks (ConsistentRuns has it): two and three parts with different boundaries.
const std::vector<std::vector<std::string>> kCheckSplits = {
    {"0-2", "3-5"}, {"0-1", "2-3", "4-5"}, {"3-100", "0-0", "1-2"}};

// Six ranks: one communicator over all of them, and three of two ranks each (whose lowest members, 0, 2 and 4, fall
// in different parts of each split).
detnccl::test::SyntheticRunSpec six_ranks_in(std::uint32_t groups) {
  detnccl::test::SyntheticRunSpec spec = six_ranks();
  spec.groups = groups;
  return spec;
}

TEST(CliMergeCheck, ConsistentRuns) {
  TempDir dir;
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "world", six_ranks_in(1)), "");
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "groups", six_ranks_in(3)), "");
  const json world = expect_check_merges_equal_one_process(dir, "world", kSplits);
  EXPECT_EQ(world["verdict"], "consistent");
  const json groups = expect_check_merges_equal_one_process(dir, "groups", kSplits);
  EXPECT_EQ(groups["verdict"], "consistent");
  // Each group's collectives and pairs are counted once, by the part of its lowest member: the same counts as one
  // communicator over all ranks with a third of the members per collective.
  EXPECT_EQ(groups["calls"], world["calls"]);
  EXPECT_EQ(groups["collectives"], 3 * world["collectives"].get<std::uint64_t>());
  EXPECT_EQ(groups["point_to_point_pairs"], world["point_to_point_pairs"]);
  // A real job's logs (the shim's records, step index and all) on four ranks.
  ASSERT_EQ(traced_job(dir, "traced", 4, "--steps 2").exit_code, 0);
  const json traced = expect_check_merges_equal_one_process(dir, "traced", {{"0-1", "2-3"}, {"1-2", "0-0", "3-9"}});
  EXPECT_EQ(traced["verdict"], "consistent");
}

// A corrupted Recv on rank 1 and, in the groups' run, on rank 5 (the part of rank 4 owns its group); then one corrupted
// Recv on every rank at every step: more findings than are kept (1000), so the kept ones and the note counting the
// rest must be those of one process.
TEST(CliMergeCheck, SendRecvCorruption) {
  using detnccl::records::OpId;
  TempDir dir;
  const auto corrupt = [](std::uint32_t rank, detnccl::records::CallFields& call, auto&, auto&, auto&, auto&) {
    if ((rank == 1 || rank == 5) && call.step == 2 && call.op == OpId::kRecv) call.output_fingerprint ^= 1;
    return true;
  };
  detnccl::test::SyntheticRunSpec world = six_ranks_in(1);
  world.hook = corrupt;
  detnccl::test::SyntheticRunSpec groups = six_ranks_in(3);
  groups.hook = corrupt;
  detnccl::test::SyntheticRunSpec many = six_ranks_in(2);
  many.steps = 90;  // 6 ranks x 2 Recvs x 90 steps: 1080 findings
  many.hook = [](std::uint32_t, detnccl::records::CallFields& call, auto&, auto&, auto&, auto&) {
    if (call.op == OpId::kRecv) call.output_fingerprint ^= 1;
    return true;
  };
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "world", world), "");
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "groups", groups), "");
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "many", many), "");
  for (const char* run : {"world", "groups"}) {
    const json expected = expect_check_merges_equal_one_process(dir, run, kCheckSplits);
    EXPECT_EQ(expected["verdict"], "inconsistent") << run;
    EXPECT_EQ(expected["finding_counts"]["content mismatch"], 2 * 2) << run;  // two Recvs per step and rank
  }
  const json capped = expect_check_merges_equal_one_process(dir, "many", {{"0-2", "3-5"}, {"0-0", "1-4", "5"}});
  EXPECT_EQ(capped["finding_counts"]["content mismatch"], 6 * 2 * many.steps);
  EXPECT_EQ(capped["findings"].size(), 1000u);
}

// Rank 5 states 4 members for its group of two (ranks 4 and 5): one finding, owned by the part of rank 4, the same
// merged as in one process.
TEST(CliMergeCheck, CommunicatorSizeMismatch) {
  TempDir dir;
  detnccl::test::SyntheticRunSpec groups = six_ranks_in(3);
  groups.communicator_hook = [](std::uint32_t rank, detnccl::records::CommunicatorRecord& communicator) {
    if (rank == 5) communicator.nranks = 4;
  };
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "groups", groups), "");
  const json expected = expect_check_merges_equal_one_process(dir, "groups", kCheckSplits);
  EXPECT_EQ(expected["verdict"], "inconsistent");
  EXPECT_EQ(expected["finding_counts"], json({{"communicator size mismatch", 1}}));
  ASSERT_EQ(expected["findings"].size(), 1u);
  EXPECT_EQ(expected["findings"][0]["ranks"], json({5}));
  EXPECT_EQ(expected["findings"][0]["comm_id"], hex_id(detnccl::test::kSyntheticCommunicatorId + 1 + 2));
}

// A metadata desync naming the odd rank (rank 2's AllGather datatype at step 1; in the groups' run, rank 4's in a
// group of three), and a configuration that differs on rank 4 (named against the majority) with per-rank log files
// (notes).
TEST(CliMergeCheck, MetadataDesyncAndConfiguration) {
  using detnccl::records::OpId;
  TempDir dir;
  const auto desync = [](std::uint32_t rank, detnccl::records::CallFields& call, auto&, auto&, auto&, auto&) {
    if ((rank == 2 || rank == 4) && call.step == 1 && call.op == OpId::kAllGather) call.datatype = 9;
    return true;
  };
  const auto config = [](std::uint32_t rank) {
    return "DETNCCL_LOG_FILE=log-" + std::to_string(rank) + "\n" + (rank == 4 ? "DETNCCL_DETERMINISTIC=1\n" : "");
  };
  detnccl::test::SyntheticRunSpec world = six_ranks_in(1);
  world.hook = desync;
  world.rank_config = config;
  detnccl::test::SyntheticRunSpec groups = six_ranks_in(2);
  groups.hook = desync;
  groups.rank_config = config;
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "world", world), "");
  ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), "groups", groups), "");
  const json expected = expect_check_merges_equal_one_process(dir, "world", kCheckSplits);
  EXPECT_EQ(expected["verdict"], "inconsistent");
  EXPECT_EQ(expected["finding_counts"]["configuration mismatch"], 1) << expected.dump(2);
  EXPECT_EQ(expected["config_notes"].size(), 1u) << expected.dump(2);
  bool named = false;
  for (const json& finding : expected["findings"]) {
    if (finding["kind"] == "dtype mismatch") {
      EXPECT_EQ(finding["ranks"], json::array({2, 4})) << finding.dump();
      named = true;
    }
  }
  EXPECT_TRUE(named) << expected.dump(2);
  expect_check_merges_equal_one_process(dir, "groups", kCheckSplits);
  // The same with the steps numbered by the CLI (an option the parts and the one process share).
  expect_check_merges_equal_one_process(dir, "groups", {{"0-2", "3-5"}}, "--infer-steps");
}

// Ranks that did not join: rank 3 killed at step 2 (a torn tail: its calls are missing, not unrecorded), in the
// world run and in a group (ranks 2-3, owned by the part of rank 2); rank 0 killed before writing its log's header.
TEST(CliMergeCheck, RanksThatDidNotJoin) {
  TempDir dir;
  const auto killed = [](std::uint32_t rank, detnccl::records::CallFields& call, auto&, auto&, auto&, auto&) {
    return !(rank == 3 && call.step >= 2);
  };
  for (const std::uint32_t groups : {1u, 3u}) {
    detnccl::test::SyntheticRunSpec spec = six_ranks_in(groups);
    spec.close_logs = false;
    spec.hook = killed;
    const std::string run = "killed-" + std::to_string(groups);
    ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), run, spec), "");
    const json expected = expect_check_merges_equal_one_process(dir, run, kCheckSplits);
    EXPECT_EQ(expected["verdict"], "inconsistent") << run;
    EXPECT_GT(expected["finding_counts"]["not all ranks joined"].get<int>(), 0) << expected.dump(2);
    // Rank 0 killed before its log's header (a file of zeros): no log names it, the configuration is compared in
    // the part of rank 1, and rank 1 is the lowest member its logs name of the world (or its group's) communicator.
    const std::string headerless = "headerless-" + std::to_string(groups);
    ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), headerless, six_ranks_in(groups)), "");
    const std::string victim = dir.run(headerless) + "/" + detnccl::records::rank_log_file_name(0);
    std::ofstream(victim, std::ios::binary | std::ios::trunc).close();
    fs::resize_file(victim, 1u << 16);
    const json without = expect_check_merges_equal_one_process(dir, headerless, kCheckSplits);
    EXPECT_EQ(without["ranks"], 5) << without.dump(2);
    EXPECT_GT(without["finding_counts"]["not all ranks joined"].get<int>(), 0) << without.dump(2);
  }
}

// A truncated log (rank 4 from step 2): undecided, its unrecorded calls not checked; and with a desync before it
// (rank 2 at step 1), inconsistent.
TEST(CliMergeCheck, ATruncatedLog) {
  using detnccl::records::OpId;
  TempDir dir;
  for (const bool desync : {false, true}) {
    for (const std::uint32_t groups : {1u, 3u}) {
      detnccl::test::SyntheticRunSpec spec = six_ranks_in(groups);
      spec.truncated_ranks = {4};
      spec.hook = [desync](std::uint32_t rank, detnccl::records::CallFields& call, auto&, auto&, auto&, auto&) {
        if (desync && rank == 2 && call.step == 1 && call.op == OpId::kAllGather) call.datatype = 9;
        return !(rank == 4 && call.step >= 2);
      };
      const std::string run = std::string(desync ? "desync-" : "truncated-") + std::to_string(groups);
      ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), run, spec), "");
      const json expected = expect_check_merges_equal_one_process(dir, run, kCheckSplits);
      EXPECT_EQ(expected["verdict"], desync ? "inconsistent" : "undecided") << run;
      EXPECT_EQ(expected["truncated_ranks"], json::array({4})) << run;
      EXPECT_GT(expected["not_checked"].get<int>(), 0) << run;
    }
  }
}

// Blocks recorded folded (DETNCCL_TRACE=hash): AlltoAlls counted as unchecked, and a gathered block that differs
// found through the folds (a finding that names no rank).
TEST(CliMergeCheck, FoldedBlocks) {
  using detnccl::records::OpId;
  TempDir dir;
  for (const std::uint32_t groups : {1u, 3u}) {
    detnccl::test::SyntheticRunSpec spec = six_ranks_in(groups);
    spec.fold_blocks = true;
    spec.hook = [](std::uint32_t rank, detnccl::records::CallFields& call, auto&, auto& output_blocks, auto&, auto&) {
      if (rank == 5 && call.step == 3 && call.op == OpId::kAllGather) output_blocks[0] ^= 1;
      return true;
    };
    const std::string run = "folded-" + std::to_string(groups);
    ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), run, spec), "");
    const json expected = expect_check_merges_equal_one_process(dir, run, kCheckSplits);
    EXPECT_GT(expected["folded_blocks_unchecked"].get<int>(), 0) << run;
    EXPECT_EQ(expected["finding_counts"]["content mismatch"], 2) << expected.dump(2);  // two AllGathers a step
  }
}

// Parts that do not make up one check are refused with exit status 2, naming the file; so are check and diff parts
// together.
TEST(CliMergeCheck, RefusesMixedOverlappingMissingForeignAndDamagedParts) {
  TempDir dir;
  for (const char* name : {"a", "b"}) {
    ASSERT_EQ(detnccl::test::write_synthetic_run(dir.path(), name, six_ranks_in(3)), "");
  }
  const auto part = [&](const std::string& run, const std::string& range, const std::string& name) {
    const std::string file = dir.path() + "/" + name;
    EXPECT_EQ(write_check_part(dir.run(run), range, "", file), 0) << name;
    return file;
  };
  const std::string low = part("a", "0-2", "low.json");
  const std::string high = part("a", "3-5", "high.json");
  const std::string middle = part("a", "2-3", "middle.json");
  const std::string top = part("a", "5-5", "top.json");
  const std::string other = part("b", "3-5", "other.json");
  const std::string diff_high = dir.path() + "/diff-high.json";
  ASSERT_EQ(write_part(dir.run("a") + " " + dir.run("b"), "3-5", "", diff_high), 0);
  ASSERT_EQ(detnccl("merge " + low + " " + high).exit_code, 0);
  const auto refused = [&](const std::string& parts, const std::vector<std::string>& named) {
    const CommandResult result = detnccl("merge " + parts, /*with_stderr=*/true);
    EXPECT_EQ(result.exit_code, 2) << parts << ": " << result.output;
    for (const std::string& text : named) EXPECT_NE(result.output.find(text), std::string::npos) << result.output;
    const CommandResult as_json = detnccl("merge --json " + parts);
    EXPECT_EQ(as_json.exit_code, 2);
    const json document = json::parse(as_json.output, nullptr, false);
    ASSERT_FALSE(document.is_discarded()) << as_json.output;
    EXPECT_EQ(document["verdict"], "unusable");
  };
  refused(low + " " + diff_high, {"diff-high.json", "low.json", "a part of diff"});
  refused(diff_high + " " + low, {"diff-high.json", "low.json", "a part of check"});
  refused(low + " " + middle + " " + high, {"low.json (0-2)", "middle.json (2-3)", "overlap"});
  refused(low + " " + low + " " + high, {"low.json", "overlap"});
  refused(low + " " + top, {"no part holds ranks 3-4"});
  refused(low + " " + other, {"other.json", "low.json", "different checks"});
  std::ifstream in(high);
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const auto write = [&](const std::string& name, const std::string& content) {
    std::ofstream(dir.path() + "/" + name) << content;
    return dir.path() + "/" + name;
  };
  refused(low + " " + write("cut.json", text.substr(0, text.size() / 2)), {"cut.json", "not a JSON document"});
  json newer = json::parse(text);
  newer["partial_version"] = 99;
  refused(low + " " + write("newer.json", newer.dump()), {"newer.json", "format version 99"});
  json wrong = json::parse(text);
  wrong["results"][0]["calls"] = -1;
  refused(low + " " + write("wrong.json", wrong.dump()), {"wrong.json", "results[0].calls"});
  json counts = json::parse(text);
  counts["tally"]["collectives"] = "many";
  refused(low + " " + write("counts.json", counts.dump()), {"counts.json", "tally.collectives"});
  json holder = json::parse(text);
  holder["configuration"] = true;
  refused(low + " " + write("holder.json", holder.dump()), {"holder.json", "configuration"});
  refused(low + " " + write("empty.json", ""), {"empty.json"});
  // Arguments: --ranks needs --partial, a range must parse, a part is JSON already.
  const std::string a = dir.run("a");
  EXPECT_EQ(detnccl("check " + a + " --ranks 0-2").exit_code, 2);
  EXPECT_EQ(detnccl("check " + a + " --partial --ranks 3-1").exit_code, 2);
  EXPECT_EQ(detnccl("check " + a + " --partial --json").exit_code, 2);
  // A run that cannot be checked: the part says so (exit 2) and merge answers as one check does.
  expect_check_merges_equal_one_process(dir, "missing", {{"0-2", "3-5"}});
}

}  // namespace
