// End-to-end tests of DETNCCL_CAPTURE: trace_job runs under hostnccl-run with libdetnccl.so preloaded, and each
// rank's capture file is read back with records::CaptureReader. Every buffer a call record says is saved is looked up
// by the record's (fingerprint, size) and fingerprinted again here; the windows choose what is captured; a budget
// spent mid-run stops capture with one warning per rank while the job completes.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <utility>

#include "cli/analysis/call_layout.h"
#include "records/capture_reader.h"
#include "tests/test_support.h"
#include "tests/trace_job_log_checks.h"

namespace {

using detnccl::records::CallRecord;
using detnccl::records::CaptureLookupStatus;
using detnccl::records::CaptureReader;
using detnccl::test::CommandResult;
using detnccl::test::TempDir;
using namespace detnccl::test::trace_job_logs;
namespace records = detnccl::records;
namespace fs = std::filesystem;

CommandResult run_traced_job(int nranks, const std::string& environment, const std::string& job_arguments) {
  return detnccl::test::run_command(
      "env HOSTNCCL_TIMEOUT_S=20 " + environment + " " DETNCCL_LAUNCHER " -n " + std::to_string(nranks) +
      " --timeout 120 -- env LD_PRELOAD=" DETNCCL_SHIM_PATH " " DETNCCL_TRACE_JOB " " + job_arguments + " 2>&1");
}

std::string capture_path(const std::string& dir, const std::string& run, int rank) {
  return dir + "/" + run + "/" + records::capture_file_name(static_cast<std::uint32_t>(rank));
}

using Address = std::pair<std::uint64_t, std::uint64_t>;  // (fingerprint, bytes)

// One side of a recorded call: its address, and whether it was fingerprinted, saved, or skipped.
struct Side {
  bool fingerprinted = false;
  bool saved = false;
  Address address;
};

// The input and output sides of a call, with the byte sizes the CLI computes from the record (cli/analysis).
std::pair<Side, Side> sides_of(const CallRecord& call, const RankLog& log) {
  const records::CommunicatorRecord* comm = nullptr;
  for (const auto& c : log.communicators) {
    if (c.ordinal == call.comm_ordinal) comm = &c;
  }
  EXPECT_NE(comm, nullptr) << "seq " << call.seq;
  const std::uint64_t element = detnccl::analysis::datatype_bytes(call.datatype);
  const std::uint32_t nranks = comm != nullptr ? comm->nranks : 1, rank = comm != nullptr ? comm->rank : 0;
  Side input, output;
  input.fingerprinted = (call.flags & records::kCallInputFingerprint) != 0;
  input.saved = (call.flags & records::kCallInputSaved) != 0;
  input.address = {call.input_fingerprint, detnccl::analysis::input_elements(call, nranks, rank) * element};
  output.fingerprinted = (call.flags & records::kCallOutputFingerprint) != 0;
  output.saved = (call.flags & records::kCallOutputSaved) != 0;
  output.address = {call.output_fingerprint, detnccl::analysis::output_elements(call, nranks, rank) * element};
  return {input, output};
}

// The buffer at `address` is in the capture file, intact: its bytes have that size and fingerprint (hash/).
void expect_found(const CaptureReader& reader, const Address& address, std::uint64_t seq) {
  const records::CaptureLookup lookup = reader.find(address.first, address.second);
  ASSERT_EQ(lookup.status, CaptureLookupStatus::kFound) << "seq " << seq << ": " << lookup.message;
  EXPECT_EQ(lookup.bytes.size(), address.second) << "seq " << seq;
  EXPECT_EQ(fingerprint_of(lookup.bytes), address.first) << "seq " << seq;
}

TEST(ShimCapture, EverySavedBufferIsFoundUnderItsRecordsFingerprintAndStoredOnce) {
  const int nranks = 3;
  TempDir dir;
  const CommandResult job =
      run_traced_job(nranks, "DETNCCL_DIR=" + dir.path() + " DETNCCL_RUN=c DETNCCL_CAPTURE=1", "--steps 2");
  ASSERT_EQ(job.exit_code, 0) << job.output;
  EXPECT_EQ(job.output.find("capture"), std::string::npos) << job.output;  // no warning
  for (int rank = 0; rank < nranks; ++rank) {
    const RankLog log = read_log(rank_log(dir.path(), "c", rank));
    ASSERT_FALSE(log.calls.empty());
    const records::OpenedCapture opened = CaptureReader::open_file(capture_path(dir.path(), "c", rank));
    ASSERT_NE(opened.reader, nullptr) << opened.error;
    EXPECT_EQ(opened.reader->rank(), static_cast<std::uint32_t>(rank));
    EXPECT_EQ(opened.reader->end().kind, records::CaptureEndKind::kClosed) << opened.reader->end().message;
    std::set<Address> saved;
    std::size_t saved_sides = 0;
    for (const CallRecord& call : log.calls) {
      EXPECT_EQ(call.flags & records::kCallSaveSkipped, 0) << "seq " << call.seq;
      const auto [input, output] = sides_of(call, log);
      for (const Side& side : {input, output}) {
        EXPECT_EQ(side.saved, side.fingerprinted) << "seq " << call.seq;  // every fingerprinted side is saved
        if (!side.saved) continue;
        ++saved_sides;
        saved.insert(side.address);
        expect_found(*opened.reader, side.address, call.seq);
      }
    }
    // Content seen twice (a Broadcast's input and output, an in-place call's...) is stored once.
    EXPECT_EQ(opened.reader->blob_count(), saved.size());
    EXPECT_LT(saved.size(), saved_sides);
  }
}

TEST(ShimCapture, TheWindowsChooseWhatIsCaptured) {
  TempDir dir;
  const std::uint64_t min_bytes = 5 * 1024;
  const CommandResult job = run_traced_job(
      2, "DETNCCL_DIR=" + dir.path() + " DETNCCL_RUN=w DETNCCL_CAPTURE=1 DETNCCL_STEPS=1 DETNCCL_MIN_BYTES=5K",
      "--steps 3");
  ASSERT_EQ(job.exit_code, 0) << job.output;
  for (int rank = 0; rank < 2; ++rank) {
    const RankLog log = read_log(rank_log(dir.path(), "w", rank));
    const records::OpenedCapture opened = CaptureReader::open_file(capture_path(dir.path(), "w", rank));
    ASSERT_NE(opened.reader, nullptr) << opened.error;
    std::set<Address> saved;
    std::size_t selected_calls = 0;
    for (const CallRecord& call : log.calls) {
      const auto [input, output] = sides_of(call, log);
      const bool selected = call.step == 1 && std::max(input.address.second, output.address.second) >= min_bytes;
      selected_calls += selected ? 1 : 0;
      for (const Side& side : {input, output}) {
        EXPECT_EQ(side.saved, selected && side.fingerprinted) << "seq " << call.seq;
        if (!side.saved) continue;
        saved.insert(side.address);
        expect_found(*opened.reader, side.address, call.seq);
      }
    }
    EXPECT_GT(selected_calls, 0u);
    EXPECT_LT(selected_calls, log.calls.size() / 3);
    EXPECT_EQ(opened.reader->blob_count(), saved.size());
  }
}

TEST(ShimCapture, ABudgetSpentMidRunStopsCaptureOnceAndTheJobCompletes) {
  const int nranks = 2;
  TempDir dir;
  const std::uint64_t budget = 6 * 1024;  // trace_job's buffers compress well: a few dozen of them
  const CommandResult job = run_traced_job(
      nranks,
      "DETNCCL_DIR=" + dir.path() + " DETNCCL_RUN=b DETNCCL_CAPTURE=1 DETNCCL_CAPTURE_BYTES=" + std::to_string(budget),
      "--steps 3");
  ASSERT_EQ(job.exit_code, 0) << job.output;
  // Exactly one warning line per rank, saying so.
  EXPECT_EQ(detnccl::test::occurrences(job.output, "capture stopped"), static_cast<std::size_t>(nranks)) << job.output;
  EXPECT_EQ(detnccl::test::occurrences(job.output, "DETNCCL_CAPTURE_BYTES"), static_cast<std::size_t>(nranks))
      << job.output;
  for (int rank = 0; rank < nranks; ++rank) {
    const RankLog log = read_log(rank_log(dir.path(), "b", rank));
    check_against_script(log, rank, nranks, 3, /*fingerprints_expected=*/true);  // tracing went on, unchanged
    const records::OpenedCapture opened = CaptureReader::open_file(capture_path(dir.path(), "b", rank));
    ASSERT_NE(opened.reader, nullptr) << opened.error;
    EXPECT_EQ(opened.reader->end().kind, records::CaptureEndKind::kStopped) << opened.reader->end().message;
    EXPECT_EQ(opened.reader->end().stop_reason, records::CaptureStopReason::kBudgetSpent);
    EXPECT_LE(opened.reader->end().offset, budget);
    std::set<Address> saved;
    std::uint64_t first_skipped = ~std::uint64_t{0};
    std::size_t skipped_calls = 0;
    for (const CallRecord& call : log.calls) {
      const auto [input, output] = sides_of(call, log);
      const bool skipped = (call.flags & records::kCallSaveSkipped) != 0;
      if (skipped && first_skipped == ~std::uint64_t{0}) first_skipped = call.seq;
      if (call.seq > first_skipped) {
        // After the stop: every fingerprinted call says "not saved", and nothing of it is saved.
        EXPECT_TRUE(skipped) << "seq " << call.seq;
        EXPECT_FALSE(input.saved || output.saved) << "seq " << call.seq;
      }
      skipped_calls += skipped ? 1 : 0;
      for (const Side& side : {input, output}) {
        if (side.saved) {
          saved.insert(side.address);
          expect_found(*opened.reader, side.address, call.seq);
        } else if (side.fingerprinted && !saved.contains(side.address)) {
          EXPECT_EQ(opened.reader->find(side.address.first, side.address.second).status, CaptureLookupStatus::kAbsent)
              << "seq " << call.seq;
        }
      }
    }
    EXPECT_LT(first_skipped, log.calls.size() / 2) << "the budget should run out in the first half";
    EXPECT_GT(skipped_calls, log.calls.size() / 2);
    EXPECT_FALSE(saved.empty());
    EXPECT_EQ(opened.reader->blob_count(), saved.size());
  }
}

}  // namespace

namespace {

// Capture's own failure (here: its file cannot be created, a file is in the way) is one warning; the job and its
// tracing go on, and no record claims a capture.
TEST(ShimCapture, ACaptureFileThatCannotBeCreatedIsOneWarningAndTracingGoesOn) {
  TempDir dir;
  fs::create_directories(dir.path() + "/f");
  std::ofstream(capture_path(dir.path(), "f", 1)) << "in the way";
  const CommandResult job =
      run_traced_job(2, "DETNCCL_DIR=" + dir.path() + " DETNCCL_RUN=f DETNCCL_CAPTURE=1", "--steps 2");
  ASSERT_EQ(job.exit_code, 0) << job.output;
  EXPECT_EQ(detnccl::test::occurrences(job.output, "capture is off"), 1u) << job.output;
  EXPECT_NE(job.output.find(capture_path(dir.path(), "f", 1)), std::string::npos) << job.output;
  for (int rank = 0; rank < 2; ++rank) {
    const RankLog log = read_log(rank_log(dir.path(), "f", rank));
    check_against_script(log, rank, 2, 2, /*fingerprints_expected=*/true);
    for (const CallRecord& call : log.calls) {
      const std::uint16_t capture_flags =
          records::kCallInputSaved | records::kCallOutputSaved | records::kCallSaveSkipped;
      const bool fingerprinted = (call.flags & (records::kCallInputFingerprint | records::kCallOutputFingerprint)) != 0;
      EXPECT_EQ((call.flags & capture_flags) != 0, rank == 0 && fingerprinted)
          << "rank " << rank << " seq " << call.seq;
    }
  }
  // Rank 0's capture is whole; rank 1's file is the one that was in the way, untouched.
  const records::OpenedCapture rank_0 = CaptureReader::open_file(capture_path(dir.path(), "f", 0));
  ASSERT_NE(rank_0.reader, nullptr) << rank_0.error;
  EXPECT_GT(rank_0.reader->blob_count(), 0u);
  std::ifstream in_the_way(capture_path(dir.path(), "f", 1));
  std::string text;
  std::getline(in_the_way, text);
  EXPECT_EQ(text, "in the way");
}

}  // namespace
