// detnccl: THE capture file format (DETNCCL_CAPTURE=1): the full buffers of fingerprinted calls, one file per rank
// next to its log (DIR/RUN/rank-NNNNN.cap). Shared by the writer (capture_writer.h) and the reader
// (capture_reader.h); docs/log-format.md's "Capture files" describes the same bytes in prose. Change both together.
//
//   header   CaptureFileHeader (its header_bytes says how long it is), then a u64 XXH3-64 checksum of every header
//            byte before it: header_bytes covers it too. The first record starts at header_bytes.
//   record   framed exactly as a log record (log_format.h's RecordFrame: u32 length written LAST, u16 type, u16
//            fixed_bytes, u64 checksum = record_checksum of the payload), 8-byte aligned. Types: CaptureRecordType.
//
// A buffer is stored once per (fingerprint, byte size), its content address: the fingerprint is the one the log's
// call record holds (CallFields::input_fingerprint / output_fingerprint, hash/'s tree hash), so a call record finds
// its buffer with (fingerprint, bytes). Blobs are zstd-compressed when that saves at least an eighth, else raw.
// Fields are in the writer's byte order; the magic reveals it (a reader refuses the other order). Versioning as the
// log's: kCaptureFormatVersion changes when a byte changes meaning; fields are only appended to fixed parts (each
// states its length), record types only added (readers skip unknown ones, still checking their checksum).
#ifndef DETNCCL_RECORDS_CAPTURE_FORMAT_H
#define DETNCCL_RECORDS_CAPTURE_FORMAT_H

#include <cstddef>
#include <cstdint>
#include <string>

namespace detnccl::records {

// The first 8 bytes of every capture file read "DNCCCAP1" when the writer was little-endian ("1PACCCND" otherwise).
inline constexpr std::uint64_t kCaptureMagic = 0x3150414343434E44ull;

// The format this code writes and the newest it reads.
inline constexpr std::uint32_t kCaptureFormatVersion = 1;

// The header's fixed part, exactly as on disk; its u64 checksum follows at header_bytes - 8.
struct CaptureFileHeader {
  std::uint64_t magic = kCaptureMagic;
  std::uint32_t format_version = kCaptureFormatVersion;
  std::uint32_t header_bytes = 0;         // the whole header, checksum included (a multiple of 8)
  std::uint64_t start_time_ns = 0;        // wall clock at creation, ns since the epoch
  std::uint32_t rank = 0;                 // the log's rank (the same file name number)
  std::uint32_t fingerprint_version = 0;  // hash::kFingerprintVersion of the content addresses
  std::uint32_t pid = 0;
  std::uint32_t reserved = 0;
  // New fields go here; header_bytes grows with them.
};
static_assert(sizeof(CaptureFileHeader) == 40);

// A reader refuses headers shorter (the fixed part and its checksum) or longer than these.
inline constexpr std::uint32_t kMinCaptureHeaderBytes = sizeof(CaptureFileHeader) + 8;
inline constexpr std::uint32_t kMaxCaptureHeaderBytes = 1u << 16;

// Capture record types. Numbers never change; new types get new numbers.
enum class CaptureRecordType : std::uint16_t {
  kBlob = 1,     // one buffer: CaptureBlobFields, then stored_bytes of data
  kStopped = 2,  // capture stopped early (budget spent, write error): CaptureStopFields, then its text; nothing follows
  kEnd = 3,      // the writer closed the file cleanly: CaptureEndFields; nothing follows
};

// How a blob's bytes are stored.
enum class CaptureCodec : std::uint32_t {
  kRaw = 0,   // as they were
  kZstd = 1,  // one zstd frame (RFC 8878) whose content is the raw bytes
};

// CaptureRecordType::kBlob fixed part, exactly as on disk; stored_bytes of data follow it (at the record's
// fixed_bytes), then zero padding to the record's length.
struct CaptureBlobFields {
  std::uint64_t fingerprint = 0;   // hash::fingerprint of the raw bytes, as the log records it
  std::uint64_t raw_bytes = 0;     // the buffer's size
  std::uint64_t stored_bytes = 0;  // the data's size in the file (raw_bytes for kRaw)
  std::uint64_t raw_checksum = 0;  // capture_data_checksum of the raw bytes (checked after decompression)
  CaptureCodec codec = CaptureCodec::kRaw;
  std::uint32_t reserved = 0;
};
static_assert(sizeof(CaptureBlobFields) == 40);

// Why capture stopped early.
enum class CaptureStopReason : std::uint32_t {
  kUnknown = 0,
  kBudgetSpent = 1,  // the next blob would have taken the file past DETNCCL_CAPTURE_BYTES
  kWriteError = 2,   // the file could not grow (disk full, quota, I/O error): error_number says which
  kUserStopped = 3,  // the writer's user turned capture off after a failure of its own (CaptureWriter::stop_early)
};

// CaptureRecordType::kStopped fixed part; text_bytes of text follow it.
struct CaptureStopFields {
  CaptureStopReason reason = CaptureStopReason::kUnknown;
  std::int32_t error_number = 0;
  std::uint32_t text_bytes = 0;
  std::uint32_t reserved = 0;
};
static_assert(sizeof(CaptureStopFields) == 16);

// CaptureRecordType::kEnd payload.
struct CaptureEndFields {
  std::uint64_t blobs_written = 0;  // blob records before this one
  std::uint64_t end_time_ns = 0;
};
static_assert(sizeof(CaptureEndFields) == 16);

// A blob's content address: a call record finds its buffer's blob with (fingerprint, byte size).
struct CaptureAddress {
  std::uint64_t fingerprint = 0;
  std::uint64_t bytes = 0;
  bool operator==(const CaptureAddress&) const = default;
};
struct CaptureAddressHash {
  std::size_t operator()(const CaptureAddress& address) const noexcept {
    return static_cast<std::size_t>(address.fingerprint ^ (address.bytes * 0x9E3779B97F4A7C15ull));
  }
};

// A capture record is at most this long (frame included, 8-byte aligned): buffers whose record would be longer are
// not captured.
inline constexpr std::uint64_t kMaxCaptureRecordBytes = 0xFFFFFFF8u;

// The checksum of a blob's raw bytes: XXH3-64, seed 0.
std::uint64_t capture_data_checksum(const void* bytes, std::size_t count) noexcept;

// The name of a rank's capture file: "rank-00003.cap" (at least 5 digits, like rank_log_file_name).
std::string capture_file_name(std::uint32_t rank);

}  // namespace detnccl::records

#endif  // DETNCCL_RECORDS_CAPTURE_FORMAT_H
