// detnccl: the crash-safe mmap append writer (see record_writer.h for the promises, log_format.h for the bytes).
#include "records/record_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <utility>

#include "posix/file_descriptor.h"

// Linux 5.14's madvise advice; older C libraries lack the name, older kernels refuse it with EINVAL.
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace detnccl::records {
namespace {

// RATIONALE: space for the truncation marker is kept free at all times, so the log can say it is truncated even
// when the disk is full.
constexpr std::uint64_t kMarkerReserve = 512;
constexpr std::size_t kMaxStopTextBytes = kMarkerReserve - sizeof(RecordFrame) - sizeof(TruncationFields) - 8;
// RATIONALE: the pages of published records are handed back to the kernel (they stay in the page cache and are
// written out as usual) every this many bytes, so the job's resident memory does not grow with its log.
constexpr std::uint64_t kReleaseStepBytes = 4u << 20;

std::uint64_t page_size() noexcept {
  const long size = sysconf(_SC_PAGESIZE);
  return size > 0 ? static_cast<std::uint64_t>(size) : 4096;
}

std::uint64_t round_up(std::uint64_t value, std::uint64_t multiple) noexcept {
  return (value + multiple - 1) / multiple * multiple;
}

// The largest size this process may give a file (RLIMIT_FSIZE), or UINT64_MAX.
// RATIONALE: asking the kernel for more raises SIGXFSZ, whose default action kills the job; the writer must never
// ask, and treats the limit as EFBIG instead.
std::uint64_t file_size_limit() noexcept {
  rlimit limit{};
  if (getrlimit(RLIMIT_FSIZE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return UINT64_MAX;
  return limit.rlim_cur;
}

std::uint64_t wall_clock_ns() noexcept {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<std::uint64_t>(now.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(now.tv_nsec);
}

std::string error_text(int error_number) {
  std::array<char, 128> buffer{};
  // GNU strerror_r returns the message, which may or may not be in buffer.
  return strerror_r(error_number, buffer.data(), buffer.size());
}

bool is_single_component(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

// mkdir -p with mode 0700 for the components that are missing. The components of DETNCCL_DIR are resolved as
// usual (the user named that path; /scratch may well be a symlink); the run directory and the file are not.
std::string make_directories(const std::string& dir) {
  if (dir.empty()) return "the log directory (DETNCCL_DIR) is empty";
  for (std::size_t slash = dir.find('/', 1);; slash = dir.find('/', slash + 1)) {
    const std::string prefix = dir.substr(0, slash);
    if (!prefix.empty() && mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) {
      return "cannot create directory " + prefix + ": " + error_text(errno);
    }
    if (slash == std::string::npos) break;
  }
  return {};
}

using detnccl::posix::FileDescriptor;

// When this process started, as CLOCK_REALTIME nanoseconds (to the kernel's clock tick); 0 when unknown.
std::uint64_t process_start_ns() noexcept {
  const FileDescriptor stat_file(open("/proc/self/stat", O_RDONLY | O_CLOEXEC));
  char text[1024] = {};
  if (stat_file.get() < 0 || read(stat_file.get(), text, sizeof text - 1) <= 0) return 0;
  // Field 22, starttime (clock ticks after boot), counted from the fields after the command name's ')'.
  const char* field = std::strrchr(text, ')');
  for (int i = 2; field != nullptr && i < 22; ++i) field = std::strchr(field + 1, ' ');
  const long ticks_per_second = sysconf(_SC_CLK_TCK);
  if (field == nullptr || ticks_per_second <= 0) return 0;
  const unsigned long long ticks = std::strtoull(field + 1, nullptr, 10);
  timespec now_real{}, now_boot{};
  if (clock_gettime(CLOCK_REALTIME, &now_real) != 0 || clock_gettime(CLOCK_BOOTTIME, &now_boot) != 0) return 0;
  const auto ns = [](const timespec& t) {
    return static_cast<std::uint64_t>(t.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(t.tv_nsec);
  };
  const std::uint64_t since_boot = ticks * (1000000000ull / static_cast<std::uint64_t>(ticks_per_second));
  const std::uint64_t age = ns(now_boot) > since_boot ? ns(now_boot) - since_boot : 0;
  return ns(now_real) > age ? ns(now_real) - age : 0;
}

// The fixed header of the run's rank-0 log when it has one (a regular file that reads as a log); nullopt otherwise.
std::optional<FileHeaderFixed> rank_0_header(int run_fd) {
  const FileDescriptor file(
      openat(run_fd, rank_log_file_name(0).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  struct stat file_stat {};
  if (file.get() < 0 || fstat(file.get(), &file_stat) != 0 || !S_ISREG(file_stat.st_mode)) return std::nullopt;
  FileHeaderFixed fixed{};
  if (pread(file.get(), &fixed, sizeof fixed, 0) != static_cast<ssize_t>(sizeof fixed) || fixed.magic != kMagic) {
    return std::nullopt;
  }
  return fixed;
}

// Whether the run directory holds the logs of an earlier job: its rank-0 log says another world size and was
// created before this process started. (The logs of one job agree on the world size, and a rank-0 log of this job
// is created once its first communicator exists, which takes this process too.) A rerun with more ranks under the
// name of an earlier run finds the new ranks' files free: without this check they would join the old logs.
std::optional<FileHeaderFixed> earlier_job(int run_fd, const LogLocation& location, const LogHeader& header) {
  if (header.world_size == 0 || location.file_name == rank_log_file_name(0)) return std::nullopt;
  const std::optional<FileHeaderFixed> theirs = rank_0_header(run_fd);
  if (!theirs || theirs->world_size == 0 || theirs->world_size == header.world_size) return std::nullopt;
  // RATIONALE: a margin of two clock ticks: the start time is known to the tick.
  constexpr std::uint64_t kMarginNs = 20000000;
  const std::uint64_t started = process_start_ns();
  if (started == 0 || theirs->start_time_ns + kMarginNs >= started) return std::nullopt;
  return theirs;
}

TruncationReason reason_of(int error_number) noexcept {
  switch (error_number) {
    case ENOSPC:
    case EDQUOT:
      return TruncationReason::kDiskFull;
    case EFBIG:
      return TruncationReason::kFileTooLarge;
    default:
      return TruncationReason::kWriteError;
  }
}

}  // namespace

CreatedWriter RecordWriter::create(const LogLocation& location, const LogHeader& header,
                                   WriterOptions options) noexcept {
  CreatedWriter result;
  try {
    if (!is_single_component(location.run)) {
      result.error = "invalid run directory name '" + location.run + "'";
      return result;
    }
    if (!is_single_component(location.file_name)) {
      result.error = "invalid log file name '" + location.file_name + "'";
      return result;
    }
    if (std::string problem = make_directories(location.dir); !problem.empty()) {
      result.error = problem;
      return result;
    }
    const FileDescriptor dir(open(location.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (dir.get() < 0) {
      result.error = "cannot open the log directory " + location.dir + ": " + error_text(errno);
      return result;
    }
    const std::string run_path = location.dir + "/" + location.run;
    // All ranks of a run share the run directory: it may exist already, but must be ours and a real directory.
    if (mkdirat(dir.get(), location.run.c_str(), 0700) != 0 && errno != EEXIST) {
      result.error = "cannot create the run directory " + run_path + ": " + error_text(errno);
      return result;
    }
    const FileDescriptor run(openat(dir.get(), location.run.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (run.get() < 0) {
      const int error = errno;
      result.error = "cannot open the run directory " + run_path +
                     (error == ELOOP || error == ENOTDIR ? ": it is a symlink or not a directory (refused)"
                                                         : ": " + error_text(error));
      return result;
    }
    struct stat run_stat {};
    if (fstat(run.get(), &run_stat) != 0 || run_stat.st_uid != geteuid()) {
      result.error = "the run directory " + run_path + " belongs to another user (uid " +
                     std::to_string(run_stat.st_uid) + "); refused";
      return result;
    }
    const std::string path = run_path + "/" + location.file_name;
    if (const auto theirs = earlier_job(run.get(), location, header)) {
      result.error = "cannot create " + path + ": " + run_path + " holds the logs of an earlier job of " +
                     std::to_string(theirs->world_size) + " ranks (this one has " + std::to_string(header.world_size) +
                     "), so run name '" + location.run +
                     "' was used before; detnccl never adds a job's logs to another's: set DETNCCL_RUN to a new name "
                     "or remove " +
                     run_path;
      return result;
    }
    FileDescriptor file(
        openat(run.get(), location.file_name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (file.get() < 0) {
      const int error = errno;
      struct stat existing {};
      if (error == EEXIST && fstatat(run.get(), location.file_name.c_str(), &existing, AT_SYMLINK_NOFOLLOW) == 0 &&
          S_ISLNK(existing.st_mode)) {
        result.error = "cannot create " + path + ": a symlink is in its place (refused)";
      } else if (error == EEXIST) {
        result.error = "cannot create " + path + ": it already exists, so run name '" + location.run +
                       "' was used before; detnccl never overwrites a log: set DETNCCL_RUN to a new name or remove " +
                       run_path;
      } else {
        result.error = "cannot create " + path + ": " + error_text(error);
      }
      return result;
    }
    std::unique_ptr<RecordWriter> writer(new RecordWriter(file.release(), path, std::move(options)));
    if (!writer->write_header(header)) {
      result.error = "cannot write the header of " + path + ": " + writer->stop_reason_;
      // The file is ours (created exclusively just now) and useless: remove it so a rerun is not blocked by it.
      writer->close();
      unlinkat(run.get(), location.file_name.c_str(), 0);
      return result;
    }
    result.writer = std::move(writer);
  } catch (const std::bad_alloc&) {
    result.writer.reset();
    result.error = "out of memory while creating the log";
  }
  return result;
}

RecordWriter::RecordWriter(int fd, std::string path, WriterOptions options)
    : fd_(fd), path_(std::move(path)), options_(std::move(options)) {
  if (options_.populate_ahead_bytes == 0) populated_ = UINT64_MAX;
}

RecordWriter::~RecordWriter() { close(); }

bool RecordWriter::write_header(const LogHeader& header) noexcept {
  const std::array<std::string_view, kHeaderStringCount> strings = {
      header.host, header.detnccl_version_text, header.run, header.config_text, header.nccl_environment};
  std::uint64_t bytes = sizeof(FileHeaderFixed);
  for (std::string_view s : strings) bytes += 4 + std::min<std::size_t>(s.size(), kMaxHeaderStringBytes);
  bytes = round_up(bytes, 8) + 8;

  const std::uint64_t page = page_size();
  const std::uint64_t limit = file_size_limit();
  if (round_up(bytes + kMarkerReserve, page) > limit) {
    stop_reason_ = "the header alone exceeds the file size limit (RLIMIT_FSIZE): " + error_text(EFBIG);
    stopped_ = true;
    return false;
  }
  const std::uint64_t minimal = round_up(bytes + kMarkerReserve, page);
  std::uint64_t capacity =
      std::min(round_up(std::max(options_.initial_bytes, bytes + kMarkerReserve), page), limit / page * page);
  if (int error = posix_fallocate(fd_, 0, static_cast<off_t>(capacity)); error != 0) {
    // RATIONALE: as grow() does, a nearly full disk still takes what fits: the header and the marker reserve. The
    // first record that does not fit then ends the log with a truncation marker (and the job's one warning), rather
    // than the rank leaving no log at all.
    if (minimal < capacity && posix_fallocate(fd_, 0, static_cast<off_t>(minimal)) == 0) {
      capacity = minimal;
      error = 0;
    }
    if (error != 0) {
      stop_reason_ = "cannot reserve " + std::to_string(minimal) + " bytes: " + error_text(error);
      stopped_ = true;
      return false;
    }
  }
  void* map = mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (map == MAP_FAILED) {
    stop_reason_ = "cannot map the file: " + error_text(errno);
    stopped_ = true;
    return false;
  }
  map_ = static_cast<std::byte*>(map);
  capacity_ = capacity;

  FileHeaderFixed fixed{};
  fixed.magic = kMagic;
  fixed.format_version = kFormatVersion;
  fixed.header_bytes = static_cast<std::uint32_t>(bytes);
  fixed.start_time_ns = header.start_time_ns;
  fixed.rank = header.rank;
  fixed.world_size = header.world_size;
  fixed.pid = header.pid;
  fixed.nccl_version = header.nccl_version;
  fixed.fingerprint_version = header.fingerprint_version;
  fixed.detnccl_version = header.detnccl_version;
  fixed.rank_source = header.rank_source;
  fixed.string_count = kHeaderStringCount;
  fixed.fixed_bytes = sizeof(fixed);
  std::memcpy(map_, &fixed, sizeof(fixed));
  std::uint64_t offset = sizeof(fixed);
  for (std::string_view s : strings) {
    const auto length = static_cast<std::uint32_t>(std::min<std::size_t>(s.size(), kMaxHeaderStringBytes));
    std::memcpy(map_ + offset, &length, 4);
    std::memcpy(map_ + offset + 4, s.data(), length);
    offset += 4 + length;
  }
  // The padding is already zero: fallocate'd space reads as zeros.
  const std::uint64_t checksum = header_checksum(map_, bytes - 8);
  std::memcpy(map_ + bytes - 8, &checksum, 8);
  used_ = bytes;
  return true;
}

void RecordWriter::put_record(RecordType type, const void* fixed, std::size_t fixed_bytes,
                              std::span<const std::span<const std::uint64_t>> arrays, std::uint32_t length) noexcept {
  if (used_ + length > populated_) populate_ahead(used_ + length);
  std::byte* const record = map_ + used_;
  std::size_t offset = sizeof(RecordFrame);
  std::memcpy(record + offset, fixed, fixed_bytes);
  offset += fixed_bytes;
  for (std::span<const std::uint64_t> array : arrays) {
    if (!array.empty()) std::memcpy(record + offset, array.data(), array.size_bytes());
    offset += array.size_bytes();
  }
  std::memset(record + offset, 0, length - offset);
  // RATIONALE: the hook is read once, and each point costs a test of this local, never taken in production:
  // nothing next to the copy and the checksum of the record.
  const AppendHook hook = options_.append_hook;
  const auto at = [this, hook, length](AppendPoint point) {
    if (hook != nullptr) [[unlikely]] {
      hook(options_.append_hook_context, point, used_, length);
    }
  };
  at(AppendPoint::kAfterPayload);
  const auto type_number = static_cast<std::uint16_t>(type);
  const auto fixed_length = static_cast<std::uint16_t>(fixed_bytes);  // is_valid_fixed_part: it fits
  const std::uint64_t checksum =
      record_checksum(length, type_number, fixed_length, record + sizeof(RecordFrame), length - sizeof(RecordFrame));
  std::memcpy(record + offsetof(RecordFrame, type), &type_number, sizeof(type_number));
  std::memcpy(record + offsetof(RecordFrame, fixed_bytes), &fixed_length, sizeof(fixed_length));
  std::memcpy(record + offsetof(RecordFrame, checksum), &checksum, sizeof(checksum));
  at(AppendPoint::kAfterChecksum);
  at(AppendPoint::kBeforeLength);
  // RATIONALE: the length is published last, with release ordering: a reader (or the page cache after kill -9)
  // that sees it sees the whole record; before it, the slot reads as the end of the log.
  std::atomic_ref<std::uint32_t>(*reinterpret_cast<std::uint32_t*>(record)).store(length, std::memory_order_release);
  at(AppendPoint::kAfterLength);
  used_ += length;
  if (used_ - released_ >= kReleaseStepBytes) release_written_pages();
}

void RecordWriter::release_written_pages() noexcept {
  const std::uint64_t page = page_size();
  const std::uint64_t end = used_ / page * page;
  // A shared file mapping: MADV_DONTNEED only unmaps the pages from this process; their contents (dirty ones
  // included) stay in the page cache and reach the file as usual. Failure is harmless: the pages stay resident.
  if (end > released_ && madvise(map_ + released_, end - released_, MADV_DONTNEED) == 0) released_ = end;
}

void RecordWriter::populate_ahead(std::uint64_t end) noexcept {
  const std::uint64_t page = page_size();
  const std::uint64_t from = std::max(populated_, used_ / page * page);
  // RATIONALE: only space already reserved by posix_fallocate and mapped (capacity_) is populated, so this can never
  // raise SIGBUS (beyond the file's end) or ask for blocks the disk does not have.
  const std::uint64_t ahead = round_up(std::min(options_.populate_ahead_bytes, capacity_), page);
  const std::uint64_t to = std::min(round_up(end, page) + ahead, capacity_);
  if (to <= from) return;
  // RATIONALE: otherwise the first store to each new page of the shared file mapping traps into the kernel (one
  // fault per 1 to 4 pages: every 30 to 120 meta records); one call maps the whole window instead. The kernel's work
  // per page (page cache, zeroing) is the same; the traps are saved (bench/results/bench_record_writer_*). Populated
  // pages hold zeros (the fallocate'd space), so the log's bytes and its commit order are unchanged. Any failure
  // (EINVAL before Linux 5.14) turns populating off for good: pages are then mapped by faults, as without it.
  if (madvise(map_ + from, to - from, MADV_POPULATE_WRITE) != 0) {
    populated_ = UINT64_MAX;
    return;
  }
  populated_ = to;
}

bool RecordWriter::reserve(std::uint64_t length) noexcept {
  if (used_ + length + kMarkerReserve <= capacity_) return true;
  if (const int error = grow(used_ + length + kMarkerReserve); error != 0) {
    stop_with_error(error, "cannot grow the log");
    return false;
  }
  return true;
}

int RecordWriter::grow(std::uint64_t needed) noexcept {
  const std::uint64_t page = page_size();
  const std::uint64_t limit = file_size_limit();
  if (round_up(needed, page) > limit) return EFBIG;
  std::uint64_t target = capacity_;
  while (target < needed) target += std::clamp(target, page, std::max(options_.max_growth_bytes, page));
  target = std::min(target, limit / page * page);
  int error = posix_fallocate(fd_, static_cast<off_t>(capacity_), static_cast<off_t>(target - capacity_));
  if (error != 0) {
    // Fall back to the space this record needs: a nearly full disk still takes what fits.
    const std::uint64_t minimal = round_up(needed, page);
    if (minimal < target &&
        posix_fallocate(fd_, static_cast<off_t>(capacity_), static_cast<off_t>(minimal - capacity_)) == 0) {
      target = minimal;
      error = 0;
    }
  }
  if (error != 0) return error;
  void* map = mremap(map_, capacity_, target, MREMAP_MAYMOVE);
  if (map == MAP_FAILED) return errno;
  map_ = static_cast<std::byte*>(map);
  capacity_ = target;
  return 0;
}

void RecordWriter::stop_with_error(int error_number, std::string_view what) noexcept {
  std::array<char, kMaxStopTextBytes + 1> text{};
  std::array<char, 128> reason{};
  const int printed =
      std::snprintf(text.data(), text.size(),
                    "tracing stopped: %.*s %s beyond %llu bytes: %s; the log is marked truncated and "
                    "the job continues",
                    static_cast<int>(what.size()), what.data(), path_.c_str(),
                    static_cast<unsigned long long>(capacity_), strerror_r(error_number, reason.data(), reason.size()));
  const std::size_t text_bytes = std::min(printed > 0 ? static_cast<std::size_t>(printed) : 0, kMaxStopTextBytes);
  put_truncation_marker(reason_of(error_number), error_number, std::string_view(text.data(), text_bytes));
}

void RecordWriter::put_truncation_marker(TruncationReason reason, int error_number, std::string_view text) noexcept {
  const std::size_t text_bytes = std::min(text.size(), kMaxStopTextBytes);
  const TruncationFields fields{reason, error_number, static_cast<std::uint32_t>(text_bytes), 0};
  const auto length =
      static_cast<std::uint32_t>(round_up(sizeof(RecordFrame) + sizeof(fields) + text_bytes, kRecordAlignment));
  // The text goes in as one more "array"; put_record zero-pads it to the record's length. It fits:
  // used_ + kMarkerReserve <= capacity_ always holds, and the marker is smaller than the reserve.
  std::array<std::uint64_t, (kMaxStopTextBytes + 7) / 8> words{};
  std::memcpy(words.data(), text.data(), text_bytes);
  const std::array<std::span<const std::uint64_t>, 1> arrays = {std::span(words.data(), (text_bytes + 7) / 8)};
  put_record(RecordType::kTruncated, &fields, sizeof(fields), arrays, length);
  try {
    stop_reason_.assign(text.data(), text_bytes);
  } catch (const std::bad_alloc&) {
    // The marker in the log says it all; the in-memory copy is a convenience.
  }
  stopped_.store(true, std::memory_order_release);
}

void RecordWriter::stop_early(std::string_view why) noexcept {
  if (detached_.load(std::memory_order_acquire)) return;
  std::lock_guard lock(mutex_);
  if (closed_ || map_ == nullptr || stopped_.load(std::memory_order_relaxed)) return;
  put_truncation_marker(TruncationReason::kTracerStopped, 0, why);
  stop_reported_ = true;  // the caller reports its own failure
}

void RecordWriter::report_stop() noexcept {
  std::string message;
  {
    std::lock_guard lock(mutex_);
    if (stop_reported_ || stop_reason_.empty()) return;
    stop_reported_ = true;
    try {
      message = stop_reason_;
    } catch (const std::bad_alloc&) {
      return;
    }
  }
  if (options_.on_stop) {
    try {
      options_.on_stop(message);
    } catch (...) {
      // The job must never see an exception from detnccl.
    }
  }
}

AppendStatus RecordWriter::append(const CommunicatorRecord& record) noexcept {
  if (stopped()) return AppendStatus::kStopped;
  constexpr auto kLength = static_cast<std::uint32_t>(sizeof(RecordFrame) + sizeof(CommunicatorRecord));
  bool appended = false;
  {
    std::lock_guard lock(mutex_);
    if (stopped_.load(std::memory_order_relaxed)) return AppendStatus::kStopped;
    if (reserve(kLength)) {
      if (options_.write_calls && !index_off_) {
        try {
          step_index_.communicator(used_);
        } catch (...) {
          index_off_ = true;  // out of memory: the log simply has no step index
        }
      }
      put_record(RecordType::kCommunicator, &record, sizeof(record), {}, kLength);
      ++records_;
      appended = true;
    }
  }
  if (!appended) {
    report_stop();
    return AppendStatus::kStopped;
  }
  return AppendStatus::kOk;
}

AppendStatus RecordWriter::append(const CallRecord& record) noexcept {
  if (stopped()) return AppendStatus::kStopped;
  std::array<std::span<const std::uint64_t>, 4> arrays = {record.input_blocks, record.output_blocks,
                                                          record.input_segments, record.output_segments};
  CallFields fields = record;
  // A digest whose flag is not set is not valid: without either, the part before them is written (they read 0).
  if ((fields.flags & kCallInputBlocksFolded) == 0) fields.input_blocks_digest = 0;
  if ((fields.flags & kCallOutputBlocksFolded) == 0) fields.output_blocks_digest = 0;
  const std::size_t fixed_bytes = (fields.flags & (kCallInputBlocksFolded | kCallOutputBlocksFolded)) != 0
                                      ? sizeof(CallFields)
                                      : kCallFixedBytesWithoutBlockDigests;
  const auto bytes_with = [&arrays, fixed_bytes] {
    std::uint64_t bytes = sizeof(RecordFrame) + fixed_bytes;
    for (const auto& array : arrays) bytes += array.size_bytes();
    return bytes;
  };
  AppendStatus status = AppendStatus::kOk;
  if (bytes_with() > kMaxRecordBytes) {
    arrays[2] = {};
    arrays[3] = {};
    fields.flags |= kCallSegmentsDropped;
    status = AppendStatus::kSegmentsDropped;
    if (bytes_with() > kMaxRecordBytes) {
      arrays[0] = {};
      arrays[1] = {};
    }
  }
  fields.input_block_count = static_cast<std::uint32_t>(arrays[0].size());
  fields.output_block_count = static_cast<std::uint32_t>(arrays[1].size());
  fields.input_segment_count = static_cast<std::uint32_t>(arrays[2].size());
  fields.output_segment_count = static_cast<std::uint32_t>(arrays[3].size());
  fields.reserved = 0;
  const auto length = static_cast<std::uint32_t>(bytes_with());
  bool appended = false;
  {
    std::lock_guard lock(mutex_);
    if (stopped_.load(std::memory_order_relaxed)) return AppendStatus::kStopped;
    // RATIONALE: the digests of a step that ended go before the first call of the next one, so that a reader meets
    // each step's digests once all of its calls are behind it.
    try {
      step_digester_.add(fields, ended_steps_);
      if (options_.write_calls && !index_off_) step_index_.step_ended(ended_steps_);
    } catch (...) {
      ended_steps_.clear();  // out of memory: this step's digest is not written (a reader recomputes it)
      index_off_ = true;
    }
    if (put_ended_steps() && !options_.write_calls) return status;
    if (!index_off_ && step_index_.chunk_due()) put_step_index();
    if (!stopped_.load(std::memory_order_relaxed) && reserve(length)) {
      if (!index_off_) {
        try {
          step_index_.call(fields, used_);
        } catch (...) {
          index_off_ = true;
        }
      }
      put_record(RecordType::kCall, &fields, fixed_bytes, arrays, length);
      ++records_;
      appended = true;
    }
  }
  if (!appended) {
    report_stop();
    return AppendStatus::kStopped;
  }
  return status;
}

void RecordWriter::flush() noexcept {
  std::lock_guard lock(mutex_);
  if (map_ != nullptr) msync(map_, round_up(used_, page_size()), MS_ASYNC);
}

void RecordWriter::close() noexcept {
  if (detached_.load(std::memory_order_acquire)) return;
  std::lock_guard lock(mutex_);
  if (closed_) return;
  closed_ = true;
  if (map_ != nullptr && !stopped_.load(std::memory_order_relaxed)) {
    try {
      step_digester_.finish(ended_steps_);
      if (options_.write_calls && !index_off_) step_index_.step_ended(ended_steps_);
    } catch (...) {
      ended_steps_.clear();
      index_off_ = true;
    }
    put_ended_steps();
    if (options_.write_calls && !index_off_) put_step_index();
  }
  if (map_ != nullptr && !stopped_.load(std::memory_order_relaxed)) {
    const EndRecord end{records_, wall_clock_ns(), index_off_ ? 0 : last_index_offset_};
    constexpr auto kLength = static_cast<std::uint32_t>(sizeof(RecordFrame) + sizeof(EndRecord));
    put_record(RecordType::kEnd, &end, sizeof(end), {}, kLength);  // fits in the marker reserve
  }
  stopped_.store(true, std::memory_order_release);
  if (map_ != nullptr) {
    munmap(map_, capacity_);
    map_ = nullptr;
  }
  if (fd_ >= 0) {
    // The file is cut to the bytes in use: the fallocate'd tail beyond them is zeros.
    if (ftruncate(fd_, static_cast<off_t>(used_)) == 0) fdatasync(fd_);
    ::close(fd_);
    fd_ = -1;
  }
}

bool RecordWriter::put_ended_steps() noexcept {
  constexpr auto kLength = static_cast<std::uint32_t>(sizeof(RecordFrame) + sizeof(StepDigestRecord));
  for (const StepDigestRecord& digest : ended_steps_) {
    if (stopped_.load(std::memory_order_relaxed) || !reserve(kLength)) break;
    put_record(RecordType::kStepDigest, &digest, sizeof(digest), {}, kLength);
    ++records_;
  }
  ended_steps_.clear();
  return !stopped_.load(std::memory_order_relaxed);
}

void RecordWriter::put_step_index() noexcept {
  if (step_index_.failed()) index_off_ = true;
  if (index_off_ || stopped_.load(std::memory_order_relaxed)) return;
  try {
    const StepIndexChunk chunk = step_index_.take();
    // RATIONALE: a log without calls needs no index; an index record without entries still chains the
    // communicator records written since the last one.
    if (chunk.entries.empty() && (last_index_offset_ == 0 || chunk.communicator_offsets.empty())) return;
    const std::vector<std::uint64_t> payload = encode_step_index(chunk, last_index_offset_);
    const std::uint64_t length = sizeof(RecordFrame) + payload.size() * 8;
    // RATIONALE: an index is an aid, never a reason to stop tracing: one that would not fit a record (millions of
    // Send/Recv peers in a step) is dropped, and readers read the log from its start.
    if (length > kMaxRecordBytes) {
      index_off_ = true;
      return;
    }
    if (!reserve(length)) return;
    const std::uint64_t offset = used_;
    const std::span<const std::uint64_t> arrays[] = {std::span(payload).subspan(sizeof(StepIndexFields) / 8)};
    put_record(RecordType::kStepIndex, payload.data(), sizeof(StepIndexFields), arrays,
               static_cast<std::uint32_t>(length));
    ++records_;
    last_index_offset_ = offset;
  } catch (...) {
    index_off_ = true;  // out of memory
  }
}

void RecordWriter::detach_after_fork() noexcept {
  // RATIONALE: in a fork()ed child the mutex may be held by a parent thread that does not exist here; touching it
  // would deadlock. The child is single-threaded at this point.
  detached_.store(true, std::memory_order_release);
  stopped_.store(true, std::memory_order_release);
  if (map_ != nullptr) munmap(map_, capacity_);
  map_ = nullptr;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string RecordWriter::stop_reason() const {
  std::lock_guard lock(mutex_);
  return stop_reason_;
}

std::uint64_t RecordWriter::records_written() const noexcept {
  std::lock_guard lock(mutex_);
  return records_;
}

std::uint64_t RecordWriter::bytes_used() const noexcept {
  std::lock_guard lock(mutex_);
  return used_;
}

}  // namespace detnccl::records
