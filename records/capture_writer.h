// detnccl: CaptureWriter, the writer of one rank's capture file (format: capture_format.h; DETNCCL_CAPTURE=1).
//
// Each buffer handed to save() is stored once per content address (fingerprint, byte size): zstd-compressed at a
// fast level when that saves at least an eighth, raw otherwise. Records are written with pwrite and their length is
// published last (a second 4-byte pwrite), as the log's writer does: a process killed at any instant leaves a file
// whose complete records all read back, and nothing half-written that looks valid.
//
// The file stops growing at a byte budget (CaptureWriterOptions::budget_bytes, DETNCCL_CAPTURE_BYTES): the first
// blob that would take it past the budget, or the first write error, ends the file with a stop marker, calls
// on_stop once with a one-line message, and every later save() returns kStopped. Never throws; thread-safe: save()
// holds a mutex while it compresses and writes (the shim calls it from its collector thread only), and contains()
// and stopped(), which the job's threads call, never wait for it.
#ifndef DETNCCL_RECORDS_CAPTURE_WRITER_H
#define DETNCCL_RECORDS_CAPTURE_WRITER_H

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "records/capture_format.h"

namespace detnccl::records {

// Tuning and reporting.
struct CaptureWriterOptions {
  // The file (header and records) is never let grow past this many bytes; the stop marker (under 300 bytes) may
  // follow the last blob beyond it.
  std::uint64_t budget_bytes = std::uint64_t{1} << 30;
  // zstd's level (1: its fastest standard level).
  int zstd_level = 1;
  // Called once, outside the writer's lock, with a one-line message when capture stops early (budget, write error).
  std::function<void(std::string_view message)> on_stop;
  // Tests only: called with the writer's lock held after a record's body is written and before its length is.
  void (*before_length_hook)(void* context, std::uint64_t record_offset) = nullptr;
  void* hook_context = nullptr;
};

// What save() did.
enum class CaptureSaveStatus : std::uint8_t {
  kStored,         // the buffer is in the file now
  kAlreadyStored,  // a buffer of this fingerprint and size was stored before: nothing written
  kTooLarge,       // its record would exceed kMaxCaptureRecordBytes: not stored, capture goes on
  kStopped,        // capture has stopped (budget spent, write error, closed): not stored
};

class CaptureWriter;

// What create() returns: a writer, or the reason there is none (one sentence naming the path).
struct CreatedCaptureWriter {
  std::unique_ptr<CaptureWriter> writer;
  std::string error;
};

class CaptureWriter {
 public:
  // Creates run_directory/capture_file_name(rank) (O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600; the directory must exist,
  // be ours and not be a symlink: the log's writer made it) and writes its header. Never overwrites anything.
  static CreatedCaptureWriter create(const std::string& run_directory, std::uint32_t rank,
                                     CaptureWriterOptions options = {}) noexcept;

  ~CaptureWriter();
  CaptureWriter(const CaptureWriter&) = delete;
  CaptureWriter& operator=(const CaptureWriter&) = delete;

  // Stores the buffer `bytes` whose hash::fingerprint is `fingerprint` (the caller computed it; it is not checked
  // here), unless a buffer of that fingerprint and size is stored already.
  CaptureSaveStatus save(std::uint64_t fingerprint, std::span<const std::byte> bytes) noexcept;

  // Whether a buffer of this fingerprint and size is stored. Never waits for a blob being written.
  bool contains(std::uint64_t fingerprint, std::uint64_t bytes) const noexcept;

  // Ends the file with an end marker (unless capture stopped early) and closes it. Idempotent.
  void close() noexcept;

  // Stops capture for a failure outside the writer (the shim could not copy a buffer): ends the file with a stop
  // marker of reason kUserStopped whose text is `why`; later saves return kStopped. Does not call on_stop (the caller
  // reports its own failure). Does nothing once stopped.
  void stop_early(std::string_view why) noexcept;

  // For a fork()ed child: forgets the file without writing to it (the parent owns it).
  void detach_after_fork() noexcept;

  // Whether capture has stopped (budget spent, write error, closed, detached). Never waits for a blob being written.
  bool stopped() const noexcept;
  // Why it stopped early; empty when it did not.
  std::string stop_reason() const;
  // Bytes of the file in use, and blob records written.
  std::uint64_t bytes_written() const noexcept;
  std::uint64_t blobs_written() const noexcept;
  const std::string& path() const noexcept { return path_; }

 private:
  CaptureWriter(int fd, std::string path, CaptureWriterOptions options);
  // Writes one record (frame filled here, length last) at used_. Caller holds mutex_. Returns 0 or an errno.
  int put_record(CaptureRecordType type, std::size_t payload_bytes) noexcept;
  // Writes a stop marker, keeps the reason, stops. Caller holds mutex_.
  void stop(CaptureStopReason reason, int error_number, std::string text) noexcept;


  mutable std::mutex mutex_;       // held while a blob is compressed and written
  mutable std::mutex keys_mutex_;  // guards stored_ only (held for a lookup or an insert: never while writing)
  int fd_ = -1;
  bool stopped_ = false;
  std::atomic<bool> stopped_flag_{false};  // stopped_, readable without waiting for a write
  bool stop_reported_ = false;
  std::uint64_t used_ = 0;
  std::uint64_t blobs_ = 0;
  std::unordered_set<CaptureAddress, CaptureAddressHash> stored_;
  std::vector<std::byte> record_;  // the record being written, reused
  std::string path_;
  std::string stop_reason_;
  CaptureWriterOptions options_;
};

}  // namespace detnccl::records

#endif  // DETNCCL_RECORDS_CAPTURE_WRITER_H
