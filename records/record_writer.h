// detnccl: RecordWriter, the crash-safe append-only writer of one rank's log (format: log_format.h).
//
// The log is a memory-mapped file grown in chunks whose space is reserved with posix_fallocate before any page is
// touched (so a full disk is an error code, never a SIGBUS). Each record is written, then its length is published
// last, so a crash or kill -9 leaves every complete record readable and nothing half-written that looks valid.
// Appends take a mutex and make no allocation and no system call except when the file grows, every 64 KiB when the
// pages ahead of the write position are mapped in one call (instead of a page fault per page as records reach them),
// and every few MiB when the pages of published records are handed back to the kernel (so resident memory does not
// grow with the log).
//
// Failures never reach the caller as exceptions or signals: when the file cannot grow (disk full, quota, file size
// limit, I/O error) the writer puts a truncation marker in space it kept for it, stops appending, and reports once
// through WriterOptions::on_stop; later appends return AppendStatus::kStopped. The job goes on.
//
// Files are created safely (see create()): no symlink is followed for the run directory or the file, nothing is
// ever overwritten, files are 0600 and created directories 0700. A second run with the same run name therefore
// fails to create its logs, with a message that says so; it never reuses or damages the first run's logs.
//
// One process that drives several ranks (ncclCommInitAll, one thread per GPU) writes one log: appends are
// thread-safe, and each call record names its communicator, whose record gives the rank in it. A fork()ed child
// must call detach_after_fork() (from an atfork handler) and not append: the mapping is shared with the parent.
#ifndef DETNCCL_RECORDS_RECORD_WRITER_H
#define DETNCCL_RECORDS_RECORD_WRITER_H

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "records/log_format.h"
#include "records/step_digest.h"
#include "records/step_index.h"

namespace detnccl::records {

// Where a log goes: dir/run/file_name.
struct LogLocation {
  std::string dir;        // DETNCCL_DIR; created (0700, like mkdir -p) when missing
  std::string run;        // the run directory's name (one path component)
  std::string file_name;  // rank_log_file_name(rank)
};

// The instants of appending one record, in this order, at which WriterOptions::append_hook is called. Until
// kBeforeLength the record's length word is 0 (the slot reads as the end of the log); from kAfterLength the whole
// record is in the file. Each is an instant where a crash or kill -9 may land.
enum class AppendPoint : std::uint8_t {
  kAfterPayload,   // fixed part, variable part and padding written; frame not yet
  kAfterChecksum,  // type, fixed_bytes and checksum written too
  kBeforeLength,   // just before the length is published (a release store)
  kAfterLength,    // just after: the record is complete
};

// A test's observer of appends (WriterOptions::append_hook): called with the writer's lock held, at each point of
// every record (markers included), with the record's offset in the file and its length.
using AppendHook = void (*)(void* context, AppendPoint point, std::uint64_t record_offset, std::uint32_t length);

// Tuning and reporting.
struct WriterOptions {
  // The file starts this large and grows by its own size, doubling up to max_growth_bytes per step.
  std::uint64_t initial_bytes = 1u << 20;
  std::uint64_t max_growth_bytes = 64u << 20;
  // Pages up to this many bytes ahead of the write position are mapped writable in one system call
  // (madvise MADV_POPULATE_WRITE, Linux 5.14+) whenever records reach the end of those mapped so far, never beyond
  // the space already reserved in the file. 0 turns it off: every new page is then mapped by a page fault at its
  // first store. A kernel that refuses the advice turns it off too, silently (it only saves time).
  // RATIONALE: 64 KiB, not more: each populate holds the append lock (about 20 us at 64 KiB, 66 us at 256 KiB on the
  // development VM) and the throughput was the same (bench/results/bench_record_writer_2026-11-29_2cpu-vm.txt).
  std::uint64_t populate_ahead_bytes = 64u << 10;
  // Called once, outside the writer's lock, with a one-line message when tracing stops early (disk full...). The shim
  // logs it as a warning. May be empty.
  std::function<void(std::string_view message)> on_stop;
  // Tests only (tests/test_records.cc proves the crash promise with it): called at each AppendPoint, with
  // append_hook_context. Null in production, where it costs one predictable branch per point.
  AppendHook append_hook = nullptr;
  void* append_hook_context = nullptr;
  // Whether call records are written. Either way every call is folded into its step's digest (step_digest.h), and a
  // StepDigestRecord per communicator is written when the step ends and at close; false is DETNCCL_TRACE=steps.
  bool write_calls = true;
};

// What an append did.
enum class AppendStatus : std::uint8_t {
  kOk,               // the record is in the log
  kSegmentsDropped,  // the call record is in the log without its segment digests (it would have exceeded
                     // kMaxRecordBytes); its flags say so
  kStopped,          // tracing has stopped (earlier failure, close(), or detach_after_fork()); nothing was written
};

class RecordWriter;

// What create() returns: a writer, or the reason there is none (one sentence naming the path).
struct CreatedWriter {
  std::unique_ptr<RecordWriter> writer;
  std::string error;
};

class RecordWriter {
 public:
  // Creates dir (mode 0700, missing components only), then dir/run (0700; an existing one must be a real directory
  // owned by this user, not a symlink), then the log file with O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600, and writes the
  // header. Fails, without touching anything that exists, when the file exists already (same run name twice), a
  // symlink stands in place of the run directory or the file, or anything cannot be created. Never throws.
  static CreatedWriter create(const LogLocation& location, const LogHeader& header,
                              WriterOptions options = {}) noexcept;

  // Closes the log (close()).
  ~RecordWriter();

  RecordWriter(const RecordWriter&) = delete;
  RecordWriter& operator=(const RecordWriter&) = delete;

  // Appends a communicator record. Thread-safe.
  AppendStatus append(const CommunicatorRecord& record) noexcept;

  // Appends a call record; the array counts come from its spans. Block digests are written as given (the caller
  // folds them: block_digests.h's fold_call_blocks); a record without folded ones gets the shorter fixed part
  // (kCallFixedBytesWithoutBlockDigests). Thread-safe.
  AppendStatus append(const CallRecord& record) noexcept;

  // Asks the kernel to start writing the appended records to disk (msync MS_ASYNC); returns at once. Records are
  // safe from a process crash without it; this narrows what a machine crash can lose.
  void flush() noexcept;

  // Ends the log: appends the end marker (unless tracing stopped early), cuts the file to the bytes used, and closes
  // it. Later appends return kStopped. Idempotent; the destructor calls it.
  void close() noexcept;

  // Stops tracing for a failure outside the writer (the shim ran out of memory, or device fingerprints never
  // completed): ends the log with a truncation marker of reason kTracerStopped whose text is `why` (cut to fit), so
  // that readers know records are missing; later appends return kStopped and close() writes no end marker. Does not
  // call on_stop (the caller reports its own failure). Does nothing once stopped, closed or detached. Thread-safe.
  void stop_early(std::string_view why) noexcept;

  // For a fork()ed child: forgets the log without writing to it or taking the lock (the parent still owns it).
  void detach_after_fork() noexcept;

  // Whether appends are refused now (stopped early, closed or detached).
  bool stopped() const noexcept { return stopped_.load(std::memory_order_acquire); }

  // Why tracing stopped early; empty when it did not.
  std::string stop_reason() const;

  // The log's path.
  const std::string& path() const noexcept { return path_; }

  // Records appended so far (markers excluded).
  std::uint64_t records_written() const noexcept;

  // Bytes of the file in use (header and records).
  std::uint64_t bytes_used() const noexcept;

 private:
  RecordWriter(int fd, std::string path, WriterOptions options);

  // Writes one framed record at used_ and publishes it. Caller holds mutex_ and has ensured the space.
  void put_record(RecordType type, const void* fixed, std::size_t fixed_bytes,
                  std::span<const std::span<const std::uint64_t>> arrays, std::uint32_t length) noexcept;
  // Makes room for a record of length bytes plus the marker reserve; false when tracing stopped.
  bool reserve(std::uint64_t length) noexcept;
  // Grows the file and the mapping to at least needed bytes; returns 0 or an errno.
  int grow(std::uint64_t needed) noexcept;
  // Writes the truncation marker, records the reason and marks the writer stopped. Caller holds mutex_.
  void stop_with_error(int error_number, std::string_view what) noexcept;
  // Writes a truncation marker with this reason, errno and text, keeps the text as stop_reason() and marks the writer
  // stopped. Caller holds mutex_.
  void put_truncation_marker(TruncationReason reason, int error_number, std::string_view text) noexcept;
  // Gives the pages of published records back to the kernel (see kReleaseStepBytes). Caller holds mutex_.
  void release_written_pages() noexcept;
  // Maps the pages from the write position up to end plus populate_ahead_bytes (within capacity_). Caller holds
  // mutex_.
  void populate_ahead(std::uint64_t end) noexcept;
  // Calls on_stop once, outside the lock.
  void report_stop() noexcept;
  bool write_header(const LogHeader& header) noexcept;

  mutable std::mutex mutex_;
  std::atomic<bool> stopped_{false};
  std::atomic<bool> detached_{false};
  bool closed_ = false;
  bool stop_reported_ = false;
  int fd_ = -1;
  std::byte* map_ = nullptr;
  std::uint64_t capacity_ = 0;  // bytes reserved in the file and mapped
  std::uint64_t used_ = 0;      // bytes of header and published records
  std::uint64_t released_ = 0;  // mapped pages before this offset were given back to the kernel
  // Pages before this offset were populated ahead of used_; UINT64_MAX when populating is off or was refused.
  std::uint64_t populated_ = 0;
  std::uint64_t records_ = 0;
  StepDigester step_digester_;                 // guarded by mutex_
  std::vector<StepDigestRecord> ended_steps_;  // guarded by mutex_: digests to write, reused
  // The step index (guarded by mutex_): gathered only when call records are written; written every
  // kStepIndexChunkEntries entries and at close, unless it failed (index_off_: the log then has none).
  StepIndexBuilder step_index_;
  std::uint64_t last_index_offset_ = 0;  // the last step index record written; 0: none yet
  bool index_off_ = false;
  // Writes the step index gathered so far as one record (when due, or at close); on failure stops writing an index.
  // Caller holds mutex_.
  void put_step_index() noexcept;
  // Writes the digests of ended_steps_ and clears it; false when tracing stopped. Caller holds mutex_.
  bool put_ended_steps() noexcept;
  std::string path_;
  std::string stop_reason_;
  WriterOptions options_;
};

}  // namespace detnccl::records

#endif  // DETNCCL_RECORDS_RECORD_WRITER_H
