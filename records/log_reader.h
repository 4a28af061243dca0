// detnccl: LogReader, the streaming reader of one rank's log (format: log_format.h).
//
// It validates the header (magic, byte order, version, checksum), then hands out records one by one until the
// first one it cannot accept, and says why it stopped: the writer closed the log, the log says it was truncated
// (disk full...), the log ends without an end marker (a torn tail: the writer was killed or crashed, or the file was
// cut), or a record is corrupt. Every record handed out passed its checksum.
//
// Hostile input is expected (the reader is fuzzed): every length is checked against the bytes present and capped,
// each step advances by at least one record frame, and nothing throws. A reader parses from a file or from a byte
// span; it keeps its own 8-byte aligned view of the bytes, and decoded spans and strings point into it.
//
// A file is read in one of two ways (LogAccess). Mapped (the default): through a read-only mapping whose pages behind
// the cursor are handed back to the kernel as the reader moves on (a few MiB at a time), so streaming a log costs
// bounded memory however long it is (`detnccl check` holds a reader per rank, a thousand ranks at once), and spans
// of records read earlier stay valid: a page touched again is read back from the file. Streamed: with large pread()s
// into a buffer the reader reuses (256 KiB, or one record when larger), nothing mapped; several times faster (no page
// faults, and the checksum reads bytes already in cache), but a record's spans and strings are valid only until the
// next call of next() or seek(): a caller that keeps a record longer copies what it keeps.
#ifndef DETNCCL_RECORDS_LOG_READER_H
#define DETNCCL_RECORDS_LOG_READER_H

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "records/log_format.h"

namespace detnccl::records {

// Why a reader stopped handing out records.
enum class LogEndKind : std::uint8_t {
  kNotReached,  // next() has not returned false yet
  kClosed,      // an end marker: the writer closed the log cleanly
  kTruncated,   // a truncation marker: tracing stopped early (see LogEnd::truncation)
  kTornTail,    // the log ends without a marker: every record before LogEnd::offset is complete, the rest is lost
  kCorrupt,     // the record at LogEnd::offset is damaged (bad length or checksum with data after it, bad counts)
};

// The reader's verdict, once next() has returned false.
struct LogEnd {
  LogEndKind kind = LogEndKind::kNotReached;
  std::uint64_t offset = 0;     // byte offset of the marker, the torn record or the corrupt record
  std::string message;          // one sentence for the user, with the offset
  TruncationRecord truncation;  // for kTruncated: the marker's reason and text
  EndRecord end_marker;         // for kClosed: the end marker
};

// One record as next() hands it out.
struct LogRecord {
  std::uint64_t offset = 0;  // byte offset of the record in the file
  // StepDigestRecord only when the reader was asked for them (LogReader::return_step_digests).
  std::variant<CommunicatorRecord, CallRecord, StepDigestRecord> record;
};

class LogReader;

// How LogReader::open_file reads a file (see the top of this file).
enum class LogAccess : std::uint8_t {
  kMapped,    // a read-only mapping: spans of records stay valid as long as the reader
  kStreamed,  // pread()s into a reused buffer: spans valid until the next next() or seek()
};

// A log's step index (step_index.h), as LogReader::read_step_index() finds it.
struct StepIndex {
  std::vector<StepIndexEntry> entries;              // log order
  std::vector<StepIndexPair> pairs;                 // StepIndexPair::entry indexes entries; in entry order
  std::vector<CommunicatorRecord> communicators;    // every communicator record of the log, in log order
  std::vector<std::uint64_t> communicator_offsets;  // their offsets
  EndRecord end_marker;
  std::uint64_t end_offset = 0;  // the end marker's offset
};

// What open_file() and from_bytes() return: a reader, or why the log cannot be read (bad magic, other byte order,
// newer version, damaged header...).
struct OpenedLog {
  std::unique_ptr<LogReader> reader;
  std::string error;
  // With no reader: the file holds no header at all, only what the writer leaves when it is killed between creating
  // the file (O_EXCL) and writing the header: no bytes, or zeros (its reservation). error then says so. Not damage:
  // that rank's log holds no records. Decided from a bounded read: the file is empty, or its first
  // kNoHeaderScanBytes bytes (or all of it when shorter) and its last kNoHeaderTailBytes bytes are zero. Any
  // other content that is not a log (text, a damaged header) is not this.
  bool no_header = false;
};

// How much of a file open_file() reads to tell a log whose writer died before its header (OpenedLog::no_header):
// the first kNoHeaderScanBytes, the largest header a log can have, and the last kNoHeaderTailBytes.
inline constexpr std::uint64_t kNoHeaderScanBytes = kMaxHeaderBytes;
inline constexpr std::uint64_t kNoHeaderTailBytes = 64u << 10;

class LogReader {
 public:
  // Opens a log file, read as `access` says, and validates its header. Never throws.
  static OpenedLog open_file(const std::string& path, LogAccess access = LogAccess::kMapped) noexcept;

  // Parses a log held in memory (copied into aligned storage first), e.g. a fuzzer's input. Never throws.
  static OpenedLog from_bytes(std::span<const std::byte> bytes) noexcept;

  ~LogReader();
  LogReader(const LogReader&) = delete;
  LogReader& operator=(const LogReader&) = delete;

  // The decoded header.
  const LogHeader& header() const noexcept { return header_; }

  // Decodes the next communicator or call record into record and returns true; returns false at the end of what
  // can be read (markers end the log and are reported by end(), not returned). Unknown record types with a valid
  // checksum are skipped and counted.
  bool next(LogRecord& record) noexcept;

  // Why next() returned false (kNotReached before that).
  const LogEnd& end() const noexcept { return end_; }

  // Whether next() hands out step digest records too. By default it does not: it keeps them, in log order, in
  // step_digests() (so that readers of calls need not know the type).
  void return_step_digests(bool returned) noexcept { return_step_digests_ = returned; }

  // The step digest records read so far and not handed out. Once the log has ended without its end marker (a torn
  // tail or a truncation marker), the digests its writer never wrote for the calls after its last digest record
  // follow, recomputed from those call records (step_digest.h).
  const std::vector<StepDigestRecord>& step_digests() const noexcept { return step_digests_; }

  // How many of step_digests() were recomputed that way (the last ones).
  std::uint64_t step_digests_recomputed() const noexcept { return step_digests_recomputed_; }

  // The step index of a log its writer closed cleanly (an end marker at the file's end that names its last step
  // index record), read without reading the calls: the end marker is found from the file's end, the index records
  // from it. nullopt when the log has none (a torn or truncated log, an older writer, DETNCCL_TRACE=steps) or when
  // it is damaged (`problem`, when given, then says why): the log is then read from its start. Does not move next().
  std::optional<StepIndex> read_step_index(std::string* problem = nullptr) const noexcept;

  // Moves next() to the record at offset, a group_offset of this log's step index: next() goes on from there (the
  // end marker's record count is then not checked: records were skipped). False, nothing changed, for an offset that
  // is not 8-byte aligned within the log's records, or once the log has ended.
  bool seek(std::uint64_t offset) noexcept;

  // Records handed out by next() so far.
  std::uint64_t records_read() const noexcept { return records_read_; }

  // Records of unknown types skipped (written by a newer detnccl of the same format version).
  std::uint64_t unknown_records_skipped() const noexcept { return unknown_skipped_; }

  // How many bytes of consumed pages are given back to the kernel at a time (default 4 MiB, at least one page):
  // what a reader keeps resident behind its cursor. A tool that holds many readers open at once (`detnccl check`, a
  // reader per rank) makes it smaller. A streamed reader reads at most this much at a time (and at most 256 KiB).
  void set_page_release_bytes(std::uint64_t bytes) noexcept { release_step_bytes_ = bytes; }

  // Step index records next() passed by (read_step_index() reads them).
  std::uint64_t step_index_records_passed() const noexcept { return index_records_; }

 private:
  LogReader() = default;
  // Validates the header; returns the problem, empty when fine (sets no_header_ for a file with no header at all).
  std::string read_header();
  // Whether the bytes where a header would be, and the file's last bytes, are all zero (see OpenedLog::no_header).
  bool header_area_is_zero() const;
  // The length of the fixed part of the record framed by frame (version_1_fixed_bytes() in a version-1 log, else
  // what the frame states), or why the stated length is impossible. The frame's length has been checked.
  std::string fixed_part_bytes(const RecordFrame& frame, std::uint64_t& fixed_bytes) const;
  // Decodes the checksummed record at offset at: true when it is handed out in record, false when it ends the log
  // (a marker, or corrupt: end_ is set), nullopt for a type this reader does not know (skipped and counted).
  std::optional<bool> decode(std::uint64_t at, const RecordFrame& frame, const std::byte* payload, LogRecord& record);
  // Sets end_ and returns false.
  bool finish(LogEndKind kind, std::uint64_t offset, std::string message) noexcept;
  // Whether every byte from offset to the end is zero.
  bool zeros_from(std::uint64_t offset) const;
  // The offset just past the last non-zero byte at or after offset (offset itself when all are zero).
  std::uint64_t end_of_data(std::uint64_t offset) const;
  // Gives the mapped pages wholly before offset back to the kernel, once enough have been consumed.
  void release_pages_before(std::uint64_t offset) noexcept;

  // A streamed reader's window on its file: the bytes from `start`, `length` of them, in 8-byte aligned storage.
  struct ReadBuffer {
    std::unique_ptr<std::uint64_t[]> words;
    std::uint64_t capacity = 0;  // bytes
    std::uint64_t start = 0;
    std::uint64_t length = 0;
  };
  // The log's bytes [offset, offset + bytes), within the file: a pointer into the mapping or the copy, or (streamed)
  // into `buffer`, read from the file when it does not hold them, valid until the next call with that buffer. Bytes a
  // file no longer holds (cut while read) read as zeros. Throws std::bad_alloc.
  const std::byte* bytes_at(ReadBuffer& buffer, std::uint64_t offset, std::uint64_t bytes) const;

  const std::byte* data_ = nullptr;  // mapped or copied: the whole log; null when streamed
  std::uint64_t size_ = 0;
  int fd_ = -1;  // when streaming a file
  // RATIONALE: two buffers, so that what next() handed out stays valid while the step index, the end of the file or
  // a torn tail are read (aux_: everything but next()'s records, from const functions too).
  ReadBuffer stream_;
  mutable ReadBuffer aux_;
  void* mapping_ = nullptr;     // when reading a file
  std::uint64_t released_ = 0;  // mapped bytes before this offset were given back (a multiple of the page size)
  // RATIONALE: 4 MiB by default: the madvise calls cost nothing next to reading the records, and a reader alone keeps
  // little resident; check, with a reader per rank, divides a budget among them (run_check.cc).
  std::uint64_t release_step_bytes_ = 4u << 20;  // set_page_release_bytes()
  std::vector<std::uint64_t> copy_;              // when reading bytes: aligned storage
  bool return_step_digests_ = false;
  bool seeked_ = false;              // seek() skipped records: the end marker's count is not checked
  std::uint64_t index_records_ = 0;  // step index records passed by next()
  std::uint64_t header_bytes_ = 0;   // where the first record starts
  // The checksummed record of `type` at offset whose fixed part is at least `least` bytes: its payload and fixed
  // part's length, or nullopt (out of the log, bad frame or checksum, other type).
  struct RawRecord {
    const std::byte* payload;
    std::uint64_t payload_bytes;
    std::uint64_t fixed_bytes;
  };
  std::optional<RawRecord> record_at(std::uint64_t offset, RecordType type) const;
  std::vector<StepDigestRecord> step_digests_;  // kept, not handed out
  std::uint64_t step_digests_kept_ = 0;
  std::uint64_t step_digests_recomputed_ = 0;
  std::uint64_t after_last_digest_ = 0;  // offset of the first record after the last step digest record
  // At a torn or truncated end: folds the call records between after_last_digest_ and `end` into the digests their
  // writer did not write, and appends them to step_digests_.
  void recompute_open_step(std::uint64_t end) noexcept;
  LogHeader header_;
  bool no_header_ = false;
  std::uint64_t position_ = 0;
  std::uint64_t records_read_ = 0;
  std::uint64_t unknown_skipped_ = 0;
  LogEnd end_;
};

}  // namespace detnccl::records

#endif  // DETNCCL_RECORDS_LOG_READER_H
