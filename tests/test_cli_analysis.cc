// Unit tests of the analysis behind `detnccl diff`, `check` and `stats` (cli/analysis/), on synthetic runs written
// with records::RecordWriter (tests/test_cli_synthetic_run.h). Each test changes known calls and checks that the
// analysis names exactly those: the expected rank, step, kind and role follow from the change the test made.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "abi/nccl_abi.h"
#include "cli/analysis/call_layout.h"
#include "cli/analysis/run_check.h"
#include "cli/analysis/run_diff.h"
#include "cli/analysis/run_stats.h"
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
  detnccl::analysis::RunDiff diff(const std::string& a, const std::string& b,
                                  detnccl::analysis::DiffOptions options = {}) {
    return detnccl::analysis::diff_runs(detnccl::analysis::list_run(dir_.run(a)),
                                        detnccl::analysis::list_run(dir_.run(b)), options);
  }
  detnccl::analysis::CheckResult check(const std::string& name) {
    return detnccl::analysis::check_run(detnccl::analysis::list_run(dir_.run(name)), {});
  }
  TempDir dir_;
};

// The index within a step of the first call of an op in the synthetic pattern.
std::uint64_t index_of(OpId op) {
  for (std::uint64_t i = 0;; ++i) {
    if (detnccl::test::synthetic_op(i) == op) return i;
  }
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
  // The AllReduce of step 2 gives other bits on every rank with every input unchanged.
  SyntheticRunSpec b;
  b.hook = [](std::uint32_t, CallFields& call, Blocks&, Blocks&, Blocks&, Blocks&) {
    if (call.step >= 2 && call.op == OpId::kAllReduce) call.output_fingerprint ^= 7;
    return true;
  };
  write("a", {});
  write("b", b);
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
  const auto corrupt = diff("a", "b");
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
  SyntheticRunSpec spec;
  spec.close_logs = false;
  spec.hook = [](std::uint32_t rank, CallFields& call, Blocks&, Blocks&, Blocks&, Blocks&) {
    return !(rank == 2 && call.step >= 3);
  };
  write("a", spec);
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

}  // namespace
