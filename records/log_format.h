// detnccl: THE log format. The one header shared by the writer (record_writer.h) and every reader (log_reader.h,
// the CLI). docs/log-format.md describes the same bytes in prose; change both together.
//
// A log is one file per rank: a header, then self-validating records, each 8-byte aligned.
//
//   header   fixed part (FileHeaderFixed; its fixed_bytes says how long it is), five length-prefixed strings, zero
//            padding to a multiple of 8, then a u64 XXH3-64 checksum of every header byte before it. header_bytes
//            covers all of it.
//   record   u32 length (whole record, multiple of 8, written LAST), u16 type, u16 fixed_bytes, u64 checksum,
//            payload (zero-padded to the length): the type's fixed part (fixed_bytes long), then its variable part
//            (a call's arrays, a truncation marker's text). checksum = XXH3_64bits_withSeed(payload, length - 16,
//            seed = length | type << 32 | fixed_bytes << 48), so a torn, cut or corrupted record is detected.
//
// Fields are fixed-width and written in the writer's byte order; the magic's bytes reveal which, and a reader
// refuses a log of the other order with a clear message rather than byte-swapping (every machine detnccl targets is
// little-endian). Versioning rule: kFormatVersion changes whenever an existing byte changes meaning; readers refuse
// newer versions and read every older one. Without a version change, a record type may be added (readers skip
// unknown types, still checking their checksum), and fields may be appended to the end of any fixed part, the
// header's included: every fixed part states its own length, so a reader finds what follows it whatever its size,
// ignores a longer part's tail it does not know, and gives the fields a shorter part lacks their defaults
// (read_fixed_part below). Version 1 (the first) stated no lengths: its fixed parts have the kVersion1* sizes.
#ifndef DETNCCL_RECORDS_LOG_FORMAT_H
#define DETNCCL_RECORDS_LOG_FORMAT_H

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "abi/nccl_api_table.h"
#include "abi/traced_ops.h"

namespace detnccl::records {

// ---------------------------------------------------------------------------------------------------------------
// File header

// The first 8 bytes of every log read "DNCCLOG1" when the writer was little-endian ("1GOLCCND" when big-endian).
inline constexpr std::uint64_t kMagic = 0x31474F4C43434E44ull;

// The format this code writes and the newest it reads. Version 2 added the fixed-part lengths (FileHeaderFixed::
// fixed_bytes, RecordFrame::fixed_bytes); version 1 logs are read forever (tests/fixtures/logs-v1).
inline constexpr std::uint32_t kFormatVersion = 2;

// Where a header's rank came from.
enum class RankSource : std::uint32_t {
  kUnknown = 0,
  kEnvironment = 1,   // RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID or PMI_RANK
  kCommunicator = 2,  // the rank in the first communicator that spans the world
  kProcessId = 3,     // no rank was known: the "rank" is the process id
};

// The fixed part of the header, exactly as on disk.
struct FileHeaderFixed {
  std::uint64_t magic;                // kMagic
  std::uint32_t format_version;       // kFormatVersion
  std::uint32_t header_bytes;         // whole header, checksum included; the first record starts here
  std::uint64_t start_time_ns;        // wall clock (CLOCK_REALTIME) when the log was created, ns since the epoch
  std::uint32_t rank;                 // global rank (see rank_source)
  std::uint32_t world_size;           // 0 when unknown
  std::uint32_t pid;                  // process id
  std::uint32_t nccl_version;         // ncclGetVersion() code of the NCCL under the shim (22809); 0 when unknown
  std::uint32_t fingerprint_version;  // version of the fingerprint definition (hash/); fingerprints of logs with
                                      // different versions are not comparable
  std::uint32_t detnccl_version;      // major * 10000 + minor * 100 + patch
  RankSource rank_source;
  std::uint32_t flags;         // 0; reserved
  std::uint32_t string_count;  // number of length-prefixed strings after the fixed part (kHeaderStringCount)
  std::uint32_t fixed_bytes;   // the fixed part's length: the strings start here. Version 1: 0 (reserved), the
                               // part is kVersion1HeaderFixedBytes long. New fields go after this one.
};
static_assert(sizeof(FileHeaderFixed) == 64);
static_assert(offsetof(FileHeaderFixed, start_time_ns) == 16 && offsetof(FileHeaderFixed, rank) == 24 &&
              offsetof(FileHeaderFixed, nccl_version) == 36 && offsetof(FileHeaderFixed, string_count) == 56);

// The fixed part's length in version 1, and the least a version-2 header may state.
inline constexpr std::uint32_t kVersion1HeaderFixedBytes = 64;

// The header's strings, in this order, each as a u32 byte count followed by the bytes (no terminator).
enum class HeaderString : std::uint32_t {
  kHost = 0,             // host name
  kDetncclVersion = 1,   // detnccl version text ("0.1.0")
  kRun = 2,              // run name
  kConfig = 3,           // effective DETNCCL_* configuration, "NAME=value\n" lines (config::format_config)
  kNcclEnvironment = 4,  // every NCCL_* variable of the environment, "NAME=value\n" lines
};
inline constexpr std::uint32_t kHeaderStringCount = 5;

// A header is at most this long (readers refuse longer ones; writers cut each string to kMaxHeaderStringBytes).
inline constexpr std::uint32_t kMaxHeaderBytes = 16u << 20;
inline constexpr std::uint32_t kMaxHeaderStringBytes = 1u << 20;

// The header, decoded (reader) or to be written (writer; it sets magic, format version and sizes itself).
struct LogHeader {
  std::uint32_t format_version = kFormatVersion;
  std::uint64_t start_time_ns = 0;
  std::uint32_t rank = 0;
  RankSource rank_source = RankSource::kUnknown;
  std::uint32_t world_size = 0;
  std::uint32_t pid = 0;
  std::uint32_t nccl_version = 0;
  std::uint32_t fingerprint_version = 0;
  std::uint32_t detnccl_version = 0;
  std::string host;
  std::string detnccl_version_text;
  std::string run;
  std::string config_text;
  std::string nccl_environment;
};

// The header checksum: XXH3-64 of the header's bytes before the checksum itself.
std::uint64_t header_checksum(const void* bytes, std::size_t count) noexcept;

// The name of a rank's log file: "rank-00042.dnc" (at least 5 digits).
std::string rank_log_file_name(std::uint32_t rank);

// ---------------------------------------------------------------------------------------------------------------
// Record framing

// Bytes before every payload: length, type, fixed-part length, checksum.
struct RecordFrame {
  std::uint32_t length;       // whole record in bytes, frame included; a multiple of 8; written last by the writer
  std::uint16_t type;         // RecordType
  std::uint16_t fixed_bytes;  // length of the payload's fixed part (a multiple of 8, at most the payload); its
                              // variable part follows it. 0: not stated, the type's version-1 size
                              // (version_1_fixed_bytes); version 1 wrote 0 here ("flags", reserved) and readers
                              // ignore it in version-1 logs.
  std::uint64_t checksum;
};
static_assert(sizeof(RecordFrame) == 16);

// Records are 8-byte aligned and at most this long (a reader calls a longer length corruption).
inline constexpr std::uint32_t kRecordAlignment = 8;
inline constexpr std::uint32_t kMaxRecordBytes = 64u << 20;

// Record types. Numbers never change; new types get new numbers.
enum class RecordType : std::uint16_t {
  kCommunicator = 1,  // a communicator was created: CommunicatorRecord
  kCall = 2,          // one NCCL call: CallRecord
  kTruncated = 3,     // tracing stopped early (disk full, write error): TruncationRecord; nothing follows
  kEnd = 4,           // the writer closed the log cleanly: EndRecord; nothing follows
  kStepDigest = 5,    // one communicator's calls of one step, folded into a digest: StepDigestRecord (version 2)
  kStepIndex = 6,     // where each step's calls start, with their digests and counters: StepIndexFields (version 2)
};

// The checksum of a record: XXH3-64 of the payload (padding included), seeded with length, type and fixed_bytes.
std::uint64_t record_checksum(std::uint32_t length, std::uint16_t type, std::uint16_t fixed_bytes, const void* payload,
                              std::size_t payload_bytes) noexcept;

// The length of a record type's fixed part in format version 1: what a version-1 record's fixed part is, what a
// version-2 record's fixed_bytes of 0 means, and the least a version-2 record of that type may state (a reader
// refuses less). 0 for types this reader does not know (it skips them).
constexpr std::uint32_t version_1_fixed_bytes(RecordType type) noexcept {
  switch (type) {
    case RecordType::kCommunicator:
      return 56;
    case RecordType::kCall:
      return 112;
    case RecordType::kTruncated:
      return 16;
    case RecordType::kEnd:
      return 16;
    case RecordType::kStepDigest:
      return 40;  // new in version 2: the least a record may state
    case RecordType::kStepIndex:
      return 24;  // likewise
  }
  return 0;
}

// A fixed part as a reader decodes it: the first `stated_bytes` bytes at `bytes` over a default-constructed T. A
// part shorter than T (an older writer) leaves the fields it lacks at their defaults; a longer one (a newer writer
// appended fields) has its tail ignored. The caller has checked that stated_bytes bytes are there.
template <typename Fixed>
Fixed read_fixed_part(const std::byte* bytes, std::size_t stated_bytes) noexcept {
  Fixed value{};
  std::memcpy(&value, bytes, stated_bytes < sizeof(Fixed) ? stated_bytes : sizeof(Fixed));
  return value;
}

// ---------------------------------------------------------------------------------------------------------------
// Operations: stable numbers

// The NCCL operation of a call record, generated from abi/traced_ops.h, whose ids are the stable numbers: part of
// the format, they never change, and a new operation gets a new number (never reuse one). abi/traced_ops.h checks
// at compile time that every collective and point-to-point row of abi/nccl_api_table.h has one.
enum class OpId : std::uint16_t {
  kUnknown = 0,
#define DETNCCL_RECORDS_OP_ID(id, name, ...) k##name = id,
  DETNCCL_TRACED_OPS(DETNCCL_RECORDS_OP_ID)
#undef DETNCCL_RECORDS_OP_ID
};

// The NCCL function name without "nccl" ("AllReduce"), or "Unknown".
constexpr std::string_view op_name(OpId op) noexcept {
  const std::size_t index = abi::traced_op_index(static_cast<std::uint16_t>(op));
  return index != abi::kNoTracedOp ? abi::kTracedOps[index].name : std::string_view("Unknown");
}

// The OpId of an NCCL function name ("ncclAllReduce"), or kUnknown. constexpr so that code generated from the API
// table can compute it at compile time: constexpr OpId id = op_id_from_nccl_name(#name).
constexpr OpId op_id_from_nccl_name(std::string_view nccl_name) noexcept {
  const std::size_t index = abi::traced_op_index_of_nccl_name(nccl_name);
  return index != abi::kNoTracedOp ? static_cast<OpId>(abi::kTracedOps[index].id) : OpId::kUnknown;
}

// Names for the numeric NCCL fields of a call record (ncclDataType_t, ncclRedOp_t, ncclResult_t values, which are
// NCCL's stable ABI numbers): "float32", "sum", "ncclSuccess"; "user" for redops >= 5, "?" for unknown values. The
// datatype and operator names are abi/nccl_datatypes.h's.
std::string_view datatype_name(std::uint16_t datatype) noexcept;
std::string_view redop_name(std::int32_t redop) noexcept;
std::string_view result_name(std::int32_t result) noexcept;

// ---------------------------------------------------------------------------------------------------------------
// Record payloads

// How a communicator came to be.
enum class CommOrigin : std::uint16_t {
  kUnknown = 0,
  kInitRank = 1,          // ncclCommInitRank / ncclCommInitRankConfig
  kInitAll = 2,           // ncclCommInitAll (one process, several devices)
  kInitRankScalable = 3,  // ncclCommInitRankScalable
  kSplit = 4,             // ncclCommSplit
  kShrink = 5,            // ncclCommShrink
};

inline constexpr std::uint64_t kNoParent = ~std::uint64_t{0};  // parent_ordinal of a communicator without parent
inline constexpr std::int32_t kNotSplit = INT32_MIN;           // split_color/split_key of one not made by a split

// RecordType::kCommunicator payload, exactly as on disk.
struct CommunicatorRecord {
  std::uint64_t ordinal = 0;                 // per-process creation order (0, 1, ...): the key between two runs
  std::uint64_t id = 0;                      // run-local id, equal on all members (communicator_id.h): the key
                                             // between the ranks of one run
  std::uint64_t parent_ordinal = kNoParent;  // ordinal of the parent (split, shrink), else kNoParent
  std::uint64_t parent_id = 0;               // id of the parent, else 0
  std::uint32_t nranks = 0;
  std::uint32_t rank = 0;    // this process's rank in the communicator
  std::int32_t device = -1;  // CUDA device, -1 when unknown
  std::int32_t split_color = kNotSplit;
  std::int32_t split_key = kNotSplit;
  CommOrigin origin = CommOrigin::kUnknown;
  std::uint16_t reserved = 0;
  friend bool operator==(const CommunicatorRecord&, const CommunicatorRecord&) = default;
};
static_assert(sizeof(CommunicatorRecord) == 56);  // fields appended later go after `reserved`
static_assert(offsetof(CommunicatorRecord, nranks) == 32 && offsetof(CommunicatorRecord, origin) == 52);

// CallRecord::flags bits.
enum CallFlags : std::uint16_t {
  kCallInPlace = 1u << 0,            // send and receive buffers overlap as NCCL's in-place convention says
  kCallInputFingerprint = 1u << 1,   // input_fingerprint (and input blocks/segments) were computed
  kCallOutputFingerprint = 1u << 2,  // output_fingerprint (and output blocks/segments) were computed
  kCallDeterministic = 1u << 3,      // detnccl's deterministic algorithm ran instead of NCCL's (see algorithm)
  kCallPreMulSumScalar = 1u << 4,    // redop is a PreMulSum and premulsum_scalar holds its scalar
  kCallSegmentsDropped = 1u << 5,    // segment digests were dropped: the record would exceed kMaxRecordBytes
  kCallCaptured = 1u << 6,           // issued during CUDA stream capture: recorded without device fingerprints
  // The side's per-peer block digests were folded (block_digests.h: fold_block_digests) into input_blocks_digest
  // (output_blocks_digest). Set whenever that side's blocks were fingerprinted; the per-peer list itself is written
  // only at DETNCCL_TRACE=segments (input_block_count 0 otherwise), so a record stays one size at any world size.
  kCallInputBlocksFolded = 1u << 7,
  kCallOutputBlocksFolded = 1u << 8,
  // DETNCCL_CAPTURE (not kCallCaptured, which is CUDA stream capture): the side's whole buffer is in the rank's
  // capture file (capture_format.h, rank-NNNNN.cap) under its content address (input_fingerprint or
  // output_fingerprint, and the side's byte size), stored by this call or by an earlier one with the same content.
  kCallInputSaved = 1u << 9,
  kCallOutputSaved = 1u << 10,
  // Capture was asked for (DETNCCL_CAPTURE=1 and the call fingerprinted) but a fingerprinted side is not saved: the
  // budget (DETNCCL_CAPTURE_BYTES) was spent, the buffer was too large for a record, or capture failed.
  kCallSaveSkipped = 1u << 11,
};

// Where a call record's step came from (CallFields::step_source).
enum class StepSource : std::uint32_t {
  kUnknown = 0,    // the writer did not say: version-1 logs, and any record whose fixed part ends before the field
  kNone = 1,       // the job had marked no step yet (step is 0)
  kMarked = 2,     // the job marked it: detnccl_set_step(), the Python helper
  kInferred = 3,   // detnccl numbered the iterations itself from the job's calls (or DETNCCL_STEP_BOUNDARY's call)
  kOptimizer = 4,  // the job's optimizer stepped: the PyTorch hook (detnccl_set_optimizer_step), no code change
};

// "unknown", "none", "marked", "inferred", "optimizer"; "?" for other values.
constexpr std::string_view step_source_name(StepSource source) noexcept {
  switch (source) {
    case StepSource::kUnknown:
      return "unknown";
    case StepSource::kNone:
      return "none";
    case StepSource::kMarked:
      return "marked";
    case StepSource::kInferred:
      return "inferred";
    case StepSource::kOptimizer:
      return "optimizer";
  }
  return "?";
}

// RecordType::kCall fixed part, exactly as on disk; the four u64 arrays of CallRecord follow it (at the record's
// fixed_bytes), in field order, with the counts below. A new field is appended after the last member, and gets a
// row in records/call_record_fields.h (the build fails without it); the offsets of the version-1 fields never
// change.
struct CallFields {
  std::uint64_t seq = 0;           // per-log sequence number of the call (0, 1, ...)
  std::uint64_t comm_ordinal = 0;  // CommunicatorRecord::ordinal of its communicator
  std::uint64_t comm_seq = 0;      // sequence number within that communicator
  std::uint64_t count = 0;         // NCCL's count argument (elements)
  std::uint64_t step = 0;          // training step the call belongs to
  std::uint64_t group_id = 0;      // calls between one outermost ncclGroupStart/End share it; 0 outside groups
  std::uint64_t input_fingerprint = 0;
  std::uint64_t output_fingerprint = 0;
  std::uint64_t premulsum_scalar = 0;  // raw bits of the PreMulSum scalar (datatype's width, zero-extended)
  OpId op = OpId::kUnknown;
  std::uint16_t datatype = 0;   // ncclDataType_t
  std::int32_t redop = -1;      // ncclRedOp_t; -1 for operations without one
  std::int32_t peer = -1;       // root (rooted collectives) or peer (Send/Recv); -1 otherwise
  std::int32_t result = 0;      // ncclResult_t the call returned
  std::uint16_t flags = 0;      // CallFlags
  std::uint16_t algorithm = 0;  // deterministic algorithm that ran (kCallDeterministic); 0: NCCL's own
  std::uint32_t input_block_count = 0;
  std::uint32_t output_block_count = 0;
  std::uint32_t input_segment_count = 0;
  std::uint32_t output_segment_count = 0;
  std::uint32_t reserved = 0;
  // Appended in format version 2 (a version-1 record reads kUnknown).
  StepSource step_source = StepSource::kUnknown;
  std::uint32_t reserved_2 = 0;
  // Appended in format version 2 (older records read 0): fold_block_digests of the side's per-peer block digests,
  // valid when kCallInputBlocksFolded (kCallOutputBlocksFolded) is set.
  std::uint64_t input_blocks_digest = 0;
  std::uint64_t output_blocks_digest = 0;
  friend bool operator==(const CallFields&, const CallFields&) = default;
};
static_assert(offsetof(CallFields, op) == 72 && offsetof(CallFields, redop) == 76 &&
              offsetof(CallFields, flags) == 88 && offsetof(CallFields, input_block_count) == 92 &&
              offsetof(CallFields, reserved) == 108 && offsetof(CallFields, step_source) == 112 &&
              offsetof(CallFields, input_blocks_digest) == 120 && sizeof(CallFields) == 136);

// The fixed part the writer states for a call without folded block digests (neither kCall*BlocksFolded bit): the
// part before input_blocks_digest, whose fields then read 0, their default. So the calls of operations without
// per-peer blocks cost what they did before the digests were appended.
inline constexpr std::uint16_t kCallFixedBytesWithoutBlockDigests = offsetof(CallFields, input_blocks_digest);

// A call record: the fixed fields plus the fingerprint arrays. Per-peer block fingerprints (AllGather, AlltoAll,
// Gather, Scatter: block i goes to or comes from peer i) let data be matched across ranks (written at
// DETNCCL_TRACE=segments; below it only their fold, input_blocks_digest / output_blocks_digest); segment digests cover
// consecutive DETNCCL_SEGMENT_BYTES pieces of a buffer. The writer takes the counts from the spans (the *_count
// fields are ignored on write); from a reader the spans point into the reader's memory and live as long as it.
struct CallRecord : CallFields {
  std::span<const std::uint64_t> input_blocks;
  std::span<const std::uint64_t> output_blocks;
  std::span<const std::uint64_t> input_segments;
  std::span<const std::uint64_t> output_segments;
};

// RecordType::kStepDigest payload, exactly as on disk: what `detnccl diff` compares of one communicator's calls in
// one step (records/step_digest.h says which fields), folded in log order into two 64-bit digests: what went into
// the calls (metadata and input fingerprints) and what came out (results and output fingerprints), so that a step
// whose inputs already differed (a receiver, or the compute before the call) is told from one whose inputs matched.
// Written when the process's step moves on, and at close, after the last call it covers (and before the first call of
// the next step); a log cut short by a crash lacks its last step's digests (a reader recomputes them from the call
// records when the log has them). Version 2 added the type: older readers skip it as unknown.
struct StepDigestRecord {
  std::uint64_t comm_ordinal = 0;  // CommunicatorRecord::ordinal
  std::uint64_t step = 0;
  std::uint64_t calls = 0;          // call records folded in (at least 1)
  std::uint64_t input_digest = 0;   // step_digest.h: fold_call_input over them, in log order, from kStepDigestSeed
  std::uint64_t output_digest = 0;  // fold_call_output, likewise
  friend bool operator==(const StepDigestRecord&, const StepDigestRecord&) = default;
};
// 56 bytes framed: the broad trace costs under 64 bytes per communicator and step.
static_assert(sizeof(StepDigestRecord) == 40);  // fields appended later go after output_digest

// Why tracing stopped early.
enum class TruncationReason : std::uint32_t {
  kUnknown = 0,
  kDiskFull = 1,       // ENOSPC or EDQUOT
  kFileTooLarge = 2,   // EFBIG (RLIMIT_FSIZE or the file system's limit)
  kWriteError = 3,     // any other failure to grow or map the file
  kTracerStopped = 4,  // the writer's user turned tracing off after a failure of its own (RecordWriter::stop_early)
};

// RecordType::kTruncated fixed part, exactly as on disk; text_bytes of message text follow it (at the record's
// fixed_bytes).
struct TruncationFields {
  TruncationReason reason;
  std::int32_t error_number;  // errno of the failure
  std::uint32_t text_bytes;
  std::uint32_t reserved;
};
static_assert(sizeof(TruncationFields) == 16);

// A truncation marker, decoded. text points into the reader's memory.
struct TruncationRecord {
  TruncationReason reason = TruncationReason::kUnknown;
  std::int32_t error_number = 0;
  std::string_view text;
};

// RecordType::kEnd payload, exactly as on disk.
struct EndRecord {
  std::uint64_t records_written = 0;  // records before this one
  std::uint64_t end_time_ns = 0;      // wall clock at close, ns since the epoch
  // Appended in version 2 (absent: 0): the offset of the log's last step index record, 0 when it has none.
  std::uint64_t step_index_offset = 0;
  friend bool operator==(const EndRecord&, const EndRecord&) = default;
};
static_assert(sizeof(EndRecord) == 24);

// A step index record (type 6): written only in logs with call records, every kStepIndexChunkEntries step digests
// and at close, so that a reader can find each step's calls without reading the calls before them. Its fixed part,
// then entry_count StepIndexEntry, pair_count StepIndexPair and communicator_count u64 offsets of communicator records
// (those written since the previous index record). The records chain backwards from EndRecord::step_index_offset.
struct StepIndexFields {
  std::uint64_t previous_offset = 0;  // the previous step index record's offset; 0 for the first
  std::uint32_t entry_count = 0;
  std::uint32_t pair_count = 0;
  std::uint32_t communicator_count = 0;
  std::uint32_t reserved = 0;
};
static_assert(sizeof(StepIndexFields) == 24);

// One communicator's calls of one step (what its StepDigestRecord says), where they start, and the counts a reader
// needs to number them as if it had read every call before them. Entries are in log order: those of one group of
// consecutive calls of one step share group_offset, sorted by comm_ordinal.
struct StepIndexEntry {
  std::uint64_t comm_ordinal = 0;
  std::uint64_t step = 0;
  std::uint64_t calls = 0;
  std::uint64_t input_digest = 0;
  std::uint64_t output_digest = 0;
  std::uint64_t group_offset = 0;         // offset of the first call record of the step's group (any communicator)
  std::uint64_t fingerprinted_calls = 0;  // calls with an input or an output fingerprint
  std::uint64_t collectives_before = 0;   // collectives (not Send/Recv) on the communicator before the group
  std::uint64_t first_comm_seq = 0;       // comm_seq of the communicator's first call in the group
  std::uint64_t step_sources = 0;         // bit 1 << StepSource of each of its calls' step sources
  friend bool operator==(const StepIndexEntry&, const StepIndexEntry&) = default;
};
static_assert(sizeof(StepIndexEntry) == 80);

// A Send/Recv pair with calls in a group: how many calls of that op to or from that peer its communicator had before
// the group (what makes the k-th Send on one rank the partner of the k-th Recv on the other).
struct StepIndexPair {
  std::uint32_t entry = 0;  // the StepIndexEntry of its communicator and group: index in the same record
  std::int32_t peer = -1;
  std::uint32_t op = 0;  // OpId
  std::uint32_t reserved = 0;
  std::uint64_t count_before = 0;
  friend bool operator==(const StepIndexPair&, const StepIndexPair&) = default;
};
static_assert(sizeof(StepIndexPair) == 24);

// Step index entries a writer gathers before writing a step index record (80 bytes each: about 80 KiB). RATIONALE:
// small enough that the shim's memory stays flat within a few hundred KiB, large enough that a reader follows few
// records (800 steps of 3 communicators: 3 records).
inline constexpr std::uint32_t kStepIndexChunkEntries = 1024;

// Every fixed part keeps its version-1 fields where they were, is a whole number of 8-byte words (so what follows
// it is aligned) and fits RecordFrame::fixed_bytes.
template <typename Fixed>
constexpr bool is_valid_fixed_part(RecordType type) {
  return sizeof(Fixed) >= version_1_fixed_bytes(type) && sizeof(Fixed) % kRecordAlignment == 0 &&
         sizeof(Fixed) <= UINT16_MAX - 7;
}
static_assert(is_valid_fixed_part<CommunicatorRecord>(RecordType::kCommunicator));
static_assert(is_valid_fixed_part<CallFields>(RecordType::kCall));
static_assert(is_valid_fixed_part<TruncationFields>(RecordType::kTruncated));
static_assert(is_valid_fixed_part<EndRecord>(RecordType::kEnd));
static_assert(is_valid_fixed_part<StepIndexFields>(RecordType::kStepIndex));
static_assert(sizeof(FileHeaderFixed) >= kVersion1HeaderFixedBytes && sizeof(FileHeaderFixed) % 8 == 0);

}  // namespace detnccl::records

#endif  // DETNCCL_RECORDS_LOG_FORMAT_H
