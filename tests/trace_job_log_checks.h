// The logs trace_job leaves, read back whole and checked against its script (tests/trace_job_script.h): the
// metadata of every call and every fingerprint the window selected, computed here from the buffers the script says
// each call read or wrote. Shared by the tests that run trace_job under the shim (test_shim_trace.cc,
// test_run_command.cc).
#ifndef DETNCCL_TESTS_TRACE_JOB_LOG_CHECKS_H
#define DETNCCL_TESTS_TRACE_JOB_LOG_CHECKS_H

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "abi/traced_ops.h"
#include "hash/fingerprint.h"
#include "records/block_digests.h"
#include "records/log_reader.h"
#include "tests/trace_job_script.h"

namespace detnccl::test::trace_job_logs {

using detnccl::records::CallRecord;
using detnccl::records::CommunicatorRecord;
using detnccl::records::LogReader;
using detnccl::records::LogRecord;

struct RankLog {
  detnccl::records::LogHeader header;
  std::vector<CommunicatorRecord> communicators;
  std::vector<CallRecord> calls;
  std::vector<uint32_t> call_lengths;  // each call record's length in the file, frame included
  detnccl::records::LogEndKind end = detnccl::records::LogEndKind::kNotReached;
  std::unique_ptr<LogReader> reader;  // owns the memory the records' spans point into
};

inline RankLog read_log(const std::string& path) {
  RankLog log;
  auto opened = LogReader::open_file(path);
  EXPECT_TRUE(opened.reader) << path << ": " << opened.error;
  if (!opened.reader) return log;
  log.header = opened.reader->header();
  std::ifstream file(path, std::ios::binary);
  LogRecord record;
  while (opened.reader->next(record)) {
    if (auto* call = std::get_if<CallRecord>(&record.record)) {
      log.calls.push_back(*call);
      uint32_t length = 0;  // the frame's first field
      file.seekg(static_cast<std::streamoff>(record.offset));
      file.read(reinterpret_cast<char*>(&length), sizeof length);
      log.call_lengths.push_back(length);
    }
    if (auto* comm = std::get_if<CommunicatorRecord>(&record.record)) log.communicators.push_back(*comm);
  }
  log.end = opened.reader->end().kind;
  log.reader = std::move(opened.reader);
  return log;
}

inline std::string rank_log(const std::string& dir, const std::string& run, int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank-%05d.dnc", rank);
  return dir + "/" + run + "/" + name;
}

inline uint64_t fingerprint_of(const std::vector<std::byte>& bytes) {
  return detnccl::hash::fingerprint(bytes.data(), bytes.size());
}

// Checks one rank's log against the script: metadata of every call, and every fingerprint the window selected; the
// per-peer blocks' fold, and their list when the log's DETNCCL_TRACE is segments (else each record's size).
// `non_blocking`: calls of a non-blocking communicator whose outputs are not fingerprinted keep the result the call
// returned, ncclInProgress.
inline void check_against_script(const RankLog& log, int rank, int nranks, int steps, bool fingerprints_expected,
                                 bool non_blocking = false) {
  ASSERT_EQ(log.communicators.size(), 1u);
  EXPECT_EQ(log.communicators[0].nranks, static_cast<uint32_t>(nranks));
  EXPECT_EQ(log.communicators[0].rank, static_cast<uint32_t>(rank));
  EXPECT_EQ(log.header.rank, static_cast<uint32_t>(rank));
  EXPECT_EQ(log.header.world_size, static_cast<uint32_t>(nranks));
  EXPECT_EQ(log.end, detnccl::records::LogEndKind::kClosed);
  const bool lists_expected = log.header.config_text.find("DETNCCL_TRACE=segments\n") != std::string::npos;

  std::size_t index = 0;
  for (int step = 0; step < steps; ++step) {
    const auto script = detnccl::test::script_step(rank, nranks, static_cast<uint64_t>(step));
    uint64_t group_id = 0;
    for (std::size_t c = 0; c < script.size(); ++c, ++index) {
      ASSERT_LT(index, log.calls.size()) << "log ends early";
      const auto& expected = script[c];
      const CallRecord& call = log.calls[index];
      SCOPED_TRACE("rank " + std::to_string(rank) + " step " + std::to_string(step) + " call " + std::to_string(c) +
                   " " + std::string(detnccl::records::op_name(expected.op)));
      EXPECT_EQ(call.seq, index);
      EXPECT_EQ(call.comm_seq, index);
      EXPECT_EQ(call.step, static_cast<uint64_t>(step));
      EXPECT_EQ(call.op, expected.op);
      EXPECT_EQ(call.count, expected.count);
      EXPECT_EQ(call.datatype, static_cast<uint16_t>(expected.datatype));
      EXPECT_EQ(call.redop, expected.has_redop ? static_cast<int32_t>(expected.redop) : -1);
      EXPECT_EQ(call.peer, expected.peer);
      if (non_blocking && call.result == ncclInProgress) {
        EXPECT_FALSE(call.flags & detnccl::records::kCallOutputFingerprint) << "fingerprinted once settled";
      } else {
        EXPECT_EQ(call.result, 0);
      }
      EXPECT_EQ((call.flags & detnccl::records::kCallInPlace) != 0, expected.in_place);
      if (expected.grouped) {
        EXPECT_NE(call.group_id, 0u);
        if (group_id != 0) {
          EXPECT_EQ(call.group_id, group_id);
        }
        group_id = call.group_id;
      } else {
        EXPECT_EQ(call.group_id, 0u);
      }
      const bool input_hashed = (call.flags & detnccl::records::kCallInputFingerprint) != 0;
      const bool output_hashed = (call.flags & detnccl::records::kCallOutputFingerprint) != 0;
      EXPECT_EQ(input_hashed, fingerprints_expected && expected.has_input);
      EXPECT_EQ(output_hashed, fingerprints_expected && expected.has_output);
      // The recorded input of an in-place call is the data before the operation.
      if (input_hashed) {
        EXPECT_EQ(call.input_fingerprint, fingerprint_of(expected.input));
      }
      if (output_hashed) {
        EXPECT_EQ(call.output_fingerprint, fingerprint_of(expected.output));
      }
      // Per-peer blocks (abi/traced_ops.h): their fold always, their list only at DETNCCL_TRACE=segments.
      const auto& row = detnccl::abi::kTracedOps[detnccl::abi::traced_op_index(static_cast<uint16_t>(expected.op))];
      for (const bool input : {true, false}) {
        SCOPED_TRACE(input ? "input blocks" : "output blocks");
        const bool per_peer =
            (input ? row.input_per_peer() : row.output_per_peer()) && (input ? input_hashed : output_hashed);
        const uint16_t folded_bit =
            input ? detnccl::records::kCallInputBlocksFolded : detnccl::records::kCallOutputBlocksFolded;
        const auto list = input ? call.input_blocks : call.output_blocks;
        EXPECT_EQ((call.flags & folded_bit) != 0, per_peer);
        if (!per_peer) {
          EXPECT_TRUE(list.empty());
          continue;
        }
        const auto& whole = input ? expected.input : expected.output;
        const std::size_t block_bytes = whole.size() / static_cast<std::size_t>(nranks);
        std::vector<uint64_t> blocks;
        for (int b = 0; b < nranks; ++b) {
          blocks.push_back(
              detnccl::hash::fingerprint(whole.data() + static_cast<std::size_t>(b) * block_bytes, block_bytes));
        }
        if (expected.blocks > 0 && expected.blocks_on_input == input) {
          EXPECT_EQ(blocks.size(), expected.blocks);
        }
        EXPECT_EQ(input ? call.input_blocks_digest : call.output_blocks_digest,
                  detnccl::records::fold_block_digests(blocks));
        if (lists_expected) {
          EXPECT_TRUE(std::ranges::equal(list, blocks));
        } else {
          EXPECT_TRUE(list.empty()) << "the list is folded below DETNCCL_TRACE=segments";
        }
      }
      // Below DETNCCL_TRACE=segments a record is the frame and the fixed part: one size at any world size (the
      // longer fixed part holds the folded block digests).
      if (!lists_expected) {
        const bool folded =
            (call.flags & (detnccl::records::kCallInputBlocksFolded | detnccl::records::kCallOutputBlocksFolded)) != 0;
        EXPECT_EQ(log.call_lengths[index], sizeof(detnccl::records::RecordFrame) +
                                               (folded ? sizeof(detnccl::records::CallFields)
                                                       : detnccl::records::kCallFixedBytesWithoutBlockDigests));
      }
    }
  }
  EXPECT_EQ(log.calls.size(), index);
}

}  // namespace detnccl::test::trace_job_logs

#endif  // DETNCCL_TESTS_TRACE_JOB_LOG_CHECKS_H
