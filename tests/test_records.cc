// Tests of records/: the log format, RecordWriter (crash safety, disk full, safe creation, threads) and LogReader
// (torn tails, corruption, every truncation, random damage).
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>
#include <xxhash.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <thread>
#include <tuple>

#include "records/block_digests.h"
#include "records/communicator_id.h"
#include "records/log_format.h"
#include "records/log_reader.h"
#include "records/record_writer.h"
#include "records/step_digest.h"
#include "records/step_index.h"

namespace detnccl::records {
namespace {

namespace fs = std::filesystem;

// A fresh directory, removed with everything in it at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "detnccl-records-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) std::abort();
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::uint64_t mix(std::uint64_t x) {  // splitmix64: distinct, well-spread test values
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

LogHeader make_header(std::uint32_t rank) {
  LogHeader header;
  header.start_time_ns = 1700000000123456789ull;
  header.rank = rank;
  header.rank_source = RankSource::kEnvironment;
  header.world_size = 16;
  header.pid = 4242;
  header.nccl_version = 22809;
  header.fingerprint_version = 3;
  header.detnccl_version = 100;
  header.host = "node-017";
  header.detnccl_version_text = "0.1.0";
  header.run = "run-a";
  header.config_text = "DETNCCL_DIR=/x\nDETNCCL_TRACE=hash\n";
  header.nccl_environment = "NCCL_ALGO=Ring\n";
  return header;
}

// Backing storage for the arrays of one generated call record.
struct CallArrays {
  std::vector<std::uint64_t> input_blocks, output_blocks, input_segments, output_segments;
};

// Call record number i: every field a function of i, arrays of varying length (empty included).
CallRecord make_call(std::uint64_t i, CallArrays& arrays) {
  CallRecord call;
  call.seq = i;
  call.comm_ordinal = i % 3;
  call.comm_seq = i / 3;
  call.count = mix(i) % 100000;
  call.step = i / 10;
  call.group_id = i % 5 == 0 ? 0 : i / 5 + 1;
  call.input_fingerprint = mix(i ^ 0x1000);
  call.output_fingerprint = mix(i ^ 0x2000);
  call.premulsum_scalar = i % 7 == 0 ? 0x3fe0000000000000ull : 0;
  call.op = static_cast<OpId>(1 + i % 11);
  call.datatype = static_cast<std::uint16_t>(i % 12);
  call.redop = static_cast<std::int32_t>(i % 6) - 1;
  call.peer = static_cast<std::int32_t>(i % 4) - 1;
  call.result = i % 9 == 0 ? 4 : 0;
  call.flags = kCallInputFingerprint | kCallOutputFingerprint | (i % 2 ? kCallInPlace : 0) |
               (i % 7 == 0 ? kCallPreMulSumScalar : 0);
  call.algorithm = i % 13 == 0 ? 2 : 0;
  // Folded block digests on some calls (written with the longer fixed part), any value: the writer stores them.
  if (i % 5 == 2) {
    call.flags |= kCallInputBlocksFolded;
    call.input_blocks_digest = mix(i ^ 0x3000);
  }
  if (i % 4 == 3) {
    call.flags |= kCallOutputBlocksFolded;
    call.output_blocks_digest = mix(i ^ 0x4000);
  }
  const auto fill = [i](std::vector<std::uint64_t>& array, std::size_t size, std::uint64_t salt) {
    array.resize(size);
    for (std::size_t k = 0; k < size; ++k) array[k] = mix(i * 1000 + salt * 100 + k);
  };
  fill(arrays.input_blocks, i % 4, 1);
  fill(arrays.output_blocks, (i % 3) * 2, 2);
  fill(arrays.input_segments, i % 5, 3);
  fill(arrays.output_segments, i % 6 == 0 ? 3 : 0, 4);
  call.input_blocks = arrays.input_blocks;
  call.output_blocks = arrays.output_blocks;
  call.input_segments = arrays.input_segments;
  call.output_segments = arrays.output_segments;
  call.input_block_count = static_cast<std::uint32_t>(arrays.input_blocks.size());
  call.output_block_count = static_cast<std::uint32_t>(arrays.output_blocks.size());
  call.input_segment_count = static_cast<std::uint32_t>(arrays.input_segments.size());
  call.output_segment_count = static_cast<std::uint32_t>(arrays.output_segments.size());
  return call;
}

CommunicatorRecord make_communicator(std::uint64_t ordinal) {
  CommunicatorRecord comm;
  comm.ordinal = ordinal;
  comm.id = mix(ordinal + 77);
  comm.parent_ordinal = ordinal == 0 ? kNoParent : 0;
  comm.parent_id = ordinal == 0 ? 0 : mix(77);
  comm.nranks = 8;
  comm.rank = static_cast<std::uint32_t>(ordinal % 8);
  comm.device = static_cast<std::int32_t>(ordinal % 4);
  comm.split_color = ordinal == 0 ? kNotSplit : static_cast<std::int32_t>(ordinal);
  comm.split_key = ordinal == 0 ? kNotSplit : -3;
  comm.origin = ordinal == 0 ? CommOrigin::kInitRank : CommOrigin::kSplit;
  return comm;
}

// Whether a decoded call equals the generated call number i.
::testing::AssertionResult is_call(const LogRecord& record, std::uint64_t i) {
  const auto* call = std::get_if<CallRecord>(&record.record);
  if (call == nullptr) return ::testing::AssertionFailure() << "not a call record at offset " << record.offset;
  CallArrays arrays;
  const CallRecord expected = make_call(i, arrays);
  if (!(static_cast<const CallFields&>(*call) == static_cast<const CallFields&>(expected))) {
    return ::testing::AssertionFailure() << "fields of call " << i << " differ (seq " << call->seq << ")";
  }
  if (!std::ranges::equal(call->input_blocks, expected.input_blocks) ||
      !std::ranges::equal(call->output_blocks, expected.output_blocks) ||
      !std::ranges::equal(call->input_segments, expected.input_segments) ||
      !std::ranges::equal(call->output_segments, expected.output_segments)) {
    return ::testing::AssertionFailure() << "arrays of call " << i << " differ";
  }
  return ::testing::AssertionSuccess();
}

struct ReadLog {
  std::vector<LogRecord> records;         // communicators and calls
  std::vector<StepDigestRecord> digests;  // written ones, then those recomputed for a torn step
  std::uint64_t recomputed = 0;
  LogEnd end;
  std::uint64_t unknown = 0;
  std::uint64_t index_records = 0;  // step index records passed by
};

ReadLog read_all(LogReader& reader) {
  ReadLog log;
  LogRecord record;
  while (reader.next(record)) log.records.push_back(record);
  log.digests = reader.step_digests();
  log.recomputed = reader.step_digests_recomputed();
  log.end = reader.end();
  log.unknown = reader.unknown_records_skipped();
  log.index_records = reader.step_index_records_passed();
  return log;
}

// The step digests a writer owes the calls make_call(0 .. calls-1), in log order, computed here per (step,
// communicator) with fold_call; `before_close` leaves out the last step's, which only close() writes.
std::vector<StepDigestRecord> expected_digests(std::uint64_t calls, bool before_close) {
  std::vector<StepDigestRecord> out;
  std::map<std::uint64_t, StepDigestRecord> open;
  const auto end_step = [&] {
    for (const auto& [ordinal, digest] : open) out.push_back(digest);
    open.clear();
  };
  for (std::uint64_t i = 0; i < calls; ++i) {
    CallArrays arrays;
    const CallRecord call = make_call(i, arrays);
    if (i > 0 && call.step != make_call(i - 1, arrays).step) end_step();
    StepDigestRecord& digest = open[call.comm_ordinal];
    if (digest.calls == 0) digest = {call.comm_ordinal, call.step, 0, kStepDigestSeed, kStepDigestSeed};
    digest.input_digest = fold_call_input(digest.input_digest, call);
    digest.output_digest = fold_call_output(digest.output_digest, call);
    ++digest.calls;
  }
  if (!before_close) end_step();
  return out;
}

// The step index a writer owes the calls make_call(0 .. calls-1) once closed, computed here from the calls and
// expected_digests: per group of consecutive calls of one step, one entry per communicator in ordinal order, its
// counts from the calls before the group. call_offsets[i] is where call i lies in the log.
struct ExpectedIndex {
  std::vector<StepIndexEntry> entries;
  std::vector<StepIndexPair> pairs;
};
ExpectedIndex expected_index(std::uint64_t calls, const std::vector<std::uint64_t>& call_offsets) {
  ExpectedIndex out;
  const std::vector<StepDigestRecord> digests = expected_digests(calls, /*before_close=*/false);
  std::size_t next_digest = 0;
  std::map<std::uint64_t, std::uint64_t> collectives;                            // ordinal -> so far
  std::map<std::tuple<std::uint64_t, OpId, std::int32_t>, std::uint64_t> pairs;  // (ordinal, op, peer) -> so far
  CallArrays arrays;
  for (std::uint64_t first = 0; first < calls;) {
    const std::uint64_t step = make_call(first, arrays).step;
    std::map<std::uint64_t, StepIndexEntry> group;
    std::map<std::uint64_t, std::vector<StepIndexPair>> group_pairs;
    std::uint64_t i = first;
    for (; i < calls && make_call(i, arrays).step == step; ++i) {
      const CallRecord call = make_call(i, arrays);
      auto [found, fresh] = group.try_emplace(call.comm_ordinal);
      StepIndexEntry& entry = found->second;
      if (fresh) {
        entry.group_offset = call_offsets[first];
        entry.collectives_before = collectives[call.comm_ordinal];
        entry.first_comm_seq = call.comm_seq;
      }
      if ((call.flags & (kCallInputFingerprint | kCallOutputFingerprint)) != 0) ++entry.fingerprinted_calls;
      entry.step_sources |= std::uint64_t{1} << static_cast<std::uint32_t>(call.step_source);
      if (call.op != OpId::kSend && call.op != OpId::kRecv) {
        ++collectives[call.comm_ordinal];
        continue;
      }
      std::uint64_t& count = pairs[{call.comm_ordinal, call.op, call.peer}];
      auto& listed = group_pairs[call.comm_ordinal];
      if (std::none_of(listed.begin(), listed.end(), [&](const StepIndexPair& pair) {
            return pair.op == static_cast<std::uint32_t>(call.op) && pair.peer == call.peer;
          })) {
        listed.push_back({0, call.peer, static_cast<std::uint32_t>(call.op), 0, count});
      }
      ++count;
    }
    for (auto& [ordinal, entry] : group) {
      const StepDigestRecord& digest = digests.at(next_digest++);
      entry.comm_ordinal = digest.comm_ordinal;
      entry.step = digest.step;
      entry.calls = digest.calls;
      entry.input_digest = digest.input_digest;
      entry.output_digest = digest.output_digest;
      for (StepIndexPair pair : group_pairs[ordinal]) {
        pair.entry = static_cast<std::uint32_t>(out.entries.size());
        out.pairs.push_back(pair);
      }
      out.entries.push_back(entry);
    }
    first = i;
  }
  return out;
}

// The length of a closed log's last step index record (0 when it has none).
std::uint64_t step_index_record_bytes(const std::string& path) {
  OpenedLog opened = LogReader::open_file(path);
  if (!opened.reader) return 0;
  const std::optional<StepIndex> index = opened.reader->read_step_index();
  if (!index) return 0;
  return index->end_offset - index->end_marker.step_index_offset;
}

std::vector<std::byte> file_bytes(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(chars.size());
  std::memcpy(bytes.data(), chars.data(), chars.size());
  return bytes;
}

std::unique_ptr<RecordWriter> create_or_fail(const LogLocation& location, WriterOptions options = {}) {
  CreatedWriter created = RecordWriter::create(location, make_header(0), std::move(options));
  EXPECT_TRUE(created.writer) << created.error;
  return std::move(created.writer);
}

// A closed log: 2 communicators, then calls 0..call_count-1.
std::string write_small_log(const TempDir& dir, std::uint64_t call_count) {
  const LogLocation location{dir.path(), "run", rank_log_file_name(0)};
  auto writer = create_or_fail(location);
  EXPECT_EQ(writer->append(make_communicator(0)), AppendStatus::kOk);
  EXPECT_EQ(writer->append(make_communicator(1)), AppendStatus::kOk);
  for (std::uint64_t i = 0; i < call_count; ++i) {
    CallArrays arrays;
    EXPECT_EQ(writer->append(make_call(i, arrays)), AppendStatus::kOk);
  }
  writer->close();
  return writer->path();
}

TEST(LogFormat, StableNumbersAndNames) {
  // The numbers are part of the format: written out here, not derived.
  EXPECT_EQ(static_cast<int>(OpId::kAllReduce), 1);
  EXPECT_EQ(static_cast<int>(OpId::kReduce), 2);
  EXPECT_EQ(static_cast<int>(OpId::kBroadcast), 3);
  EXPECT_EQ(static_cast<int>(OpId::kBcast), 4);
  EXPECT_EQ(static_cast<int>(OpId::kAllGather), 5);
  EXPECT_EQ(static_cast<int>(OpId::kReduceScatter), 6);
  EXPECT_EQ(static_cast<int>(OpId::kAlltoAll), 7);
  EXPECT_EQ(static_cast<int>(OpId::kGather), 8);
  EXPECT_EQ(static_cast<int>(OpId::kScatter), 9);
  EXPECT_EQ(static_cast<int>(OpId::kSend), 10);
  EXPECT_EQ(static_cast<int>(OpId::kRecv), 11);
  EXPECT_EQ(static_cast<int>(RecordType::kCommunicator), 1);
  EXPECT_EQ(static_cast<int>(RecordType::kCall), 2);
  EXPECT_EQ(static_cast<int>(RecordType::kTruncated), 3);
  EXPECT_EQ(static_cast<int>(RecordType::kEnd), 4);
  static_assert(op_id_from_nccl_name("ncclAlltoAll") == OpId::kAlltoAll);
  EXPECT_EQ(op_id_from_nccl_name("AllReduce"), OpId::kUnknown);
  EXPECT_EQ(op_id_from_nccl_name("ncclGroupStart"), OpId::kUnknown);
  EXPECT_EQ(op_name(OpId::kReduceScatter), "ReduceScatter");
  EXPECT_EQ(datatype_name(9), "bfloat16");
  EXPECT_EQ(datatype_name(12), "?");
  EXPECT_EQ(redop_name(4), "avg");
  EXPECT_EQ(redop_name(5), "user");
  EXPECT_EQ(result_name(0), "ncclSuccess");
  EXPECT_EQ(rank_log_file_name(3), "rank-00003.dnc");
  EXPECT_EQ(rank_log_file_name(123456), "rank-123456.dnc");
  // The checksum is XXH3-64 of the payload seeded with length, type and flags.
  const std::array<std::uint64_t, 2> payload = {1, 2};
  EXPECT_EQ(record_checksum(32, 2, 0, payload.data(), 16),
            XXH3_64bits_withSeed(payload.data(), 16, 32 | (std::uint64_t{2} << 32)));
}

TEST(CommunicatorId, EqualInputsGiveEqualIdsAndDifferentInputsDifferentOnes) {
  std::array<std::byte, 128> unique_id{};
  for (std::size_t i = 0; i < unique_id.size(); ++i) unique_id[i] = static_cast<std::byte>(i * 7);
  const std::uint64_t id = communicator_id_from_unique_id(unique_id);
  EXPECT_EQ(id, XXH3_64bits(unique_id.data(), unique_id.size()));
  unique_id[100] ^= std::byte{1};
  EXPECT_NE(communicator_id_from_unique_id(unique_id), id);
  const std::uint64_t split = communicator_id_from_parent(id, 0, 1);
  EXPECT_EQ(split, communicator_id_from_parent(id, 0, 1));
  EXPECT_NE(split, communicator_id_from_parent(id, 1, 1));
  EXPECT_NE(split, communicator_id_from_parent(id, 0, 2));
  EXPECT_NE(split, communicator_id_from_parent(id + 1, 0, 1));
  EXPECT_NE(split, 0u);
}

TEST(RecordWriter, RoundTripOfEveryRecordType) {
  TempDir dir;
  const LogLocation location{dir.path() + "/made/on/demand", "run-a", rank_log_file_name(5)};
  CreatedWriter created = RecordWriter::create(location, make_header(5));
  ASSERT_TRUE(created.writer) << created.error;
  RecordWriter& writer = *created.writer;
  EXPECT_EQ(writer.path(), location.dir + "/run-a/rank-00005.dnc");
  for (std::uint64_t c = 0; c < 3; ++c) EXPECT_EQ(writer.append(make_communicator(c)), AppendStatus::kOk);
  constexpr std::uint64_t kCalls = 200;
  for (std::uint64_t i = 0; i < kCalls; ++i) {
    CallArrays arrays;
    EXPECT_EQ(writer.append(make_call(i, arrays)), AppendStatus::kOk);
  }
  writer.flush();
  // 20 steps of 10 calls over 3 communicators: 3 digests each, the last step's written at close.
  const std::vector<StepDigestRecord> digests = expected_digests(kCalls, /*before_close=*/false);
  const std::uint64_t digests_before_close = expected_digests(kCalls, /*before_close=*/true).size();
  ASSERT_EQ(digests.size(), 60u);
  ASSERT_EQ(digests_before_close, 57u);
  EXPECT_EQ(writer.records_written(), kCalls + 3 + digests_before_close);
  const std::uint64_t used_before_close = writer.bytes_used();
  constexpr std::uint64_t kDigestRecordBytes = sizeof(RecordFrame) + sizeof(StepDigestRecord);
  writer.close();
  writer.close();  // idempotent
  CallArrays arrays;
  EXPECT_EQ(writer.append(make_call(0, arrays)), AppendStatus::kStopped);
  EXPECT_TRUE(writer.stop_reason().empty());

  struct stat file_stat {};
  ASSERT_EQ(stat(writer.path().c_str(), &file_stat), 0);
  EXPECT_EQ(file_stat.st_mode & 0777, 0600u);
  const std::uint64_t index_bytes = step_index_record_bytes(writer.path());
  EXPECT_EQ(static_cast<std::uint64_t>(file_stat.st_size),
            used_before_close + (digests.size() - digests_before_close) * kDigestRecordBytes + index_bytes +
                sizeof(RecordFrame) + sizeof(EndRecord))
      << "the last step's digests, the step index, then cut to its end marker";
  struct stat dir_stat {};
  ASSERT_EQ(stat((location.dir + "/run-a").c_str(), &dir_stat), 0);
  EXPECT_EQ(dir_stat.st_mode & 0777, 0700u);
  ASSERT_EQ(stat(location.dir.c_str(), &dir_stat), 0);
  EXPECT_EQ(dir_stat.st_mode & 0777, 0700u);

  const std::vector<std::byte> bytes = file_bytes(writer.path());
  ASSERT_GE(bytes.size(), 8u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(bytes.data()), 8), "DNCCLOG1") << "little-endian magic";

  OpenedLog opened = LogReader::open_file(writer.path());
  ASSERT_TRUE(opened.reader) << opened.error;
  const LogHeader& header = opened.reader->header();
  const LogHeader expected = make_header(5);
  EXPECT_EQ(header.format_version, kFormatVersion);
  EXPECT_EQ(header.start_time_ns, expected.start_time_ns);
  EXPECT_EQ(header.rank, 5u);
  EXPECT_EQ(header.rank_source, RankSource::kEnvironment);
  EXPECT_EQ(header.world_size, 16u);
  EXPECT_EQ(header.pid, 4242u);
  EXPECT_EQ(header.nccl_version, 22809u);
  EXPECT_EQ(header.fingerprint_version, 3u);
  EXPECT_EQ(header.detnccl_version, 100u);
  EXPECT_EQ(header.host, expected.host);
  EXPECT_EQ(header.detnccl_version_text, expected.detnccl_version_text);
  EXPECT_EQ(header.run, expected.run);
  EXPECT_EQ(header.config_text, expected.config_text);
  EXPECT_EQ(header.nccl_environment, expected.nccl_environment);

  const ReadLog log = read_all(*opened.reader);
  ASSERT_EQ(log.records.size(), kCalls + 3);
  for (std::uint64_t c = 0; c < 3; ++c) {
    const auto* comm = std::get_if<CommunicatorRecord>(&log.records[c].record);
    ASSERT_NE(comm, nullptr);
    EXPECT_EQ(*comm, make_communicator(c));
  }
  for (std::uint64_t i = 0; i < kCalls; ++i) EXPECT_TRUE(is_call(log.records[3 + i], i));
  EXPECT_EQ(log.end.kind, LogEndKind::kClosed) << log.end.message;
  EXPECT_EQ(log.end.end_marker.records_written, kCalls + 3 + digests.size() + 1) << "and one step index record";
  EXPECT_GT(log.end.end_marker.end_time_ns, 0u);
  EXPECT_EQ(log.end.offset,
            used_before_close + (digests.size() - digests_before_close) * kDigestRecordBytes + index_bytes);
  EXPECT_EQ(log.digests, digests);

  // Asked for them, the reader hands the digests out in place: each step's after its last call, before the next
  // step's first.
  OpenedLog again = LogReader::open_file(writer.path());
  ASSERT_TRUE(again.reader) << again.error;
  again.reader->return_step_digests(true);
  LogRecord record;
  std::uint64_t calls_seen = 0;
  std::size_t digests_seen = 0;
  std::uint64_t last_call_step = 0;
  while (again.reader->next(record)) {
    if (const auto* call = std::get_if<CallRecord>(&record.record)) {
      EXPECT_TRUE(calls_seen == 0 || digests_seen == 3 * call->step) << "call " << call->seq;
      last_call_step = call->step;
      ++calls_seen;
    } else if (const auto* digest = std::get_if<StepDigestRecord>(&record.record)) {
      ASSERT_LT(digests_seen, digests.size());
      EXPECT_EQ(*digest, digests[digests_seen]);
      EXPECT_EQ(digest->step, last_call_step) << "a step's digests come right after its calls";
      ++digests_seen;
    }
  }
  EXPECT_EQ(calls_seen, kCalls);
  EXPECT_EQ(digests_seen, digests.size());
  EXPECT_TRUE(again.reader->step_digests().empty()) << "handed out, not kept";
}

// The digests fold exactly what diff compares, each field into its side (what went in, what came out); nothing else
// changes them.
TEST(StepDigest, FoldsWhatDiffComparesAndNothingElse) {
  CallArrays arrays;
  const CallRecord base = make_call(14, arrays);  // both fingerprints and a PreMulSum scalar recorded
  ASSERT_TRUE(base.flags & kCallPreMulSumScalar);
  ASSERT_EQ(base.result, 0);
  const auto digests = [](const CallFields& call) {
    return std::pair{fold_call_input(kStepDigestSeed, call), fold_call_output(kStepDigestSeed, call)};
  };
  const auto [input, output] = digests(base);
  enum Changes { kNeither, kInput, kOutput };
  const auto changes = [&](auto change) {
    CallFields call = base;
    change(call);
    const auto [i, o] = digests(call);
    EXPECT_FALSE(i != input && o != output) << "one side only";
    return i != input ? kInput : o != output ? kOutput : kNeither;
  };
  EXPECT_EQ(changes([](CallFields& c) { c.op = OpId::kBroadcast; }), kInput);
  EXPECT_EQ(changes([](CallFields& c) { c.count += 1; }), kInput);
  EXPECT_EQ(changes([](CallFields& c) { c.datatype ^= 1; }), kInput);
  EXPECT_EQ(changes([](CallFields& c) { c.redop += 1; }), kInput);
  EXPECT_EQ(changes([](CallFields& c) { c.peer += 1; }), kInput);
  EXPECT_EQ(changes([](CallFields& c) { c.premulsum_scalar ^= 1; }), kInput);
  EXPECT_EQ(changes([](CallFields& c) { c.input_fingerprint ^= 1; }), kInput);
  EXPECT_EQ(changes([](CallFields& c) { c.flags &= static_cast<std::uint16_t>(~kCallInputFingerprint); }), kInput);
  EXPECT_EQ(changes([](CallFields& c) { c.result = 3; }), kOutput);
  EXPECT_EQ(changes([](CallFields& c) { c.output_fingerprint ^= 1; }), kOutput);
  EXPECT_EQ(changes([](CallFields& c) { c.flags &= static_cast<std::uint16_t>(~kCallOutputFingerprint); }), kOutput);
  EXPECT_EQ(changes([](CallFields& c) { c.seq += 5; }), kNeither);
  EXPECT_EQ(changes([](CallFields& c) { c.comm_seq += 5; }), kNeither);
  EXPECT_EQ(changes([](CallFields& c) { c.group_id += 5; }), kNeither);
  EXPECT_EQ(changes([](CallFields& c) { c.flags ^= kCallInPlace | kCallDeterministic; }), kNeither);
  EXPECT_EQ(changes([](CallFields& c) { c.algorithm += 1; }), kNeither);
  EXPECT_EQ(changes([](CallFields& c) { c.result = 7; }), kNeither) << "ncclInProgress is ncclSuccess to diff";
  // Fingerprints not computed are not compared, whatever the field holds.
  CallFields unhashed = base;
  unhashed.flags &= static_cast<std::uint16_t>(~(kCallInputFingerprint | kCallOutputFingerprint));
  CallFields other = unhashed;
  other.input_fingerprint ^= 0xff;
  other.output_fingerprint ^= 0xff;
  EXPECT_EQ(digests(unhashed), digests(other));
  // Order matters: a and b folded in either order differ.
  const CallRecord next = make_call(15, arrays);
  EXPECT_NE(fold_call_input(fold_call_input(kStepDigestSeed, base), next),
            fold_call_input(fold_call_input(kStepDigestSeed, next), base));
}

// A log cut short by a crash lacks its open step's digests: the reader recomputes them from that step's call records,
// exactly as the writer would have written them at close.
TEST(StepDigest, TheReaderRecomputesATornStepsDigestsFromItsCalls) {
  TempDir dir;
  auto writer = create_or_fail({dir.path(), "run", rank_log_file_name(0)});
  ASSERT_TRUE(writer);
  for (std::uint64_t c = 0; c < 3; ++c) EXPECT_EQ(writer->append(make_communicator(c)), AppendStatus::kOk);
  constexpr std::uint64_t kCalls = 47;  // steps 0-3 whole, step 4 open (7 calls on all 3 communicators)
  for (std::uint64_t i = 0; i < kCalls; ++i) {
    CallArrays arrays;
    EXPECT_EQ(writer->append(make_call(i, arrays)), AppendStatus::kOk);
  }
  const std::vector<std::byte> killed = file_bytes(writer->path());  // as kill -9 would leave the file now
  OpenedLog opened = LogReader::from_bytes(killed);
  ASSERT_TRUE(opened.reader) << opened.error;
  const ReadLog log = read_all(*opened.reader);
  EXPECT_EQ(log.end.kind, LogEndKind::kTornTail) << log.end.message;
  ASSERT_EQ(expected_digests(kCalls, /*before_close=*/true).size(), 12u);
  EXPECT_EQ(log.digests, expected_digests(kCalls, /*before_close=*/false));
  EXPECT_EQ(opened.reader->step_digests_recomputed(), 3u);
  // A log that closed cleanly has every digest written, and nothing recomputed.
  writer->close();
  OpenedLog closed = LogReader::open_file(writer->path());
  ASSERT_TRUE(closed.reader) << closed.error;
  EXPECT_EQ(read_all(*closed.reader).digests, expected_digests(kCalls, false));
  EXPECT_EQ(closed.reader->step_digests_recomputed(), 0u);
}

// DETNCCL_TRACE=steps: the writer folds every call into its digests but writes no call record.
TEST(StepDigest, AWriterWithoutCallsWritesOnlyCommunicatorsAndDigests) {
  TempDir dir;
  WriterOptions options;
  options.write_calls = false;
  auto writer = create_or_fail({dir.path(), "run", rank_log_file_name(0)}, options);
  ASSERT_TRUE(writer);
  for (std::uint64_t c = 0; c < 3; ++c) EXPECT_EQ(writer->append(make_communicator(c)), AppendStatus::kOk);
  constexpr std::uint64_t kCalls = 95;
  for (std::uint64_t i = 0; i < kCalls; ++i) {
    CallArrays arrays;
    EXPECT_EQ(writer->append(make_call(i, arrays)), AppendStatus::kOk);
  }
  writer->close();
  OpenedLog opened = LogReader::open_file(writer->path());
  ASSERT_TRUE(opened.reader) << opened.error;
  const ReadLog log = read_all(*opened.reader);
  EXPECT_EQ(log.end.kind, LogEndKind::kClosed) << log.end.message;
  ASSERT_EQ(log.records.size(), 3u) << "communicators only";
  EXPECT_EQ(log.digests, expected_digests(kCalls, /*before_close=*/false));
  EXPECT_EQ(log.digests.size(), 30u) << "10 steps, each with calls on all 3 communicators";
}

TEST(LogReader, RejectsWhatItCannotRead) {
  TempDir dir;
  const std::vector<std::byte> good = file_bytes(write_small_log(dir, 3));
  ASSERT_TRUE(LogReader::from_bytes(good).reader);

  std::vector<std::byte> swapped = good;
  const std::uint64_t swapped_magic = __builtin_bswap64(kMagic);
  std::memcpy(swapped.data(), &swapped_magic, 8);
  EXPECT_NE(LogReader::from_bytes(swapped).error.find("other byte order"), std::string::npos)
      << LogReader::from_bytes(swapped).error;

  std::vector<std::byte> newer = good;
  const std::uint32_t version = kFormatVersion + 1;
  std::memcpy(newer.data() + offsetof(FileHeaderFixed, format_version), &version, 4);
  EXPECT_NE(LogReader::from_bytes(newer).error.find("newer detnccl"), std::string::npos)
      << LogReader::from_bytes(newer).error;

  std::vector<std::byte> damaged = good;
  damaged[offsetof(FileHeaderFixed, pid)] ^= std::byte{1};
  EXPECT_NE(LogReader::from_bytes(damaged).error.find("checksum"), std::string::npos);

  const std::string text = "#!/bin/sh\necho not a log\n";
  EXPECT_NE(LogReader::from_bytes(std::as_bytes(std::span(text))).error.find("not a detnccl log"), std::string::npos);
  EXPECT_FALSE(LogReader::from_bytes({}).error.empty());
  EXPECT_FALSE(LogReader::open_file(dir.path() + "/missing.dnc").error.empty());
  EXPECT_FALSE(LogReader::open_file(dir.path()).error.empty()) << "a directory is not a log";
}

// A writer killed between creating its file (O_EXCL) and writing the header leaves no bytes, or the zeros of its
// reservation: "no header", told apart from anything else that is not a log, from a bounded read (the first
// kNoHeaderScanBytes and the last kNoHeaderTailBytes).
TEST(LogReader, AFileWithoutAHeaderIsToldApartFromOtherFilesThatAreNotLogs) {
  TempDir dir;
  // A file of `size` zero bytes (sparse), with byte `nonzero_at` set to 1 when given.
  const auto zeros = [&](const std::string& name, std::uint64_t size, std::optional<std::uint64_t> nonzero_at = {}) {
    const std::string path = dir.path() + "/" + name;
    std::ofstream(path, std::ios::binary).close();
    fs::resize_file(path, size);
    if (nonzero_at) {
      std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
      file.seekp(static_cast<std::streamoff>(*nonzero_at));
      file.put('\x01');
    }
    return LogReader::open_file(path);
  };
  const OpenedLog empty = zeros("empty.dnc", 0);
  EXPECT_FALSE(empty.reader);
  EXPECT_TRUE(empty.no_header);
  EXPECT_NE(empty.error.find("empty.dnc: no header: the file is empty"), std::string::npos) << empty.error;
  EXPECT_NE(empty.error.find("before writing its header"), std::string::npos) << empty.error;

  // The writer's first reservation, nothing written; fewer bytes than a magic number, too.
  for (const std::uint64_t size : {std::uint64_t{1} << 20, std::uint64_t{5}}) {
    const OpenedLog reserved = zeros("reserved.dnc", size);
    EXPECT_FALSE(reserved.reader);
    EXPECT_TRUE(reserved.no_header) << size;
    EXPECT_NE(reserved.error.find("the file's " + std::to_string(size) + " bytes are all zero"), std::string::npos)
        << reserved.error;
  }

  // Longer than what is read: the message names the bytes checked.
  const std::uint64_t big = 4 * kNoHeaderScanBytes + 8;
  const OpenedLog long_zeros = zeros("long.dnc", big);
  EXPECT_TRUE(long_zeros.no_header);
  const std::string checked = "the file's first " + std::to_string(kNoHeaderScanBytes) + " and last " +
                              std::to_string(kNoHeaderTailBytes) + " bytes (of " + std::to_string(big) + ") are zero";
  EXPECT_NE(long_zeros.error.find(checked), std::string::npos) << long_zeros.error;

  // One byte that is not zero, in the header area or in the last bytes: not a log, and not "no header" either.
  for (const std::uint64_t at : {std::uint64_t{0}, std::uint64_t{8}, kNoHeaderScanBytes - 1}) {
    const OpenedLog stray = zeros("stray.dnc", kNoHeaderScanBytes, at);
    EXPECT_FALSE(stray.reader);
    EXPECT_FALSE(stray.no_header) << at;
    EXPECT_NE(stray.error.find("not a detnccl log"), std::string::npos) << stray.error;
  }
  const OpenedLog stray_tail = zeros("tail.dnc", big, big - 1);
  EXPECT_FALSE(stray_tail.no_header);
  EXPECT_NE(stray_tail.error.find("not a detnccl log"), std::string::npos) << stray_tail.error;

  // The same from bytes in memory; and text, a damaged header or a valid log are never "no header".
  EXPECT_TRUE(LogReader::from_bytes({}).no_header);
  const std::vector<std::byte> twelve_zeros(12);
  EXPECT_TRUE(LogReader::from_bytes(twelve_zeros).no_header);
  const std::string text = "not a log";
  EXPECT_FALSE(LogReader::from_bytes(std::as_bytes(std::span(text))).no_header);
  std::vector<std::byte> good = file_bytes(write_small_log(dir, 2));
  EXPECT_FALSE(LogReader::from_bytes(good).no_header);
  good[offsetof(FileHeaderFixed, pid)] ^= std::byte{1};
  const OpenedLog damaged = LogReader::from_bytes(good);
  EXPECT_FALSE(damaged.no_header);
  EXPECT_NE(damaged.error.find("checksum"), std::string::npos) << damaged.error;
}

TEST(LogReader, FlippedByteIsCorruptionAtThatRecord) {
  TempDir dir;
  const std::string path = write_small_log(dir, 20);
  const std::vector<std::byte> good = file_bytes(path);
  OpenedLog opened = LogReader::from_bytes(good);
  ASSERT_TRUE(opened.reader) << opened.error;
  const ReadLog original = read_all(*opened.reader);
  ASSERT_EQ(original.records.size(), 22u);
  const std::uint64_t target = original.records[12].offset;  // call 10

  for (const std::uint64_t byte_in_record : {std::uint64_t{40}, std::uint64_t{3}, std::uint64_t{9}}) {
    std::vector<std::byte> bad = good;
    bad[target + byte_in_record] ^= std::byte{0x40};
    OpenedLog reopened = LogReader::from_bytes(bad);
    ASSERT_TRUE(reopened.reader) << reopened.error;
    const ReadLog log = read_all(*reopened.reader);
    EXPECT_EQ(log.end.kind, LogEndKind::kCorrupt) << byte_in_record << ": " << log.end.message;
    EXPECT_EQ(log.end.offset, target);
    EXPECT_NE(log.end.message.find("offset " + std::to_string(target)), std::string::npos) << log.end.message;
    ASSERT_EQ(log.records.size(), 12u);
    for (std::uint64_t i = 0; i < 10; ++i) EXPECT_TRUE(is_call(log.records[2 + i], i));
  }
}

TEST(LogReader, EveryTruncationYieldsAPrefixAndNeverCrashes) {
  TempDir dir;
  const std::vector<std::byte> good = file_bytes(write_small_log(dir, 6));
  OpenedLog full_reader = LogReader::from_bytes(good);
  ASSERT_TRUE(full_reader.reader);
  const ReadLog full = read_all(*full_reader.reader);
  ASSERT_EQ(full.end.kind, LogEndKind::kClosed);

  std::uint64_t headers_refused = 0;
  for (std::size_t length = 0; length <= good.size(); ++length) {
    OpenedLog opened = LogReader::from_bytes(std::span(good).first(length));
    if (!opened.reader) {
      EXPECT_FALSE(opened.error.empty());
      ++headers_refused;
      continue;
    }
    const ReadLog log = read_all(*opened.reader);
    ASSERT_LE(log.records.size(), full.records.size());
    for (std::size_t r = 0; r < log.records.size(); ++r) {
      EXPECT_EQ(log.records[r].offset, full.records[r].offset);
    }
    if (length == good.size()) {
      EXPECT_EQ(log.end.kind, LogEndKind::kClosed);
    } else {
      EXPECT_EQ(log.end.kind, LogEndKind::kTornTail) << length << ": " << log.end.message;
    }
  }
  EXPECT_GT(headers_refused, 64u);
  EXPECT_LT(headers_refused, good.size());
}

TEST(LogReader, RandomDamageNeverCrashesAndKeepsTheUndamagedPrefix) {
  TempDir dir;
  const std::vector<std::byte> good = file_bytes(write_small_log(dir, 12));
  OpenedLog full_reader = LogReader::from_bytes(good);
  ASSERT_TRUE(full_reader.reader);
  const ReadLog full = read_all(*full_reader.reader);
  std::mt19937_64 random(2024);
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<std::byte> bad = good;
    std::size_t first_damage = bad.size();
    const int flips = 1 + static_cast<int>(random() % 4);
    for (int f = 0; f < flips; ++f) {
      const std::size_t at = random() % bad.size();
      bad[at] ^= static_cast<std::byte>(1 + random() % 255);
      first_damage = std::min(first_damage, at);
    }
    if (random() % 4 == 0) bad.resize(random() % bad.size());
    OpenedLog opened = LogReader::from_bytes(bad);
    if (!opened.reader) continue;
    const ReadLog log = read_all(*opened.reader);
    EXPECT_NE(log.end.kind, LogEndKind::kNotReached);
    for (std::size_t r = 0; r < log.records.size() && r < full.records.size(); ++r) {
      if (log.records[r].offset + 16 + 112 > first_damage) break;  // from here on, damaged bytes may be inside
      EXPECT_EQ(log.records[r].offset, full.records[r].offset);
    }
  }
}

TEST(LogReader, UnpublishedLastRecordIsATornTail) {
  // What a writer killed between filling a record and publishing its length leaves: the record's bytes with a zero
  // length, then the zeros of reserved space.
  TempDir dir;
  std::vector<std::byte> bytes = file_bytes(write_small_log(dir, 5));
  OpenedLog opened = LogReader::from_bytes(bytes);
  ASSERT_TRUE(opened.reader);
  const ReadLog original = read_all(*opened.reader);
  const std::uint64_t last_call = original.records.back().offset;
  bytes.resize(original.end.offset);  // no end marker
  std::memset(bytes.data() + last_call, 0, 4);
  bytes.resize(bytes.size() + 4096, std::byte{0});
  OpenedLog reopened = LogReader::from_bytes(bytes);
  ASSERT_TRUE(reopened.reader);
  const ReadLog log = read_all(*reopened.reader);
  EXPECT_EQ(log.end.kind, LogEndKind::kTornTail) << log.end.message;
  EXPECT_EQ(log.end.offset, last_call);
  EXPECT_NE(log.end.message.find("unfinished record"), std::string::npos) << log.end.message;
  ASSERT_EQ(log.records.size(), 6u);
  for (std::uint64_t i = 0; i < 4; ++i) EXPECT_TRUE(is_call(log.records[2 + i], i));
}

TEST(LogReader, UnknownRecordTypesAreSkipped) {
  TempDir dir;
  std::vector<std::byte> bytes = file_bytes(write_small_log(dir, 4));
  OpenedLog opened = LogReader::from_bytes(bytes);
  ASSERT_TRUE(opened.reader);
  const ReadLog original = read_all(*opened.reader);
  const std::uint64_t at = original.records[3].offset;  // call 1 becomes a record of a type from the future
  RecordFrame frame;
  std::memcpy(&frame, bytes.data() + at, sizeof(frame));
  frame.type = 99;
  frame.checksum =
      record_checksum(frame.length, frame.type, frame.fixed_bytes, bytes.data() + at + 16, frame.length - 16);
  std::memcpy(bytes.data() + at, &frame, sizeof(frame));
  OpenedLog reopened = LogReader::from_bytes(bytes);
  ASSERT_TRUE(reopened.reader);
  const ReadLog log = read_all(*reopened.reader);
  EXPECT_EQ(log.end.kind, LogEndKind::kClosed) << log.end.message;
  EXPECT_EQ(log.unknown, 1u);
  ASSERT_EQ(log.records.size(), 5u);
  EXPECT_TRUE(is_call(log.records[2], 0));
  EXPECT_TRUE(is_call(log.records[3], 2));
}

TEST(RecordWriter, KillDashNineLeavesEveryCompleteRecordAndATornTail) {
  TempDir dir;
  const LogLocation location{dir.path(), "killed", rank_log_file_name(1)};
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(ready[0]);
    WriterOptions options;
    options.initial_bytes = 64 << 10;  // many growths while writing
    CreatedWriter created = RecordWriter::create(location, make_header(1), options);
    if (!created.writer) _exit(2);
    for (std::uint64_t i = 0; i < 400000; ++i) {
      CallArrays arrays;
      if (created.writer->append(make_call(i, arrays)) != AppendStatus::kOk) _exit(3);
      if (i == 2000 && write(ready[1], "x", 1) != 1) _exit(4);
    }
    while (true) pause();  // never closes: the parent kills it
  }
  close(ready[1]);
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1) << "the writer child failed";
  close(ready[0]);
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));

  OpenedLog opened = LogReader::open_file(location.dir + "/killed/" + location.file_name);
  ASSERT_TRUE(opened.reader) << opened.error;
  const ReadLog log = read_all(*opened.reader);
  EXPECT_GT(log.records.size(), 2000u);
  for (std::uint64_t i = 0; i < log.records.size(); ++i) ASSERT_TRUE(is_call(log.records[i], i));
  EXPECT_EQ(log.end.kind, LogEndKind::kTornTail) << log.end.message;
  EXPECT_NE(log.end.message.find("end marker"), std::string::npos) << log.end.message;
}

TEST(RecordWriter, FileSizeLimitStopsTracingButNotTheCaller) {
  TempDir dir;
  const LogLocation location{dir.path(), "full", rank_log_file_name(0)};
  constexpr rlim_t kLimit = 256 << 10;
  int report[2];
  ASSERT_EQ(pipe(report), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // A full disk, simulated: growing past RLIMIT_FSIZE fails with EFBIG (SIGXFSZ ignored, as a job would).
    signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{kLimit, kLimit};
    if (setrlimit(RLIMIT_FSIZE, &limit) != 0) _exit(2);
    std::atomic<int> reports{0};
    WriterOptions options;
    options.initial_bytes = 64 << 10;
    options.max_growth_bytes = 64 << 10;
    options.on_stop = [&reports](std::string_view message) {
      if (message.find("File too large") != std::string_view::npos)
        ++reports;
      else
        reports += 100;
    };
    CreatedWriter created = RecordWriter::create(location, make_header(0), options);
    if (!created.writer) _exit(3);
    std::uint64_t written = 0;
    for (std::uint64_t i = 0; i < 100000; ++i) {
      CallArrays arrays;
      if (created.writer->append(make_call(i, arrays)) != AppendStatus::kOk) break;
      ++written;
    }
    CallArrays arrays;
    if (created.writer->append(make_call(written, arrays)) != AppendStatus::kStopped) _exit(4);
    if (!created.writer->stopped() || reports.load() != 1) _exit(5);
    created.writer->close();
    if (write(report[1], &written, sizeof(written)) != sizeof(written)) _exit(6);
    _exit(0);
  }
  close(report[1]);
  std::uint64_t written = 0;
  ASSERT_EQ(read(report[0], &written, sizeof(written)), static_cast<ssize_t>(sizeof(written)));
  close(report[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << "the child's checks failed (see the exit codes in the test)";
  EXPECT_GT(written, 100u);

  const std::string path = location.dir + "/full/" + location.file_name;
  EXPECT_LE(fs::file_size(path), kLimit);
  OpenedLog opened = LogReader::open_file(path);
  ASSERT_TRUE(opened.reader) << opened.error;
  const ReadLog log = read_all(*opened.reader);
  ASSERT_EQ(log.records.size(), written);
  for (std::uint64_t i = 0; i < written; ++i) ASSERT_TRUE(is_call(log.records[i], i));
  EXPECT_EQ(log.end.kind, LogEndKind::kTruncated) << log.end.message;
  EXPECT_EQ(log.end.truncation.reason, TruncationReason::kFileTooLarge);
  EXPECT_EQ(log.end.truncation.error_number, EFBIG);
  EXPECT_NE(log.end.truncation.text.find("the log is marked truncated"), std::string::npos);
  EXPECT_NE(log.end.message.find("truncated"), std::string::npos);
}

#if defined(__x86_64__) || defined(__aarch64__)
// Makes this process's file system look nearly full, for the writer's posix_fallocate: a fallocate of more than
// max_bytes at once, or starting at or beyond free_bytes, fails with ENOSPC (as a disk with about free_bytes left
// does); everything else runs as usual.
bool install_nearly_full_disk(std::uint32_t max_bytes, std::uint32_t free_bytes) {
  constexpr std::uint32_t kLow = 0;   // offset of a u64 argument's low word (little-endian)
  constexpr std::uint32_t kHigh = 4;  // and of its high word
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_fallocate, 0, 8),                     // not fallocate: allow
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[3]) + kHigh),  // length >= 4 GiB
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 7),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[3]) + kLow),  // length > max_bytes
      BPF_JUMP(BPF_JMP | BPF_JGT | BPF_K, max_bytes, 5, 0),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[2]) + kHigh),  // offset >= 4 GiB
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 3),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[2]) + kLow),  // offset >= free_bytes
      BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, free_bytes, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSPC),
  };
  const sock_fprog program{static_cast<unsigned short>(std::size(filter)), filter};
  return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program, 0, 0) == 0;
}

TEST(RecordWriter, ANearlyFullDiskStillGetsALogThatEndsTruncated) {
  // Less free space than the 1 MiB the log starts with: the writer takes what fits, as it does when growing, so the
  // log holds the header and every call that fit, then a truncation marker saying the disk is full.
  constexpr std::uint32_t kFree = 192 << 10;
  TempDir dir;
  const LogLocation location{dir.path(), "nearly-full", rank_log_file_name(0)};
  int report[2];
  ASSERT_EQ(pipe(report), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(report[0]);
    if (!install_nearly_full_disk(64 << 10, kFree)) _exit(2);
    std::atomic<int> reports{0};
    WriterOptions options;  // the default initial size: 1 MiB
    options.on_stop = [&reports](std::string_view message) {
      reports += message.find("No space left on device") != std::string_view::npos ? 1 : 100;
    };
    CreatedWriter created = RecordWriter::create(location, make_header(0), options);
    if (!created.writer) _exit(3);
    if (created.writer->append(make_communicator(0)) != AppendStatus::kOk) _exit(4);
    std::uint64_t written = 0;
    for (std::uint64_t i = 0; i < 100000; ++i) {
      CallArrays arrays;
      if (created.writer->append(make_call(i, arrays)) != AppendStatus::kOk) break;
      ++written;
    }
    if (!created.writer->stopped() || reports.load() != 1) _exit(5);
    created.writer->close();
    if (write(report[1], &written, sizeof(written)) != sizeof(written)) _exit(6);
    _exit(0);
  }
  close(report[1]);
  std::uint64_t written = 0;
  const ssize_t got = read(report[0], &written, sizeof(written));
  close(report[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the writer child died of signal " << WTERMSIG(status);
  if (WEXITSTATUS(status) == 2) GTEST_SKIP() << "cannot install a seccomp filter here";
  ASSERT_EQ(WEXITSTATUS(status), 0) << "the child's checks failed (see the exit codes in the test)";
  ASSERT_EQ(got, static_cast<ssize_t>(sizeof(written)));
  EXPECT_GT(written, 100u) << "the log took what fit";

  const std::string path = location.dir + "/nearly-full/" + location.file_name;
  EXPECT_LE(fs::file_size(path), kFree + (64 << 10));
  OpenedLog opened = LogReader::open_file(path);
  ASSERT_TRUE(opened.reader) << opened.error;
  EXPECT_EQ(opened.reader->header().rank, 0u);
  const ReadLog log = read_all(*opened.reader);
  ASSERT_EQ(log.records.size(), written + 1);
  ASSERT_TRUE(std::holds_alternative<CommunicatorRecord>(log.records[0].record));
  for (std::uint64_t i = 0; i < written; ++i) ASSERT_TRUE(is_call(log.records[i + 1], i));
  EXPECT_EQ(log.end.kind, LogEndKind::kTruncated) << log.end.message;
  EXPECT_EQ(log.end.truncation.reason, TruncationReason::kDiskFull);
  EXPECT_EQ(log.end.truncation.error_number, ENOSPC);
}

TEST(RecordWriter, ADiskWithoutRoomForTheHeaderLeavesNoFileAndSaysWhy) {
  // Not even the header and the truncation marker's reserve fit: no log (an empty file would block a rerun).
  TempDir dir;
  const LogLocation location{dir.path(), "full", rank_log_file_name(0)};
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (!install_nearly_full_disk(0, 0)) _exit(2);
    CreatedWriter created = RecordWriter::create(location, make_header(0));
    if (created.writer) _exit(3);
    if (created.error.find("cannot write the header") == std::string::npos ||
        created.error.find("No space left on device") == std::string::npos) {
      _exit(4);
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the writer child died of signal " << WTERMSIG(status);
  if (WEXITSTATUS(status) == 2) GTEST_SKIP() << "cannot install a seccomp filter here";
  ASSERT_EQ(WEXITSTATUS(status), 0) << "the child's checks failed (see the exit codes in the test)";
  EXPECT_FALSE(fs::exists(location.dir + "/full/" + location.file_name));
}
#endif

TEST(RecordWriter, ThreadedAppendsAreAllRecoveredIntact) {
  TempDir dir;
  const LogLocation location{dir.path(), "threads", rank_log_file_name(0)};
  WriterOptions options;
  options.initial_bytes = 16 << 10;
  auto writer = create_or_fail(location, options);
  constexpr std::uint64_t kThreads = 4;
  constexpr std::uint64_t kPerThread = 2500;
  constexpr std::uint64_t kStride = 1000000;  // call numbers of thread t: t * kStride + i
  std::vector<std::thread> threads;
  for (std::uint64_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&writer, t] {
      for (std::uint64_t i = 0; i < kPerThread; ++i) {
        CallArrays arrays;
        EXPECT_EQ(writer->append(make_call(t * kStride + i, arrays)), AppendStatus::kOk);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  writer->close();

  OpenedLog opened = LogReader::open_file(writer->path());
  ASSERT_TRUE(opened.reader) << opened.error;
  const ReadLog log = read_all(*opened.reader);
  EXPECT_EQ(log.end.kind, LogEndKind::kClosed) << log.end.message;
  ASSERT_EQ(log.records.size(), kThreads * kPerThread);
  std::vector<std::uint64_t> next(kThreads, 0);
  for (const LogRecord& record : log.records) {
    const auto& call = std::get<CallRecord>(record.record);
    const std::uint64_t t = call.seq / kStride;
    ASSERT_LT(t, kThreads);
    ASSERT_EQ(call.seq % kStride, next[t]) << "thread " << t << "'s calls out of order or missing";
    ASSERT_TRUE(is_call(record, call.seq));
    ++next[t];
  }
}

TEST(RecordWriter, OversizedSegmentDigestsAreDroppedNotTheRecord) {
  TempDir dir;
  auto writer = create_or_fail({dir.path(), "big", rank_log_file_name(0)});
  CallArrays arrays;
  CallRecord call = make_call(8, arrays);  // 0 input blocks, 4 output blocks
  const std::vector<std::uint64_t> huge(kMaxRecordBytes / 8 + 1, 7);
  call.input_segments = huge;
  EXPECT_EQ(writer->append(call), AppendStatus::kSegmentsDropped);
  writer->close();
  OpenedLog opened = LogReader::open_file(writer->path());
  ASSERT_TRUE(opened.reader) << opened.error;
  const ReadLog log = read_all(*opened.reader);
  ASSERT_EQ(log.records.size(), 1u);
  const auto& read_call = std::get<CallRecord>(log.records[0].record);
  EXPECT_TRUE(read_call.flags & kCallSegmentsDropped);
  EXPECT_TRUE(read_call.input_segments.empty());
  EXPECT_TRUE(read_call.output_segments.empty());
  EXPECT_TRUE(std::ranges::equal(read_call.output_blocks, arrays.output_blocks));
}

TEST(RecordWriter, SameRunNameTwiceIsRefusedAndNothingIsOverwritten) {
  TempDir dir;
  const std::string path = write_small_log(dir, 3);
  const std::vector<std::byte> before = file_bytes(path);
  CreatedWriter again = RecordWriter::create({dir.path(), "run", rank_log_file_name(0)}, make_header(0));
  EXPECT_FALSE(again.writer);
  EXPECT_NE(again.error.find("already exists"), std::string::npos) << again.error;
  EXPECT_NE(again.error.find("DETNCCL_RUN"), std::string::npos) << again.error;
  EXPECT_EQ(file_bytes(path), before);
  // Another rank of the same run shares the run directory.
  CreatedWriter other_rank = RecordWriter::create({dir.path(), "run", rank_log_file_name(1)}, make_header(1));
  EXPECT_TRUE(other_rank.writer) << other_rank.error;
}

// A rerun with more ranks under the name of an earlier run: its ranks beyond the earlier world find their files
// free, but the run directory's rank-0 log says another world size and predates the process: refused, nothing added.
TEST(RecordWriter, ARankOfALargerRerunIsNotAddedToAnEarlierJobsRunDirectory) {
  TempDir dir;
  const auto now_ns = [] {
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count());
  };
  LogHeader earlier = make_header(0);
  earlier.world_size = 2;  // make_header's start time is in 2023: long before this process
  CreatedWriter rank_0 = RecordWriter::create({dir.path(), "run", rank_log_file_name(0)}, earlier);
  ASSERT_TRUE(rank_0.writer) << rank_0.error;
  rank_0.writer->close();

  LogHeader rerun = make_header(2);
  rerun.world_size = 4;
  CreatedWriter refused = RecordWriter::create({dir.path(), "run", rank_log_file_name(2)}, rerun);
  EXPECT_FALSE(refused.writer);
  EXPECT_NE(refused.error.find("holds the logs of an earlier job of 2 ranks (this one has 4)"), std::string::npos)
      << refused.error;
  EXPECT_NE(refused.error.find("DETNCCL_RUN"), std::string::npos) << refused.error;
  EXPECT_FALSE(fs::exists(dir.path() + "/run/" + rank_log_file_name(2))) << "nothing added to the earlier run";

  // A rank of the same world size is another rank of that job (started late, say): it joins.
  LogHeader same_world = make_header(1);
  same_world.world_size = 2;
  EXPECT_TRUE(RecordWriter::create({dir.path(), "run", rank_log_file_name(1)}, same_world).writer);
  // A rank-0 log created after this process started may be of this very job (its world size as its launcher said):
  // nothing is concluded from it.
  LogHeader recent = make_header(0);
  recent.world_size = 2;
  recent.start_time_ns = now_ns();
  CreatedWriter recent_0 = RecordWriter::create({dir.path(), "recent", rank_log_file_name(0)}, recent);
  ASSERT_TRUE(recent_0.writer) << recent_0.error;
  recent_0.writer->close();
  EXPECT_TRUE(RecordWriter::create({dir.path(), "recent", rank_log_file_name(3)}, rerun).writer);
  // Without a world size in either header nothing is concluded either.
  LogHeader unknown = rerun;
  unknown.world_size = 0;
  EXPECT_TRUE(RecordWriter::create({dir.path(), "run", rank_log_file_name(5)}, unknown).writer);
}

TEST(RecordWriter, SymlinksAreNeverFollowed) {
  TempDir dir;
  const std::string elsewhere = dir.path() + "/elsewhere";
  ASSERT_TRUE(fs::create_directory(elsewhere));

  // A symlink in place of the run directory.
  fs::create_directory_symlink(elsewhere, dir.path() + "/linked-run");
  CreatedWriter through_dir = RecordWriter::create({dir.path(), "linked-run", rank_log_file_name(0)}, make_header(0));
  EXPECT_FALSE(through_dir.writer);
  EXPECT_NE(through_dir.error.find("symlink"), std::string::npos) << through_dir.error;
  EXPECT_TRUE(fs::is_empty(elsewhere));

  // A symlink in place of the file: to an existing file, and dangling.
  ASSERT_TRUE(fs::create_directory(dir.path() + "/run"));
  const std::string precious = elsewhere + "/precious";
  std::ofstream(precious) << "keep me";
  fs::create_symlink(precious, dir.path() + "/run/" + rank_log_file_name(0));
  fs::create_symlink(elsewhere + "/new-file", dir.path() + "/run/" + rank_log_file_name(1));
  for (std::uint32_t rank : {0u, 1u}) {
    CreatedWriter through_file = RecordWriter::create({dir.path(), "run", rank_log_file_name(rank)}, make_header(0));
    EXPECT_FALSE(through_file.writer);
    EXPECT_NE(through_file.error.find("symlink"), std::string::npos) << through_file.error;
  }
  std::ifstream kept(precious);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), "keep me");
  EXPECT_FALSE(fs::exists(elsewhere + "/new-file"));
}

TEST(RecordWriter, UnusableDirectoriesAreReportedNotThrown) {
  TempDir dir;
  std::ofstream(dir.path() + "/a-file") << "x";
  CreatedWriter under_file =
      RecordWriter::create({dir.path() + "/a-file/sub", "run", "rank-00000.dnc"}, make_header(0));
  EXPECT_FALSE(under_file.writer);
  EXPECT_NE(under_file.error.find("cannot create directory"), std::string::npos) << under_file.error;
  EXPECT_FALSE(RecordWriter::create({dir.path(), "../escape", "rank-00000.dnc"}, make_header(0)).writer);
  EXPECT_FALSE(RecordWriter::create({dir.path(), "run", "a/b"}, make_header(0)).writer);
  EXPECT_FALSE(RecordWriter::create({"", "run", "rank-00000.dnc"}, make_header(0)).writer);

  // A run directory that belongs to someone else (needs root to arrange).
  ASSERT_TRUE(fs::create_directory(dir.path() + "/theirs"));
  if (chown((dir.path() + "/theirs").c_str(), 12345, 12345) != 0) GTEST_SKIP() << "not root: cannot chown";
  CreatedWriter theirs = RecordWriter::create({dir.path(), "theirs", "rank-00000.dnc"}, make_header(0));
  EXPECT_FALSE(theirs.writer);
  EXPECT_NE(theirs.error.find("another user"), std::string::npos) << theirs.error;
}

TEST(RecordWriter, ForkedChildDetachesWithoutTouchingTheLog) {
  TempDir dir;
  auto writer = create_or_fail({dir.path(), "fork", rank_log_file_name(0)});
  CallArrays arrays;
  ASSERT_EQ(writer->append(make_call(0, arrays)), AppendStatus::kOk);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    writer->detach_after_fork();
    CallArrays child_arrays;
    const bool refused = writer->append(make_call(999, child_arrays)) == AppendStatus::kStopped;
    writer->close();
    _exit(refused ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_EQ(writer->append(make_call(1, arrays)), AppendStatus::kOk);
  writer->close();
  OpenedLog opened = LogReader::open_file(writer->path());
  ASSERT_TRUE(opened.reader) << opened.error;
  const ReadLog log = read_all(*opened.reader);
  EXPECT_EQ(log.end.kind, LogEndKind::kClosed) << log.end.message;
  ASSERT_EQ(log.records.size(), 2u);
  EXPECT_TRUE(is_call(log.records[0], 0));
  EXPECT_TRUE(is_call(log.records[1], 1));
}

// Which pages of the process's one mapping of `path` are present in its page table (/proc/self/pagemap bit 63, readable
// without privileges), indexed by page from the start of the file. Empty when no mapping of it is found.
std::vector<bool> mapped_pages(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  std::uintptr_t start = 0, end = 0;
  while (std::getline(maps, line)) {
    if (line.size() > path.size() && line.compare(line.size() - path.size(), path.size(), path) == 0 &&
        std::sscanf(line.c_str(), "%lx-%lx", &start, &end) == 2) {
      break;
    }
    start = end = 0;
  }
  const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  std::vector<bool> present;
  const int pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (pagemap < 0) return present;
  for (std::uintptr_t address = start; address < end; address += page) {
    std::uint64_t entry = 0;
    if (pread(pagemap, &entry, sizeof(entry), static_cast<off_t>(address / page * sizeof(entry))) != sizeof(entry)) {
      break;
    }
    present.push_back((entry >> 63) != 0);
  }
  close(pagemap);
  return present;
}

// Whether this kernel knows MADV_POPULATE_WRITE (Linux 5.14+).
bool kernel_populates() {
  const long page = sysconf(_SC_PAGESIZE);
  void* memory =
      mmap(nullptr, static_cast<std::size_t>(page), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return false;
  const bool known = madvise(memory, static_cast<std::size_t>(page), 23 /* MADV_POPULATE_WRITE */) == 0;
  munmap(memory, static_cast<std::size_t>(page));
  return known;
}

// Appends calls first, first + 1, ... until the writer uses more than `bytes`; returns the next call number.
std::uint64_t append_until(RecordWriter& writer, std::uint64_t first, std::uint64_t bytes) {
  std::uint64_t i = first;
  while (writer.bytes_used() <= bytes) {
    CallArrays arrays;
    EXPECT_EQ(writer.append(make_call(i++, arrays)), AppendStatus::kOk);
  }
  return i;
}

TEST(RecordWriter, PagesAheadOfTheWritePositionAreMappedWithinTheReservedSpaceOnly) {
  if (!kernel_populates()) GTEST_SKIP() << "the kernel does not know MADV_POPULATE_WRITE (Linux < 5.14)";
  const auto page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  constexpr std::uint64_t kAhead = 64 << 10;
  constexpr std::uint64_t kInitial = 256 << 10;
  ASSERT_GT(kInitial, 2 * (kAhead + 2 * page)) << "the test needs room beyond the window";
  const auto round_up_page = [page](std::uint64_t bytes) { return (bytes + page - 1) / page * page; };
  TempDir dir;
  for (const std::uint64_t ahead : {kAhead, std::uint64_t{0}}) {
    SCOPED_TRACE("populate_ahead_bytes " + std::to_string(ahead));
    WriterOptions options;
    options.initial_bytes = kInitial;
    options.populate_ahead_bytes = ahead;
    auto writer = create_or_fail({dir.path(), "ahead-" + std::to_string(ahead), rank_log_file_name(0)}, options);
    ASSERT_TRUE(writer);
    std::uint64_t next = append_until(*writer, 0, 4 << 10);
    std::uint64_t used = writer->bytes_used();
    std::vector<bool> present = mapped_pages(writer->path());
    ASSERT_EQ(present.size() * page, kInitial) << "one mapping of the whole reserved space";
    // Written pages are mapped either way; the ones after them only when populated ahead, and no further than the
    // window past the page the first record ended in.
    for (std::uint64_t p = 0; p < present.size(); ++p) {
      const std::uint64_t offset = p * page;
      if (offset < used) {
        EXPECT_TRUE(present[p]) << "written page " << p;
      } else if (ahead != 0 && offset < kAhead) {
        EXPECT_TRUE(present[p]) << "page " << p << " ahead of the write position at " << used;
      } else if (ahead == 0 || offset >= round_up_page(used) + ahead) {
        EXPECT_FALSE(present[p]) << "page " << p << " beyond the window, write position " << used;
      }
    }
    // Past the reserved space the writer grows the file (and may move the mapping); the window is populated again
    // from there, within the new reserved space.
    next = append_until(*writer, next, kInitial + 1024);
    used = writer->bytes_used();
    present = mapped_pages(writer->path());
    ASSERT_EQ(present.size() * page, 2 * kInitial) << "grown by its own size";
    for (std::uint64_t p = kInitial / page; p < present.size(); ++p) {
      const std::uint64_t offset = p * page;
      if (offset < used) {
        EXPECT_TRUE(present[p]) << "written page " << p;
      } else if (ahead != 0 && offset < kInitial + kAhead) {
        EXPECT_TRUE(present[p]) << "page " << p << " ahead of the write position at " << used << " after growing";
      } else if (ahead == 0 || offset >= round_up_page(used) + ahead) {
        EXPECT_FALSE(present[p]) << "page " << p << " beyond the window, write position " << used;
      }
    }
    writer->close();
    OpenedLog opened = LogReader::open_file(writer->path());
    ASSERT_TRUE(opened.reader) << opened.error;
    const ReadLog log = read_all(*opened.reader);
    EXPECT_EQ(log.end.kind, LogEndKind::kClosed) << log.end.message;
    ASSERT_EQ(log.records.size(), next);
    for (std::uint64_t i = 0; i < next; ++i) ASSERT_TRUE(is_call(log.records[i], i));
  }
}

#if defined(__x86_64__) || defined(__aarch64__)
std::atomic<int> g_refused_populates{0};

// SIGSYS from the seccomp filter below: the madvise call did not run; make it return EINVAL, as a kernel older than
// 5.14 does, and count it.
void refuse_populate(int, siginfo_t*, void* context) {
  auto* registers = &static_cast<ucontext_t*>(context)->uc_mcontext;
#if defined(__x86_64__)
  registers->gregs[REG_RAX] = -EINVAL;
#else
  registers->regs[0] = static_cast<unsigned long long>(-EINVAL);
#endif
  g_refused_populates.fetch_add(1, std::memory_order_relaxed);
}

// Makes every madvise(..., MADV_POPULATE_WRITE) of this process trap to refuse_populate; other calls run as usual.
bool install_populate_refusal() {
  struct sigaction action {};
  action.sa_sigaction = refuse_populate;
  action.sa_flags = SA_SIGINFO;
  if (sigaction(SIGSYS, &action, nullptr) != 0) return false;
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_madvise, 0, 3),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[2])),  // the advice's low 32 bits
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 23 /* MADV_POPULATE_WRITE */, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  const sock_fprog program{static_cast<unsigned short>(std::size(filter)), filter};
  return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program, 0, 0) == 0;
}

TEST(RecordWriter, RefusedPopulateAdviceIsAskedOnceAndEveryRecordIsStillWritten) {
  TempDir dir;
  const LogLocation location{dir.path(), "refused", rank_log_file_name(0)};
  constexpr std::uint64_t kCalls = 20000;  // several windows and growths
  int report[2];
  ASSERT_EQ(pipe(report), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(report[0]);
    if (!install_populate_refusal()) _exit(2);
    WriterOptions options;
    options.initial_bytes = 64 << 10;
    options.populate_ahead_bytes = 16 << 10;
    CreatedWriter created = RecordWriter::create(location, make_header(0), options);
    if (!created.writer) _exit(3);
    for (std::uint64_t i = 0; i < kCalls; ++i) {
      CallArrays arrays;
      if (created.writer->append(make_call(i, arrays)) != AppendStatus::kOk) _exit(4);
    }
    created.writer->close();
    const int refused = g_refused_populates.load();
    if (write(report[1], &refused, sizeof(refused)) != sizeof(refused)) _exit(5);
    _exit(0);
  }
  close(report[1]);
  int refused = -1;
  const ssize_t got = read(report[0], &refused, sizeof(refused));
  close(report[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the writer child died of signal " << WTERMSIG(status);
  if (WEXITSTATUS(status) == 2) GTEST_SKIP() << "cannot install a seccomp filter here";
  ASSERT_EQ(WEXITSTATUS(status), 0) << "the child's checks failed (see the exit codes in the test)";
  ASSERT_EQ(got, static_cast<ssize_t>(sizeof(refused)));
  EXPECT_EQ(refused, 1) << "a refused advice is not asked again";

  OpenedLog opened = LogReader::open_file(location.dir + "/refused/" + location.file_name);
  ASSERT_TRUE(opened.reader) << opened.error;
  const ReadLog log = read_all(*opened.reader);
  EXPECT_EQ(log.end.kind, LogEndKind::kClosed) << log.end.message;
  ASSERT_EQ(log.records.size(), kCalls);
  for (std::uint64_t i = 0; i < kCalls; ++i) ASSERT_TRUE(is_call(log.records[i], i));
}
#endif

TEST(LogFormatDocs, LogFormatMdDescribesThisVersion) {
  std::ifstream file(DETNCCL_SOURCE_DIR "/docs/log-format.md");
  ASSERT_TRUE(file) << "docs/log-format.md is missing";
  const std::string docs((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  EXPECT_NE(docs.find("Format version: " + std::to_string(kFormatVersion)), std::string::npos);
  for (std::string_view name : {"DNCCLOG1", "FileHeaderFixed", "RecordFrame", "CommunicatorRecord", "CallFields",
                                "TruncationFields", "EndRecord"}) {
    EXPECT_NE(docs.find(name), std::string::npos) << name;
  }
  for (int op = 1; op <= 11; ++op) {
    const std::string row = "| " + std::to_string(op) + " | " + std::string(op_name(static_cast<OpId>(op))) + " |";
    EXPECT_NE(docs.find(row), std::string::npos) << "missing op table row: " << row;
  }
}

// A FIFO (or any file that is not a regular file) named like a log is refused at once, never waited on: opening a
// FIFO for reading blocks until a writer comes. Should the open block anyway, the test opens the write end itself
// (which releases the reader) and fails, rather than hanging.
TEST(LogReader, AFifoIsRefusedWithoutBlocking) {
  TempDir dir;
  const std::string fifo = dir.path() + "/" + rank_log_file_name(2);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  std::atomic<bool> returned{false};
  std::string error;
  std::thread opener([&] {
    error = LogReader::open_file(fifo).error;
    returned = true;
  });
  for (int i = 0; i < 500 && !returned; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const bool in_time = returned;
  int writer = -1;
  if (!in_time) writer = open(fifo.c_str(), O_WRONLY | O_NONBLOCK);  // releases the blocked open
  opener.join();
  if (writer >= 0) close(writer);
  EXPECT_TRUE(in_time) << "opening a FIFO named like a log blocked";
  EXPECT_NE(error.find("not a regular file"), std::string::npos) << error;
}

// docs/log-format.md: a reader refuses a header whose strings do not add up. A string count that cannot fit in the
// header (each string takes at least its 4-byte length) is such a header, even with a valid checksum.
TEST(LogReader, AStringCountThatDoesNotFitTheHeaderIsRefused) {
  TempDir dir;
  const std::vector<std::byte> good = file_bytes(write_small_log(dir, 2));
  FileHeaderFixed fixed;
  std::memcpy(&fixed, good.data(), sizeof(fixed));
  const auto with_count = [&](std::uint32_t count) {
    std::vector<std::byte> bytes = good;
    std::memcpy(bytes.data() + offsetof(FileHeaderFixed, string_count), &count, 4);
    const std::uint64_t checksum = header_checksum(bytes.data(), fixed.header_bytes - 8);
    std::memcpy(bytes.data() + fixed.header_bytes - 8, &checksum, 8);
    return bytes;
  };
  ASSERT_TRUE(LogReader::from_bytes(with_count(kHeaderStringCount)).reader) << "the re-checksummed original reads";
  // After the five strings come at most 7 bytes of zero padding: room for room / 4 more (empty) strings, no more.
  std::uint64_t strings_bytes = 0;
  for (std::uint64_t offset = sizeof(FileHeaderFixed), i = 0; i < kHeaderStringCount; ++i) {
    std::uint32_t length = 0;
    std::memcpy(&length, good.data() + offset, 4);
    offset += 4 + length;
    strings_bytes = offset;
  }
  const std::uint64_t room = fixed.header_bytes - 8 - strings_bytes;
  const auto too_many = static_cast<std::uint32_t>(kHeaderStringCount + room / 4 + 1);
  for (const std::uint32_t count : {too_many, 1000000u, 0xFFFFFFFFu}) {
    const OpenedLog opened = LogReader::from_bytes(with_count(count));
    EXPECT_FALSE(opened.reader) << "string_count " << count << " in a " << fixed.header_bytes << "-byte header";
    EXPECT_NE(opened.error.find("strings"), std::string::npos) << opened.error;
  }
}

// Messages count records in good English: "the 1 record before it is complete".
TEST(LogReader, EndMessagesSayRecordOrRecords) {
  TempDir dir;
  const std::string path = write_small_log(dir, 0);  // two communicator records
  std::vector<std::byte> bytes = file_bytes(path);
  OpenedLog opened = LogReader::from_bytes(bytes);
  ASSERT_TRUE(opened.reader);
  const ReadLog log = read_all(*opened.reader);
  ASSERT_EQ(log.records.size(), 2u);
  EXPECT_NE(log.end.message.find("after 2 records"), std::string::npos) << log.end.message;
  // Cut just after the first record: a torn tail with one complete record before it.
  bytes.resize(log.records[1].offset);
  OpenedLog cut = LogReader::from_bytes(bytes);
  ASSERT_TRUE(cut.reader);
  const ReadLog torn = read_all(*cut.reader);
  ASSERT_EQ(torn.end.kind, LogEndKind::kTornTail) << torn.end.message;
  EXPECT_NE(torn.end.message.find("the 1 record before it is complete"), std::string::npos) << torn.end.message;
}

// ---------------------------------------------------------------------------------------------------------------
// Format version 2: fixed parts state their length, so fields can be appended to them (log_format.h).

template <typename T>
void append_bytes(std::vector<std::byte>& bytes, const T& value) {
  const auto* raw = reinterpret_cast<const std::byte*>(&value);
  bytes.insert(bytes.end(), raw, raw + sizeof(T));
}

void append_words(std::vector<std::byte>& bytes, std::span<const std::uint64_t> words) {
  for (std::uint64_t word : words) append_bytes(bytes, word);
}

// One framed record whose frame states `fixed_bytes` (the payload is zero-padded to a multiple of 8).
std::vector<std::byte> framed(RecordType type, std::uint16_t fixed_bytes, std::vector<std::byte> payload) {
  payload.resize((payload.size() + 7) / 8 * 8);
  RecordFrame frame{};
  frame.length = static_cast<std::uint32_t>(sizeof(frame) + payload.size());
  frame.type = static_cast<std::uint16_t>(type);
  frame.fixed_bytes = fixed_bytes;
  frame.checksum = record_checksum(frame.length, frame.type, frame.fixed_bytes, payload.data(), payload.size());
  // RATIONALE: sized first and copied into, not inserted into an empty vector: at -O1 GCC 12 takes the insert for
  // an overflow of the empty vector's storage (-Wstringop-overflow, a false positive).
  std::vector<std::byte> bytes(sizeof(frame) + payload.size());
  std::memcpy(bytes.data(), &frame, sizeof(frame));
  std::copy(payload.begin(), payload.end(), bytes.begin() + sizeof(frame));
  return bytes;
}

// The header of a log this writer writes (make_header(0)), on its own.
std::vector<std::byte> written_header() {
  TempDir dir;
  std::vector<std::byte> bytes = file_bytes(write_small_log(dir, 0));
  FileHeaderFixed fixed{};
  std::memcpy(&fixed, bytes.data(), sizeof(fixed));
  bytes.resize(fixed.header_bytes);
  return bytes;
}

// A log of `header`, then `records` (framed), then an end marker counting them unless `end` is false.
std::vector<std::byte> log_of(std::vector<std::byte> header, const std::vector<std::vector<std::byte>>& records,
                              bool end = true) {
  for (const auto& record : records) header.insert(header.end(), record.begin(), record.end());
  if (end) {
    std::vector<std::byte> payload;
    append_bytes(payload, EndRecord{records.size(), 1});
    const auto marker = framed(RecordType::kEnd, sizeof(EndRecord), payload);
    header.insert(header.end(), marker.begin(), marker.end());
  }
  return header;
}

// Call record i's fixed part followed by `future` bytes of fields a later writer appended, then its arrays.
std::vector<std::byte> call_with_future_fields(std::uint64_t i, std::size_t future) {
  CallArrays arrays;
  const CallRecord call = make_call(i, arrays);
  std::vector<std::byte> payload;
  append_bytes(payload, static_cast<const CallFields&>(call));
  payload.resize(payload.size() + future, std::byte{0xEE});
  append_words(payload, call.input_blocks);
  append_words(payload, call.output_blocks);
  append_words(payload, call.input_segments);
  append_words(payload, call.output_segments);
  return framed(RecordType::kCall, static_cast<std::uint16_t>(sizeof(CallFields) + future), payload);
}

TEST(LogFormatV2, TheWriterStatesEveryFixedPartsLength) {
  TempDir dir;
  const std::vector<std::byte> bytes = file_bytes(write_small_log(dir, 3));
  FileHeaderFixed fixed{};
  std::memcpy(&fixed, bytes.data(), sizeof(fixed));
  EXPECT_EQ(fixed.format_version, 2u);
  EXPECT_EQ(fixed.fixed_bytes, sizeof(FileHeaderFixed));
  std::vector<std::pair<std::uint16_t, std::uint16_t>> types_and_fixed;
  for (std::uint64_t at = fixed.header_bytes; at < bytes.size();) {
    RecordFrame frame{};
    std::memcpy(&frame, bytes.data() + at, sizeof(frame));
    ASSERT_GE(frame.length, sizeof(frame));
    types_and_fixed.emplace_back(frame.type, frame.fixed_bytes);
    at += frame.length;
  }
  constexpr std::uint16_t kComm = sizeof(CommunicatorRecord), kCall = sizeof(CallFields), kEnd = sizeof(EndRecord);
  constexpr std::uint16_t kDigest = sizeof(StepDigestRecord), kIndex = sizeof(StepIndexFields);
  // A call without folded block digests stops before them (120 bytes): calls 0 and 1; call 2 has one.
  constexpr std::uint16_t kCallWithout = offsetof(CallFields, input_blocks_digest);
  static_assert(kCallWithout == 120 && kCallWithout == kCallFixedBytesWithoutBlockDigests);
  // Three calls of step 0 on three communicators: three digests and the step index at close.
  const std::vector<std::pair<std::uint16_t, std::uint16_t>> expected = {
      {1, kComm},   {1, kComm},   {2, kCallWithout}, {2, kCallWithout}, {2, kCall},
      {5, kDigest}, {5, kDigest}, {5, kDigest},      {6, kIndex},       {4, kEnd}};
  EXPECT_EQ(types_and_fixed, expected);
}

TEST(LogFormatV2, LongerFixedPartsOfALaterWriterAreReadWithTheirArraysAndTextIntact) {
  std::vector<std::byte> comm;
  append_bytes(comm, make_communicator(1));
  comm.resize(comm.size() + 8, std::byte{0xEE});  // a field appended to CommunicatorRecord
  const std::vector<std::vector<std::byte>> records = {
      framed(RecordType::kCommunicator, sizeof(CommunicatorRecord) + 8, comm), call_with_future_fields(6, 16),
      call_with_future_fields(7, 8), call_with_future_fields(0, 0)};
  OpenedLog opened = LogReader::from_bytes(log_of(written_header(), records));
  ASSERT_TRUE(opened.reader) << opened.error;
  const ReadLog log = read_all(*opened.reader);
  EXPECT_EQ(log.end.kind, LogEndKind::kClosed) << log.end.message;
  ASSERT_EQ(log.records.size(), 4u);
  EXPECT_EQ(std::get<CommunicatorRecord>(log.records[0].record), make_communicator(1));
  EXPECT_TRUE(is_call(log.records[1], 6));
  EXPECT_TRUE(is_call(log.records[2], 7));
  EXPECT_TRUE(is_call(log.records[3], 0));

  // A truncation marker with a longer fixed part: its text is found after it.
  constexpr std::string_view kText = "tracing stopped: a later writer's marker";
  std::vector<std::byte> marker;
  append_bytes(marker, TruncationFields{TruncationReason::kDiskFull, ENOSPC, kText.size(), 0});
  marker.resize(marker.size() + 8, std::byte{0xEE});
  for (char c : kText) marker.push_back(static_cast<std::byte>(c));
  OpenedLog truncated = LogReader::from_bytes(
      log_of(written_header(), {call_with_future_fields(1, 24), framed(RecordType::kTruncated, 24, marker)}, false));
  ASSERT_TRUE(truncated.reader) << truncated.error;
  const ReadLog cut = read_all(*truncated.reader);
  ASSERT_EQ(cut.records.size(), 1u);
  EXPECT_TRUE(is_call(cut.records[0], 1));
  EXPECT_EQ(cut.end.kind, LogEndKind::kTruncated) << cut.end.message;
  EXPECT_EQ(cut.end.truncation.reason, TruncationReason::kDiskFull);
  EXPECT_EQ(cut.end.truncation.error_number, ENOSPC);
  EXPECT_EQ(cut.end.truncation.text, kText);
}

TEST(LogFormatV2, AHeaderWithALongerFixedPartIsReadWithItsStrings) {
  std::vector<std::byte> header = written_header();
  FileHeaderFixed fixed{};
  std::memcpy(&fixed, header.data(), sizeof(fixed));
  fixed.fixed_bytes = sizeof(fixed) + 16;
  fixed.header_bytes += 16;
  std::vector<std::byte> longer;
  append_bytes(longer, fixed);
  longer.resize(longer.size() + 16, std::byte{0xEE});  // fields a later writer appended
  longer.insert(longer.end(), header.begin() + sizeof(fixed), header.end() - 8);
  append_bytes(longer, header_checksum(longer.data(), longer.size()));
  OpenedLog opened = LogReader::from_bytes(log_of(longer, {call_with_future_fields(3, 0)}));
  ASSERT_TRUE(opened.reader) << opened.error;
  const LogHeader& read = opened.reader->header();
  const LogHeader expected = make_header(0);
  EXPECT_EQ(read.format_version, 2u);
  EXPECT_EQ(read.pid, expected.pid);
  EXPECT_EQ(read.host, expected.host);
  EXPECT_EQ(read.run, expected.run);
  EXPECT_EQ(read.config_text, expected.config_text);
  EXPECT_EQ(read.nccl_environment, expected.nccl_environment);
  const ReadLog log = read_all(*opened.reader);
  EXPECT_EQ(log.end.kind, LogEndKind::kClosed) << log.end.message;
  ASSERT_EQ(log.records.size(), 1u);
  EXPECT_TRUE(is_call(log.records[0], 3));
}

// What a later reader that knows one more call field sees in a record of today's writer: the field's default.
struct CallFieldsOfALaterReader {
  CallFields today;
  std::uint64_t appended = 77;  // a field with a default other than zero
};

TEST(LogFormatV2, AShorterFixedPartLeavesTheFieldsItLacksAtTheirDefaults) {
  TempDir dir;
  const std::vector<std::byte> bytes = file_bytes(write_small_log(dir, 1));
  OpenedLog opened = LogReader::from_bytes(bytes);
  ASSERT_TRUE(opened.reader);
  const ReadLog log = read_all(*opened.reader);
  ASSERT_EQ(log.records.size(), 3u);
  RecordFrame frame{};
  std::memcpy(&frame, bytes.data() + log.records[2].offset, sizeof(frame));
  EXPECT_EQ(frame.fixed_bytes, kCallFixedBytesWithoutBlockDigests);  // call 0 has no folded block digest
  const std::byte* payload = bytes.data() + log.records[2].offset + sizeof(RecordFrame);
  const auto later = read_fixed_part<CallFieldsOfALaterReader>(payload, frame.fixed_bytes);
  CallArrays arrays;
  CallFields expected = make_call(0, arrays);
  EXPECT_EQ(later.today, expected);
  EXPECT_EQ(later.appended, 77u);
  // A communicator record cut before its last fields keeps their defaults too (what a reader of a record two
  // versions of its struct apart would see).
  const auto comm = read_fixed_part<CommunicatorRecord>(bytes.data() + log.records[1].offset + 16, 32);
  EXPECT_EQ(comm.ordinal, 1u);
  EXPECT_EQ(comm.nranks, 0u);
  EXPECT_EQ(comm.device, -1);
  EXPECT_EQ(comm.split_color, kNotSplit);
  // A record that states 0 has its version-1 size (hand-made records, as tests write them).
  CallArrays unstated_arrays;
  const CallRecord call = make_call(5, unstated_arrays);
  std::vector<std::byte> unstated;
  const auto* call_bytes = reinterpret_cast<const std::byte*>(static_cast<const CallFields*>(&call));
  unstated.insert(unstated.end(), call_bytes, call_bytes + version_1_fixed_bytes(RecordType::kCall));
  append_words(unstated, call.input_blocks);
  append_words(unstated, call.output_blocks);
  append_words(unstated, call.input_segments);
  append_words(unstated, call.output_segments);
  OpenedLog zero = LogReader::from_bytes(log_of(written_header(), {framed(RecordType::kCall, 0, unstated)}));
  ASSERT_TRUE(zero.reader);
  const ReadLog zero_log = read_all(*zero.reader);
  ASSERT_EQ(zero_log.records.size(), 1u);
  EXPECT_TRUE(is_call(zero_log.records[0], 5));
}

TEST(LogFormatV2, ImpossibleFixedPartLengthsAreRefusedWithAClearMessage) {
  const auto corrupt_call = [](std::uint16_t stated, std::string_view expected_text) {
    std::vector<std::byte> call = call_with_future_fields(2, 0);
    RecordFrame frame{};
    std::memcpy(&frame, call.data(), sizeof(frame));
    frame.fixed_bytes = stated;
    frame.checksum = record_checksum(frame.length, frame.type, stated, call.data() + 16, frame.length - 16);
    std::memcpy(call.data(), &frame, sizeof(frame));
    OpenedLog opened = LogReader::from_bytes(log_of(written_header(), {call_with_future_fields(1, 0), call}));
    ASSERT_TRUE(opened.reader);
    const ReadLog log = read_all(*opened.reader);
    EXPECT_EQ(log.records.size(), 1u) << stated;
    EXPECT_EQ(log.end.kind, LogEndKind::kCorrupt) << stated;
    EXPECT_NE(log.end.message.find("fixed part's stated length " + std::to_string(stated)), std::string::npos)
        << log.end.message;
    EXPECT_NE(log.end.message.find(expected_text), std::string::npos) << log.end.message;
  };
  corrupt_call(116, "not a multiple of 8");
  corrupt_call(104, "less than the type's 112 bytes of log format version 1");
  corrupt_call(8, "less than the type's 112 bytes");
  corrupt_call(4096, "exceeds its");

  for (std::uint32_t stated : {60u, 56u, 68u, 1u << 20}) {
    std::vector<std::byte> header = written_header();
    std::memcpy(header.data() + offsetof(FileHeaderFixed, fixed_bytes), &stated, 4);
    const std::uint64_t checksum = header_checksum(header.data(), header.size() - 8);
    std::memcpy(header.data() + header.size() - 8, &checksum, 8);
    OpenedLog opened = LogReader::from_bytes(log_of(header, {}));
    EXPECT_FALSE(opened.reader) << stated;
    EXPECT_NE(opened.error.find("fixed part's stated length " + std::to_string(stated)), std::string::npos)
        << opened.error;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The writer's crash promise, instant by instant (WriterOptions::append_hook): at every point of appending a record
// the file holds every earlier record and this one whole or not at all.

// What the observer knows of the log being written.
struct AppendObserver {
  std::string path;
  std::uint64_t complete = 0;                // records (markers included) whose length is published
  std::optional<std::uint64_t> call_number;  // make_call's i of the call being appended, if one is
  std::size_t large_segments = 0;            // the call's input segments were replaced by this many (large_call)
  std::uint64_t instants = 0;                // points observed
};

const char* point_name(AppendPoint point) {
  switch (point) {
    case AppendPoint::kAfterPayload:
      return "after the payload";
    case AppendPoint::kAfterChecksum:
      return "after the checksum";
    case AppendPoint::kBeforeLength:
      return "before the length";
    case AppendPoint::kAfterLength:
      return "after the length";
  }
  return "?";
}

std::vector<std::uint64_t> large_segments(std::uint64_t i, std::size_t count) {
  std::vector<std::uint64_t> words(count);
  for (std::size_t k = 0; k < count; ++k) words[k] = mix(i << 32 | k);
  return words;
}

// Checks the file as a crash at this instant would leave it: the record's slot, then what a reader makes of it.
void observe_append(void* context, AppendPoint point, std::uint64_t offset, std::uint32_t length) {
  auto& observer = *static_cast<AppendObserver*>(context);
  ++observer.instants;
  const std::vector<std::byte> bytes = file_bytes(observer.path);
  SCOPED_TRACE(std::string("record ") + std::to_string(observer.complete) + " at offset " + std::to_string(offset) +
               ", " + point_name(point));
  ASSERT_GE(bytes.size(), offset + length);
  const bool published = point == AppendPoint::kAfterLength;
  RecordFrame frame{};
  std::memcpy(&frame, bytes.data() + offset, sizeof(frame));
  // The slot: length 0 (the end of the log) until the length is published, then a record that verifies.
  if (!published) {
    EXPECT_EQ(frame.length, 0u) << "the length is visible before the record is complete";
  } else {
    EXPECT_EQ(frame.length, length);
    EXPECT_EQ(frame.checksum,
              record_checksum(length, frame.type, frame.fixed_bytes, bytes.data() + offset + 16, length - 16));
  }
  // The reader: every earlier record, then this one whole or not at all; never corruption.
  OpenedLog opened = LogReader::from_bytes(bytes);
  ASSERT_TRUE(opened.reader) << opened.error;
  const ReadLog log = read_all(*opened.reader);
  const bool marker = log.end.kind == LogEndKind::kClosed || log.end.kind == LogEndKind::kTruncated;
  const std::uint64_t seen =
      log.records.size() + log.digests.size() - log.recomputed + log.index_records + (marker ? 1 : 0);
  EXPECT_EQ(seen, observer.complete + (published ? 1 : 0));
  if (!marker) {
    EXPECT_EQ(log.end.kind, LogEndKind::kTornTail) << log.end.message;
    EXPECT_EQ(log.end.offset, published ? offset + length : offset) << log.end.message;
  }
  if (published && observer.call_number && !log.records.empty() &&
      frame.type == static_cast<std::uint16_t>(RecordType::kCall)) {
    const auto* call = std::get_if<CallRecord>(&log.records.back().record);
    ASSERT_NE(call, nullptr);
    CallArrays arrays;
    const CallRecord expected = make_call(*observer.call_number, arrays);
    EXPECT_EQ(call->seq, expected.seq);
    EXPECT_TRUE(std::ranges::equal(call->output_segments, expected.output_segments));
    if (observer.large_segments > 0) {
      EXPECT_TRUE(
          std::ranges::equal(call->input_segments, large_segments(*observer.call_number, observer.large_segments)));
    } else {
      EXPECT_TRUE(is_call(log.records.back(), *observer.call_number));
    }
  }
  if (published) ++observer.complete;
}

// Writes 2 communicators and `calls` calls (each with `segments` input segment digests when not 0), then closes,
// checking the file at every instant of every append. Returns the observer.
AppendObserver append_observed(std::uint64_t calls, std::size_t segments) {
  TempDir dir;
  AppendObserver observer;
  WriterOptions options;
  options.initial_bytes = 64u << 10;  // the file grows (and its mapping moves) under the records
  options.append_hook = observe_append;
  options.append_hook_context = &observer;
  auto writer = create_or_fail({dir.path(), "run", rank_log_file_name(0)}, options);
  if (!writer) return observer;
  observer.path = writer->path();
  EXPECT_EQ(writer->append(make_communicator(0)), AppendStatus::kOk);
  EXPECT_EQ(writer->append(make_communicator(1)), AppendStatus::kOk);
  for (std::uint64_t i = 0; i < calls; ++i) {
    CallArrays arrays;
    CallRecord call = make_call(i, arrays);
    const std::vector<std::uint64_t> large = large_segments(i, segments);
    if (segments > 0) call.input_segments = large;
    observer.call_number = i;
    observer.large_segments = segments;
    EXPECT_EQ(writer->append(call), AppendStatus::kOk);
  }
  observer.call_number.reset();
  writer->close();
  return observer;
}

TEST(RecordWriterCrashPromise, SmallRecordsAreWholeOrAbsentAtEveryInstantOfTheirAppend) {
  const AppendObserver observer = append_observed(24, 0);
  // Communicators, calls, the step digests (steps 0 to 2, each on 3 communicators), the step index, the end marker.
  EXPECT_EQ(observer.complete, 2u + 24u + expected_digests(24, false).size() + 1u + 1u);
  EXPECT_EQ(expected_digests(24, false).size(), 9u);
  EXPECT_EQ(observer.instants, 4 * observer.complete);
}

TEST(RecordWriterCrashPromise, LargeRecordsAreWholeOrAbsentAtEveryInstantOfTheirAppend) {
  const AppendObserver observer = append_observed(6, 40000);  // 320 KB of segment digests per call
  EXPECT_EQ(observer.complete, 2u + 6u + 3u + 1u + 1u);       // and the 3 digests of step 0 and the index at close
  EXPECT_EQ(observer.instants, 4 * observer.complete);
}

TEST(RecordWriterCrashPromise, ATruncationMarkerIsWholeOrAbsentToo) {
  TempDir dir;
  AppendObserver observer;
  WriterOptions options;
  options.append_hook = observe_append;
  options.append_hook_context = &observer;
  auto writer = create_or_fail({dir.path(), "run", rank_log_file_name(0)}, options);
  ASSERT_TRUE(writer);
  observer.path = writer->path();
  EXPECT_EQ(writer->append(make_communicator(0)), AppendStatus::kOk);
  writer->stop_early("tracing stopped: the test said so");
  EXPECT_EQ(observer.complete, 2u);
  EXPECT_EQ(observer.instants, 8u);
}

// ---------------------------------------------------------------------------------------------------------------
// Folded per-peer block digests (block_digests.h)

// The fold, computed here with libxxhash from its definition: XXH3-64 of the digests' bytes, seed "dnblock1".
std::uint64_t reference_fold(const std::vector<std::uint64_t>& digests) {
  return XXH3_64bits_withSeed(digests.data(), digests.size() * 8, 0x316b636f6c626e64ull);
}

// n per-peer block digests of one side of a call (any values: the writer and the fold only move them).
std::vector<std::uint64_t> peer_digests(std::uint32_t n, std::uint64_t salt) {
  std::vector<std::uint64_t> digests(n);
  for (std::uint32_t p = 0; p < n; ++p) digests[p] = mix(salt * 100000 + p);
  return digests;
}

TEST(BlockDigests, TheFoldIsXxh3OfTheDigestsInPeerOrder) {
  const std::vector<std::uint64_t> digests = peer_digests(5, 1);
  EXPECT_EQ(fold_block_digests(digests), reference_fold(digests));
  std::vector<std::uint64_t> swapped = digests;
  std::swap(swapped[1], swapped[3]);
  EXPECT_NE(fold_block_digests(swapped), fold_block_digests(digests)) << "the peers' order is part of the fold";
  std::vector<std::uint64_t> changed = digests;
  changed[4] ^= 1;
  EXPECT_NE(fold_block_digests(changed), fold_block_digests(digests));
  // One block is folded too: its fold is not its digest (a fold never passes for a fingerprint).
  EXPECT_NE(fold_block_digests(std::span(digests.data(), 1)), digests[0]);
}

// Each record of `path`, as (frame length, decoded call) in file order, calls only.
std::vector<std::pair<std::uint32_t, CallRecord>> call_records_with_lengths(const std::string& path,
                                                                            std::unique_ptr<LogReader>& keep) {
  const std::vector<std::byte> bytes = file_bytes(path);
  auto opened = LogReader::open_file(path);
  EXPECT_TRUE(opened.reader) << opened.error;
  std::vector<std::pair<std::uint32_t, CallRecord>> out;
  if (!opened.reader) return out;
  LogRecord record;
  while (opened.reader->next(record)) {
    const auto* call = std::get_if<CallRecord>(&record.record);
    if (call == nullptr) continue;
    RecordFrame frame{};
    std::memcpy(&frame, bytes.data() + record.offset, sizeof(frame));
    out.emplace_back(frame.length, *call);
  }
  EXPECT_EQ(opened.reader->end().kind, LogEndKind::kClosed) << opened.reader->end().message;
  keep = std::move(opened.reader);
  return out;
}

// At DETNCCL_TRACE=hash the shim folds the per-peer lists (fold_call_blocks without keeping them): an AlltoAll or
// AllGather record is then the frame and the whole fixed part, 16 + 136 bytes, at every world size; at
// DETNCCL_TRACE=segments it keeps the lists, 8 bytes per peer and side more.
TEST(BlockDigests, AHashLevelRecordStaysOneSizeAtAnyWorldSize) {
  constexpr std::uint32_t kCompactBytes = sizeof(RecordFrame) + 136;
  static_assert(sizeof(CallFields) == 136);
  for (const bool keep_lists : {false, true}) {
    for (const std::uint32_t nranks : {1u, 2u, 8u, 256u, 4096u}) {
      SCOPED_TRACE((keep_lists ? "segments level, " : "hash level, ") + std::to_string(nranks) + " ranks");
      TempDir dir;
      auto writer = create_or_fail({dir.path(), "run", rank_log_file_name(0)});
      ASSERT_TRUE(writer);
      const std::vector<std::uint64_t> alltoall_in = peer_digests(nranks, 1), alltoall_out = peer_digests(nranks, 2);
      const std::vector<std::uint64_t> gathered = peer_digests(nranks, 3);
      CallRecord alltoall;
      alltoall.op = OpId::kAlltoAll;
      alltoall.flags = kCallInputFingerprint | kCallOutputFingerprint;
      alltoall.input_blocks = alltoall_in;
      alltoall.output_blocks = alltoall_out;
      fold_call_blocks(alltoall, keep_lists);
      CallRecord allgather;
      allgather.seq = 1;
      allgather.op = OpId::kAllGather;
      allgather.flags = kCallInputFingerprint | kCallOutputFingerprint;
      allgather.output_blocks = gathered;
      fold_call_blocks(allgather, keep_lists);
      CallRecord allreduce;  // no per-peer blocks: no folded digest, the shorter fixed part
      allreduce.seq = 2;
      allreduce.op = OpId::kAllReduce;
      allreduce.flags = kCallInputFingerprint | kCallOutputFingerprint;
      fold_call_blocks(allreduce, keep_lists);
      for (const CallRecord& call : {alltoall, allgather, allreduce})
        EXPECT_EQ(writer->append(call), AppendStatus::kOk);
      writer->close();

      std::unique_ptr<LogReader> reader;
      const auto calls = call_records_with_lengths(writer->path(), reader);
      ASSERT_EQ(calls.size(), 3u);
      const std::uint32_t lists = keep_lists ? 8 * nranks : 0;
      EXPECT_EQ(calls[0].first, kCompactBytes + 2 * lists);
      EXPECT_EQ(calls[1].first, kCompactBytes + lists);
      EXPECT_EQ(calls[2].first, sizeof(RecordFrame) + 120);

      const CallRecord& a2a = calls[0].second;
      EXPECT_EQ(a2a.flags & (kCallInputBlocksFolded | kCallOutputBlocksFolded),
                kCallInputBlocksFolded | kCallOutputBlocksFolded);
      EXPECT_EQ(a2a.input_blocks_digest, reference_fold(alltoall_in));
      EXPECT_EQ(a2a.output_blocks_digest, reference_fold(alltoall_out));
      EXPECT_EQ(a2a.input_blocks.size(), keep_lists ? nranks : 0u);
      EXPECT_EQ(a2a.output_blocks.size(), keep_lists ? nranks : 0u);
      if (keep_lists) {
        EXPECT_TRUE(std::ranges::equal(a2a.input_blocks, alltoall_in));
      }
      EXPECT_EQ(input_blocks_folded_only(a2a), !keep_lists);
      EXPECT_EQ(output_blocks_folded_only(a2a), !keep_lists);

      const CallRecord& ag = calls[1].second;
      EXPECT_EQ(ag.flags & (kCallInputBlocksFolded | kCallOutputBlocksFolded), kCallOutputBlocksFolded);
      EXPECT_EQ(ag.input_blocks_digest, 0u);
      EXPECT_EQ(ag.output_blocks_digest, reference_fold(gathered));
      EXPECT_EQ(input_blocks_fold(ag), std::nullopt);
      EXPECT_EQ(output_blocks_fold(ag), reference_fold(gathered));

      const CallRecord& ar = calls[2].second;
      EXPECT_EQ(ar.flags & (kCallInputBlocksFolded | kCallOutputBlocksFolded), 0);
      EXPECT_EQ(ar.input_blocks_digest, 0u);
      EXPECT_EQ(ar.output_blocks_digest, 0u);
    }
  }
}

// A record written before the folded digests (the per-peer lists only) gives the same fold as the compact record of
// the same blocks, so the tools compare old and new logs alike.
TEST(BlockDigests, ARecordWithOnlyTheListsFoldsToTheCompactRecordsDigest) {
  const std::vector<std::uint64_t> blocks = peer_digests(16, 4);
  CallRecord old_style;
  old_style.op = OpId::kAlltoAll;
  old_style.input_blocks = blocks;
  old_style.output_blocks = blocks;
  CallRecord compact = old_style;
  fold_call_blocks(compact, false);
  EXPECT_TRUE(compact.input_blocks.empty());
  EXPECT_EQ(input_blocks_fold(old_style), reference_fold(blocks));
  EXPECT_EQ(input_blocks_fold(compact), reference_fold(blocks));
  EXPECT_EQ(output_blocks_fold(old_style), output_blocks_fold(compact));
  EXPECT_FALSE(input_blocks_folded_only(old_style));
  EXPECT_TRUE(input_blocks_folded_only(compact));
  // A digest without its flag is not written: it reads 0, as the shorter fixed part it gets says.
  TempDir dir;
  auto writer = create_or_fail({dir.path(), "run", rank_log_file_name(0)});
  ASSERT_TRUE(writer);
  CallRecord stray;
  stray.input_blocks_digest = 42;
  EXPECT_EQ(writer->append(stray), AppendStatus::kOk);
  writer->close();
  std::unique_ptr<LogReader> reader;
  const auto calls = call_records_with_lengths(writer->path(), reader);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].first, sizeof(RecordFrame) + 120);
  EXPECT_EQ(calls[0].second.input_blocks_digest, 0u);
}

}  // namespace
// The step index says where each step's calls start, with their digests and the counts that number them; a log of
// more than kStepIndexChunkEntries entries chains several index records, read back as one.
TEST(RecordWriter, StepIndexSaysWhereEachStepStartsWithItsCounts) {
  for (const std::uint64_t calls : {std::uint64_t{200}, std::uint64_t{15000}}) {
    TempDir dir;
    const LogLocation location{dir.path(), "run", rank_log_file_name(0)};
    auto writer = create_or_fail(location);
    for (std::uint64_t c = 0; c < 3; ++c) ASSERT_EQ(writer->append(make_communicator(c)), AppendStatus::kOk);
    for (std::uint64_t i = 0; i < calls; ++i) {
      CallArrays arrays;
      ASSERT_EQ(writer->append(make_call(i, arrays)), AppendStatus::kOk);
    }
    writer->close();
    OpenedLog opened = LogReader::open_file(writer->path());
    ASSERT_TRUE(opened.reader) << opened.error;
    std::string problem;
    const std::optional<StepIndex> index = opened.reader->read_step_index(&problem);
    ASSERT_TRUE(index) << problem;
    const ReadLog log = read_all(*opened.reader);
    ASSERT_EQ(log.end.kind, LogEndKind::kClosed) << log.end.message;
    std::vector<std::uint64_t> call_offsets;
    for (const LogRecord& record : log.records) {
      if (std::holds_alternative<CallRecord>(record.record)) call_offsets.push_back(record.offset);
    }
    ASSERT_EQ(call_offsets.size(), calls);
    const ExpectedIndex expected = expected_index(calls, call_offsets);
    EXPECT_EQ(index->entries.size(), expected.entries.size());
    EXPECT_TRUE(index->entries == expected.entries) << calls << " calls";
    EXPECT_TRUE(index->pairs == expected.pairs) << calls << " calls";
    EXPECT_GT(expected.pairs.size(), 0u);
    ASSERT_EQ(index->communicators.size(), 3u);
    for (std::uint64_t c = 0; c < 3; ++c) EXPECT_EQ(index->communicators[c], make_communicator(c));
    EXPECT_EQ(index->end_offset, log.end.offset);
    // 3 entries per step of 10 calls: one record below kStepIndexChunkEntries entries, one more per chunk above.
    const std::uint64_t groups_per_record = (kStepIndexChunkEntries + 2) / 3;
    const std::uint64_t expected_records = (expected.entries.size() / 3 + groups_per_record - 1) / groups_per_record;
    EXPECT_EQ(log.index_records, expected_records);
    EXPECT_EQ(log.end.end_marker.records_written, calls + 3 + expected.entries.size() + expected_records);
  }
}

// A log whose end marker is missing (torn) or whose index records are damaged has no index: readers then read it
// from its start. A log without calls has none either.
TEST(LogReader, AStepIndexIsOnlyTakenFromACleanlyClosedLog) {
  TempDir dir;
  const std::string path = write_small_log(dir, 200);
  std::vector<std::byte> bytes = file_bytes(path);
  {
    OpenedLog opened = LogReader::from_bytes(bytes);
    ASSERT_TRUE(opened.reader);
    ASSERT_TRUE(opened.reader->read_step_index());
  }
  OpenedLog whole = LogReader::from_bytes(bytes);
  const std::optional<StepIndex> index = whole.reader->read_step_index();
  ASSERT_TRUE(index);
  // Torn: the end marker cut off.
  std::vector<std::byte> torn(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(index->end_offset));
  EXPECT_FALSE(LogReader::from_bytes(torn).reader->read_step_index());
  // A flipped byte in the index record: its checksum fails.
  std::vector<std::byte> damaged = bytes;
  damaged[index->end_marker.step_index_offset + 40] ^= std::byte{1};
  std::string problem;
  EXPECT_FALSE(LogReader::from_bytes(damaged).reader->read_step_index(&problem));
  EXPECT_NE(problem.find("damaged"), std::string::npos) << problem;
  // No calls: no index.
  TempDir empty_dir;
  const std::string no_calls = write_small_log(empty_dir, 0);
  EXPECT_FALSE(LogReader::open_file(no_calls).reader->read_step_index());
}

// seek() moves next() to a step's first call; the records from there on are the ones a full read gives.
TEST(LogReader, SeekToAGroupReadsFromItsFirstCall) {
  TempDir dir;
  const std::string path = write_small_log(dir, 200);
  OpenedLog opened = LogReader::open_file(path);
  const std::optional<StepIndex> index = opened.reader->read_step_index();
  ASSERT_TRUE(index);
  const StepIndexEntry& entry = index->entries.at(30);  // step 10's first entry: 3 per step
  ASSERT_EQ(entry.step, 10u);
  ASSERT_TRUE(opened.reader->seek(entry.group_offset));
  const ReadLog log = read_all(*opened.reader);
  ASSERT_EQ(log.records.size(), 100u);
  for (std::uint64_t i = 0; i < 100; ++i) EXPECT_TRUE(is_call(log.records[i], 100 + i));
  EXPECT_EQ(log.end.kind, LogEndKind::kClosed) << "records were skipped: the end marker's count is not checked";
  EXPECT_FALSE(opened.reader->seek(entry.group_offset)) << "once ended";
  EXPECT_FALSE(LogReader::open_file(path).reader->seek(entry.group_offset + 4)) << "not aligned";
}

// What a reader makes of a log, written out as it goes: a streamed reader's spans last only until its next next(),
// so each record is turned into text at once.
struct Transcript {
  std::vector<std::string> lines;
  bool operator==(const Transcript&) const = default;
};

std::string words_text(std::span<const std::uint64_t> words) {
  std::string text;
  for (const std::uint64_t word : words) text += std::to_string(word) + ",";
  return text;
}

void transcribe_record(const LogRecord& record, Transcript& out) {
  std::string line = std::to_string(record.offset) + ":";
  if (const auto* call = std::get_if<CallRecord>(&record.record)) {
    std::array<std::byte, sizeof(CallFields)> fields{};
    std::memcpy(fields.data(), static_cast<const void*>(&static_cast<const CallFields&>(*call)), fields.size());
    line += "call seq " + std::to_string(call->seq) + " " + std::to_string(XXH3_64bits(fields.data(), fields.size())) +
            " [" + words_text(call->input_blocks) + "][" + words_text(call->output_blocks) + "][" +
            words_text(call->input_segments) + "][" + words_text(call->output_segments) + "]";
  } else if (const auto* communicator = std::get_if<CommunicatorRecord>(&record.record)) {
    line += "communicator " + std::to_string(communicator->ordinal) + " " + std::to_string(communicator->id);
  } else {
    line += "step digest";
  }
  out.lines.push_back(std::move(line));
}

void transcribe_end(const LogReader& reader, Transcript& out) {
  const LogEnd& end = reader.end();
  out.lines.push_back("end " + std::to_string(static_cast<int>(end.kind)) + " at " + std::to_string(end.offset) + ": " +
                      end.message + " / " + std::string(end.truncation.text) + " / " +
                      std::to_string(end.end_marker.records_written));
  for (const StepDigestRecord& digest : reader.step_digests()) {
    out.lines.push_back("digest " + std::to_string(digest.comm_ordinal) + " " + std::to_string(digest.step) + " " +
                        std::to_string(digest.calls) + " " + std::to_string(digest.input_digest));
  }
  out.lines.push_back("recomputed " + std::to_string(reader.step_digests_recomputed()) + " unknown " +
                      std::to_string(reader.unknown_records_skipped()) + " index records " +
                      std::to_string(reader.step_index_records_passed()));
}

// Everything a reader says of a log: the open error, the step index, every record and the end; then, when the log
// has a step index, what a reader seeked to each of its groups reads first.
Transcript transcribe(const std::function<OpenedLog()>& open) {
  Transcript out;
  OpenedLog opened = open();
  std::string error = opened.error;
  if (const std::size_t path_end = error.find(".dnc: "); path_end != std::string::npos) error.erase(0, path_end + 6);
  out.lines.push_back("open: " + error + (opened.no_header ? " (no header)" : ""));
  if (!opened.reader) return out;
  std::string problem;
  const std::optional<StepIndex> index = opened.reader->read_step_index(&problem);
  out.lines.push_back("index: " + problem);
  LogRecord record;
  bool index_read_again = false;
  while (opened.reader->next(record)) {
    transcribe_record(record, out);
    if (!index_read_again) {
      // Reading the index between two records changes nothing of what next() handed out or hands out next.
      index_read_again = true;
      const std::optional<StepIndex> again = opened.reader->read_step_index();
      EXPECT_EQ(again.has_value(), index.has_value());
      transcribe_record(record, out);
    }
  }
  transcribe_end(*opened.reader, out);
  if (!index) return out;
  out.lines.push_back("index end " + std::to_string(index->end_offset) + " entries " +
                      std::to_string(index->entries.size()) + " pairs " + std::to_string(index->pairs.size()) +
                      " communicators " + std::to_string(index->communicators.size()));
  for (std::size_t i = 0; i < index->entries.size(); i += 7) {
    OpenedLog seeked = open();
    EXPECT_TRUE(seeked.reader->seek(index->entries[i].group_offset));
    for (int n = 0; n < 3 && seeked.reader->next(record); ++n) transcribe_record(record, out);
  }
  return out;
}

// A streamed reader (pread()s into a buffer) says of every log exactly what a reader of the same bytes in memory
// says: records, arrays, end, messages, digests, step index and seeks. Its buffer is made a page small, so that
// records straddle its refills, and some records are larger than it.
TEST(LogReader, AStreamedReaderReadsEveryLogAsAReaderOfItsBytesInMemory) {
  TempDir dir;
  const LogLocation location{dir.path(), "run", rank_log_file_name(0)};
  std::string path;
  {
    auto writer = create_or_fail(location);
    for (std::uint64_t c = 0; c < 3; ++c) ASSERT_EQ(writer->append(make_communicator(c)), AppendStatus::kOk);
    for (std::uint64_t i = 0; i < 400; ++i) {
      CallArrays arrays;
      CallRecord call = make_call(i, arrays);
      std::vector<std::uint64_t> large;
      if (i % 50 == 7) {
        large = large_segments(i, 700 + i);  // 5.6 KiB and more: larger than a page
        call.input_segments = large;
        call.input_segment_count = static_cast<std::uint32_t>(large.size());
      }
      ASSERT_EQ(writer->append(call), AppendStatus::kOk);
    }
    writer->close();
    path = writer->path();
  }
  const std::vector<std::byte> good = file_bytes(path);
  const std::string copy = dir.path() + "/copy.dnc";
  const auto compare = [&](const std::vector<std::byte>& bytes, const std::string& what) {
    {
      std::ofstream file(copy, std::ios::binary | std::ios::trunc);
      file.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    }
    const Transcript in_memory = transcribe([&] { return LogReader::from_bytes(bytes); });
    for (const std::uint64_t buffer_bytes : {std::uint64_t{1}, std::uint64_t{4} << 20}) {
      const Transcript streamed = transcribe([&] {
        OpenedLog opened = LogReader::open_file(copy, LogAccess::kStreamed);
        if (opened.reader) opened.reader->set_page_release_bytes(buffer_bytes);
        return opened;
      });
      const Transcript mapped = transcribe([&] { return LogReader::open_file(copy); });
      EXPECT_TRUE(mapped == in_memory) << what;
      ASSERT_EQ(streamed.lines.size(), in_memory.lines.size()) << what << ", buffer " << buffer_bytes;
      for (std::size_t i = 0; i < streamed.lines.size(); ++i) {
        ASSERT_EQ(streamed.lines[i], in_memory.lines[i]) << what << ", buffer " << buffer_bytes << ", line " << i;
      }
    }
  };
  compare(good, "the whole log");
  const Transcript whole = transcribe([&] { return LogReader::from_bytes(good); });
  ASSERT_GT(whole.lines.size(), 400u);
  OpenedLog reference = LogReader::from_bytes(good);
  ASSERT_TRUE(reference.reader);
  std::vector<std::uint64_t> offsets;
  LogRecord record;
  while (reference.reader->next(record)) offsets.push_back(record.offset);
  ASSERT_EQ(reference.reader->end().kind, LogEndKind::kClosed);
  const std::uint64_t end_offset = reference.reader->end().offset;
  // Cut at record boundaries and inside records: torn tails; and with the zeros of reserved space after the cut.
  for (std::size_t r = 0; r < offsets.size(); r += 37) {
    for (const std::uint64_t inside : {std::uint64_t{0}, std::uint64_t{5}, std::uint64_t{24}}) {
      std::vector<std::byte> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(offsets[r] + inside));
      compare(cut, "cut at record " + std::to_string(r) + " + " + std::to_string(inside));
      cut.resize(cut.size() + 10000, std::byte{0});
      compare(cut, "cut at record " + std::to_string(r) + " + " + std::to_string(inside) + ", zeros after");
    }
  }
  std::vector<std::byte> no_marker(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(end_offset));
  compare(no_marker, "no end marker");
  // An unpublished last record: zero length, its bytes, then zeros.
  std::vector<std::byte> unpublished = no_marker;
  std::memset(unpublished.data() + offsets.back(), 0, 4);
  unpublished.resize(unpublished.size() + 8192, std::byte{0});
  compare(unpublished, "an unpublished last record");
  // Flipped bytes: in a record's frame, fixed part and arrays (corrupt, or a torn last record), in the index.
  std::mt19937_64 random(17);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<std::byte> bad = good;
    bad[random() % bad.size()] ^= static_cast<std::byte>(1 + random() % 255);
    compare(bad, "flipped byte, trial " + std::to_string(trial));
  }
  // Files with no header: empty, zeros.
  compare({}, "an empty file");
  compare(std::vector<std::byte>(70000), "zeros");
}

}  // namespace detnccl::records
