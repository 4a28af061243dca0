// detnccl: the capture file's writer (see capture_writer.h).
#include "records/capture_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <new>
#include <utility>

#include "hash/tree_shape.h"
#include "posix/file_descriptor.h"
#include "records/log_format.h"
#include "records/zstd_codec.h"

namespace detnccl::records {
namespace {

constexpr std::size_t kFrameBytes = sizeof(RecordFrame);

std::string error_text(int error_number) {
  std::array<char, 128> buffer{};
  return strerror_r(error_number, buffer.data(), buffer.size());
}

// pwrite of all `size` bytes at `offset`, retrying after EINTR and short writes. Returns 0 or an errno.
int pwrite_all(int fd, const void* data, std::size_t size, std::uint64_t offset) noexcept {
  const auto* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t written = pwrite(fd, bytes, size, static_cast<off_t>(offset));
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return written < 0 ? errno : EIO;
    bytes += written;
    size -= static_cast<std::size_t>(written);
    offset += static_cast<std::uint64_t>(written);
  }
  return 0;
}

std::uint64_t round_up(std::uint64_t bytes) noexcept { return (bytes + 7) & ~std::uint64_t{7}; }

std::uint64_t now_ns() noexcept {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<std::uint64_t>(now.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(now.tv_nsec);
}

}  // namespace

CreatedCaptureWriter CaptureWriter::create(const std::string& run_directory, std::uint32_t rank,
                                           CaptureWriterOptions options) noexcept {
  CreatedCaptureWriter result;
  try {
    const posix::FileDescriptor run(open(run_directory.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (run.get() < 0) {
      result.error = "cannot open the run directory " + run_directory + ": " + error_text(errno);
      return result;
    }
    struct stat run_stat {};
    if (fstat(run.get(), &run_stat) != 0 || run_stat.st_uid != geteuid()) {
      result.error = "the run directory " + run_directory + " belongs to another user; refused";
      return result;
    }
    const std::string name = capture_file_name(rank);
    const std::string path = run_directory + "/" + name;
    posix::FileDescriptor file(
        openat(run.get(), name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (file.get() < 0) {
      const int error = errno;
      result.error = "cannot create " + path + ": " +
                     (error == EEXIST ? std::string("it already exists (detnccl never overwrites a capture file)")
                                      : error_text(error));
      return result;
    }
    std::unique_ptr<CaptureWriter> writer(new CaptureWriter(file.release(), path, std::move(options)));
    CaptureFileHeader header;
    header.header_bytes = kMinCaptureHeaderBytes;
    header.start_time_ns = now_ns();
    header.rank = rank;
    header.fingerprint_version = hash::kFingerprintVersion;
    header.pid = static_cast<std::uint32_t>(getpid());
    std::array<std::byte, kMinCaptureHeaderBytes> bytes{};
    std::memcpy(bytes.data(), &header, sizeof header);
    const std::uint64_t checksum = header_checksum(bytes.data(), sizeof header);
    std::memcpy(bytes.data() + sizeof header, &checksum, sizeof checksum);
    if (const int error = pwrite_all(writer->fd_, bytes.data(), bytes.size(), 0); error != 0) {
      result.error = "cannot write the header of " + path + ": " + error_text(error);
      writer->stopped_ = true;
      writer->stopped_flag_.store(true);
      unlinkat(run.get(), name.c_str(), 0);
      return result;
    }
    writer->used_ = bytes.size();
    result.writer = std::move(writer);
  } catch (const std::bad_alloc&) {
    result.writer.reset();
    result.error = "out of memory while creating the capture file";
  }
  return result;
}

CaptureWriter::CaptureWriter(int fd, std::string path, CaptureWriterOptions options)
    : fd_(fd), path_(std::move(path)), options_(std::move(options)) {}

CaptureWriter::~CaptureWriter() { close(); }

int CaptureWriter::put_record(CaptureRecordType type, std::size_t payload_bytes) noexcept {
  const std::size_t fixed_bytes = type == CaptureRecordType::kBlob      ? sizeof(CaptureBlobFields)
                                  : type == CaptureRecordType::kStopped ? sizeof(CaptureStopFields)
                                                                        : sizeof(CaptureEndFields);
  const std::uint64_t length = round_up(kFrameBytes + payload_bytes);
  std::memset(record_.data() + kFrameBytes + payload_bytes, 0, length - kFrameBytes - payload_bytes);
  RecordFrame frame{};
  frame.length = 0;  // published last
  frame.type = static_cast<std::uint16_t>(type);
  frame.fixed_bytes = static_cast<std::uint16_t>(fixed_bytes);
  frame.checksum = record_checksum(static_cast<std::uint32_t>(length), frame.type, frame.fixed_bytes,
                                   record_.data() + kFrameBytes, length - kFrameBytes);
  std::memcpy(record_.data(), &frame, sizeof frame);
  if (const int error = pwrite_all(fd_, record_.data(), length, used_); error != 0) return error;
  if (options_.before_length_hook != nullptr) options_.before_length_hook(options_.hook_context, used_);
  const auto published = static_cast<std::uint32_t>(length);
  if (const int error = pwrite_all(fd_, &published, sizeof published, used_); error != 0) return error;
  used_ += length;
  return 0;
}

void CaptureWriter::stop(CaptureStopReason reason, int error_number, std::string text) noexcept {
  stopped_ = true;
  stopped_flag_.store(true, std::memory_order_release);
  try {
    stop_reason_ = text;
    text.resize(std::min<std::size_t>(text.size(), 256));
    const std::size_t payload = sizeof(CaptureStopFields) + text.size();
    if (record_.size() < round_up(kFrameBytes + payload)) record_.resize(round_up(kFrameBytes + payload));
    CaptureStopFields fields;
    fields.reason = reason;
    fields.error_number = error_number;
    fields.text_bytes = static_cast<std::uint32_t>(text.size());
    std::memcpy(record_.data() + kFrameBytes, &fields, sizeof fields);
    std::memcpy(record_.data() + kFrameBytes + sizeof fields, text.data(), text.size());
    put_record(CaptureRecordType::kStopped, payload);  // best effort: a file without it reads as a torn tail
  } catch (const std::bad_alloc&) {
  }
}

CaptureSaveStatus CaptureWriter::save(std::uint64_t fingerprint, std::span<const std::byte> bytes) noexcept {
  std::function<void(std::string_view)> report;
  std::string message;
  CaptureSaveStatus status = CaptureSaveStatus::kStopped;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (stopped_) return CaptureSaveStatus::kStopped;
    const CaptureAddress key{fingerprint, bytes.size()};
    if (contains(fingerprint, bytes.size())) return CaptureSaveStatus::kAlreadyStored;
    const std::uint64_t head = kFrameBytes + sizeof(CaptureBlobFields);
    if (head + bytes.size() > kMaxCaptureRecordBytes) return CaptureSaveStatus::kTooLarge;
    try {
      // RATIONALE: below 64 bytes a zstd frame's own header leaves nothing to gain.
      const std::size_t bound = bytes.size() >= 64 ? zstd_compress_bound(bytes.size()) : 0;
      const std::uint64_t room = round_up(head + std::max<std::uint64_t>(bytes.size(), bound));
      if (record_.size() < room) record_.resize(room);
      CaptureBlobFields fields;
      fields.fingerprint = fingerprint;
      fields.raw_bytes = bytes.size();
      fields.raw_checksum = capture_data_checksum(bytes.data(), bytes.size());
      std::byte* data = record_.data() + head;
      std::size_t compressed = 0;
      if (bound != 0) {
        compressed = zstd_compress(data, room - head, bytes.data(), bytes.size(), options_.zstd_level);
      }
      if (compressed != 0 && compressed <= bytes.size() - bytes.size() / 8) {
        fields.codec = CaptureCodec::kZstd;
        fields.stored_bytes = compressed;
      } else {
        fields.codec = CaptureCodec::kRaw;
        fields.stored_bytes = bytes.size();
        if (!bytes.empty()) std::memcpy(data, bytes.data(), bytes.size());
      }
      std::memcpy(record_.data() + kFrameBytes, &fields, sizeof fields);
      const std::uint64_t length = round_up(head + fields.stored_bytes);
      if (used_ + length > options_.budget_bytes) {
        message = "capture stopped: the next buffer (" + std::to_string(bytes.size()) + " bytes, " +
                  std::to_string(length) + " in the file) would take " + path_ + " past its budget of " +
                  std::to_string(options_.budget_bytes) + " bytes (DETNCCL_CAPTURE_BYTES; " + std::to_string(used_) +
                  " written); later calls are recorded as not captured";
        stop(CaptureStopReason::kBudgetSpent, 0, message);
      } else if (const int error = put_record(CaptureRecordType::kBlob, sizeof fields + fields.stored_bytes);
                 error != 0) {
        message = "capture stopped: cannot write " + path_ + ": " + error_text(error) +
                  "; later calls are recorded as not captured";
        stop(CaptureStopReason::kWriteError, error, message);
      } else {
        {
          const std::lock_guard<std::mutex> keys(keys_mutex_);
          stored_.insert(key);
        }
        ++blobs_;
        status = CaptureSaveStatus::kStored;
      }
    } catch (const std::bad_alloc&) {
      message = "capture stopped: out of memory while storing a buffer of " + std::to_string(bytes.size()) +
                " bytes; later calls are recorded as not captured";
      stop(CaptureStopReason::kWriteError, ENOMEM, message);
    }
    if (stopped_ && !stop_reported_) {
      stop_reported_ = true;
      report = options_.on_stop;
    }
  }
  if (report) report(message);
  return status;
}

void CaptureWriter::stop_early(std::string_view why) noexcept {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (stopped_ || fd_ < 0) return;
  try {
    stop(CaptureStopReason::kUserStopped, 0, std::string(why));
  } catch (const std::bad_alloc&) {
    stopped_ = true;
    stopped_flag_.store(true, std::memory_order_release);
  }
}

bool CaptureWriter::contains(std::uint64_t fingerprint, std::uint64_t bytes) const noexcept {
  const std::lock_guard<std::mutex> lock(keys_mutex_);
  return stored_.count(CaptureAddress{fingerprint, bytes}) != 0;
}

void CaptureWriter::close() noexcept {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (fd_ < 0) return;
  if (!stopped_) {
    try {
      if (record_.size() < kFrameBytes + sizeof(CaptureEndFields))
        record_.resize(kFrameBytes + sizeof(CaptureEndFields));
      CaptureEndFields fields;
      fields.blobs_written = blobs_;
      fields.end_time_ns = now_ns();
      std::memcpy(record_.data() + kFrameBytes, &fields, sizeof fields);
      put_record(CaptureRecordType::kEnd, sizeof fields);
    } catch (const std::bad_alloc&) {
    }
  }
  stopped_ = true;
  stopped_flag_.store(true, std::memory_order_release);
  ::close(fd_);
  fd_ = -1;
}

void CaptureWriter::detach_after_fork() noexcept {
  // RATIONALE: the lock may be held by a parent thread that does not exist here; the descriptor is the parent's too
  // (closing our copy does not affect it).
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  stopped_ = true;
  stopped_flag_.store(true, std::memory_order_release);
}

bool CaptureWriter::stopped() const noexcept { return stopped_flag_.load(std::memory_order_acquire); }

std::string CaptureWriter::stop_reason() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return stop_reason_;
}

std::uint64_t CaptureWriter::bytes_written() const noexcept {
  const std::lock_guard<std::mutex> lock(mutex_);
  return used_;
}

std::uint64_t CaptureWriter::blobs_written() const noexcept {
  const std::lock_guard<std::mutex> lock(mutex_);
  return blobs_;
}

}  // namespace detnccl::records
