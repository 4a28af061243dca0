// Unit tests of the analysis behind `detnccl diff`, `check` and `stats` (cli/analysis/), on synthetic runs written
// with records::RecordWriter (tests/test_cli_synthetic_run.h). Each test changes known calls and checks that the
// analysis names exactly those: the expected rank, step, kind and role follow from the change the test made.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>

#include "abi/nccl_abi.h"
#include "cli/analysis/call_layout.h"
#include "cli/analysis/magnitude_report.h"
#include "cli/analysis/run_check.h"
#include "cli/analysis/run_diff.h"
#include "cli/analysis/run_jobs.h"
#include "cli/analysis/run_logs.h"
#include "cli/analysis/run_map.h"
#include "cli/analysis/run_stats.h"
#include "config/config.h"
#include "tests/test_cli_synthetic_run.h"
#include "tests/test_support.h"

namespace {

namespace fs = std::filesystem;
using detnccl::analysis::CheckFindingKind;
using detnccl::analysis::DivergenceKind;
using detnccl::analysis::DivergenceRole;
using detnccl::records::CallFields;
using detnccl::records::OpId;
using detnccl::test::SyntheticRunSpec;

using Blocks = std::vector<std::uint64_t>;

using detnccl::test::TempDir;

class Analysis : public ::testing::Test {
 protected:
  void write(const std::string& name, const SyntheticRunSpec& spec) {
    ASSERT_EQ(detnccl::test::write_synthetic_run(dir_.path(), name, spec), "");
  }
  // Runs "a" and "b" where, in b, the AllReduce of step 2 and later gives other bits on every rank with every input
  // unchanged: an output origin on rank 0.
  void write_output_origin_pair() {
    SyntheticRunSpec b;
    b.hook = [](std::uint32_t, CallFields& call, Blocks&, Blocks&, Blocks&, Blocks&) {
      if (call.step >= 2 && call.op == OpId::kAllReduce) call.output_fingerprint ^= 7;
      return true;
    };
    ASSERT_NO_FATAL_FAILURE(write("a", {}));
    ASSERT_NO_FATAL_FAILURE(write("b", b));
  }
  // Run `name` where rank 2 joins no collective from step 3 on (its log left open, as a hung rank's is).
  void write_rank_2_leaving_at_step_3(const std::string& name) {
    SyntheticRunSpec spec;
    spec.close_logs = false;
    spec.hook = [](std::uint32_t rank, CallFields& call, Blocks&, Blocks&, Blocks&, Blocks&) {
      return !(rank == 2 && call.step >= 3);
    };
    ASSERT_NO_FATAL_FAILURE(write(name, spec));
  }
  // diff_runs; with the step-index shortcut on (the default), also without it, expecting the same answers: every
  // diff test here is also a test that the shortcut changes no answer. And again reading one page at a time: the
  // readers then refill their buffers every few calls, so a call kept (pending a match, or a divergence) that still
  // pointed into a reader's buffer would change an answer.
  detnccl::analysis::RunDiff diff(const std::string& a, const std::string& b,
                                  detnccl::analysis::DiffOptions options = {}) {
    const auto run_a = detnccl::analysis::list_run(dir_.run(a));
    const auto run_b = detnccl::analysis::list_run(dir_.run(b));
    detnccl::analysis::RunDiff result = detnccl::analysis::diff_runs(run_a, run_b, options);
    {
      SCOPED_TRACE("read one page at a time");
      detnccl::analysis::DiffOptions paged = options;
      paged.read_window_bytes = 4096;
      const detnccl::analysis::RunDiff small = detnccl::analysis::diff_runs(run_a, run_b, paged);
      expect_same_answers(small, result);
      for (std::size_t i = 0; i < result.ranks.size() && i < small.ranks.size(); ++i) {
        EXPECT_EQ(small.ranks[i].matching, result.ranks[i].matching);
        EXPECT_EQ(small.ranks[i].differing, result.ranks[i].differing);
        EXPECT_EQ(small.ranks[i].calls_read, result.ranks[i].calls_read);
      }
    }
    if (options.use_step_index) {
      options.use_step_index = false;
      expect_same_answers(result, detnccl::analysis::diff_runs(run_a, run_b, options));
    }
    return result;
  }
  // What diff answers (not its counts of calls, which the shortcut leaves out after the window): the verdict, the
  // first divergence and its classification, the receivers and stopped ranks, each rank's first divergence.
  static void expect_same_answers(const detnccl::analysis::RunDiff& shortcut, const detnccl::analysis::RunDiff& full) {
    SCOPED_TRACE("the step-index shortcut against --all-records");
    if (!full.error.empty()) return;  // damage in records the shortcut need not read: tested apart
    EXPECT_EQ(shortcut.error, full.error);
    EXPECT_EQ(shortcut.identical(), full.identical());
    EXPECT_EQ(shortcut.undecided, full.undecided);
    EXPECT_EQ(shortcut.metadata_only(), full.metadata_only());
    EXPECT_EQ(shortcut.receivers, full.receivers);
    EXPECT_EQ(shortcut.stopped, full.stopped);
    EXPECT_EQ(shortcut.config_differences.size(), full.config_differences.size());
    EXPECT_EQ(shortcut.first_step.has_value(), full.first_step.has_value());
    const auto same_call = [](const std::optional<detnccl::analysis::CallDivergence>& x,
                              const std::optional<detnccl::analysis::CallDivergence>& y) {
      ASSERT_EQ(x.has_value(), y.has_value());
      if (!x) return;
      EXPECT_EQ(x->kind, y->kind);
      EXPECT_EQ(x->role, y->role);
      EXPECT_EQ(x->rank, y->rank);
      EXPECT_EQ(x->step(), y->step());
      EXPECT_EQ(x->seq(), y->seq());
      EXPECT_EQ(x->cause, y->cause);
      EXPECT_EQ(x->metadata_differences, y->metadata_differences);
      EXPECT_EQ(x->input_blocks, y->input_blocks);
      EXPECT_EQ(x->output_blocks, y->output_blocks);
      const auto bytes = [](const std::vector<detnccl::analysis::DifferingRange>& ranges) {
        std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
        for (const auto& range : ranges) out.emplace_back(range.first_byte, range.end_byte);
        return out;
      };
      EXPECT_EQ(bytes(x->input_ranges), bytes(y->input_ranges));
      EXPECT_EQ(bytes(x->output_ranges), bytes(y->output_ranges));
      EXPECT_EQ(x->source.has_value(), y->source.has_value());
      if (x->source && y->source) {
        EXPECT_EQ(x->source->rank, y->source->rank);
      }
    };
    same_call(shortcut.first, full.first);
    ASSERT_EQ(shortcut.ranks.size(), full.ranks.size());
    for (std::size_t i = 0; i < full.ranks.size(); ++i) {
      SCOPED_TRACE("rank " + std::to_string(full.ranks[i].rank));
      same_call(shortcut.ranks[i].first, full.ranks[i].first);
      EXPECT_EQ(shortcut.ranks[i].calls_a, full.ranks[i].calls_a);
      EXPECT_EQ(shortcut.ranks[i].calls_b, full.ranks[i].calls_b);
      EXPECT_EQ(shortcut.ranks[i].end_a, full.ranks[i].end_a);
      EXPECT_EQ(shortcut.ranks[i].end_b, full.ranks[i].end_b);
      EXPECT_EQ(shortcut.ranks[i].step_sources_a, full.ranks[i].step_sources_a);
      EXPECT_EQ(shortcut.ranks[i].first_step_b, full.ranks[i].first_step_b);
      EXPECT_EQ(shortcut.ranks[i].last_step_b, full.ranks[i].last_step_b);
      if (shortcut.ranks[i].calls_not_read == 0) {
        EXPECT_EQ(shortcut.ranks[i].matching, full.ranks[i].matching);
        EXPECT_EQ(shortcut.ranks[i].unverified, full.ranks[i].unverified);
        EXPECT_EQ(shortcut.ranks[i].differing, full.ranks[i].differing);
      }
    }
  }
  // check_run; again reading one page at a time, expecting the same result: a call waiting for its members that
  // still pointed into its reader's buffer would see another call's arrays after a refill.
  detnccl::analysis::CheckResult check(const std::string& name) {
    const auto logs = detnccl::analysis::list_run(dir_.run(name));
    detnccl::analysis::CheckResult result = detnccl::analysis::check_run(logs, {});
    detnccl::analysis::CheckOptions paged;
    paged.read_window_bytes = 4096;
    const detnccl::analysis::CheckResult small = detnccl::analysis::check_run(logs, paged);
    SCOPED_TRACE("check reading one page at a time");
    EXPECT_EQ(small.error, result.error);
    EXPECT_EQ(small.calls, result.calls);
    EXPECT_EQ(small.collectives, result.collectives);
    EXPECT_EQ(small.point_to_point_pairs, result.point_to_point_pairs);
    EXPECT_EQ(small.content_checks, result.content_checks);
    EXPECT_EQ(small.content_unchecked, result.content_unchecked);
    EXPECT_EQ(small.finding_counts, result.finding_counts);
    EXPECT_EQ(small.findings.size(), result.findings.size());
    for (std::size_t i = 0; i < small.findings.size() && i < result.findings.size(); ++i) {
      EXPECT_EQ(small.findings[i].message, result.findings[i].message);
    }
    return result;
  }
  TempDir dir_;
};

// The index within a step of the first call of an op in the synthetic pattern.
std::uint64_t index_of(OpId op) {
  for (std::uint64_t i = 0;; ++i) {
    if (detnccl::test::synthetic_op(i) == op) return i;
  }
}

// A kept call owns its arrays: what its stream's buffer holds next, and what happens to the copy it came from, no
// longer matter; a copy of a call not kept still points where the call did.
TEST(CallInRun, KeptArraysOutliveTheBufferTheCallWasReadFrom) {
  std::vector<std::uint64_t> buffer = {1, 2, 3, 4, 5, 6, 7};
  detnccl::analysis::CallInRun read;
  read.call.input_blocks = std::span(buffer).subspan(0, 2);
  read.call.output_blocks = std::span(buffer).subspan(2, 3);
  read.call.output_segments = std::span(buffer).subspan(5, 2);
  const detnccl::analysis::CallInRun not_kept = read;
  EXPECT_EQ(not_kept.call.output_blocks.data(), buffer.data() + 2);
  auto kept = std::make_unique<detnccl::analysis::CallInRun>(read);
  kept->keep_arrays();
  std::fill(buffer.begin(), buffer.end(), 0);  // the stream reads on
  const detnccl::analysis::CallInRun copy = *kept;
  detnccl::analysis::CallInRun moved = std::move(*kept);
  kept.reset();
  for (const detnccl::analysis::CallInRun* call : {&copy, static_cast<const detnccl::analysis::CallInRun*>(&moved)}) {
    EXPECT_EQ(Blocks(call->call.input_blocks.begin(), call->call.input_blocks.end()), (Blocks{1, 2}));
    EXPECT_EQ(Blocks(call->call.output_blocks.begin(), call->call.output_blocks.end()), (Blocks{3, 4, 5}));
    EXPECT_TRUE(call->call.input_segments.empty());
    EXPECT_EQ(Blocks(call->call.output_segments.begin(), call->call.output_segments.end()), (Blocks{6, 7}));
  }
  // A kept call that a stream then reads a new call into: its copies point where the new call does.
  detnccl::analysis::CallInRun reused = copy;
  reused.call.input_blocks = std::span(buffer).subspan(1, 1);
  reused.call.output_blocks = {};
  reused.call.output_segments = {};
  const detnccl::analysis::CallInRun copy_of_reused = reused;
  EXPECT_EQ(copy_of_reused.call.input_blocks.data(), buffer.data() + 1);
}

TEST_F(Analysis, IdenticalRunsMatchCallByCall) {
  SyntheticRunSpec spec;
  write("a", spec);
  write("b", spec);
  const auto result = diff("a", "b");
  ASSERT_EQ(result.error, "");
  EXPECT_TRUE(result.identical());
  ASSERT_EQ(result.ranks.size(), spec.ranks);
  for (const auto& rank : result.ranks) {
    EXPECT_EQ(rank.matching, spec.steps * spec.calls_per_step) << "rank " << rank.rank;
    EXPECT_EQ(rank.differing + rank.unverified + rank.missing_in_a + rank.missing_in_b, 0u);
  }
}

TEST_F(Analysis, APerturbedInputIsTheOriginAndItsReceiversAreNamed) {
  // Rank 2's compute goes wrong at step 3: every input it contributes that step differs, and so does everything
  // derived from it on other ranks (AllReduce outputs, the Recv of its Send on rank 3, AllGather outputs).
  const std::uint32_t bad_rank = 2;
  const std::uint64_t bad_step = 3;
  SyntheticRunSpec a;
  SyntheticRunSpec b;
  b.hook = [&](std::uint32_t rank, CallFields& call, Blocks&, Blocks& output_blocks, Blocks&, Blocks&) {
    if (call.step != bad_step) return true;
    if (rank == bad_rank && call.op != OpId::kRecv && call.op != OpId::kAlltoAll) call.input_fingerprint ^= 1;
    if (call.op == OpId::kAllReduce || call.op == OpId::kAllGather) call.output_fingerprint ^= 1;
    if (call.op == OpId::kAllGather) output_blocks[bad_rank] ^= 1;
    if (call.op == OpId::kRecv && rank == bad_rank + 1) call.output_fingerprint ^= 1;
    return true;
  };
  write("a", a);
  write("b", b);
  const auto result = diff("a", "b");
  ASSERT_EQ(result.error, "");
  ASSERT_TRUE(result.first.has_value());
  EXPECT_EQ(result.first->rank, bad_rank);
  EXPECT_EQ(result.first->step(), bad_step);
  EXPECT_EQ(result.first->kind, DivergenceKind::kInput);
  EXPECT_EQ(result.first->role, DivergenceRole::kOrigin);
  EXPECT_EQ(result.first->present_side().fields.op, OpId::kAllReduce);
  // Every other rank's AllReduce output differs with its own input unchanged: receivers of rank 2's input.
  std::vector<std::uint32_t> expected_receivers = {0, 1, 3};
  EXPECT_EQ(result.receivers, expected_receivers);
  for (const auto& rank : result.ranks) {
    if (rank.rank == bad_rank) continue;
    ASSERT_TRUE(rank.first.has_value());
    EXPECT_EQ(rank.first->role, DivergenceRole::kReceiver);
    ASSERT_TRUE(rank.first->source.has_value());
    EXPECT_EQ(rank.first->source->rank, bad_rank);
  }
}

TEST_F(Analysis, RunsReadFromMemoryGiveTheAnswersOfTheirFiles) {
  // analysis::run_in_memory (the diff fuzzer's source): the same logs, read from memory instead of their files, give
  // the same diff, first divergence and per-rank counts included, and the same check.
  SyntheticRunSpec a;
  SyntheticRunSpec b;
  b.hook = [](std::uint32_t rank, CallFields& call, Blocks&, Blocks&, Blocks&, Blocks&) {
    if (rank == 1 && call.step == 2 && call.op == OpId::kAllReduce) call.input_fingerprint ^= 1;
    return true;
  };
  write("a", a);
  write("b", b);
  const auto read_run = [&](const std::string& name, std::vector<std::string>& contents) {
    const auto files = detnccl::analysis::list_run(dir_.run(name));
    std::vector<std::span<const std::byte>> bytes;
    contents.reserve(files.logs.size());
    for (const auto& file : files.logs) {
      std::ifstream stream(file.path, std::ios::binary);
      contents.emplace_back(std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>());
      bytes.push_back(std::as_bytes(std::span(contents.back().data(), contents.back().size())));
    }
    return detnccl::analysis::run_in_memory(dir_.run(name), bytes);
  };
  std::vector<std::string> a_contents;
  std::vector<std::string> b_contents;
  const auto memory_a = read_run("a", a_contents);
  const auto memory_b = read_run("b", b_contents);
  ASSERT_EQ(memory_a.logs.size(), a.ranks);
  for (const auto& file : memory_a.logs) EXPECT_TRUE(file.in_memory.has_value());

  detnccl::analysis::DiffOptions options;
  options.threads = 1;
  const auto from_files = diff("a", "b", options);
  const auto from_memory = detnccl::analysis::diff_runs(memory_a, memory_b, options);
  ASSERT_EQ(from_memory.error, from_files.error);
  ASSERT_TRUE(from_files.first.has_value());
  ASSERT_TRUE(from_memory.first.has_value());
  EXPECT_EQ(from_memory.first->rank, 1u);
  EXPECT_EQ(from_memory.first->rank, from_files.first->rank);
  EXPECT_EQ(from_memory.first->step(), from_files.first->step());
  EXPECT_EQ(from_memory.first->kind, from_files.first->kind);
  EXPECT_EQ(from_memory.receivers, from_files.receivers);
  ASSERT_EQ(from_memory.ranks.size(), from_files.ranks.size());
  for (std::size_t i = 0; i < from_files.ranks.size(); ++i) {
    EXPECT_EQ(from_memory.ranks[i].matching, from_files.ranks[i].matching) << "rank " << i;
    EXPECT_EQ(from_memory.ranks[i].differing, from_files.ranks[i].differing) << "rank " << i;
  }
  EXPECT_TRUE(detnccl::analysis::diff_runs(memory_a, memory_a, options).identical());

  detnccl::analysis::CheckOptions check_options;
  check_options.threads = 1;
  const auto check_files = detnccl::analysis::check_run(detnccl::analysis::list_run(dir_.run("b")), check_options);
  const auto check_memory = detnccl::analysis::check_run(memory_b, check_options);
  EXPECT_EQ(check_memory.error, check_files.error);
  EXPECT_EQ(check_memory.ranks, check_files.ranks);
  EXPECT_EQ(check_memory.findings.size(), check_files.findings.size());
}

TEST_F(Analysis, ARecvNamesTheSendItReceivedFrom) {
  // Only rank 1's Send at step 2 differs (and so its receiver's Recv on rank 2).
  SyntheticRunSpec b;
  b.hook = [](std::uint32_t rank, CallFields& call, Blocks&, Blocks&, Blocks&, Blocks&) {
    if (call.step == 2 && call.op == OpId::kSend && rank == 1) call.input_fingerprint ^= 1;
    if (call.step == 2 && call.op == OpId::kRecv && rank == 2) call.output_fingerprint ^= 1;
    return true;
  };
  write("a", {});
  write("b", b);
  const auto result = diff("a", "b");
  ASSERT_TRUE(result.first.has_value());
  EXPECT_EQ(result.first->rank, 1u);
  EXPECT_EQ(result.first->kind, DivergenceKind::kInput);
  const auto& receiver = result.ranks[2];
  ASSERT_TRUE(receiver.first.has_value());
  EXPECT_EQ(receiver.first->kind, DivergenceKind::kInput);
  EXPECT_EQ(receiver.first->role, DivergenceRole::kReceiver);
  ASSERT_TRUE(receiver.first->source.has_value());
  EXPECT_EQ(receiver.first->source->rank, 1u);
  EXPECT_EQ(receiver.first->source->op, OpId::kSend);
  EXPECT_EQ(receiver.first->source->step, 2u);
  EXPECT_NE(receiver.first->cause.find("rank 1's matching Send"), std::string::npos) << receiver.first->cause;
}

TEST_F(Analysis, ARecvWhoseSendMatchedIsAnOutputOrigin) {
  SyntheticRunSpec b;
  b.hook = [](std::uint32_t rank, CallFields& call, Blocks&, Blocks&, Blocks&, Blocks&) {
    if (call.step == 1 && call.op == OpId::kRecv && rank == 3) call.output_fingerprint ^= 1;
    return true;
  };
  write("a", {});
  write("b", b);
  const auto result = diff("a", "b");
  ASSERT_TRUE(result.first.has_value());
  EXPECT_EQ(result.first->rank, 3u);
  EXPECT_EQ(result.first->kind, DivergenceKind::kOutput);
  EXPECT_EQ(result.first->role, DivergenceRole::kOrigin);
  EXPECT_NE(result.first->cause.find("in transit"), std::string::npos) << result.first->cause;
}

TEST_F(Analysis, SameInputsDifferentOutputsIsAnOutputOrigin) {
  ASSERT_NO_FATAL_FAILURE(write_output_origin_pair());
  const auto result = diff("a", "b");
  ASSERT_TRUE(result.first.has_value());
  EXPECT_EQ(result.first->kind, DivergenceKind::kOutput);
  EXPECT_EQ(result.first->role, DivergenceRole::kOrigin);
  EXPECT_EQ(result.first->step(), 2u);
  EXPECT_EQ(result.first->seq(), 2 * 12 + index_of(OpId::kAllReduce));
  EXPECT_EQ(result.first->rank, 0u);  // every rank is an origin at the same call: the lowest is shown
  EXPECT_TRUE(result.receivers.empty());
}

TEST_F(Analysis, SegmentDigestsLocateTheDifferingBytesAndElements) {
  SyntheticRunSpec spec;
  spec.segments = 4;
  spec.count = (4u << 20) / 4 - 100;  // four 1 MiB segments, the last one 400 bytes short
  SyntheticRunSpec b = spec;
  b.hook = [](std::uint32_t rank, CallFields& call, Blocks&, Blocks&, Blocks&, Blocks& output_segments) {
    if (call.step == 1 && call.op == OpId::kAllReduce && rank == 0) {
      call.output_fingerprint ^= 1;
      output_segments[1] ^= 1;
      output_segments[3] ^= 1;
    }
    return true;
  };
  write("a", spec);
  write("b", b);
  const auto result = diff("a", "b");
  ASSERT_TRUE(result.first.has_value());
  const auto& ranges = result.first->output_ranges;
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0].first_byte, 1u << 20);
  EXPECT_EQ(ranges[0].end_byte, 2u << 20);
  EXPECT_EQ(ranges[0].first_element, (1u << 20) / 4);
  EXPECT_EQ(ranges[0].end_element, (2u << 20) / 4);
  EXPECT_EQ(ranges[1].first_byte, 3u << 20);
  EXPECT_EQ(ranges[1].end_byte, spec.count * 4);
  EXPECT_EQ(ranges[1].end_element, spec.count);
}

TEST_F(Analysis, DifferentCallsAreAMetadataDivergence) {
  SyntheticRunSpec b;
  b.hook = [](std::uint32_t rank, CallFields& call, Blocks&, Blocks&, Blocks&, Blocks&) {
    if (call.step == 1 && call.op == OpId::kAllGather && rank == 3) call.count = 999;
    return true;
  };
  write("a", {});
  write("b", b);
  const auto result = diff("a", "b");
  ASSERT_TRUE(result.first.has_value());
  EXPECT_EQ(result.first->kind, DivergenceKind::kMetadata);
  EXPECT_EQ(result.first->rank, 3u);
  EXPECT_EQ(result.first->step(), 1u);
  ASSERT_EQ(result.first->metadata_differences.size(), 1u);
  EXPECT_EQ(result.first->metadata_differences[0], "count 1024 vs 999");
}

// On a non-blocking communicator NCCL returns ncclInProgress or ncclSuccess for the same call, run to run; a record
// keeps what the call returned when its outputs were not fingerprinted. That is no divergence; a failure still is.
TEST_F(Analysis, InProgressAndSuccessAreTheSameResultButAFailureIsNot) {
  SyntheticRunSpec a, b;
  a.fingerprints = b.fingerprints = false;  // DETNCCL_TRACE=meta
  b.hook = [](std::uint32_t rank, CallFields& call, Blocks&, Blocks&, Blocks&, Blocks&) {
    if ((call.seq + rank) % 3 == 0) call.result = ncclInProgress;
    return true;
  };
  write("a", a);
  write("b", b);
  const auto same = diff("a", "b");
  ASSERT_EQ(same.error, "");
  EXPECT_TRUE(same.identical()) << (same.first ? same.first->metadata_differences.front() : "");

  SyntheticRunSpec c = a;
  c.hook = [](std::uint32_t rank, CallFields& call, Blocks&, Blocks&, Blocks&, Blocks&) {
    if (rank == 2 && call.step == 3 && call.op == OpId::kBroadcast) call.result = ncclRemoteError;
    return true;
  };
  write("c", c);
  const auto failed = diff("b", "c");
  ASSERT_TRUE(failed.first.has_value());
  EXPECT_EQ(failed.first->kind, DivergenceKind::kMetadata);
  EXPECT_EQ(failed.first->rank, 2u);
  EXPECT_EQ(failed.first->step(), 3u);
  ASSERT_EQ(failed.first->metadata_differences.size(), 1u);
  EXPECT_EQ(failed.first->metadata_differences[0].rfind("result ", 0), 0u) << failed.first->metadata_differences[0];
}

TEST_F(Analysis, ARunThatStopsEarlyIsMissing) {
  SyntheticRunSpec b;
  b.close_logs = false;
  b.hook = [](std::uint32_t rank, CallFields& call, Blocks&, Blocks&, Blocks&, Blocks&) {
    return !(rank == 1 && call.step >= 2);
  };
  write("a", {});
  write("b", b);
  const auto result = diff("a", "b");
  ASSERT_TRUE(result.first.has_value());
  EXPECT_EQ(result.first->kind, DivergenceKind::kMissing);
  EXPECT_EQ(result.first->rank, 1u);
  EXPECT_EQ(result.first->step(), 2u);
  EXPECT_EQ(result.ranks[1].missing_in_b, 2 * 12u);
  EXPECT_EQ(result.ranks[1].end_b, detnccl::records::LogEndKind::kTornTail);
  EXPECT_NE(result.first->cause.find("stops early"), std::string::npos) << result.first->cause;
}

TEST_F(Analysis, AResumedRunMatchesFromItsFirstStep) {
  SyntheticRunSpec resumed;
  resumed.first_step = 2;  // its sequence numbers restart at 0 at step 2
  write("full", {});
  write("resumed", resumed);
  detnccl::analysis::DiffOptions from;
  from.from_step = 2;
  const auto matched = diff("full", "resumed", from);
  ASSERT_EQ(matched.error, "");
  EXPECT_TRUE(matched.identical());
  EXPECT_EQ(matched.ranks[0].matching, 2 * 12u);
  const auto unaligned = diff("full", "resumed");
  EXPECT_FALSE(unaligned.identical());
  // --to-step limits the range too: steps 0-1 of the full run against nothing of the resumed run are missing.
  detnccl::analysis::DiffOptions to;
  to.to_step = 1;
  const auto early = diff("full", "full", to);
  EXPECT_TRUE(early.identical());
  EXPECT_EQ(early.ranks[0].matching, 2 * 12u);
}

TEST_F(Analysis, ConfigurationDifferencesAreReportedButNotTheRunName) {
  SyntheticRunSpec b;
  b.extra_config = "DETNCCL_ALGO=ring\n";
  write("a", {});
  write("b", b);
  const auto result = diff("a", "b");
  EXPECT_FALSE(result.identical());
  EXPECT_FALSE(result.first.has_value());
  ASSERT_EQ(result.config_differences.size(), 1u);  // DETNCCL_DIR is equal, DETNCCL_RUN differs but is ignored
  EXPECT_EQ(result.config_differences[0].field, "DETNCCL_ALGO");
  EXPECT_EQ(result.config_differences[0].a, "(unset)");
  EXPECT_EQ(result.config_differences[0].b, "ring");
  EXPECT_EQ(result.config_differences[0].rank_count, 4u);
}

TEST_F(Analysis, CallsWithoutFingerprintsAreCountedApart) {
  SyntheticRunSpec meta;
  meta.fingerprints = false;
  write("a", meta);
  write("b", meta);
  const auto result = diff("a", "b");
  EXPECT_TRUE(result.identical());
  EXPECT_EQ(result.ranks[0].matching, 0u);
  EXPECT_EQ(result.ranks[0].unverified, 4 * 12u);
  ASSERT_FALSE(result.notes.empty());
  EXPECT_NE(result.notes[0].find("not compared"), std::string::npos);
}

TEST_F(Analysis, UnusableInputNamesTheFileAndWhy) {
  write("a", {});
  write("b", {});
  const std::string victim = dir_.run("b") + "/rank-00002.dnc";
  {
    // Damage a byte in the middle of the records: a checksum mismatch with data after it is corruption.
    std::fstream file(victim, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(fs::file_size(victim) / 2));
    file.put('\x5a');
  }
  // RATIONALE: with the step-index shortcut, records in groups whose digests match are never read; the damage is
  // found when every record is read (--all-records), and whenever the damaged record is in a group that is read.
  detnccl::analysis::DiffOptions all_records;
  all_records.use_step_index = false;
  const auto corrupt = diff("a", "b", all_records);
  EXPECT_NE(corrupt.error.find("rank-00002.dnc"), std::string::npos) << corrupt.error;
  EXPECT_NE(corrupt.error.find("corrupt"), std::string::npos) << corrupt.error;

  std::ofstream(dir_.run("b") + "/rank-00002.dnc", std::ios::trunc) << "hello, not a log";
  const auto not_a_log = diff("a", "b");
  EXPECT_NE(not_a_log.error.find("not a detnccl log"), std::string::npos) << not_a_log.error;

  const auto absent = diff("a", "nothing-here");
  EXPECT_NE(absent.error.find("nothing-here"), std::string::npos) << absent.error;
}

TEST_F(Analysis, CheckPassesAConsistentRun) {
  write("a", {});
  const auto result = check("a");
  ASSERT_EQ(result.error, "");
  EXPECT_TRUE(result.clean()) << (result.findings.empty() ? "" : result.findings[0].message);
  EXPECT_EQ(result.calls, 4u * 4 * 12);
  EXPECT_EQ(result.collectives, 4u * 8);               // 4 collectives per 6-call pattern: 8 per 12-call step
  EXPECT_EQ(result.point_to_point_pairs, 4u * 2 * 4);  // 2 pairs per step per rank
  EXPECT_GT(result.content_checks, 0u);
}

// check split by rank range (check_rank_range per part, combine_rank_checks: what `check --partial` and `merge` run)
// gives check_run's answer, field by field, for every split of six ranks in two parts and some in three, on a world
// communicator and on three of two ranks, with findings of several kinds, a rank that died and a truncated log, and
// with few findings kept (the kept ones are the first in report order however the parts found them).
TEST_F(Analysis, CheckSplitByRankRangeCombinesToTheOneProcessAnswer) {
  using detnccl::analysis::CheckFinding;
  using detnccl::analysis::CheckOptions;
  using detnccl::analysis::CheckResult;
  using detnccl::analysis::RankRange;
  using detnccl::analysis::RankRangeCheck;
  const auto same = [](const CheckResult& x, const CheckResult& y, const std::string& what) {
    EXPECT_EQ(x.error, y.error) << what;
    EXPECT_EQ(x.ranks, y.ranks) << what;
    EXPECT_EQ(x.calls, y.calls) << what;
    EXPECT_EQ(x.collectives, y.collectives) << what;
    EXPECT_EQ(x.point_to_point_pairs, y.point_to_point_pairs) << what;
    EXPECT_EQ(x.content_checks, y.content_checks) << what;
    EXPECT_EQ(x.content_unchecked, y.content_unchecked) << what;
    EXPECT_EQ(x.folded_blocks_unchecked, y.folded_blocks_unchecked) << what;
    EXPECT_EQ(x.finding_counts, y.finding_counts) << what;
    EXPECT_EQ(x.notes, y.notes) << what;
    EXPECT_EQ(x.config_notes, y.config_notes) << what;
    EXPECT_EQ(x.truncated_ranks, y.truncated_ranks) << what;
    EXPECT_EQ(x.not_checked, y.not_checked) << what;
    EXPECT_EQ(x.unknown_records, y.unknown_records) << what;
    EXPECT_EQ(x.digests_only, y.digests_only) << what;
    ASSERT_EQ(x.findings.size(), y.findings.size()) << what;
    for (std::size_t i = 0; i < x.findings.size(); ++i) {
      const CheckFinding& a = x.findings[i];
      const CheckFinding& b = y.findings[i];
      EXPECT_TRUE(std::tie(a.kind, a.comm_id, a.index, a.count, a.op, a.step, a.ranks, a.message) ==
                  std::tie(b.kind, b.comm_id, b.index, b.count, b.op, b.step, b.ranks, b.message))
          << what << ": finding " << i << ": " << a.message << " vs " << b.message;
    }
  };
  for (const std::uint32_t groups : {1u, 3u}) {
    SyntheticRunSpec spec;
    spec.ranks = 6;
    spec.groups = groups;
    spec.truncated_ranks = {4};
    spec.rank_config = [](std::uint32_t rank) { return rank == 5 ? std::string("DETNCCL_ACCUMULATE=fp32\n") : ""; };
    spec.hook = [](std::uint32_t rank, CallFields& call, Blocks&, Blocks&, Blocks&, Blocks&) {
      if (rank == 1 && call.op == OpId::kRecv) call.output_fingerprint ^= 1;  // every step
      if (rank == 3 && call.step == 1 && call.op == OpId::kAllGather) call.count += 1;
      if (rank == 4 && call.step >= 3) return false;  // truncated
      return !(rank == 2 && call.step >= 2);          // died (its log is closed: its calls are missing)
    };
    const std::string run = "split-" + std::to_string(groups);
    write(run, spec);
    const auto logs = detnccl::analysis::list_run(dir_.run(run));
    for (const std::size_t kept : {std::size_t{1000}, std::size_t{3}}) {
      CheckOptions options;
      options.findings_kept = kept;
      const CheckResult one = detnccl::analysis::check_run(logs, options);
      ASSERT_EQ(one.error, "");
      ASSERT_GT(one.finding_counts.size(), 2u);
      std::vector<std::vector<RankRange>> splits;
      for (std::uint32_t k = 1; k < 6; ++k) splits.push_back({{0, k - 1}, {k, 99}});
      splits.push_back({{0, 0}, {1, 3}, {4, 5}});
      splits.push_back({{0, 2}, {3, 4}, {5, 5}});
      for (const auto& split : splits) {
        std::vector<RankRangeCheck> parts;
        std::string what = run + ", " + std::to_string(kept) + " kept, parts";
        for (const RankRange& range : split) {
          parts.push_back(detnccl::analysis::check_rank_range(logs, options, range));
          what.append(1, ' ').append(std::to_string(range.first)).append(1, '-').append(std::to_string(range.last));
        }
        same(detnccl::analysis::combine_rank_checks(std::move(parts), options), one, what);
      }
    }
  }
}

TEST_F(Analysis, CheckCatchesASendRecvCorruption) {
  // A real job cannot make a Recv's data differ from its Send's under the shim (both are recorded from the buffers
  // NCCL moved), so the corruption is written into a synthetic log.
  SyntheticRunSpec spec;
  spec.hook = [](std::uint32_t rank, CallFields& call, Blocks&, Blocks&, Blocks&, Blocks&) {
    // The first of the step's two Recvs only.
    if (rank == 2 && call.step == 1 && call.seq % 12 == index_of(OpId::kRecv)) call.output_fingerprint ^= 1;
    return true;
  };
  write("a", spec);
  const auto result = check("a");
  ASSERT_EQ(result.finding_counts.size(), 1u);
  ASSERT_EQ(result.finding_counts.at(CheckFindingKind::kContentMismatch), 1u);
  const auto& finding = result.findings.at(0);
  EXPECT_EQ(finding.step, 1u);
  EXPECT_EQ(finding.ranks, std::vector<std::uint32_t>{2});
  EXPECT_NE(finding.message.find("rank 1's Send"), std::string::npos) << finding.message;
  EXPECT_NE(finding.message.find("corrupted data"), std::string::npos) << finding.message;
}

TEST_F(Analysis, CheckCatchesAMetadataDesyncAndNamesTheOddRank) {
  // hostnccl would fail or hang on a real count mismatch, so the desync is synthetic.
  SyntheticRunSpec spec;
  spec.hook = [](std::uint32_t rank, CallFields& call, Blocks&, Blocks&, Blocks&, Blocks&) {
    if (rank == 3 && call.step == 2 && call.op == OpId::kAllReduce) call.count = 512;
    if (rank == 1 && call.step == 3 && call.op == OpId::kBroadcast) call.op = OpId::kAllReduce;
    return true;
  };
  write("a", spec);
  const auto result = check("a");
  EXPECT_EQ(result.finding_counts.at(CheckFindingKind::kSizeMismatch), 2u);  // the AllReduce of each half-step
  EXPECT_EQ(result.finding_counts.at(CheckFindingKind::kTypeMismatch), 2u);
  const auto& size = result.findings.at(0);
  EXPECT_EQ(size.kind, CheckFindingKind::kSizeMismatch);
  EXPECT_EQ(size.step, 2u);
  EXPECT_EQ(size.ranks, std::vector<std::uint32_t>{3});
  const auto type = std::find_if(result.findings.begin(), result.findings.end(),
                                 [](const auto& f) { return f.kind == CheckFindingKind::kTypeMismatch; });
  ASSERT_NE(type, result.findings.end());
  EXPECT_EQ(type->ranks, std::vector<std::uint32_t>{1});
  EXPECT_EQ(type->step, 3u);
}

TEST_F(Analysis, CheckNamesTheRanksThatDidNotJoin) {
  ASSERT_NO_FATAL_FAILURE(write_rank_2_leaving_at_step_3("a"));
  const auto result = check("a");
  ASSERT_EQ(result.finding_counts.count(CheckFindingKind::kNotAllJoined), 1u);
  const auto joined = std::find_if(result.findings.begin(), result.findings.end(),
                                   [](const auto& f) { return f.kind == CheckFindingKind::kNotAllJoined; });
  ASSERT_NE(joined, result.findings.end());
  EXPECT_EQ(joined->ranks, std::vector<std::uint32_t>{2});
  EXPECT_EQ(joined->step, 3u);
  EXPECT_EQ(joined->count, 8u);  // the step's 8 collectives, merged into one finding
  // Its ring neighbours' two Sends to it and two Recvs from it at step 3 have no partner.
  EXPECT_EQ(result.finding_counts.at(CheckFindingKind::kUnmatchedPointToPoint), 4u);
}

TEST_F(Analysis, CheckMatchesGatheredAndExchangedBlocks) {
  SyntheticRunSpec spec;
  spec.hook = [](std::uint32_t rank, CallFields& call, Blocks&, Blocks& output_blocks, Blocks&, Blocks&) {
    if (call.step == 0 && call.op == OpId::kAlltoAll && rank == 1) output_blocks[2] ^= 1;
    if (call.step == 1 && call.op == OpId::kAllGather) output_blocks[3] ^= 1;  // all members agree, but wrongly
    return true;
  };
  write("a", spec);
  const auto result = check("a");
  // Two AlltoAlls at step 0 and two AllGathers at step 1 (the pattern repeats twice per step).
  ASSERT_EQ(result.finding_counts.at(CheckFindingKind::kContentMismatch), 4u);
  EXPECT_EQ(result.findings[0].op, OpId::kAlltoAll);
  EXPECT_EQ(result.findings[0].ranks, std::vector<std::uint32_t>{1});
  EXPECT_NE(result.findings[0].message.find("block from rank 2"), std::string::npos) << result.findings[0].message;
  const auto gather = std::find_if(result.findings.begin(), result.findings.end(),
                                   [](const auto& f) { return f.op == OpId::kAllGather; });
  ASSERT_NE(gather, result.findings.end());
  EXPECT_EQ(gather->ranks, std::vector<std::uint32_t>{3});
}

// The same corruptions in compact records (DETNCCL_TRACE=hash: each side's per-peer blocks folded,
// records/block_digests.h). The AllGather is still caught, by the fold of the members' inputs in rank order against
// the gathered output's fold, but its member cannot be named; AlltoAll's block-by-block relation cannot be checked,
// and a note says so. At the segments level the lists are back and so is everything the lists gave.
TEST_F(Analysis, CheckMatchesFoldedGatheredBlocksWithoutNamingTheMember) {
  SyntheticRunSpec spec;
  spec.fold_blocks = true;
  spec.hook = [](std::uint32_t rank, CallFields& call, Blocks&, Blocks& output_blocks, Blocks&, Blocks&) {
    if (call.step == 0 && call.op == OpId::kAlltoAll && rank == 1) output_blocks[2] ^= 1;
    if (call.step == 1 && call.op == OpId::kAllGather) output_blocks[3] ^= 1;  // all members agree, but wrongly
    return true;
  };
  write("hash", spec);
  const auto result = check("hash");
  ASSERT_EQ(result.error, "");
  // The two AllGathers of step 1; the AlltoAll's corruption goes unseen.
  ASSERT_EQ(result.finding_counts.size(), 1u);
  ASSERT_EQ(result.finding_counts.at(CheckFindingKind::kContentMismatch), 2u);
  for (const auto& finding : result.findings) {
    EXPECT_EQ(finding.op, OpId::kAllGather);
    EXPECT_EQ(finding.step, 1u);
    EXPECT_TRUE(finding.ranks.empty()) << "a fold cannot name the member";
    EXPECT_NE(finding.message.find("the gathered blocks differ from the members' inputs"), std::string::npos)
        << finding.message;
    EXPECT_NE(finding.message.find("DETNCCL_TRACE=segments names it"), std::string::npos) << finding.message;
  }
  // Every AlltoAll (two per step) is left unchecked, and said to be.
  EXPECT_EQ(result.folded_blocks_unchecked, 2 * spec.steps);
  const bool noted = std::any_of(result.notes.begin(), result.notes.end(), [](const std::string& note) {
    return note.find("8 collectives' per-peer blocks were recorded folded") != std::string::npos;
  });
  EXPECT_TRUE(noted) << ::testing::PrintToString(result.notes);

  // Without the corruption the folded run is consistent, each AllGather checked once by its fold.
  SyntheticRunSpec clean;
  clean.fold_blocks = true;
  write("clean", clean);
  const auto consistent = check("clean");
  EXPECT_TRUE(consistent.clean()) << ::testing::PrintToString(consistent.notes);
  SyntheticRunSpec listed;  // the lists only: the AllGather is checked member by member
  write("listed", listed);
  const auto with_lists = check("listed");
  EXPECT_TRUE(with_lists.clean());
  // Per AllGather (two per step): 1 fold check rather than one per member; per AlltoAll: none rather than n * n.
  const std::uint64_t n = spec.ranks;
  EXPECT_EQ(with_lists.content_checks - consistent.content_checks, 2 * spec.steps * ((n - 1) + n * n));

  // At the segments level the lists are written beside the folds: the members are named again.
  SyntheticRunSpec segments = spec;
  segments.segments = 2;
  write("segments", segments);
  const auto named = check("segments");
  ASSERT_EQ(named.finding_counts.at(CheckFindingKind::kContentMismatch), 4u);
  EXPECT_EQ(named.findings[0].op, OpId::kAlltoAll);
  EXPECT_EQ(named.findings[0].ranks, std::vector<std::uint32_t>{1});
  EXPECT_EQ(named.folded_blocks_unchecked, 0u);
}

// Gather and Scatter have a holder of the blocks (the root): its fold is checked against the members' fingerprints
// in rank order. The synthetic pattern's Broadcast is made a Gather (even steps) or a Scatter (odd steps) here.
TEST_F(Analysis, CheckMatchesARootsFoldedBlocksOfGatherAndScatter) {
  const auto as_gather_or_scatter = [](std::uint32_t corrupt_block) {
    return [corrupt_block](std::uint32_t rank, CallFields& call, Blocks& input_blocks, Blocks& output_blocks, Blocks&,
                           Blocks&) {
      if (call.op != OpId::kBroadcast) return true;
      constexpr std::uint32_t kRanks = 4;
      const bool gather = call.step % 2 == 0;
      const auto data = [&call](std::uint32_t r) { return detnccl::test::synthetic_digest(r, call.seq, 9); };
      Blocks& held = gather ? output_blocks : input_blocks;
      held.clear();
      if (rank == 0) {
        for (std::uint32_t r = 0; r < kRanks; ++r) held.push_back(data(r));
        if (call.step == 2 || call.step == 3) held[corrupt_block] ^= 1;
      }
      call.op = gather ? OpId::kGather : OpId::kScatter;
      call.peer = 0;
      call.input_fingerprint = gather ? data(rank) : 0;
      call.output_fingerprint = gather ? 0 : data(rank);
      const bool input = gather || rank == 0, output = !gather || rank == 0;
      call.flags = static_cast<std::uint16_t>((input ? detnccl::records::kCallInputFingerprint : 0) |
                                              (output ? detnccl::records::kCallOutputFingerprint : 0));
      if (gather && rank == 0) call.output_fingerprint = data(99);
      if (!gather && rank == 0) call.input_fingerprint = data(99);
      return true;
    };
  };
  for (const bool fold : {false, true}) {
    SCOPED_TRACE(fold ? "folded" : "lists");
    SyntheticRunSpec spec;
    spec.fold_blocks = fold;
    spec.hook = as_gather_or_scatter(2);
    const std::string name = fold ? "folded" : "lists";
    write(name, spec);
    const auto result = check(name);
    ASSERT_EQ(result.error, "");
    // Steps 2 (Gather) and 3 (Scatter), two such calls each (the pattern repeats twice per step).
    ASSERT_EQ(result.finding_counts.at(CheckFindingKind::kContentMismatch), 4u);
    ASSERT_EQ(result.findings.size(), 4u);
    for (std::size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(result.findings[i].op, i < 2 ? OpId::kGather : OpId::kScatter);
      EXPECT_EQ(result.findings[i].step, i < 2 ? 2u : 3u);
    }
    for (const auto& finding : result.findings) {
      EXPECT_EQ(finding.ranks, fold ? std::vector<std::uint32_t>{} : std::vector<std::uint32_t>{2}) << finding.message;
    }
  }
}

// diff on compact records: the divergence, its kind and its role (origin, receivers with their source) are found as
// with the lists; only the per-peer blocks that differ are not named, and the divergence says why.
TEST_F(Analysis, DiffOnFoldedBlocksKeepsOriginAndReceiversAndSaysThePeersAreNotNamed) {
  const std::uint32_t bad_rank = 2;
  for (const bool fold : {false, true}) {
    SCOPED_TRACE(fold ? "folded" : "lists");
    SyntheticRunSpec a;
    a.fold_blocks = fold;
    SyntheticRunSpec b = a;
    // Rank 2's AllGather input differs at step 2: every member's gathered output differs in block 2.
    b.hook = [&](std::uint32_t rank, CallFields& call, Blocks&, Blocks& output_blocks, Blocks&, Blocks&) {
      if (call.step != 2 || call.op != OpId::kAllGather) return true;
      if (rank == bad_rank) call.input_fingerprint ^= 1;
      call.output_fingerprint ^= 1;
      output_blocks[bad_rank] ^= 1;
      return true;
    };
    const std::string name_a = fold ? "fa" : "la", name_b = fold ? "fb" : "lb";
    write(name_a, a);
    write(name_b, b);
    const auto result = diff(name_a, name_b);
    ASSERT_EQ(result.error, "");
    ASSERT_TRUE(result.first.has_value());
    EXPECT_EQ(result.first->rank, bad_rank);
    EXPECT_EQ(result.first->step(), 2u);
    EXPECT_EQ(result.first->kind, DivergenceKind::kInput);
    EXPECT_EQ(result.first->role, DivergenceRole::kOrigin);
    EXPECT_EQ(result.first->present_side().fields.op, OpId::kAllGather);
    EXPECT_EQ(result.receivers, (std::vector<std::uint32_t>{0, 1, 3}));
    for (const auto& rank : result.ranks) {
      ASSERT_TRUE(rank.first.has_value());
      const auto& first = *rank.first;
      EXPECT_TRUE(first.output_differs);
      EXPECT_FALSE(first.input_blocks_folded) << "AllGather's input has no per-peer blocks";
      EXPECT_EQ(first.output_blocks_folded, fold);
      EXPECT_EQ(first.output_blocks, fold ? std::vector<std::uint32_t>{} : std::vector<std::uint32_t>{bad_rank});
      if (rank.rank == bad_rank) continue;
      EXPECT_EQ(first.role, DivergenceRole::kReceiver);
      ASSERT_TRUE(first.source.has_value());
      EXPECT_EQ(first.source->rank, bad_rank);
    }
  }
}

// A truncated log (tracing stopped early, e.g. disk full) holds every call up to its marker; the calls after it were
// made but not recorded: the other members' calls that expect them are not checked, never "not joined".
TEST_F(Analysis, CheckDoesNotCallTheCallsAfterATruncationMissing) {
  SyntheticRunSpec spec;
  spec.truncated_ranks = {1};
  spec.hook = [](std::uint32_t rank, CallFields& call, Blocks&, Blocks&, Blocks&, Blocks&) {
    return !(rank == 1 && call.step >= 2);
  };
  write("a", spec);
  const auto result = check("a");
  ASSERT_EQ(result.error, "");
  EXPECT_TRUE(result.clean()) << (result.findings.empty() ? "" : result.findings[0].message);
  EXPECT_TRUE(result.undecided());
  EXPECT_EQ(result.truncated_ranks, std::vector<std::uint32_t>{1});
  // Steps 2 and 3: 8 collectives each lack rank 1, and its ring neighbours' 2 Sends to it and 2 Recvs from it.
  EXPECT_EQ(result.not_checked, 2u * (8 + 4));
  EXPECT_EQ(result.collectives, 4u * 8);  // all checked among the members that recorded them
  const bool noted = std::any_of(result.notes.begin(), result.notes.end(), [](const std::string& note) {
    return note.find("log of rank 1 ends") != std::string::npos && note.find("24 collectives") != std::string::npos;
  });
  EXPECT_TRUE(noted) << ::testing::PrintToString(result.notes);
}

TEST_F(Analysis, CheckStillReportsWhatTheRecordedCallsShowAroundATruncatedLog) {
  // Rank 1's log is truncated at step 2, rank 3 was killed at step 3 (torn tail), and rank 2 made a different call
  // at step 1: the desync and rank 3's absence are findings; rank 1's unrecorded calls are not.
  SyntheticRunSpec spec;
  spec.truncated_ranks = {1};
  spec.close_logs = false;
  spec.hook = [](std::uint32_t rank, CallFields& call, Blocks&, Blocks&, Blocks&, Blocks&) {
    if (rank == 2 && call.step == 1 && call.op == OpId::kAllReduce) call.count += 1;
    return !(rank == 1 && call.step >= 2) && !(rank == 3 && call.step >= 3);
  };
  write("a", spec);
  const auto result = check("a");
  ASSERT_EQ(result.error, "");
  EXPECT_FALSE(result.undecided());
  EXPECT_EQ(result.finding_counts.at(CheckFindingKind::kSizeMismatch), 2u);  // the step's two AllReduces
  ASSERT_EQ(result.finding_counts.count(CheckFindingKind::kNotAllJoined), 1u);
  const auto joined = std::find_if(result.findings.begin(), result.findings.end(),
                                   [](const auto& f) { return f.kind == CheckFindingKind::kNotAllJoined; });
  ASSERT_NE(joined, result.findings.end());
  EXPECT_EQ(joined->ranks, std::vector<std::uint32_t>{3}) << joined->message;
  EXPECT_EQ(joined->step, 3u);
  EXPECT_EQ(joined->count, 8u);
  // Rank 2's two Sends to rank 3 and rank 0's two Recvs from it at step 3; the transfers to and from rank 1 after
  // its truncation are not checked.
  EXPECT_EQ(result.finding_counts.at(CheckFindingKind::kUnmatchedPointToPoint), 4u);
  EXPECT_EQ(result.truncated_ranks, std::vector<std::uint32_t>{1});
}

// Undecided: no divergence in what both runs recorded, but a truncated log hides the rest (docs/cli.md).
TEST_F(Analysis, DiffOfARunWithATruncatedLogIsUndecidedUnlessSomethingDivergedBeforeIt) {
  SyntheticRunSpec truncated;
  truncated.truncated_ranks = {1};
  truncated.hook = [](std::uint32_t rank, CallFields& call, Blocks&, Blocks&, Blocks&, Blocks&) {
    return !(rank == 1 && call.step >= 2);
  };
  write("a", {});
  write("b", truncated);
  const auto undecided = diff("a", "b");
  ASSERT_EQ(undecided.error, "");
  EXPECT_TRUE(undecided.undecided);
  EXPECT_FALSE(undecided.first.has_value());
  EXPECT_EQ(undecided.ranks[1].not_compared, 2u * 12);
  EXPECT_EQ(undecided.ranks[1].missing_in_b, 0u);
  EXPECT_EQ(undecided.ranks[1].end_b, detnccl::records::LogEndKind::kTruncated);

  // A divergence before the marker decides: a call, or the configuration.
  SyntheticRunSpec perturbed = truncated;
  perturbed.hook = [](std::uint32_t rank, CallFields& call, Blocks&, Blocks&, Blocks&, Blocks&) {
    if (rank == 2 && call.step == 1 && call.op == OpId::kAllReduce) call.input_fingerprint ^= 1;
    return !(rank == 1 && call.step >= 2);
  };
  write("perturbed", perturbed);
  const auto diverged = diff("a", "perturbed");
  EXPECT_FALSE(diverged.undecided);
  ASSERT_TRUE(diverged.first.has_value());
  EXPECT_EQ(diverged.first->rank, 2u);
  SyntheticRunSpec configured = truncated;
  configured.extra_config = "DETNCCL_DETERMINISTIC=1\n";
  write("configured", configured);
  const auto differently = diff("a", "configured");
  EXPECT_FALSE(differently.undecided);
  EXPECT_FALSE(differently.identical());
  EXPECT_FALSE(differently.config_differences.empty());
}

// ---------------------------------------------------------------------------------------------------------------
// Logs of two jobs in one run directory

detnccl::records::CommunicatorRecord communicator(
    std::uint64_t id, std::uint32_t nranks, std::uint32_t rank,
    detnccl::records::CommOrigin origin = detnccl::records::CommOrigin::kInitRank) {
  detnccl::records::CommunicatorRecord record;
  record.id = id;
  record.nranks = nranks;
  record.rank = rank;
  record.origin = origin;
  return record;
}

TEST(RunJobs, TheLogsOfOneJobAreNeverTakenForTwo) {
  using detnccl::analysis::group_logs_by_job;
  using detnccl::analysis::RankJobEvidence;
  using detnccl::records::CommOrigin;
  constexpr std::uint64_t kWorld = 0x1111, kLater = 0x2222, kLeft = 0x3333, kRight = 0x4444;
  // Four ranks: a world communicator, then splits into halves, then a second world communicator.
  std::vector<RankJobEvidence> job;
  for (std::uint32_t r = 0; r < 4; ++r) {
    job.push_back({r,
                   4,
                   {communicator(kWorld, 4, r), communicator(r < 2 ? kLeft : kRight, 2, r % 2, CommOrigin::kSplit),
                    communicator(kLater, 4, r, CommOrigin::kSplit)}});
  }
  EXPECT_FALSE(group_logs_by_job(job).mixed());
  // Rank 3 died (or its log was truncated) before the second world communicator and the split.
  job[3].communicators.resize(1);
  EXPECT_FALSE(group_logs_by_job(job).mixed());
  // Rank 3's log holds nothing but its header (truncated at once).
  job[3].communicators.clear();
  EXPECT_FALSE(group_logs_by_job(job).mixed());
  // Disjoint halves that never form a world communicator share nothing, yet are one job.
  std::vector<RankJobEvidence> halves;
  for (std::uint32_t r = 0; r < 4; ++r) halves.push_back({r, 4, {communicator(r < 2 ? kLeft : kRight, 2, r % 2)}});
  EXPECT_FALSE(group_logs_by_job(halves).mixed());
  // Processes that each drive several ranks with ncclCommInitAll: one record per rank, all in one log.
  std::vector<RankJobEvidence> init_all;
  for (std::uint32_t r = 0; r < 2; ++r) {
    init_all.push_back(
        {r,
         2,
         {communicator(kLeft + r, 2, 0, CommOrigin::kInitAll), communicator(kLeft + r, 2, 1, CommOrigin::kInitAll)}});
  }
  EXPECT_FALSE(group_logs_by_job(init_all).mixed());
  // Without a known world size nothing is concluded.
  std::vector<RankJobEvidence> unknown = {{0, 0, {communicator(kWorld, 2, 0)}}, {1, 0, {communicator(kLater, 2, 1)}}};
  EXPECT_FALSE(group_logs_by_job(unknown).mixed());
  // Headers that disagree on the world size, in logs that share their communicators: still one job.
  std::vector<RankJobEvidence> disagreeing = {{0, 2, {communicator(kWorld, 2, 0)}},
                                              {1, 3, {communicator(kWorld, 2, 1)}}};
  EXPECT_FALSE(group_logs_by_job(disagreeing).mixed());
}

TEST(RunJobs, TwoGroupsEachWithAWorldCommunicatorTheOtherLacksAreTwoJobs) {
  using detnccl::analysis::RankJobEvidence;
  constexpr std::uint64_t kJobA = 0xaaaa, kJobB = 0xbbbb;
  std::vector<RankJobEvidence> logs;
  for (std::uint32_t r = 0; r < 3; ++r) logs.push_back({r, 4, {communicator(kJobA, 4, r)}});
  logs.push_back({3, 4, {communicator(kJobB, 4, 3)}});
  const auto groups = detnccl::analysis::group_logs_by_job(logs);
  ASSERT_TRUE(groups.mixed());
  ASSERT_EQ(groups.ranks.size(), 2u);
  EXPECT_EQ(groups.ranks[0], (std::vector<std::uint32_t>{0, 1, 2}));
  EXPECT_EQ(groups.ranks[1], std::vector<std::uint32_t>{3});
  EXPECT_EQ(groups.world_communicators[0].id, kJobA);
  EXPECT_EQ(groups.world_communicators[1].id, kJobB);
  const std::string message = detnccl::analysis::describe_job_groups(groups);
  EXPECT_NE(message.find("2 different jobs"), std::string::npos) << message;
  EXPECT_NE(message.find("ranks 0, 1, 2 (world communicator 000000000000aaaa)"), std::string::npos) << message;
  EXPECT_NE(message.find("rank 3 (world communicator 000000000000bbbb)"), std::string::npos) << message;
}

TEST(RunJobs, ARerunWithMoreRanksBesideTheFirstRunsLogsIsASecondJob) {
  // A 2-rank job, then a 4-rank job under the same run name: its ranks 0 and 1 found their files taken, ranks 2 and
  // 3 wrote beside the first job's logs. Each job's world communicator spans its own header's world.
  using detnccl::analysis::RankJobEvidence;
  constexpr std::uint64_t kFirst = 0xaaaa, kRerun = 0xbbbb;
  std::vector<RankJobEvidence> logs;
  for (std::uint32_t r = 0; r < 2; ++r) logs.push_back({r, 2, {communicator(kFirst, 2, r)}});
  for (std::uint32_t r = 2; r < 4; ++r) logs.push_back({r, 4, {communicator(kRerun, 4, r)}});
  const auto groups = detnccl::analysis::group_logs_by_job(logs);
  ASSERT_TRUE(groups.mixed());
  EXPECT_EQ(groups.ranks[0], (std::vector<std::uint32_t>{0, 1}));
  EXPECT_EQ(groups.ranks[1], (std::vector<std::uint32_t>{2, 3}));
}

TEST_F(Analysis, CheckAndDiffRefuseARunDirectoryHoldingTwoJobs) {
  // Two jobs with the same run name, each winning some rank files: ranks 0-2 of one, rank 3 of the other.
  SyntheticRunSpec other;
  other.communicator_id = detnccl::test::kSyntheticCommunicatorId ^ 0xff;
  write("a", {});
  write("b", other);
  fs::create_directory(dir_.run("mixed"));
  for (std::uint32_t rank = 0; rank < 4; ++rank) {
    const std::string name = detnccl::records::rank_log_file_name(rank);
    fs::copy_file(dir_.run(rank < 3 ? "a" : "b") + "/" + name, dir_.run("mixed") + "/" + name);
  }
  const auto checked = check("mixed");
  EXPECT_NE(checked.error.find("2 different jobs"), std::string::npos) << checked.error;
  EXPECT_NE(checked.error.find("ranks 0, 1, 2 ("), std::string::npos) << checked.error;
  EXPECT_NE(checked.error.find("rank 3 ("), std::string::npos) << checked.error;
  const auto compared = diff("a", "mixed");
  EXPECT_NE(compared.error.find("2 different jobs"), std::string::npos) << compared.error;
  EXPECT_NE(compared.error.find(dir_.run("mixed")), std::string::npos) << compared.error;
  // Each job alone is fine.
  EXPECT_EQ(check("b").error, "");
  EXPECT_TRUE(check("b").clean());
  // stats describes such a directory, and says what it holds.
  const auto counted = detnccl::analysis::run_stats(detnccl::analysis::list_run(dir_.run("mixed")));
  EXPECT_EQ(counted.error, "");
  ASSERT_TRUE(counted.jobs.mixed());
  EXPECT_EQ(counted.jobs.ranks[0], (std::vector<std::uint32_t>{0, 1, 2}));
  EXPECT_EQ(counted.jobs.ranks[1], std::vector<std::uint32_t>{3});
  EXPECT_FALSE(detnccl::analysis::run_stats(detnccl::analysis::list_run(dir_.run("b"))).jobs.mixed());
}

TEST_F(Analysis, StatsCountCallsBytesAndSteps) {
  SyntheticRunSpec spec;
  spec.ranks = 3;
  write("a", spec);
  const auto stats = detnccl::analysis::run_stats(detnccl::analysis::list_run(dir_.run("a")));
  ASSERT_EQ(stats.error, "");
  EXPECT_EQ(stats.total.calls, 3u * 4 * 12);
  EXPECT_EQ(stats.per_op.at(OpId::kAllReduce).calls, 3u * 4 * 2);
  // AllReduce: 1024 float32 per call; AllGather and AlltoAll: 1024 per rank, 3 ranks.
  EXPECT_EQ(stats.per_op.at(OpId::kAllReduce).bytes, 3u * 4 * 2 * 4096);
  EXPECT_EQ(stats.per_op.at(OpId::kAlltoAll).bytes, 3u * 4 * 2 * 4096 * 3);
  EXPECT_EQ(*stats.first_step, 0u);
  EXPECT_EQ(*stats.last_step, 3u);
  ASSERT_EQ(stats.per_communicator.size(), 1u);
  EXPECT_EQ(stats.per_communicator.begin()->second.members_seen, 3u);
}

TEST(CallLayout, SegmentSizeComesFromTheConfiguration) {
  EXPECT_EQ(detnccl::analysis::segment_bytes_from_config("DETNCCL_TRACE=segments\nDETNCCL_SEGMENT_BYTES=64K\n"),
            64u << 10);
  EXPECT_EQ(detnccl::analysis::segment_bytes_from_config("DETNCCL_SEGMENT_BYTES=2G"), 2ull << 30);
  EXPECT_FALSE(detnccl::analysis::segment_bytes_from_config("DETNCCL_SEGMENT_BYTES=lots\n").has_value());
  EXPECT_FALSE(detnccl::analysis::segment_bytes_from_config("").has_value());
}

TEST(CallLayout, RankFromFileName) {
  EXPECT_EQ(detnccl::analysis::rank_from_file_name("rank-00042.dnc"), 42u);
  EXPECT_EQ(detnccl::analysis::rank_from_file_name("rank-123456.dnc"), 123456u);
  EXPECT_FALSE(detnccl::analysis::rank_from_file_name("rank-.dnc").has_value());
  EXPECT_FALSE(detnccl::analysis::rank_from_file_name("rank-12x.dnc").has_value());
  EXPECT_FALSE(detnccl::analysis::rank_from_file_name("notes.txt").has_value());
}

// A --from-step/--to-step range that holds no call of either run compares nothing: never "identical".
TEST_F(Analysis, AStepRangeWithNoCallInEitherRunIsNotIdentical) {
  SyntheticRunSpec shorter;
  shorter.steps = 3;
  write("a", {});
  write("b", shorter);
  detnccl::analysis::DiffOptions past;
  past.from_step = SyntheticRunSpec{}.steps + 10;
  const auto result = diff("a", "b", past);
  EXPECT_TRUE(result.nothing_in_range);
  EXPECT_FALSE(result.error.empty());
  const std::string a_steps = "run A has steps 0-" + std::to_string(SyntheticRunSpec{}.steps - 1);
  const std::string b_steps = "run B has steps 0-" + std::to_string(shorter.steps - 1);
  EXPECT_NE(result.error.find(a_steps), std::string::npos) << result.error;
  EXPECT_NE(result.error.find(b_steps), std::string::npos) << result.error;
  // A range where one run has calls still compares: run B's missing calls are a divergence.
  detnccl::analysis::DiffOptions last;
  last.from_step = shorter.steps;
  const auto tail_only = diff("a", "b", last);
  EXPECT_EQ(tail_only.error, "");
  EXPECT_FALSE(tail_only.nothing_in_range);
  ASSERT_TRUE(tail_only.first.has_value());
  EXPECT_EQ(tail_only.first->kind, DivergenceKind::kMissing);
}

// Settings that cannot change any call (detnccl's and NCCL's logging, what is fingerprinted) are notes; settings
// that change results stay configuration divergences.
// The CLI's diagnostic settings come from config/env_vars.h's `shown` column: the same answer for every DETNCCL_*
// variable as the parsed table gives, plus NCCL's debug output, and nothing else.
TEST(DiagnosticSettings, EveryTableRowIsShownAsItsRowSays) {
  std::size_t diagnostic = 0;
  for (const detnccl::config::EnvVarInfo& info : detnccl::config::env_vars()) {
    EXPECT_EQ(detnccl::analysis::is_diagnostic_setting(info.name), info.diagnostic) << info.name;
    diagnostic += info.diagnostic ? 1 : 0;
  }
  // DETNCCL_TRACE, the five windows and sizes, the two capture settings, the two step numbering settings, and the
  // three about detnccl's own output.
  EXPECT_EQ(diagnostic, 13u);
  for (const char* name : {"NCCL_DEBUG", "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_TIMESTAMP_FORMAT",
                           "NCCL_DEBUG_TIMESTAMP_LEVELS"}) {
    EXPECT_TRUE(detnccl::analysis::is_diagnostic_setting(name)) << name;
  }
  for (const char* name : {"NCCL_ALGO", "NCCL_PROTO", "DETNCCL_BOGUS", "detnccl_trace", "DETNCCL_DIR", ""}) {
    EXPECT_FALSE(detnccl::analysis::is_diagnostic_setting(name)) << name;
  }
}

TEST_F(Analysis, DiagnosticSettingsAreNotesAndResultSettingsDiverge) {
  SyntheticRunSpec noisy;
  noisy.extra_config = "DETNCCL_LOG_LEVEL=error\nDETNCCL_PRINT_CONFIG=1\nDETNCCL_STEPS=1-2\n";
  noisy.nccl_environment = "NCCL_DEBUG=INFO\nNCCL_DEBUG_SUBSYS=ALL\n";
  write("a", {});
  write("noisy", noisy);
  const auto quiet = diff("a", "noisy");
  EXPECT_EQ(quiet.error, "");
  EXPECT_TRUE(quiet.identical()) << (quiet.config_differences.empty() ? "" : quiet.config_differences[0].field);
  std::vector<std::string> noted;
  for (const auto& note : quiet.config_notes) noted.push_back(note.field);
  std::sort(noted.begin(), noted.end());
  EXPECT_EQ(noted, (std::vector<std::string>{"DETNCCL_LOG_LEVEL", "DETNCCL_PRINT_CONFIG", "DETNCCL_STEPS", "NCCL_DEBUG",
                                             "NCCL_DEBUG_SUBSYS"}));
  const bool mentioned = std::any_of(quiet.notes.begin(), quiet.notes.end(), [](const std::string& note) {
    return note.find("DETNCCL_STEPS differs") != std::string::npos;
  });
  EXPECT_TRUE(mentioned);

  SyntheticRunSpec changed = noisy;
  changed.extra_config += "DETNCCL_DETERMINISTIC=1\n";
  changed.nccl_environment += "NCCL_ALGO=Ring\n";
  write("changed", changed);
  const auto result = diff("a", "changed");
  EXPECT_FALSE(result.identical());
  std::vector<std::string> fields;
  for (const auto& difference : result.config_differences) fields.push_back(difference.field);
  std::sort(fields.begin(), fields.end());
  EXPECT_EQ(fields, (std::vector<std::string>{"DETNCCL_DETERMINISTIC", "NCCL_ALGO"}));
  EXPECT_EQ(result.config_notes.size(), noted.size());
}

// check: a per-rank log file is normal (a note, not a finding); a result-changing setting on one rank is a finding
// against the others; when no value is held by most ranks none is presented as the majority.
TEST_F(Analysis, CheckNotesDiagnosticSettingsAndNamesNoFalseMajority) {
  SyntheticRunSpec logs;
  logs.rank_config = [](std::uint32_t rank) { return "DETNCCL_LOG_FILE=/tmp/log-" + std::to_string(rank) + "\n"; };
  write("logs", logs);
  const auto noted = check("logs");
  EXPECT_EQ(noted.error, "");
  EXPECT_TRUE(noted.clean()) << (noted.findings.empty() ? "" : noted.findings[0].message);
  ASSERT_EQ(noted.config_notes.size(), 1u);
  EXPECT_NE(noted.config_notes[0].find("DETNCCL_LOG_FILE"), std::string::npos) << noted.config_notes[0];

  SyntheticRunSpec one_odd;
  one_odd.rank_config = [](std::uint32_t rank) { return rank == 2 ? "DETNCCL_ALGO=one_shot\n" : ""; };
  write("odd", one_odd);
  const auto odd = check("odd");
  ASSERT_EQ(odd.findings.size(), 1u);
  EXPECT_EQ(odd.findings[0].kind, CheckFindingKind::kConfigMismatch);
  EXPECT_EQ(odd.findings[0].ranks, std::vector<std::uint32_t>{2});
  const std::string others = "on the other " + std::to_string(one_odd.ranks - 1) + " ranks";
  EXPECT_NE(odd.findings[0].message.find(others), std::string::npos) << odd.findings[0].message;

  SyntheticRunSpec all_differ;
  const std::vector<std::string> algos = {"auto", "mixed_radix", "one_shot", "ring"};
  all_differ.rank_config = [&](std::uint32_t rank) { return "DETNCCL_ALGO=" + algos[rank] + "\n"; };
  write("differ", all_differ);
  const auto differ = check("differ");
  ASSERT_EQ(differ.findings.size(), 1u) << "one finding for the setting, not one per rank against rank 0";
  EXPECT_EQ(differ.findings[0].kind, CheckFindingKind::kConfigMismatch);
  EXPECT_EQ(differ.findings[0].ranks, (std::vector<std::uint32_t>{0, 1, 2, 3}));
  EXPECT_EQ(differ.findings[0].message.find("the other"), std::string::npos) << differ.findings[0].message;
  for (const std::string& algo : algos) {
    EXPECT_NE(differ.findings[0].message.find("DETNCCL_ALGO=" + algo), std::string::npos) << differ.findings[0].message;
  }
}

// After a call missing in one run, the runs' calls are matched out of step: calls wait for their counterparts, with
// their segment digests, while the readers read on (diff() also reads one page at a time and expects the same
// answers).
TEST_F(Analysis, TheShortcutNamesACallMissingBeforeItStopsReading) {
  SyntheticRunSpec base;
  base.steps = 6;
  base.segments = 4;
  SyntheticRunSpec skipped = base;
  const auto dropped = std::make_shared<bool>(false);
  skipped.hook = [dropped](std::uint32_t rank, CallFields& call, Blocks&, Blocks&, Blocks& input_segments, Blocks&) {
    if (rank != 0) return true;
    if (!*dropped && call.step == 1) return !(*dropped = true);
    if (*dropped) {
      ++call.seq;
      ++call.comm_seq;
    }
    if (call.step == 4 && call.op == OpId::kAllReduce && !input_segments.empty()) {
      input_segments[2] ^= 1;  // the third quarter of its input differs
      call.input_fingerprint ^= 1;
    }
    return true;
  };
  write("base", base);
  write("skipped", skipped);
  // The step-index shortcut reads from step 1 (the gap) and stops after it: the call missing there is named, not
  // taken for one the window left unread (it was, before: the first divergence became step 4's).
  const auto result = diff("base", "skipped");
  ASSERT_TRUE(result.first.has_value());
  EXPECT_EQ(result.first->kind, DivergenceKind::kMissing);
  EXPECT_EQ(result.first->step(), 1u);
  EXPECT_EQ(result.ranks[0].missing_in_b, 1u);
  detnccl::analysis::DiffOptions all_records;
  all_records.use_step_index = false;
  const auto full = diff("base", "skipped", all_records);
  ASSERT_TRUE(full.ranks[0].first.has_value());
  EXPECT_EQ(full.ranks[0].missing_in_b, 1u);
  EXPECT_EQ(full.ranks[0].differing, 2u);  // the gap, and step 4's perturbed AllReduce after it
}

// A run that made fewer calls and closed its logs cleanly did not crash; a call absent from the middle of a clean log
// is neither.
TEST_F(Analysis, AMissingCallSaysWhetherTheRunStoppedMadeFewerCallsOrSkippedOne) {
  SyntheticRunSpec fewer;
  fewer.steps = 3;
  SyntheticRunSpec skipped;
  // Rank 0 leaves out the first call of step 1 and numbers the later ones as if it were there (as a record the
  // reader skips would): only that call is absent.
  const auto dropped = std::make_shared<bool>(false);
  skipped.hook = [dropped](std::uint32_t rank, CallFields& call, Blocks&, Blocks&, Blocks&, Blocks&) {
    if (rank != 0) return true;
    if (!*dropped && call.step == 1) return !(*dropped = true);
    if (*dropped) {
      ++call.seq;
      ++call.comm_seq;
    }
    return true;
  };
  write("a", {});
  write("fewer", fewer);
  write("skipped", skipped);
  const auto short_run = diff("a", "fewer");
  ASSERT_TRUE(short_run.first.has_value());
  EXPECT_EQ(short_run.first->kind, DivergenceKind::kMissing);
  const std::string& cause = short_run.first->cause;
  EXPECT_NE(cause.find("after step " + std::to_string(fewer.steps - 1)), std::string::npos) << cause;
  EXPECT_NE(cause.find("fewer calls"), std::string::npos) << cause;
  EXPECT_EQ(cause.find("crash"), std::string::npos) << cause;
  const auto gap = diff("a", "skipped");
  ASSERT_TRUE(gap.ranks[0].first.has_value());
  EXPECT_EQ(gap.ranks[0].first->kind, DivergenceKind::kMissing);
  EXPECT_EQ(gap.ranks[0].missing_in_b, 1u);
  const std::string& gap_cause = gap.ranks[0].first->cause;
  EXPECT_EQ(gap_cause.find("crash"), std::string::npos) << gap_cause;
  EXPECT_NE(gap_cause.find("middle"), std::string::npos) << gap_cause;
}

// diff notes every log that ends with a torn tail (a killed rank), as check and stats do, even when it says identical.
TEST_F(Analysis, DiffNotesEveryTornTail) {
  SyntheticRunSpec killed;
  killed.close_logs = false;
  write("a", {});
  write("killed", killed);
  const auto result = diff("a", "killed");
  EXPECT_TRUE(result.identical());
  for (std::uint32_t rank = 0; rank < killed.ranks; ++rank) {
    const std::string prefix = "rank " + std::to_string(rank) + " of run B: the log ends";
    const bool noted = std::any_of(result.notes.begin(), result.notes.end(),
                                   [&](const std::string& note) { return note.rfind(prefix, 0) == 0; });
    EXPECT_TRUE(noted) << prefix;
  }
}

// diff and check compare the ranks of run directories: a single log file is refused, not matched by rank against
// a whole run.
TEST_F(Analysis, DiffAndCheckRefuseASingleLogFile) {
  write("a", {});
  const std::string file = dir_.run("a") + "/" + detnccl::records::rank_log_file_name(1);
  const auto compared =
      detnccl::analysis::diff_runs(detnccl::analysis::list_run(file), detnccl::analysis::list_run(dir_.run("a")), {});
  EXPECT_NE(compared.error.find("one log file"), std::string::npos) << compared.error;
  const auto checked = detnccl::analysis::check_run(detnccl::analysis::list_run(file), {});
  EXPECT_NE(checked.error.find("one log file"), std::string::npos) << checked.error;
  EXPECT_EQ(detnccl::analysis::run_stats(detnccl::analysis::list_run(file)).error, "") << "stats reads one file";
}

// A log whose header names another rank than its file name (renamed or copied) would be compared as the wrong rank:
// refused, naming both.
TEST_F(Analysis, ALogNamedForAnotherRankThanItsHeaderIsRefused) {
  write("a", {});
  write("b", {});
  const std::string from = dir_.run("b") + "/" + detnccl::records::rank_log_file_name(1);
  const std::string to = dir_.run("b") + "/" + detnccl::records::rank_log_file_name(7);
  fs::rename(from, to);
  const auto result = diff("a", "b");
  EXPECT_NE(result.error.find("rank 1"), std::string::npos) << result.error;
  EXPECT_NE(result.error.find("named for rank 7"), std::string::npos) << result.error;
  EXPECT_NE(check("b").error.find("named for rank 7"), std::string::npos);
  // Two files claiming rank 0: the copy is refused.
  fs::copy_file(dir_.run("a") + "/" + detnccl::records::rank_log_file_name(0), from);
  fs::remove(to);
  EXPECT_NE(diff("a", "b").error.find("named for rank 1"), std::string::npos) << diff("a", "b").error;
}

// A rank killed between creating its log and writing the header leaves an empty file or the zeros of its reservation:
// that rank has no records. diff, check and stats report it like a rank without a log (its calls missing), with a
// note naming the file, and still compare and check the other ranks. Any other file that is not a log stays unusable.
TEST_F(Analysis, ALogWithoutAHeaderIsARankWithoutRecordsNotUnusableInput) {
  const SyntheticRunSpec spec;
  const std::uint64_t calls = spec.steps * spec.calls_per_step;
  write("a", spec);
  write("b", spec);
  const std::string victim = dir_.run("b") + "/" + detnccl::records::rank_log_file_name(2);
  for (const std::uintmax_t size : {std::uintmax_t{1} << 20, std::uintmax_t{0}}) {
    std::ofstream(victim, std::ios::binary | std::ios::trunc).close();
    fs::resize_file(victim, size);
    const auto result = diff("a", "b");
    ASSERT_EQ(result.error, "") << size;
    ASSERT_TRUE(result.first.has_value());
    EXPECT_EQ(result.first->kind, DivergenceKind::kMissing);
    EXPECT_EQ(result.first->rank, 2u);
    EXPECT_EQ(result.first->step(), 0u);
    EXPECT_NE(result.first->cause.find("no header"), std::string::npos) << result.first->cause;
    ASSERT_EQ(result.ranks.size(), spec.ranks);
    EXPECT_FALSE(result.ranks[2].in_b);
    EXPECT_EQ(result.ranks[2].missing_in_b, calls);
    EXPECT_NE(result.ranks[2].no_header_b.find(victim), std::string::npos) << result.ranks[2].no_header_b;
    for (const std::uint32_t rank : {0u, 1u, 3u}) EXPECT_EQ(result.ranks[rank].matching, calls) << rank;
    const std::string note = "rank 2 of run B: " + victim + ": no header";
    EXPECT_TRUE(std::any_of(result.notes.begin(), result.notes.end(), [&](const std::string& n) {
      return n.rfind(note, 0) == 0;
    })) << note;

    const auto checked = check("b");
    ASSERT_EQ(checked.error, "");
    EXPECT_EQ(checked.ranks, spec.ranks - 1);
    ASSERT_FALSE(checked.notes.empty());
    EXPECT_EQ(checked.notes[0].rfind("rank 2: " + victim + ": no header", 0), 0u) << checked.notes[0];
    const auto joined = std::find_if(checked.findings.begin(), checked.findings.end(),
                                     [](const auto& f) { return f.kind == CheckFindingKind::kNotAllJoined; });
    ASSERT_NE(joined, checked.findings.end());
    EXPECT_EQ(joined->ranks, std::vector<std::uint32_t>{2});
    EXPECT_EQ(joined->step, 0u);

    const auto stats = detnccl::analysis::run_stats(detnccl::analysis::list_run(dir_.run("b")));
    ASSERT_EQ(stats.error, "");
    ASSERT_EQ(stats.ranks.size(), spec.ranks);
    EXPECT_TRUE(stats.ranks[2].no_header);
    EXPECT_EQ(stats.ranks[2].total.calls, 0u);
    EXPECT_NE(stats.ranks[2].end_message.find(victim), std::string::npos) << stats.ranks[2].end_message;
    EXPECT_EQ(stats.total.calls, (spec.ranks - 1) * calls);
  }
  // Zeros with one stray byte at the end are not what a killed writer leaves: unusable, as before.
  fs::resize_file(victim, 4096);
  {
    std::fstream file(victim, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(4095);
    file.put('\x01');
  }
  const auto stray = diff("a", "b");
  EXPECT_NE(stray.error.find("not a detnccl log"), std::string::npos) << stray.error;
  EXPECT_NE(check("b").error, "");
  // A run whose every log lacks its header holds nothing to check.
  for (std::uint32_t rank = 0; rank < spec.ranks; ++rank) {
    const std::string path = dir_.run("b") + "/" + detnccl::records::rank_log_file_name(rank);
    std::ofstream(path, std::ios::binary | std::ios::trunc).close();
  }
  EXPECT_NE(check("b").error.find("nothing to check"), std::string::npos) << check("b").error;
}

// diff --from-step K of a full run against one resumed at step S > K: the resumed run has no calls at steps K..S-1
// (its log starts later), which is a missing call, not "different calls" from aligning step S with step K; the
// calls from step S on are still aligned and compared.
TEST_F(Analysis, AResumedRunComparedFromAnEarlierStepHasNoCallsBeforeItsStart) {
  const SyntheticRunSpec full;
  SyntheticRunSpec resumed;
  resumed.first_step = 2;
  // One real difference after the resume step, on rank 1: it must still be found by the aligned comparison.
  resumed.hook = [](std::uint32_t rank, CallFields& call, Blocks&, Blocks&, Blocks&, Blocks&) {
    if (rank == 1 && call.step == 3 && call.op == OpId::kAllReduce) call.output_fingerprint ^= 1;
    return true;
  };
  write("full", full);
  write("resumed", resumed);
  const std::uint64_t per_step = full.calls_per_step;
  detnccl::analysis::DiffOptions from;
  from.from_step = 1;
  const auto result = diff("full", "resumed", from);
  ASSERT_EQ(result.error, "");
  ASSERT_TRUE(result.first.has_value());
  EXPECT_EQ(result.first->kind, DivergenceKind::kMissing);
  EXPECT_EQ(result.first->role, DivergenceRole::kOrigin);
  EXPECT_EQ(result.first->step(), 1u);
  EXPECT_TRUE(result.first->a.present);
  EXPECT_FALSE(result.first->b.present);
  const std::string& cause = result.first->cause;
  EXPECT_NE(cause.find("run B has no calls at step 1 on rank 0: its log starts at step 2"), std::string::npos) << cause;
  EXPECT_NE(cause.find("--from-step 2"), std::string::npos) << cause;
  const std::uint64_t aligned = (full.steps - resumed.first_step) * per_step;
  std::uint64_t allreduces_per_step = 0;
  for (std::uint64_t i = 0; i < per_step; ++i)
    allreduces_per_step += detnccl::test::synthetic_op(i) == OpId::kAllReduce;
  for (std::uint32_t rank = 0; rank < full.ranks; ++rank) {
    const auto& r = result.ranks[rank];
    EXPECT_EQ(r.missing_in_b, per_step) << rank;  // step 1 alone
    EXPECT_EQ(r.missing_in_a, 0u) << rank;
    EXPECT_EQ(r.late_start_b, std::optional<std::uint64_t>(resumed.first_step)) << rank;
    EXPECT_EQ(r.matching + r.differing, aligned) << rank;
    EXPECT_EQ(r.differing, rank == 1 ? allreduces_per_step : 0u) << rank;
  }
  const bool noted = std::any_of(result.notes.begin(), result.notes.end(), [](const std::string& note) {
    return note.find("start at step 2, after --from-step 1") != std::string::npos;
  });
  EXPECT_TRUE(noted);

  // The other way round, from step 0: run A is the one that starts later, two steps of run B are missing in it.
  from.from_step = 0;
  const auto reversed = diff("resumed", "full", from);
  ASSERT_TRUE(reversed.first.has_value());
  EXPECT_EQ(reversed.first->kind, DivergenceKind::kMissing);
  EXPECT_EQ(reversed.first->step(), 0u);
  EXPECT_NE(reversed.first->cause.find("run A has no calls at steps 0-1 on rank 0: its log starts at step 2"),
            std::string::npos)
      << reversed.first->cause;
  EXPECT_EQ(reversed.ranks[0].missing_in_a, 2 * per_step);
  EXPECT_EQ(reversed.ranks[0].matching, aligned);
  // Two logs that start at the same step are aligned as before: a resumed run against itself is identical.
  from.from_step = 1;
  const auto itself = diff("resumed", "resumed", from);
  EXPECT_TRUE(itself.identical());
  EXPECT_EQ(itself.ranks[0].matching, aligned);
}

}  // namespace

namespace {

// A stream moved to a step's first call by the step index numbers every call that follows as a stream that read
// the log from its start: the same communicator, collective index and Send/Recv pair index.
TEST_F(Analysis, AStreamMovedToAStepByTheIndexNumbersCallsAsAFullRead) {
  SyntheticRunSpec spec;
  spec.steps = 10;
  write("a", spec);
  const auto run = detnccl::analysis::list_run(dir_.run("a"));
  ASSERT_FALSE(run.logs.empty());
  std::string error;
  const auto full = detnccl::analysis::RankLogStream::open(run.logs[1], error);
  ASSERT_TRUE(full) << error;
  std::vector<detnccl::analysis::CallInRun> every;
  detnccl::analysis::CallInRun call;
  while (full->next(call)) every.push_back(call);
  const auto probe = detnccl::analysis::RankLogStream::open(run.logs[1], error);
  const detnccl::records::StepIndex* index = probe->step_index();
  ASSERT_NE(index, nullptr);
  bool paired = false;
  for (const auto& listed : every) paired = paired || detnccl::analysis::is_point_to_point(listed.call.op);
  ASSERT_TRUE(paired) << "the synthetic mix has Send/Recv calls, whose pair counts the index carries";
  for (std::size_t entry = 0; entry < index->entries.size(); ++entry) {
    if (entry > 0 && index->entries[entry - 1].group_offset == index->entries[entry].group_offset) continue;
    const auto moved = detnccl::analysis::RankLogStream::open(run.logs[1], error);
    ASSERT_NE(moved->step_index(), nullptr);
    ASSERT_TRUE(moved->seek_to_group(entry));
    std::size_t at = 0;
    while (at < every.size() && every[at].call.step < index->entries[entry].step) ++at;
    std::size_t read = 0;
    while (moved->next(call)) {
      ASSERT_LT(at, every.size());
      const auto& expected = every[at++];
      EXPECT_EQ(call.call.seq, expected.call.seq);
      EXPECT_EQ(call.collective_index, expected.collective_index) << "seq " << expected.call.seq;
      EXPECT_EQ(call.pair_index, expected.pair_index) << "seq " << expected.call.seq;
      EXPECT_EQ(call.communicator.id, expected.communicator.id);
      EXPECT_EQ(call.communicator.nranks, expected.communicator.nranks);
      ++read;
    }
    EXPECT_EQ(at, every.size());
    EXPECT_GT(read, 0u);
  }
}

// diff on two runs that part at one step reads only the calls from that step on: the equal steps before it are
// compared by their digests (and counted as matching), the later ones are not read at all.
TEST_F(Analysis, TheStepIndexShortcutReadsOnlyFromTheFirstDifferingStep) {
  SyntheticRunSpec spec;
  spec.steps = 40;
  write("a", spec);
  SyntheticRunSpec perturbed = spec;
  perturbed.hook = [](std::uint32_t rank, CallFields& call, Blocks&, Blocks&, Blocks&, Blocks&) {
    if (rank == 2 && call.step >= 30) call.input_fingerprint ^= 1;
    return true;
  };
  write("b", perturbed);
  const auto result = diff("a", "b");  // also compared against --all-records by the fixture
  ASSERT_TRUE(result.first.has_value());
  EXPECT_EQ(result.first->rank, 2u);
  EXPECT_EQ(result.first->step(), 30u);
  std::uint64_t calls = 0;
  std::uint64_t read = 0;
  for (const auto& rank : result.ranks) {
    calls += rank.calls_a + rank.calls_b;
    read += rank.calls_read;
    EXPECT_TRUE(rank.digest_shortcut) << "rank " << rank.rank;
  }
  const auto& origin = result.ranks[2];
  EXPECT_EQ(origin.calls_matched_by_digest, 30 * spec.calls_per_step);
  EXPECT_EQ(origin.read_through_step, std::optional<std::uint64_t>(30));
  EXPECT_EQ(origin.calls_not_read, 2 * 9 * spec.calls_per_step) << "steps 31-39 of both runs";
  // Rank 2 reads step 30 of both runs; other ranks' outputs at step 30 differ only where they meet rank 2's data.
  EXPECT_LE(read, 2 * spec.ranks * spec.calls_per_step);
  EXPECT_LT(read * 10, calls) << read << " of " << calls << " calls read";
}

// ---- `detnccl report`'s data (cli/analysis/run_map.h): computed from diff's and check's results ----

using detnccl::analysis::CellStatus;

// The map's status of every step of a rank, as one string of status numbers ("1113444"): short expectations.
std::string row_text(const detnccl::analysis::StepMap& map, std::uint32_t rank) {
  std::string text;
  for (std::uint64_t step = *map.first_step; step <= *map.last_step; ++step) {
    text += static_cast<char>('0' + static_cast<int>(map.at(rank, step)));
  }
  return text;
}

TEST_F(Analysis, ReportMapShowsTheOriginItsReceiversAndWhatDivergedAfter) {
  // Rank 2's inputs differ at step 3 of 6 and reach every rank at that step (as in the origin test above); at step 5
  // only rank 1's AllReduce output differs, alone: a second, independent origin, later.
  SyntheticRunSpec a;
  a.steps = 6;
  SyntheticRunSpec b = a;
  b.hook = [](std::uint32_t rank, CallFields& call, Blocks&, Blocks& output_blocks, Blocks&, Blocks&) {
    if (call.step == 3) {
      if (rank == 2 && call.op != OpId::kRecv && call.op != OpId::kAlltoAll) call.input_fingerprint ^= 1;
      if (call.op == OpId::kAllReduce || call.op == OpId::kAllGather) call.output_fingerprint ^= 1;
      if (call.op == OpId::kAllGather) output_blocks[2] ^= 1;
      if (call.op == OpId::kRecv && rank == 3) call.output_fingerprint ^= 1;
    }
    if (call.step == 5 && rank == 1 && call.op == OpId::kAllReduce) call.output_fingerprint ^= 1;
    return true;
  };
  write("a", a);
  write("b", b);
  detnccl::analysis::DiffOptions every_record;
  every_record.use_step_index = false;
  const auto result = diff("a", "b", every_record);
  ASSERT_TRUE(result.first.has_value());
  const auto map = detnccl::analysis::diff_step_map(result, std::nullopt, std::nullopt);
  ASSERT_EQ(map.first_step, 0u);
  ASSERT_EQ(map.last_step, 5u);
  ASSERT_EQ(map.ranks.size(), 4u);
  // 1 identical, 3 origin, 4 receiver, 6 diverged.
  EXPECT_EQ(row_text(map, 2), "111311");
  EXPECT_EQ(row_text(map, 0), "111411");
  EXPECT_EQ(row_text(map, 3), "111411");
  EXPECT_EQ(row_text(map, 1), "111416");
  EXPECT_EQ(map.at(9, 0), CellStatus::kNotTraced);
  // The runs encode each row's steps: their lengths add up to the map's width.
  for (const auto& row : map.ranks) {
    std::uint64_t width = 0;
    for (const auto& run : row.runs) width += run.steps;
    EXPECT_EQ(width, 6u) << "rank " << row.rank;
  }
  // With the step-index shortcut diff stops reading after step 3 (the last step any rank first differs at): what
  // comes after is not compared, never called identical.
  const auto shortcut = diff("a", "b");
  EXPECT_EQ(row_text(detnccl::analysis::diff_step_map(shortcut, std::nullopt, std::nullopt), 1), "111488");
  // A step range narrows the map to it.
  const auto ranged = detnccl::analysis::diff_step_map(result, 2, 4);
  EXPECT_EQ(ranged.first_step, 2u);
  EXPECT_EQ(ranged.last_step, 4u);

  // The timeline of rank 2 on its one communicator: 8 calls that matched, then its first divergent call (the step's
  // AllReduce, input and output differ), as the analysis kept them.
  const auto& rank2 = result.ranks[2];
  const auto timelines = detnccl::analysis::rank_timelines(rank2, 8, 24);
  ASSERT_EQ(timelines.size(), 1u);
  EXPECT_EQ(timelines[0].comm_id, detnccl::test::kSyntheticCommunicatorId);
  EXPECT_EQ(timelines[0].first_comm_seq, 3 * 12u - 8);
  ASSERT_EQ(timelines[0].verdicts.size(), 32u);
  EXPECT_EQ(timelines[0].verdicts.substr(0, 9), "========b");
  EXPECT_EQ(timelines[0].steps[8], 3u);
  EXPECT_TRUE(detnccl::analysis::rank_timelines(result.ranks[0], 8, 24).size() == 1u);

  // The next command: the narrow re-trace of the origin's step and rank.
  const auto next = detnccl::analysis::next_command(result, "runs/a", "runs/b");
  EXPECT_EQ(next.command, "detnccl run --trace segments --steps 3 --ranks 2 -- JOB");
  EXPECT_FALSE(next.why.empty());

  // Every rank is a member of the synthetic run's one communicator, at its own rank.
  std::vector<std::pair<std::uint32_t, const std::vector<detnccl::records::CommunicatorRecord>*>> members;
  for (const auto& rank : result.ranks) members.emplace_back(rank.rank, &rank.communicators_a);
  const auto communicators = detnccl::analysis::communicator_members(members);
  ASSERT_EQ(communicators.size(), 1u);
  EXPECT_EQ(communicators[0].nranks, 4u);
  EXPECT_EQ(communicators[0].members, (std::vector<std::uint32_t>{0, 1, 2, 3}));
}

TEST_F(Analysis, ReportMapOfIdenticalRunsAndOfARunThatStopped) {
  write("a", {});
  write("same", {});
  const auto identical = diff("a", "same");
  const auto map = detnccl::analysis::diff_step_map(identical, std::nullopt, std::nullopt);
  for (std::uint32_t rank = 0; rank < 4; ++rank) EXPECT_EQ(row_text(map, rank), "1111") << rank;
  EXPECT_TRUE(detnccl::analysis::next_command(identical, "a", "same").command.empty());

  SyntheticRunSpec b;
  b.close_logs = false;
  b.hook = [](std::uint32_t rank, CallFields& call, Blocks&, Blocks&, Blocks&, Blocks&) {
    return !(rank == 1 && call.step >= 2);
  };
  write("b", b);
  const auto stopped = diff("a", "b");
  ASSERT_TRUE(stopped.first.has_value());
  const auto torn = detnccl::analysis::diff_step_map(stopped, std::nullopt, std::nullopt);
  EXPECT_EQ(row_text(torn, 1), "1177");  // 7: missing in run B from step 2 on
  EXPECT_EQ(detnccl::analysis::next_command(stopped, "a", "b").command, "detnccl stats b -v");
}

TEST_F(Analysis, ReportNextCommandIsReplayOnlyForAReductionsOutputWhoseMembersInputsWereCaptured) {
  ASSERT_NO_FATAL_FAILURE(write_output_origin_pair());
  const auto output = diff("a", "b");
  ASSERT_TRUE(output.first.has_value());
  ASSERT_EQ(output.first->kind, DivergenceKind::kOutput);
  const std::uint64_t seq = 2 * 12 + index_of(OpId::kAllReduce);

  // Nothing measured (no capture files), or measured without every member's input (no reordering verdict): the
  // command is deterministic mode, as without capture.
  EXPECT_EQ(detnccl::analysis::next_command(output, "runs/a", "runs/b").command, "detnccl run --deterministic -- JOB");
  detnccl::analysis::MagnitudeOutcome not_captured;
  not_captured.not_captured = "run A has no capture file for rank 0";
  EXPECT_EQ(detnccl::analysis::next_command(output, "runs/a", "runs/b", &not_captured).command,
            "detnccl run --deterministic -- JOB");
  detnccl::analysis::MagnitudeOutcome unbounded;
  unbounded.measured = true;
  unbounded.side = "outputs";
  unbounded.no_bound = "run A did not capture this buffer of rank 2";
  EXPECT_EQ(detnccl::analysis::next_command(output, "runs/a", "runs/b", &unbounded).command,
            "detnccl run --deterministic -- JOB");

  // Every member's input captured (the verdict exists): replay of run A's call, within or beyond the bound.
  detnccl::analysis::MagnitudeOutcome bounded = unbounded;
  bounded.no_bound.clear();
  bounded.magnitude.reordering = detnccl::numerics::ReorderingVerdict{};
  bounded.magnitude.reordering->within_reordering_bound = false;
  const auto replay = detnccl::analysis::next_command(output, "runs/a", "runs/b", &bounded);
  EXPECT_EQ(replay.command, "detnccl replay runs/a --rank 0 --seq " + std::to_string(seq));
  EXPECT_NE(replay.why.find("beyond the reordering bound"), std::string::npos) << replay.why;
  bounded.magnitude.reordering->within_reordering_bound = true;
  EXPECT_NE(detnccl::analysis::next_command(output, "my runs/a", "b", &bounded).why.find("within the reordering bound"),
            std::string::npos);
  EXPECT_EQ(detnccl::analysis::next_command(output, "my runs/a", "b", &bounded).command,
            "detnccl replay 'my runs/a' --rank 0 --seq " + std::to_string(seq));

  // An input origin, even measured: replay cannot say why an input differs; the narrow re-trace stays.
  SyntheticRunSpec perturbed;
  perturbed.hook = [](std::uint32_t rank, CallFields& call, Blocks&, Blocks&, Blocks&, Blocks&) {
    if (rank == 1 && call.step == 1 && call.op == OpId::kAllReduce) call.input_fingerprint ^= 1;
    if (call.step == 1 && call.op == OpId::kAllReduce) call.output_fingerprint ^= 1;
    return true;
  };
  write("c", perturbed);
  const auto input = diff("a", "c");
  ASSERT_TRUE(input.first.has_value());
  ASSERT_EQ(input.first->kind, DivergenceKind::kInput);
  bounded.side = "inputs";
  EXPECT_EQ(detnccl::analysis::next_command(input, "runs/a", "runs/c", &bounded).command,
            "detnccl run --trace segments --steps 1 --ranks 1 -- JOB");
}

TEST_F(Analysis, ReportMapOfStepDigestsTakesTheirStepsAndStopsAtTheFirstDifference) {
  // DETNCCL_TRACE=steps logs hold no call: the map's steps come from the digests (RankDiff::first_digest_step_a...),
  // and diff compares each communicator's digests only up to the first that differs.
  detnccl::analysis::RunDiff result;
  detnccl::analysis::RankDiff rank;
  rank.rank = 0;
  rank.in_a = rank.in_b = true;
  rank.digests_compared = true;
  rank.first_digest_step_a = rank.first_digest_step_b = 10;
  rank.last_digest_step_a = rank.last_digest_step_b = 15;
  detnccl::analysis::StepDivergence step;
  step.step = 12;
  step.in_a = step.in_b = true;
  step.input_differs = true;
  step.role = DivergenceRole::kReceiver;
  rank.first_step = step;
  result.ranks.push_back(rank);
  result.first_step = step;
  const auto map = detnccl::analysis::diff_step_map(result, std::nullopt, std::nullopt);
  ASSERT_EQ(map.first_step, 10u);
  EXPECT_EQ(row_text(map, 0), "114888");
}

TEST_F(Analysis, EachRanksFirstDifferingStepDigestIsAnOriginUnlessAnEarlierMemberOfItsCommunicatorsDiffered) {
  // Step digests (DETNCCL_TRACE=steps) say which step differs, not which call: rank 0's inputs differ first (step 5);
  // rank 1 shares communicator 0xa with it and differs from step 6 (it could have received the difference); rank 2
  // shares nothing with them and differs from step 7 (a second, independent origin); rank 3 never differs.
  std::vector<detnccl::analysis::RankDiff> ranks(4);
  const auto member = [](std::uint64_t id, std::uint32_t rank) {
    detnccl::records::CommunicatorRecord c;
    c.id = id;
    c.nranks = 2;
    c.rank = rank;
    return c;
  };
  ranks[0].communicators_a = ranks[0].communicators_b = {member(0xa, 0)};
  ranks[1].communicators_a = ranks[1].communicators_b = {member(0xa, 1), member(0xb, 0)};
  ranks[2].communicators_a = ranks[2].communicators_b = {member(0xc, 0)};
  ranks[3].communicators_a = ranks[3].communicators_b = {member(0xb, 1), member(0xc, 1)};
  for (std::uint32_t r = 0; r < 4; ++r) {
    auto& rank = ranks[r];
    rank.rank = r;
    rank.in_a = rank.in_b = true;
    rank.digests_compared = true;
    rank.steps_matching = 5;
    rank.first_digest_step_a = rank.first_digest_step_b = 0;
    rank.last_digest_step_a = rank.last_digest_step_b = 9;
    if (r == 3) continue;
    detnccl::analysis::StepDivergence step;
    step.rank = r;
    step.step = 5 + r;
    step.in_a = step.in_b = true;
    step.input_differs = true;
    rank.first_step = step;
  }
  const auto result = detnccl::analysis::combine_rank_diffs(ranks, "a", "b", {});
  ASSERT_EQ(result.error, "");
  ASSERT_TRUE(result.first_step.has_value());
  EXPECT_EQ(result.first_step->rank, 0u);
  EXPECT_EQ(result.ranks[0].first_step->role, DivergenceRole::kOrigin);
  EXPECT_EQ(result.ranks[1].first_step->role, DivergenceRole::kReceiver);
  EXPECT_EQ(result.ranks[2].first_step->role, DivergenceRole::kOrigin);
  // The map: 1 identical, 3 origin, 4 receiver, 8 not compared (diff compares digests only up to the first that
  // differs).
  const auto map = detnccl::analysis::diff_step_map(result, std::nullopt, std::nullopt);
  EXPECT_EQ(row_text(map, 0), "1111138888");
  EXPECT_EQ(row_text(map, 1), "1111114888");
  EXPECT_EQ(row_text(map, 2), "1111111388");
  EXPECT_EQ(row_text(map, 3), "1111111111");
}

TEST_F(Analysis, ReportMapOfACheckNamesTheFindingsRanksAtTheirSteps) {
  ASSERT_NO_FATAL_FAILURE(write_rank_2_leaving_at_step_3("a"));
  const auto result = check("a");
  const auto stats = detnccl::analysis::run_stats(detnccl::analysis::list_run(dir_.run("a")));
  const auto map = detnccl::analysis::check_step_map(result, stats);
  ASSERT_EQ(map.first_step, 0u);
  ASSERT_EQ(map.last_step, 3u);
  EXPECT_EQ(map.at(2, 3), CellStatus::kMissing);  // did not join the step's collectives
  EXPECT_EQ(row_text(map, 2).substr(0, 3), "111");
  // Its ring neighbours' Sends and Recvs with it have no partner: the findings name them at step 3.
  for (const auto& finding : result.findings) {
    if (finding.kind != CheckFindingKind::kUnmatchedPointToPoint) continue;
    for (const std::uint32_t rank : finding.ranks) {
      EXPECT_EQ(map.at(rank, finding.step), rank == 2 ? CellStatus::kMissing : CellStatus::kOrigin) << rank;
    }
  }
}

// The magnitude line diff prints (issue #18): a reordering-sized difference of an fp32 sum, and a corruption.
TEST(AnalysisMagnitude, TheSentenceSaysSummationOrderOrNot) {
  const std::vector<float> x0 = {1.0f, 1e8f, 3.0f}, x1 = {2.0f, 1.0f, -3.0f}, x2 = {0.5f, -1e8f, 1.0f};
  const std::vector<const void*> inputs = {x0.data(), x1.data(), x2.data()};
  // Element 1: (1e8 + 1) - 1e8 = 0 in rank order, (1e8 - 1e8) + 1 = 1 in another: within.
  const std::vector<float> a = {3.5f, 0.0f, 1.0f}, b = {3.5f, 1.0f, 1.0f};
  const detnccl::numerics::ReductionOp sum;
  const detnccl::analysis::DivergenceMagnitude within =
      detnccl::analysis::measure_divergence(ncclFloat32, a.data(), b.data(), 3, sum, &inputs);
  EXPECT_EQ(within.magnitude.elements_differing, 1u);
  ASSERT_TRUE(within.reordering);
  EXPECT_TRUE(within.reordering->within_reordering_bound);
  const std::string text = detnccl::analysis::magnitude_sentence(within, "outputs");
  EXPECT_EQ(text.rfind("outputs differ by at most ", 0), 0u) << text;
  // The verdict right after the count, in issue #18's words; where and how much after it.
  EXPECT_NE(text.find("in 1 element \u2014 within the reordering bound: summation order, not corruption; of 3, first "
                      "at 1, worst at 1 (abs 1, rel inf)"),
            std::string::npos)
      << text;

  const std::vector<float> c = {3.5f * 1001, 0.0f, 1.0f};
  const detnccl::analysis::DivergenceMagnitude beyond =
      detnccl::analysis::measure_divergence(ncclFloat32, a.data(), c.data(), 3, sum, &inputs);
  const std::string corrupt = detnccl::analysis::magnitude_sentence(beyond, "outputs");
  EXPECT_NE(corrupt.find("in 1 element \u2014 beyond the reordering bound: not summation order (1 beyond it, the "
                         "first at 0, the worst "),
            std::string::npos)
      << corrupt;
  // Without the members' inputs (an input divergence), no verdict.
  const std::string inputs_text = detnccl::analysis::magnitude_sentence(
      detnccl::analysis::measure_divergence(ncclFloat32, a.data(), c.data(), 3, sum), "inputs");
  EXPECT_EQ(inputs_text.find("reordering"), std::string::npos) << inputs_text;
  EXPECT_EQ(inputs_text.rfind("inputs differ by at most ", 0), 0u) << inputs_text;
  EXPECT_NE(inputs_text.find(" in 1 element; of 3, first at 0, worst at 0 (abs 3.5e+03, rel 1e+03)"), std::string::npos)
      << inputs_text;
}

}  // namespace
