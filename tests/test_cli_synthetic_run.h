// Synthetic detnccl runs for the tests and benchmarks of the `detnccl` command: per-rank logs written with
// records::RecordWriter whose calls obey every cross-rank relation a real job's would (AllReduce outputs equal on all
// members, each Recv's output equal to its Send's input, AllGather and AlltoAll blocks equal to what each peer sent),
// with fingerprints computed from (rank, call) by a fixed mixing function, so that two runs written with the same
// spec are identical. A hook changes any call before it is written (a perturbation, a desync, a corruption) or drops
// it, so a test knows exactly where the difference is.
#ifndef DETNCCL_TESTS_TEST_CLI_SYNTHETIC_RUN_H
#define DETNCCL_TESTS_TEST_CLI_SYNTHETIC_RUN_H

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "records/block_digests.h"
#include "records/log_format.h"
#include "records/record_writer.h"

namespace detnccl::test {

// The communicator every synthetic rank belongs to (one, spanning the world).
inline constexpr std::uint64_t kSyntheticCommunicatorId = 0x5e5e5e5e00c0ffeeull;

// The op of call i of a step: a repeating pattern of collectives and a Send/Recv ring.
inline records::OpId synthetic_op(std::uint64_t index_in_step) {
  static constexpr records::OpId kPattern[] = {records::OpId::kAllReduce, records::OpId::kSend,
                                               records::OpId::kRecv,      records::OpId::kAllGather,
                                               records::OpId::kBroadcast, records::OpId::kAlltoAll};
  return kPattern[index_in_step % 6];
}

// A fixed 64-bit mixing function (splitmix64 finaliser) standing in for a fingerprint.
inline std::uint64_t synthetic_digest(std::uint64_t a, std::uint64_t b, std::uint64_t c = 0) {
  std::uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull ^ c;
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

// What to write.
struct SyntheticRunSpec {
  std::uint32_t ranks = 4;
  // The global rank of the first log: the logs are ranks first_rank to first_rank + ranks - 1 of a job of
  // first_rank + ranks ranks (their one communicator spans these). Hooks, rank_config and truncated_ranks use global
  // ranks; peers and blocks, communicator ranks.
  std::uint32_t first_rank = 0;
  std::uint64_t steps = 4;
  std::uint64_t calls_per_step = 12;
  std::uint64_t first_step = 0;  // a resumed run starts here (its comm_seq starts at 0)
  std::uint64_t count = 1024;    // elements per call (float32)
  std::uint32_t segments = 0;    // segment digests per buffer (0: none); DETNCCL_SEGMENT_BYTES=1M
  bool fingerprints = true;      // false: a trace level "meta" run
  // true: as today's shim writes: each side's per-peer blocks folded (records::fold_call_blocks, after the hook),
  // their lists kept only at the segments level (segments > 0); false: the lists only, as detnccl wrote before.
  bool fold_blocks = false;
  std::string extra_config;  // appended to the header's configuration text
  // Appended after extra_config on one rank: a per-rank setting (DETNCCL_LOG_FILE=log-<rank>).
  std::function<std::string(std::uint32_t rank)> rank_config;
  // The header's NCCL_* lines.
  std::string nccl_environment = "NCCL_DEBUG=WARN\n";
  bool close_logs = true;  // false: cut the end marker off (a killed job's torn tails)
  // These ranks' logs end with a truncation marker (disk full) in place of the end marker; with a hook that drops
  // their later calls, a job whose tracing stopped early on them.
  std::vector<std::uint32_t> truncated_ranks;
  std::uint64_t communicator_id = kSyntheticCommunicatorId;  // another value: another job's communicator
  // More than 1: the calls go to `groups` communicators of ranks/groups consecutive ranks each (tensor-parallel
  // groups), with ids communicator_id + 1 + group, created after the world communicator (which then has no call).
  // Peers and blocks are then ranks in the group. ranks must be a multiple of groups.
  std::uint32_t groups = 1;
  // Called with each rank's record of the calls' communicator before it is written (a damaged or forged size).
  std::function<void(std::uint32_t rank, records::CommunicatorRecord& communicator)> communicator_hook;
  // Called for every call before it is written, with the writing rank; returning false drops the call.
  std::function<bool(std::uint32_t rank, records::CallFields& call, std::vector<std::uint64_t>& input_blocks,
                     std::vector<std::uint64_t>& output_blocks, std::vector<std::uint64_t>& input_segments,
                     std::vector<std::uint64_t>& output_segments)>
      hook;
};

// Replaces a closed log's end marker (its last 32 bytes: 16-byte frame, 16-byte EndRecord) with a truncation marker
// saying the disk was full, as the writer leaves when it cannot grow. Returns an error message, empty on success.
inline std::string replace_end_with_truncation(const std::string& path) {
  constexpr std::string_view kText = "tracing stopped: cannot grow the log (synthetic): No space left on device";
  const records::TruncationFields fields{records::TruncationReason::kDiskFull, ENOSPC,
                                         static_cast<std::uint32_t>(kText.size()), 0};
  std::vector<std::byte> payload(sizeof(fields) + (kText.size() + 7) / 8 * 8);
  std::memcpy(payload.data(), &fields, sizeof(fields));
  std::memcpy(payload.data() + sizeof(fields), kText.data(), kText.size());
  records::RecordFrame frame{};
  frame.length = static_cast<std::uint32_t>(sizeof(frame) + payload.size());
  frame.type = static_cast<std::uint16_t>(records::RecordType::kTruncated);
  frame.checksum = records::record_checksum(frame.length, frame.type, 0, payload.data(), payload.size());
  std::error_code error;
  const auto size = std::filesystem::file_size(path, error);
  constexpr std::uint64_t kEndBytes = sizeof(records::RecordFrame) + sizeof(records::EndRecord);
  if (error || size < kEndBytes || truncate(path.c_str(), static_cast<off_t>(size - kEndBytes)) != 0) {
    return "cannot cut " + path;
  }
  std::ofstream file(path, std::ios::binary | std::ios::app);
  file.write(reinterpret_cast<const char*>(&frame), sizeof(frame));
  file.write(reinterpret_cast<const char*>(payload.data()), static_cast<std::streamsize>(payload.size()));
  return file.good() ? std::string() : "cannot write the truncation marker of " + path;
}

// Writes dir/run/rank-NNNNN.dnc for every rank. Returns an error message, empty on success.
inline std::string write_synthetic_run(const std::string& dir, const std::string& run, const SyntheticRunSpec& spec) {
  using records::OpId;
  const std::uint32_t n = spec.ranks;
  for (std::uint32_t rank = 0; rank < n; ++rank) {
    const std::uint32_t global = spec.first_rank + rank;
    records::LogHeader header;
    header.rank = global;
    header.world_size = spec.first_rank + n;
    header.pid = 1000 + rank;
    header.nccl_version = 22809;
    header.fingerprint_version = 1;
    header.detnccl_version = 100;
    header.host = "synthetic";
    header.detnccl_version_text = "0.1.0";
    header.run = run;
    header.config_text = "DETNCCL_DIR=" + dir + "\nDETNCCL_RUN=" + run + "\nDETNCCL_TRACE=" +
                         std::string(spec.segments > 0   ? "segments"
                                     : spec.fingerprints ? "hash"
                                                         : "meta") +
                         "\nDETNCCL_SEGMENT_BYTES=1M\n" + spec.extra_config +
                         (spec.rank_config ? spec.rank_config(global) : std::string());
    header.nccl_environment = spec.nccl_environment;
    records::WriterOptions options;
    options.initial_bytes = 64u << 10;
    auto created = records::RecordWriter::create({dir, run, records::rank_log_file_name(global)}, header, options);
    if (!created.writer) return created.error;
    records::CommunicatorRecord communicator;
    communicator.ordinal = 0;
    communicator.id = spec.communicator_id;
    communicator.nranks = n;
    communicator.rank = rank;
    communicator.origin = records::CommOrigin::kInitRank;
    if (spec.communicator_hook && spec.groups <= 1) spec.communicator_hook(global, communicator);
    created.writer->append(communicator);
    // The calls' communicator: m members, this rank's is `local`, the first member's loop index `base`.
    const std::uint32_t groups = std::max<std::uint32_t>(spec.groups, 1);
    const std::uint32_t m = n / groups;
    const std::uint32_t local = rank % m;
    const std::uint32_t base = rank - local;
    if (groups > 1) {
      communicator.ordinal = 1;
      communicator.id = spec.communicator_id + 1 + rank / m;
      communicator.nranks = m;
      communicator.rank = local;
      communicator.origin = records::CommOrigin::kSplit;
      communicator.parent_ordinal = 0;
      communicator.parent_id = spec.communicator_id;
      if (spec.communicator_hook) spec.communicator_hook(global, communicator);
      created.writer->append(communicator);
    }

    const std::uint32_t next = base + (local + 1) % m;
    const std::uint32_t previous = base + (local + m - 1) % m;
    std::uint64_t seq = 0;
    std::vector<std::uint64_t> input_blocks, output_blocks, input_segments, output_segments;
    for (std::uint64_t step = spec.first_step; step < spec.steps; ++step) {
      for (std::uint64_t i = 0; i < spec.calls_per_step; ++i) {
        // c identifies the call in the whole job (equal on every rank, whatever step the run started at).
        const std::uint64_t c = step * spec.calls_per_step + i;
        records::CallFields call;
        call.seq = seq;
        call.comm_ordinal = groups > 1 ? 1 : 0;
        call.comm_seq = seq;
        call.count = spec.count;
        call.step = step;
        call.op = synthetic_op(i);
        call.datatype = 7;  // float32
        input_blocks.clear();
        output_blocks.clear();
        const auto mine = [&](std::uint32_t r) { return synthetic_digest(r, c, 1); };
        switch (call.op) {
          case OpId::kAllReduce:
            call.redop = 0;
            call.input_fingerprint = mine(rank);
            call.output_fingerprint = synthetic_digest(~0ull, c, 2);
            break;
          case OpId::kSend:
            call.peer = static_cast<std::int32_t>(next - base);
            call.input_fingerprint = mine(rank);
            break;
          case OpId::kRecv:
            // The data of the previous rank's Send, call c - 1 of the job.
            call.peer = static_cast<std::int32_t>(previous - base);
            call.output_fingerprint = synthetic_digest(previous, c - 1, 1);
            break;
          case OpId::kAllGather:
            call.input_fingerprint = mine(rank);
            call.output_fingerprint = synthetic_digest(~0ull, c, 3);
            for (std::uint32_t r = 0; r < m; ++r) output_blocks.push_back(mine(base + r));
            break;
          case OpId::kBroadcast:
            call.peer = 0;
            call.input_fingerprint = mine(base);
            call.output_fingerprint = mine(base);
            break;
          case OpId::kAlltoAll:
            for (std::uint32_t p = 0; p < m; ++p) {
              input_blocks.push_back(synthetic_digest(rank, c, 100 + p));           // what rank sends to p
              output_blocks.push_back(synthetic_digest(base + p, c, 100 + local));  // what p sent to rank
            }
            call.input_fingerprint = synthetic_digest(rank, c, 4);
            call.output_fingerprint = synthetic_digest(rank, c, 5);
            break;
          default:
            break;
        }
        const bool has_input = call.op != OpId::kRecv && (call.op != OpId::kBroadcast || local == 0);
        const bool has_output = call.op != OpId::kSend;
        if (spec.fingerprints) {
          call.flags = static_cast<std::uint16_t>((has_input ? records::kCallInputFingerprint : 0) |
                                                  (has_output ? records::kCallOutputFingerprint : 0));
        } else {
          input_blocks.clear();
          output_blocks.clear();
        }
        input_segments.clear();
        output_segments.clear();
        for (std::uint32_t s = 0; s < spec.segments && spec.fingerprints; ++s) {
          if (has_input) input_segments.push_back(synthetic_digest(call.input_fingerprint, s, 6));
          if (has_output) output_segments.push_back(synthetic_digest(call.output_fingerprint, s, 7));
        }
        if (spec.hook && !spec.hook(global, call, input_blocks, output_blocks, input_segments, output_segments)) {
          continue;
        }
        records::CallRecord record;
        static_cast<records::CallFields&>(record) = call;
        record.input_blocks = input_blocks;
        record.output_blocks = output_blocks;
        record.input_segments = input_segments;
        record.output_segments = output_segments;
        if (spec.fold_blocks) records::fold_call_blocks(record, spec.segments > 0);
        created.writer->append(record);
        ++seq;
      }
    }
    created.writer->close();
    if (std::find(spec.truncated_ranks.begin(), spec.truncated_ranks.end(), global) != spec.truncated_ranks.end()) {
      if (std::string error = replace_end_with_truncation(created.writer->path()); !error.empty()) return error;
    } else if (!spec.close_logs) {
      // The end marker is the last record (a 16-byte frame and the EndRecord): without it the log has a torn tail.
      constexpr std::uint64_t kEndBytes = sizeof(records::RecordFrame) + sizeof(records::EndRecord);
      std::error_code error;
      const auto size = std::filesystem::file_size(created.writer->path(), error);
      if (error || truncate(created.writer->path().c_str(), static_cast<off_t>(size - kEndBytes)) != 0) {
        return "cannot cut " + created.writer->path();
      }
    }
  }
  return {};
}

}  // namespace detnccl::test

#endif  // DETNCCL_TESTS_TEST_CLI_SYNTHETIC_RUN_H
