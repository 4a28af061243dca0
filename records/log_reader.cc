// detnccl: the streaming, hostile-input-proof log reader (see log_reader.h; the bytes are in log_format.h).
#include "records/log_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <new>
#include <optional>

#include "records/step_digest.h"
#include "records/step_index.h"

namespace detnccl::records {
namespace {

template <typename T>
T load(const std::byte* at) noexcept {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

std::string at_offset(std::uint64_t offset) { return "at offset " + std::to_string(offset); }

// Why a communicator record cannot be one a writer made, or empty. NCCL's sizes and ranks are ints, a rank is below
// the size, and a writer that could not ask NCCL writes size 0 and rank 0 (interpose/communicator_registry.cc).
// RATIONALE: the tools size work by a communicator's members; a forged size of 2^32 would make them loop that long.
std::string impossible_communicator(const CommunicatorRecord& communicator) {
  constexpr std::uint32_t kMaxNcclInt = std::numeric_limits<std::int32_t>::max();
  if (communicator.nranks > kMaxNcclInt) {
    return "its size " + std::to_string(communicator.nranks) + " exceeds NCCL's largest (" +
           std::to_string(kMaxNcclInt) + ")";
  }
  if (communicator.rank >= std::max<std::uint32_t>(communicator.nranks, 1)) {
    return "its rank " + std::to_string(communicator.rank) + " is outside its size " +
           std::to_string(communicator.nranks);
  }
  return {};
}

std::uint64_t page_size() noexcept {
  static const std::uint64_t kPageSize = [] {
    const long size = sysconf(_SC_PAGESIZE);
    return size > 0 ? static_cast<std::uint64_t>(size) : std::uint64_t{4096};
  }();
  return kPageSize;
}

// RATIONALE: 256 KiB: large enough that a read costs little per record, small enough that the buffer stays in the
// processor's cache, where the checksum then finds the bytes (measured: larger windows are slower).
constexpr std::uint64_t kStreamChunkBytes = 256u << 10;
// Scans (zeros, a header) read at most this much at a time.
constexpr std::uint64_t kScanChunkBytes = 64u << 10;

// RATIONALE: memory fresh from the kernel costs a page fault per page on its first write (microseconds each in a
// virtual machine), and a 256 KiB buffer freed by one reader is often handed back to the kernel (glibc trims the
// heap) just before the next reader asks for one: a thread keeps the buffers of its last few readers for the next.
struct BufferCache {
  static constexpr std::size_t kSlots = 4;
  std::array<std::unique_ptr<std::uint64_t[]>, kSlots> words;
  std::array<std::uint64_t, kSlots> capacity{};
};
thread_local BufferCache buffer_cache;

// A buffer of `capacity` bytes (a multiple of 8): a cached one when it fits, else a new one.
std::unique_ptr<std::uint64_t[]> take_buffer(std::uint64_t capacity) {
  for (std::size_t i = 0; i < BufferCache::kSlots; ++i) {
    if (buffer_cache.words[i] && buffer_cache.capacity[i] == capacity) return std::move(buffer_cache.words[i]);
  }
  return std::unique_ptr<std::uint64_t[]>(new std::uint64_t[capacity / 8]);
}

// Keeps a buffer for the next reader of this thread when it is of an ordinary size and a slot is free.
void give_back_buffer(std::unique_ptr<std::uint64_t[]>& words, std::uint64_t capacity) noexcept {
  if (!words || (capacity != kStreamChunkBytes && capacity != kScanChunkBytes)) return;
  for (std::size_t i = 0; i < BufferCache::kSlots; ++i) {
    if (!buffer_cache.words[i]) {
      buffer_cache.words[i] = std::move(words);
      buffer_cache.capacity[i] = capacity;
      return;
    }
  }
}

}  // namespace

const std::byte* LogReader::bytes_at(ReadBuffer& buffer, std::uint64_t offset, std::uint64_t bytes) const {
  if (fd_ < 0) return data_ + offset;
  if (offset >= buffer.start && offset - buffer.start <= buffer.length &&
      bytes <= buffer.length - (offset - buffer.start)) {
    return reinterpret_cast<const std::byte*>(buffer.words.get()) + (offset - buffer.start);
  }
  // Records start 8-byte aligned, so their u64 arrays are aligned in the buffer too.
  const std::uint64_t start = offset / 8 * 8;
  const std::uint64_t chunk = &buffer == &stream_
                                  ? std::clamp<std::uint64_t>(release_step_bytes_, page_size(), kStreamChunkBytes)
                                  : kScanChunkBytes;
  const std::uint64_t wanted = std::min(std::max(offset - start + bytes, chunk), size_ - start);
  // Grown for a record larger than a chunk, the buffer shrinks back at the next refill that fits one: a reader keeps
  // no more than a chunk, or the one record it is reading.
  if (wanted > buffer.capacity || (buffer.capacity > chunk && wanted <= chunk)) {
    // A whole chunk even when the file holds less, so that buffers are of a few sizes and can be reused.
    const std::uint64_t capacity = (std::max(wanted, chunk) + 7) / 8 * 8;
    buffer.length = 0;
    give_back_buffer(buffer.words, buffer.capacity);
    buffer.words.reset();
    buffer.capacity = 0;  // no buffer, should the allocation below throw
    buffer.words = take_buffer(capacity);
    buffer.capacity = capacity;
  }
  auto* out = reinterpret_cast<std::byte*>(buffer.words.get());
  std::uint64_t got = 0;
  while (got < wanted) {
    const ssize_t n = pread(fd_, out + got, wanted - got, static_cast<off_t>(start + got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::uint64_t>(n);
  }
  // A file cut while it is read (or a read error) ends in zeros, as a torn tail does.
  if (got < wanted) std::memset(out + got, 0, wanted - got);
  buffer.start = start;
  buffer.length = wanted;
  return out + (offset - start);
}

OpenedLog LogReader::open_file(const std::string& path, LogAccess access) noexcept {
  OpenedLog result;
  try {
    // RATIONALE: O_NONBLOCK, so that opening a FIFO (or a device) named like a log returns at once instead of
    // waiting for a writer; the type is checked right after. It changes nothing for a regular file.
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
      result.error = "cannot open " + path + ": " + std::strerror(errno);
      return result;
    }
    struct stat file_stat {};
    if (fstat(fd, &file_stat) != 0 || !S_ISREG(file_stat.st_mode)) {
      ::close(fd);
      result.error = path + " is not a regular file";
      return result;
    }
    std::unique_ptr<LogReader> reader(new LogReader());
    reader->size_ = static_cast<std::uint64_t>(file_stat.st_size);
    if (access == LogAccess::kStreamed) {
      reader->fd_ = fd;
      // Read-ahead for a log not in the page cache; advice only.
      posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    } else if (reader->size_ > 0) {
      void* map = mmap(nullptr, reader->size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (map == MAP_FAILED) {
        ::close(fd);
        result.error = "cannot map " + path + ": " + std::strerror(errno);
        return result;
      }
      reader->mapping_ = map;
      reader->data_ = static_cast<const std::byte*>(map);
    }
    if (reader->fd_ < 0) ::close(fd);
    if (std::string problem = reader->read_header(); !problem.empty()) {
      result.error = path + ": " + problem;
      result.no_header = reader->no_header_;
      return result;
    }
    result.reader = std::move(reader);
  } catch (const std::bad_alloc&) {
    result.reader.reset();
    result.error = "out of memory while opening " + path;
  }
  return result;
}

OpenedLog LogReader::from_bytes(std::span<const std::byte> bytes) noexcept {
  OpenedLog result;
  try {
    std::unique_ptr<LogReader> reader(new LogReader());
    reader->copy_.resize((bytes.size() + 7) / 8);
    if (!bytes.empty()) std::memcpy(reader->copy_.data(), bytes.data(), bytes.size());
    reader->data_ = reinterpret_cast<const std::byte*>(reader->copy_.data());
    reader->size_ = bytes.size();
    if (std::string problem = reader->read_header(); !problem.empty()) {
      result.error = problem;
      result.no_header = reader->no_header_;
      return result;
    }
    result.reader = std::move(reader);
  } catch (const std::bad_alloc&) {
    result.reader.reset();
    result.error = "out of memory while reading a log";
  }
  return result;
}

LogReader::~LogReader() {
  if (mapping_ != nullptr) munmap(mapping_, size_);
  if (fd_ >= 0) ::close(fd_);
  give_back_buffer(stream_.words, stream_.capacity);
  give_back_buffer(aux_.words, aux_.capacity);
}

bool LogReader::header_area_is_zero() const {
  const auto zero = [](std::byte b) { return b == std::byte{0}; };
  const auto all_zero = [&](std::uint64_t from, std::uint64_t to) {
    for (std::uint64_t at = from; at < to;) {
      const std::uint64_t n = std::min(to - at, kScanChunkBytes);
      const std::byte* bytes = bytes_at(aux_, at, n);
      if (!std::all_of(bytes, bytes + n, zero)) return false;
      at += n;
    }
    return true;
  };
  // RATIONALE: bounded, so that a multi-GiB file of zeros costs no more than a log's largest header to refuse; a
  // valid log fails at its first byte (the magic), so this costs a log nothing.
  const std::uint64_t head = std::min(size_, kNoHeaderScanBytes);
  const std::uint64_t tail = std::min(size_ - head, kNoHeaderTailBytes);
  return all_zero(0, head) && all_zero(size_ - tail, size_);
}

std::string LogReader::read_header() {
  if (header_area_is_zero()) {
    // RATIONALE: the writer creates the file (O_EXCL), reserves its space (posix_fallocate: zeros), then writes the
    // header; a process killed in between leaves this. It is not damage, and the log holds no records.
    no_header_ = true;
    std::string text = "no header: ";
    if (size_ == 0) {
      text += "the file is empty";
    } else if (size_ <= kNoHeaderScanBytes) {
      text += "the file's ";
      text += std::to_string(size_);
      text += " bytes are all zero";
    } else {
      text += "the file's first ";
      text += std::to_string(kNoHeaderScanBytes);
      text += " and last ";
      text += std::to_string(std::min(size_ - kNoHeaderScanBytes, kNoHeaderTailBytes));
      text += " bytes (of ";
      text += std::to_string(size_);
      text += ") are zero";
    }
    text +=
        ": its writer was killed after creating the log and before writing its header, so this rank's log holds "
        "no records";
    return text;
  }
  if (size_ < sizeof(std::uint64_t)) return "not a detnccl log (" + std::to_string(size_) + " bytes)";
  const std::byte* data = bytes_at(aux_, 0, std::min<std::uint64_t>(size_, kVersion1HeaderFixedBytes + 8));
  const auto magic = load<std::uint64_t>(data);
  if (magic == __builtin_bswap64(kMagic)) {
    return "this detnccl log was written on a machine of the other byte order (" +
           std::string(std::endian::native == std::endian::little ? "big" : "little") +
           "-endian); read it on a machine of that byte order";
  }
  if (magic != kMagic) return "not a detnccl log (the file does not start with DNCCLOG1)";
  if (size_ < kVersion1HeaderFixedBytes + 8) return "the header is cut short (" + std::to_string(size_) + " bytes)";
  auto fixed = read_fixed_part<FileHeaderFixed>(data, kVersion1HeaderFixedBytes);
  if (fixed.format_version > kFormatVersion) {
    return "written by a newer detnccl (log format version " + std::to_string(fixed.format_version) +
           "; this reader knows versions 1 to " + std::to_string(kFormatVersion) + "): use a newer detnccl to read it";
  }
  if (fixed.format_version == 0) return "invalid log format version 0";
  if (fixed.header_bytes > kMaxHeaderBytes || fixed.header_bytes < kVersion1HeaderFixedBytes + 8 ||
      fixed.header_bytes % kRecordAlignment != 0) {
    return "invalid header length " + std::to_string(fixed.header_bytes);
  }
  if (fixed.header_bytes > size_) {
    return "the header is cut short (" + std::to_string(size_) + " of " + std::to_string(fixed.header_bytes) +
           " bytes)";
  }
  data = bytes_at(aux_, 0, fixed.header_bytes);
  if (load<std::uint64_t>(data + fixed.header_bytes - 8) != header_checksum(data, fixed.header_bytes - 8)) {
    return "the header is damaged (checksum mismatch)";
  }
  // Version 1 stated no length (its field was reserved, 0); version 2 does, 0 meaning the version-1 length.
  const std::uint32_t fixed_bytes =
      fixed.format_version < 2 || fixed.fixed_bytes == 0 ? kVersion1HeaderFixedBytes : fixed.fixed_bytes;
  if (fixed_bytes < kVersion1HeaderFixedBytes || fixed_bytes % kRecordAlignment != 0 ||
      fixed_bytes > fixed.header_bytes - 8) {
    return "invalid header: its fixed part's stated length " + std::to_string(fixed_bytes) +
           " is not a multiple of 8 from " + std::to_string(kVersion1HeaderFixedBytes) + " to " +
           std::to_string(fixed.header_bytes - 8) + " (the header's length less its checksum)";
  }
  fixed = read_fixed_part<FileHeaderFixed>(data, fixed_bytes);
  if (fixed.string_count < kHeaderStringCount) {
    return "the header has " + std::to_string(fixed.string_count) + " strings, " + std::to_string(kHeaderStringCount) +
           " expected";
  }
  header_.format_version = fixed.format_version;
  header_.start_time_ns = fixed.start_time_ns;
  header_.rank = fixed.rank;
  header_.rank_source = fixed.rank_source;
  header_.world_size = fixed.world_size;
  header_.pid = fixed.pid;
  header_.nccl_version = fixed.nccl_version;
  header_.fingerprint_version = fixed.fingerprint_version;
  header_.detnccl_version = fixed.detnccl_version;
  std::array<std::string*, kHeaderStringCount> strings = {&header_.host, &header_.detnccl_version_text, &header_.run,
                                                          &header_.config_text, &header_.nccl_environment};
  const std::uint64_t strings_end = fixed.header_bytes - 8;
  std::uint64_t offset = fixed_bytes;
  // Every string_count string must lie within the header, the ones a newer writer added too (they are skipped).
  // Each takes at least its 4-byte length, so the loop ends within header_bytes / 4 steps whatever the count says.
  for (std::uint64_t i = 0; i < fixed.string_count; ++i) {
    if (strings_end - offset < 4) {
      return "the header says it holds " + std::to_string(fixed.string_count) + " strings, but only " +
             std::to_string(i) + " fit in its " + std::to_string(fixed.header_bytes) + " bytes";
    }
    const auto length = load<std::uint32_t>(data + offset);
    offset += 4;
    if (length > strings_end - offset) return "the header's strings overrun it";
    if (i < strings.size()) strings[i]->assign(reinterpret_cast<const char*>(data + offset), length);
    offset += length;
  }
  position_ = fixed.header_bytes;
  header_bytes_ = position_;
  // A header may take up to 16 MiB: the scans after it need little.
  if (aux_.capacity > kScanChunkBytes) {
    give_back_buffer(aux_.words, aux_.capacity);
    aux_ = ReadBuffer{};
  }
  after_last_digest_ = position_;
  return {};
}

bool LogReader::finish(LogEndKind kind, std::uint64_t offset, std::string message) noexcept {
  if (kind == LogEndKind::kTornTail || kind == LogEndKind::kTruncated) recompute_open_step(offset);
  end_.kind = kind;
  end_.offset = offset;
  try {
    end_.message = std::move(message);
  } catch (...) {
    // The kind and the offset still say it.
  }
  position_ = size_;
  return false;
}

void LogReader::recompute_open_step(std::uint64_t end) noexcept {
  // RATIONALE: only the tail after the last digest record is read again (the records there were checked on the
  // first pass), so a reader pays nothing for this on a log that closed cleanly.
  try {
    StepDigester digester;
    std::vector<StepDigestRecord> open;
    for (std::uint64_t at = after_last_digest_; at + sizeof(RecordFrame) <= std::min(end, size_);) {
      const auto frame = load<RecordFrame>(bytes_at(aux_, at, sizeof(RecordFrame)));
      if (frame.length < sizeof(RecordFrame) || frame.length > end - at) break;
      std::uint64_t fixed_bytes = 0;
      if (frame.type == static_cast<std::uint16_t>(RecordType::kCall) && fixed_part_bytes(frame, fixed_bytes).empty() &&
          frame.length - sizeof(RecordFrame) >= fixed_bytes) {
        digester.add(read_fixed_part<CallFields>(bytes_at(aux_, at + sizeof(RecordFrame), fixed_bytes), fixed_bytes),
                     open);
      }
      at += frame.length;
    }
    digester.finish(open);
    step_digests_.insert(step_digests_.end(), open.begin(), open.end());
    step_digests_recomputed_ += open.size();
  } catch (...) {
    // Out of memory: the torn step simply has no digest.
  }
}

std::uint64_t LogReader::end_of_data(std::uint64_t offset) const {
  for (std::uint64_t end = size_; end > offset;) {
    const std::uint64_t n = std::min(end - offset, kScanChunkBytes);
    const std::byte* bytes = bytes_at(aux_, end - n, n);
    for (std::uint64_t i = n; i > 0; --i) {
      if (bytes[i - 1] != std::byte{0}) return end - n + i;
    }
    end -= n;
  }
  return offset;
}

void LogReader::release_pages_before(std::uint64_t offset) noexcept {
  if (mapping_ == nullptr || offset < released_ + std::max(release_step_bytes_, page_size())) return;
  const std::uint64_t end = offset / page_size() * page_size();
  // The mapping is private and never written, so MADV_DONTNEED only drops clean copies of file pages: touching one
  // again reads it back from the file. Failure is harmless (the pages just stay resident).
  if (madvise(static_cast<std::byte*>(mapping_) + released_, end - released_, MADV_DONTNEED) == 0) released_ = end;
}

bool LogReader::zeros_from(std::uint64_t offset) const {
  for (std::uint64_t at = offset; at < size_;) {
    const std::uint64_t n = std::min(size_ - at, kScanChunkBytes);
    const std::byte* bytes = bytes_at(aux_, at, n);
    if (!std::all_of(bytes, bytes + n, [](std::byte b) { return b == std::byte{0}; })) return false;
    at += n;
  }
  return true;
}

std::string LogReader::fixed_part_bytes(const RecordFrame& frame, std::uint64_t& fixed_bytes) const {
  const auto type = static_cast<RecordType>(frame.type);
  const std::uint32_t version_1 = version_1_fixed_bytes(type);
  // Version 1 stated no length (the field was reserved, 0); version 2 does, 0 meaning the version-1 length.
  if (header_.format_version < 2 || frame.fixed_bytes == 0) {
    fixed_bytes = version_1;
    return {};
  }
  fixed_bytes = frame.fixed_bytes;
  const std::uint64_t payload_bytes = frame.length - sizeof(RecordFrame);
  std::string problem;
  if (fixed_bytes % kRecordAlignment != 0) {
    problem = " is not a multiple of 8";
  } else if (fixed_bytes < version_1) {
    problem = " is less than the type's " + std::to_string(version_1) + " bytes of log format version 1";
  } else if (fixed_bytes > payload_bytes) {
    problem = " exceeds its " + std::to_string(payload_bytes) + "-byte payload";
  } else {
    return {};
  }
  return "its fixed part's stated length " + std::to_string(fixed_bytes) + problem;
}

std::optional<bool> LogReader::decode(std::uint64_t at, const RecordFrame& frame, const std::byte* payload,
                                      LogRecord& record) {
  const std::uint64_t payload_bytes = frame.length - sizeof(RecordFrame);
  std::uint64_t fixed_bytes = 0;
  if (std::string problem = fixed_part_bytes(frame, fixed_bytes); !problem.empty()) {
    return finish(LogEndKind::kCorrupt, at, "corrupt record " + at_offset(at) + ": " + problem);
  }
  const auto n_records = [this] {
    const std::uint64_t n = records_read_ + unknown_skipped_ + step_digests_kept_ + index_records_;
    return std::to_string(n) + (n == 1 ? " record" : " records");
  };
  // What follows a fixed part starts at fixed_bytes, whatever the size of the fixed part this reader knows.
  switch (static_cast<RecordType>(frame.type)) {
    case RecordType::kCommunicator: {
      if (payload_bytes < fixed_bytes) {
        return finish(LogEndKind::kCorrupt, at, "corrupt communicator record " + at_offset(at) + ": too short");
      }
      const auto communicator = read_fixed_part<CommunicatorRecord>(payload, fixed_bytes);
      if (std::string problem = impossible_communicator(communicator); !problem.empty()) {
        return finish(LogEndKind::kCorrupt, at, "corrupt communicator record " + at_offset(at) + ": " + problem);
      }
      record.offset = at;
      record.record = communicator;
      ++records_read_;
      return true;
    }
    case RecordType::kCall: {
      if (payload_bytes < fixed_bytes) {
        return finish(LogEndKind::kCorrupt, at, "corrupt call record " + at_offset(at) + ": too short");
      }
      // RATIONALE: decoded in place (a reader's LogRecord holds a call almost every time), not copied in.
      auto* held = std::get_if<CallRecord>(&record.record);
      CallRecord& call = held != nullptr ? *held : record.record.emplace<CallRecord>();
      // RATIONALE: the two lengths writers state are copied with a constant size (a few vector moves, where
      // read_fixed_part's variable-length copy and zeroing cost a fifth of a record's decoding).
      if (fixed_bytes >= sizeof(CallFields)) {
        std::memcpy(static_cast<void*>(&static_cast<CallFields&>(call)), payload, sizeof(CallFields));
      } else if (fixed_bytes == kCallFixedBytesWithoutBlockDigests) {
        std::memcpy(static_cast<void*>(&static_cast<CallFields&>(call)), payload, kCallFixedBytesWithoutBlockDigests);
        call.input_blocks_digest = 0;
        call.output_blocks_digest = 0;
      } else {
        static_cast<CallFields&>(call) = read_fixed_part<CallFields>(payload, fixed_bytes);
      }
      const std::uint64_t words = std::uint64_t{call.input_block_count} + call.output_block_count +
                                  call.input_segment_count + call.output_segment_count;
      if (words > (payload_bytes - fixed_bytes) / 8) {
        return finish(LogEndKind::kCorrupt, at,
                      "corrupt call record " + at_offset(at) + ": its array counts exceed its length");
      }
      // Records are 8-byte aligned in 8-byte aligned storage, and fixed parts are whole words, so the arrays are
      // aligned u64s.
      const auto* array = reinterpret_cast<const std::uint64_t*>(payload + fixed_bytes);
      call.input_blocks = {array, call.input_block_count};
      array += call.input_block_count;
      call.output_blocks = {array, call.output_block_count};
      array += call.output_block_count;
      call.input_segments = {array, call.input_segment_count};
      array += call.input_segment_count;
      call.output_segments = {array, call.output_segment_count};
      record.offset = at;
      ++records_read_;
      return true;
    }
    case RecordType::kStepDigest: {
      if (payload_bytes < fixed_bytes) {
        return finish(LogEndKind::kCorrupt, at, "corrupt step digest record " + at_offset(at) + ": too short");
      }
      const auto digest = read_fixed_part<StepDigestRecord>(payload, fixed_bytes);
      after_last_digest_ = at + frame.length;
      if (return_step_digests_) {
        record.offset = at;
        record.record = digest;
        ++records_read_;
        return true;
      }
      try {
        step_digests_.push_back(digest);
      } catch (...) {
        return finish(LogEndKind::kCorrupt, at, "out of memory keeping the step digest " + at_offset(at));
      }
      ++step_digests_kept_;
      return std::nullopt;
    }
    case RecordType::kTruncated: {
      const auto fields =
          payload_bytes >= fixed_bytes ? read_fixed_part<TruncationFields>(payload, fixed_bytes) : TruncationFields{};
      if (payload_bytes < fixed_bytes || fields.text_bytes > payload_bytes - fixed_bytes) {
        return finish(LogEndKind::kCorrupt, at, "corrupt truncation marker " + at_offset(at));
      }
      end_.truncation = {fields.reason, fields.error_number,
                         std::string_view(reinterpret_cast<const char*>(payload + fixed_bytes), fields.text_bytes)};
      return finish(LogEndKind::kTruncated, at,
                    "the log was truncated " + at_offset(at) + " after " + n_records() + ": " +
                        std::string(end_.truncation.text));
    }
    case RecordType::kEnd: {
      if (payload_bytes < fixed_bytes) return finish(LogEndKind::kCorrupt, at, "corrupt end marker " + at_offset(at));
      end_.end_marker = read_fixed_part<EndRecord>(payload, fixed_bytes);
      if (!seeked_ &&
          end_.end_marker.records_written != records_read_ + unknown_skipped_ + step_digests_kept_ + index_records_) {
        return finish(LogEndKind::kCorrupt, at,
                      "the end marker " + at_offset(at) + " counts " + std::to_string(end_.end_marker.records_written) +
                          " records, but " +
                          std::to_string(records_read_ + unknown_skipped_ + step_digests_kept_ + index_records_) +
                          " were read");
      }
      return finish(LogEndKind::kClosed, at, "the log was closed cleanly after " + n_records());
    }
    case RecordType::kStepIndex:
      // For read_step_index(); a reader of the records passes it by.
      ++index_records_;
      return std::nullopt;
  }
  ++unknown_skipped_;
  return std::nullopt;
}

std::optional<LogReader::RawRecord> LogReader::record_at(std::uint64_t offset, RecordType type) const {
  if (offset < header_bytes_ || offset % kRecordAlignment != 0 || offset > size_ ||
      size_ - offset < sizeof(RecordFrame)) {
    return std::nullopt;
  }
  const auto frame = load<RecordFrame>(bytes_at(aux_, offset, sizeof(RecordFrame)));
  if (frame.type != static_cast<std::uint16_t>(type) || frame.length < sizeof(RecordFrame) ||
      frame.length % kRecordAlignment != 0 || frame.length > kMaxRecordBytes || frame.length > size_ - offset) {
    return std::nullopt;
  }
  const std::byte* payload = bytes_at(aux_, offset, frame.length) + sizeof(RecordFrame);
  const std::uint64_t payload_bytes = frame.length - sizeof(RecordFrame);
  if (record_checksum(frame.length, frame.type, frame.fixed_bytes, payload, payload_bytes) != frame.checksum) {
    return std::nullopt;
  }
  std::uint64_t fixed_bytes = 0;
  try {
    if (!fixed_part_bytes(frame, fixed_bytes).empty() || fixed_bytes > payload_bytes) return std::nullopt;
  } catch (...) {
    return std::nullopt;
  }
  return RawRecord{payload, payload_bytes, fixed_bytes};
}

std::optional<StepIndex> LogReader::read_step_index(std::string* problem) const noexcept {
  const auto fail = [problem](const char* why) -> std::optional<StepIndex> {
    if (problem != nullptr) {
      try {
        *problem = why;
      } catch (...) {
      }
    }
    return std::nullopt;
  };
  if (header_.format_version < 2 || size_ < header_bytes_ + sizeof(RecordFrame) + sizeof(EndRecord)) {
    return std::nullopt;
  }
  // RATIONALE: the writer cuts the file after its end marker, the log's last record; its length is not known from
  // the end, so the few offsets it can start at are tried, each one checked by its checksum.
  constexpr std::uint64_t kEndSearchBytes = 4096;
  try {
    std::optional<RawRecord> end;
    std::uint64_t end_offset = 0;
    for (std::uint64_t at = (size_ - sizeof(RecordFrame) - 16) / kRecordAlignment * kRecordAlignment;
         at >= header_bytes_ && size_ - at <= kEndSearchBytes; at -= kRecordAlignment) {
      if (load<RecordFrame>(bytes_at(aux_, at, sizeof(RecordFrame))).length == size_ - at &&
          (end = record_at(at, RecordType::kEnd))) {
        end_offset = at;
        break;
      }
      if (at < kRecordAlignment) break;
    }
    if (!end) return std::nullopt;  // torn or truncated: no index to trust
    StepIndex index;
    index.end_marker = read_fixed_part<EndRecord>(end->payload, end->fixed_bytes);
    index.end_offset = end_offset;
    if (index.end_marker.step_index_offset == 0) return std::nullopt;
    // The index records, last first: each one's previous_offset must be earlier, so the walk ends.
    std::vector<StepIndexChunk> chunks;
    std::uint64_t entries = 0;
    for (std::uint64_t at = index.end_marker.step_index_offset; at != 0;) {
      if (at >= end_offset) return fail("a step index record is not before the end marker");
      const std::optional<RawRecord> raw = record_at(at, RecordType::kStepIndex);
      if (!raw) return fail("a step index record is damaged or missing");
      const auto fields = read_fixed_part<StepIndexFields>(raw->payload, raw->fixed_bytes);
      const std::uint64_t bytes = std::uint64_t{fields.entry_count} * sizeof(StepIndexEntry) +
                                  std::uint64_t{fields.pair_count} * sizeof(StepIndexPair) +
                                  std::uint64_t{fields.communicator_count} * 8;
      if (bytes > raw->payload_bytes - raw->fixed_bytes) return fail("a step index record's counts exceed its length");
      StepIndexChunk chunk;
      const std::byte* array = raw->payload + raw->fixed_bytes;
      // Copies `count` elements from the record's arrays into `out` (an empty vector's data() may be null).
      const auto take = [&array](auto& out, std::uint32_t count) {
        out.resize(count);
        const std::size_t copied = out.size() * sizeof(out[0]);
        if (copied != 0) std::memcpy(out.data(), array, copied);
        array += copied;
      };
      take(chunk.entries, fields.entry_count);
      take(chunk.pairs, fields.pair_count);
      take(chunk.communicator_offsets, fields.communicator_count);
      entries += chunk.entries.size();
      chunks.push_back(std::move(chunk));
      if (fields.previous_offset >= at) return fail("the step index records do not chain backwards");
      at = fields.previous_offset;
    }
    index.entries.reserve(entries);
    for (auto chunk = chunks.rbegin(); chunk != chunks.rend(); ++chunk) {
      const auto base = static_cast<std::uint32_t>(index.entries.size());
      for (StepIndexPair pair : chunk->pairs) {
        if (pair.entry >= chunk->entries.size() ||
            (!index.pairs.empty() && pair.entry + base < index.pairs.back().entry)) {
          return fail("a step index pair names no entry of its record");
        }
        pair.entry += base;
        index.pairs.push_back(pair);
      }
      std::uint64_t previous_group = index.entries.empty() ? header_bytes_ : index.entries.back().group_offset;
      for (const StepIndexEntry& entry : chunk->entries) {
        if (entry.group_offset < previous_group || entry.group_offset >= end_offset ||
            entry.group_offset % kRecordAlignment != 0 || entry.calls == 0) {
          return fail("a step index entry's offset or call count is impossible");
        }
        previous_group = entry.group_offset;
        index.entries.push_back(entry);
      }
      for (const std::uint64_t offset : chunk->communicator_offsets) {
        const std::optional<RawRecord> raw = record_at(offset, RecordType::kCommunicator);
        if (!raw || offset >= end_offset) return fail("a communicator record the step index names is damaged");
        const auto communicator = read_fixed_part<CommunicatorRecord>(raw->payload, raw->fixed_bytes);
        if (!impossible_communicator(communicator).empty()) {
          return fail("a communicator record the step index names is damaged");
        }
        index.communicators.push_back(communicator);
        index.communicator_offsets.push_back(offset);
      }
    }
    return index;
  } catch (...) {
    return fail("out of memory reading the step index");
  }
}

bool LogReader::seek(std::uint64_t offset) noexcept {
  if (end_.kind != LogEndKind::kNotReached || offset < header_bytes_ || offset > size_ ||
      offset % kRecordAlignment != 0) {
    return false;
  }
  position_ = offset;
  seeked_ = true;
  return true;
}

bool LogReader::next(LogRecord& record) noexcept {
  try {
    while (end_.kind == LogEndKind::kNotReached) {
      const std::uint64_t at = position_;
      release_pages_before(at);
      const std::uint64_t left = size_ - at;
      // "1 record", "2 records".
      const auto n_records = [this] {
        const std::uint64_t n = records_read_ + unknown_skipped_ + step_digests_kept_ + index_records_;
        return std::to_string(n) + (n == 1 ? " record" : " records");
      };
      // "the 1 record before it is complete", "the 2 records before it are complete".
      const auto before = [this, &n_records] {
        return n_records() + (records_read_ + unknown_skipped_ + step_digests_kept_ + index_records_ == 1
                                  ? " before it is complete"
                                  : " before it are complete");
      };
      if (left == 0 || (left < sizeof(RecordFrame) && zeros_from(at))) {
        return finish(LogEndKind::kTornTail, at,
                      "the log ends " + at_offset(at) +
                          " without an end marker (the writer was killed or crashed, "
                          "or the file was cut); the " +
                          before());
      }
      if (left < sizeof(RecordFrame)) {
        return finish(
            LogEndKind::kTornTail, at,
            "the record " + at_offset(at) + " is cut short (" + std::to_string(left) + " bytes left); the " + before());
      }
      const auto frame = load<RecordFrame>(bytes_at(stream_, at, sizeof(RecordFrame)));
      if (frame.length == 0) {
        // RATIONALE: the writer fills a record, then publishes its length; a writer killed in between leaves a
        // zero length followed by at most one record's worth of bytes, then the zeros of unused space.
        const std::uint64_t data_end = end_of_data(at);
        if (data_end == at) {
          return finish(LogEndKind::kTornTail, at,
                        "the log ends " + at_offset(at) +
                            " without an end marker (the writer was killed or crashed); "
                            "the " +
                            before());
        }
        if (data_end - at <= kMaxRecordBytes) {
          return finish(LogEndKind::kTornTail, at,
                        "the log ends " + at_offset(at) +
                            " with an unfinished record and no end marker (the writer "
                            "was killed or crashed while writing it); the " +
                            before());
        }
        return finish(LogEndKind::kCorrupt, at, "corrupt record " + at_offset(at) + ": zero length, data after it");
      }
      if (frame.length < sizeof(RecordFrame) || frame.length % kRecordAlignment != 0 ||
          frame.length > kMaxRecordBytes) {
        return finish(LogEndKind::kCorrupt, at,
                      "corrupt record " + at_offset(at) + ": invalid length " + std::to_string(frame.length));
      }
      if (frame.length > left) {
        return finish(LogEndKind::kTornTail, at,
                      "the record " + at_offset(at) + " is cut short (length " + std::to_string(frame.length) + ", " +
                          std::to_string(left) + " bytes left); the " + before());
      }
      const std::byte* payload = bytes_at(stream_, at, frame.length) + sizeof(RecordFrame);
      const std::uint64_t payload_bytes = frame.length - sizeof(RecordFrame);
      if (record_checksum(frame.length, frame.type, frame.fixed_bytes, payload, payload_bytes) != frame.checksum) {
        if (zeros_from(at + frame.length)) {
          return finish(LogEndKind::kTornTail, at,
                        "the last record, " + at_offset(at) +
                            ", fails its checksum with nothing after it (a torn "
                            "write); the " +
                            before());
        }
        return finish(LogEndKind::kCorrupt, at, "corrupt record " + at_offset(at) + ": checksum mismatch");
      }
      position_ = at + frame.length;
      if (const std::optional<bool> handed_out = decode(at, frame, payload, record)) return *handed_out;
    }
  } catch (const std::bad_alloc&) {
    return finish(LogEndKind::kCorrupt, position_, {});
  }
  return false;
}

}  // namespace detnccl::records
