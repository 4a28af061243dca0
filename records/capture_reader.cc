// detnccl: the capture file's reader (see capture_reader.h).
#include "records/capture_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>

#include "posix/file_descriptor.h"
#include "records/log_format.h"
#include "records/zstd_codec.h"

namespace detnccl::records {
namespace {

constexpr std::size_t kFrameBytes = sizeof(RecordFrame);

std::string at_offset(std::uint64_t offset) { return "at offset " + std::to_string(offset); }

std::string hex(std::uint64_t value) {
  std::array<char, 24> text{};
  std::snprintf(text.data(), text.size(), "%016llx", static_cast<unsigned long long>(value));
  return text.data();
}

std::string address_text(std::uint64_t fingerprint, std::uint64_t bytes) {
  return "the buffer with fingerprint " + hex(fingerprint) + " and " + std::to_string(bytes) + " bytes";
}

template <typename T>
T load(const std::byte* bytes) noexcept {
  T value;
  std::memcpy(&value, bytes, sizeof value);
  return value;
}

// The length a record of this frame must have, from the fields of its payload that are there (`available` bytes
// at `payload`); 0 when they do not say.
std::uint64_t expected_length(const RecordFrame& frame, const std::byte* payload, std::uint64_t available) noexcept {
  const auto rounded = [](std::uint64_t bytes) { return (bytes + 7) & ~std::uint64_t{7}; };
  switch (static_cast<CaptureRecordType>(frame.type)) {
    case CaptureRecordType::kBlob:
      if (frame.fixed_bytes >= sizeof(CaptureBlobFields) && available >= sizeof(CaptureBlobFields)) {
        const auto fields = load<CaptureBlobFields>(payload);
        if (fields.stored_bytes > kMaxCaptureRecordBytes) return 1;  // no length is right
        return rounded(kFrameBytes + frame.fixed_bytes + fields.stored_bytes);
      }
      return 0;
    case CaptureRecordType::kStopped:
      if (frame.fixed_bytes >= sizeof(CaptureStopFields) && available >= sizeof(CaptureStopFields)) {
        return rounded(kFrameBytes + frame.fixed_bytes + load<CaptureStopFields>(payload).text_bytes);
      }
      return 0;
    case CaptureRecordType::kEnd:
      return frame.fixed_bytes >= sizeof(CaptureEndFields) ? rounded(kFrameBytes + frame.fixed_bytes) : 0;
  }
  return 0;
}

}  // namespace

CaptureReader::~CaptureReader() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_bytes_);
}

OpenedCapture CaptureReader::open_file(const std::string& path) noexcept {
  OpenedCapture opened;
  try {
    const posix::FileDescriptor file(open(path.c_str(), O_RDONLY | O_CLOEXEC));
    struct stat file_stat {};
    if (file.get() < 0 || fstat(file.get(), &file_stat) != 0) {
      opened.error = "cannot open " + path + ": " + std::strerror(errno);
      return opened;
    }
    if (!S_ISREG(file_stat.st_mode)) {
      opened.error = "cannot read " + path + ": not a regular file";
      return opened;
    }
    std::unique_ptr<CaptureReader> reader(new CaptureReader());
    const auto size = static_cast<std::size_t>(file_stat.st_size);
    if (size > 0) {
      void* mapped = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, file.get(), 0);
      if (mapped == MAP_FAILED) {
        opened.error = "cannot map " + path + ": " + std::strerror(errno);
        return opened;
      }
      reader->mapping_ = mapped;
      reader->mapping_bytes_ = size;
      reader->data_ = std::span<const std::byte>(static_cast<const std::byte*>(mapped), size);
    }
    if (std::string problem = reader->index(); !problem.empty()) {
      opened.error = path + " " + problem;
      return opened;
    }
    opened.reader = std::move(reader);
  } catch (const std::bad_alloc&) {
    opened.reader.reset();
    opened.error = "out of memory while indexing " + path;
  }
  return opened;
}

OpenedCapture CaptureReader::from_bytes(std::span<const std::byte> bytes) noexcept {
  OpenedCapture opened;
  try {
    std::unique_ptr<CaptureReader> reader(new CaptureReader());
    reader->owned_.assign(bytes.begin(), bytes.end());
    reader->data_ = reader->owned_;
    if (std::string problem = reader->index(); !problem.empty()) {
      opened.error = "the capture file " + problem;
      return opened;
    }
    opened.reader = std::move(reader);
  } catch (const std::bad_alloc&) {
    opened.reader.reset();
    opened.error = "out of memory while indexing the capture file";
  }
  return opened;
}

std::string CaptureReader::index() noexcept {
  const std::byte* base = data_.data();
  const std::uint64_t size = data_.size();
  if (size < sizeof(std::uint64_t)) return "is too short to be a capture file (" + std::to_string(size) + " bytes)";
  const auto magic = load<std::uint64_t>(base);
  if (magic == __builtin_bswap64(kCaptureMagic)) {
    return "was written on a machine of the other byte order (big-endian); this reader reads little-endian files";
  }
  if (magic == kMagic) return "is a detnccl log (.dnc), not a capture file (.cap)";
  if (magic != kCaptureMagic) return "is not a detnccl capture file (bad magic)";
  if (size < kMinCaptureHeaderBytes) return "is cut short inside its header (" + std::to_string(size) + " bytes)";
  header_ = load<CaptureFileHeader>(base);
  if (header_.format_version == 0 || header_.format_version > kCaptureFormatVersion) {
    return "has capture format version " + std::to_string(header_.format_version) + "; this reader reads 1 to " +
           std::to_string(kCaptureFormatVersion) + " (a newer detnccl wrote it?)";
  }
  if (header_.header_bytes < kMinCaptureHeaderBytes || header_.header_bytes > kMaxCaptureHeaderBytes ||
      header_.header_bytes % 8 != 0) {
    return "has an invalid header length " + std::to_string(header_.header_bytes);
  }
  if (header_.header_bytes > size) {
    return "is cut short inside its header (" + std::to_string(size) + " of " + std::to_string(header_.header_bytes) +
           " bytes)";
  }
  const auto stored_checksum = load<std::uint64_t>(base + header_.header_bytes - 8);
  if (header_checksum(base, header_.header_bytes - 8) != stored_checksum) return "fails its header checksum";

  const auto finish = [this](CaptureEndKind kind, std::uint64_t at, std::string message) {
    end_.kind = kind;
    end_.offset = at;
    end_.message = std::move(message);
    return std::string();
  };
  const auto before = [this] {
    const std::size_t n = blobs_.size();
    return "the " + std::to_string(n) + (n == 1 ? " blob before it is complete" : " blobs before it are complete");
  };
  try {
    std::uint64_t at = header_.header_bytes;
    for (;;) {
      const std::uint64_t left = size - at;
      if (left == 0) {
        return finish(CaptureEndKind::kTornTail, at,
                      "the capture file ends " + at_offset(at) +
                          " without an end marker (the writer was killed or crashed, or the file was cut); " +
                          before());
      }
      if (left < kFrameBytes) {
        return finish(
            CaptureEndKind::kTornTail, at,
            "the record " + at_offset(at) + " is cut short (" + std::to_string(left) + " bytes left); " + before());
      }
      const auto frame = load<RecordFrame>(base + at);
      if (frame.length == 0) {
        // RATIONALE: the writer writes a record with a zero length, then its length: a writer killed in between
        // leaves one unfinished record at the end. A zero length with a whole record's worth of data after it that
        // is followed by more data is damage, not a torn write.
        std::uint64_t would_end = size;
        if (frame.type == static_cast<std::uint16_t>(CaptureRecordType::kBlob) &&
            left >= kFrameBytes + sizeof(CaptureBlobFields)) {
          const auto fields = load<CaptureBlobFields>(base + at + kFrameBytes);
          if (fields.stored_bytes <= left) {
            would_end = at + ((kFrameBytes + sizeof(CaptureBlobFields) + fields.stored_bytes + 7) & ~std::uint64_t{7});
          }
        }
        if (would_end < size) {
          return finish(CaptureEndKind::kCorrupt, at,
                        "corrupt record " + at_offset(at) + ": zero length, more records after it");
        }
        return finish(CaptureEndKind::kTornTail, at,
                      "the capture file ends " + at_offset(at) +
                          " with an unfinished record and no end marker (the writer was killed or crashed while "
                          "writing it); " +
                          before());
      }
      if (frame.length < kFrameBytes || frame.length % kRecordAlignment != 0) {
        return finish(CaptureEndKind::kCorrupt, at,
                      "corrupt record " + at_offset(at) + ": invalid length " + std::to_string(frame.length));
      }
      if (frame.length > left) {
        // RATIONALE: a cut file and a damaged length both leave a record longer than the data; the record's own
        // fields, when they are there, tell them apart (a blob's length follows from its stored size).
        const std::uint64_t expected = expected_length(frame, base + at + kFrameBytes, left - kFrameBytes);
        if (expected != 0 && expected != frame.length) {
          return finish(CaptureEndKind::kCorrupt, at,
                        "corrupt record " + at_offset(at) + ": length " + std::to_string(frame.length) +
                            " disagrees with its fields (" + std::to_string(expected) + ")");
        }
        return finish(CaptureEndKind::kTornTail, at,
                      "the record " + at_offset(at) + " is cut short (length " + std::to_string(frame.length) + ", " +
                          std::to_string(left) + " bytes left); " + before());
      }
      const std::byte* payload = base + at + kFrameBytes;
      const std::uint64_t payload_bytes = frame.length - kFrameBytes;
      if (record_checksum(frame.length, frame.type, frame.fixed_bytes, payload, payload_bytes) != frame.checksum) {
        return finish(CaptureEndKind::kCorrupt, at, "corrupt record " + at_offset(at) + ": checksum mismatch");
      }
      if (frame.fixed_bytes % 8 != 0 || frame.fixed_bytes > payload_bytes) {
        return finish(
            CaptureEndKind::kCorrupt, at,
            "corrupt record " + at_offset(at) + ": invalid fixed part length " + std::to_string(frame.fixed_bytes));
      }
      switch (static_cast<CaptureRecordType>(frame.type)) {
        case CaptureRecordType::kBlob: {
          if (frame.fixed_bytes < sizeof(CaptureBlobFields)) {
            return finish(CaptureEndKind::kCorrupt, at, "corrupt blob record " + at_offset(at) + ": too short");
          }
          const auto fields = read_fixed_part<CaptureBlobFields>(payload, frame.fixed_bytes);
          if (fields.stored_bytes > payload_bytes - frame.fixed_bytes ||
              (fields.codec == CaptureCodec::kRaw && fields.stored_bytes != fields.raw_bytes)) {
            return finish(CaptureEndKind::kCorrupt, at,
                          "corrupt blob record " + at_offset(at) + ": it states " +
                              std::to_string(fields.stored_bytes) + " stored bytes for " +
                              std::to_string(fields.raw_bytes) + " raw bytes in " +
                              std::to_string(payload_bytes - frame.fixed_bytes) + " bytes of data");
          }
          CaptureBlob blob;
          blob.offset = at;
          blob.fields = fields;
          if (by_address_.emplace(CaptureAddress{fields.fingerprint, fields.raw_bytes}, blobs_.size()).second) {
            by_fingerprint_.emplace(fields.fingerprint, blobs_.size());
            blobs_.push_back(blob);
          }
          break;
        }
        case CaptureRecordType::kStopped: {
          if (frame.fixed_bytes < sizeof(CaptureStopFields)) {
            return finish(CaptureEndKind::kCorrupt, at, "corrupt stop marker " + at_offset(at) + ": too short");
          }
          const auto fields = read_fixed_part<CaptureStopFields>(payload, frame.fixed_bytes);
          const std::uint64_t text_room = payload_bytes - frame.fixed_bytes;
          const std::string text(reinterpret_cast<const char*>(payload + frame.fixed_bytes),
                                 fields.text_bytes <= text_room ? fields.text_bytes : text_room);
          end_.stop_reason = fields.reason;
          return finish(CaptureEndKind::kStopped, at,
                        "capture stopped early " + at_offset(at) + " (" + text + "); " + before());
        }
        case CaptureRecordType::kEnd:
          return finish(CaptureEndKind::kClosed, at,
                        "the capture file was closed cleanly " + at_offset(at) + " after " +
                            std::to_string(blobs_.size()) + (blobs_.size() == 1 ? " blob" : " blobs"));
      }
      at += frame.length;  // a record type this reader does not know: skipped, its checksum checked
    }
  } catch (const std::bad_alloc&) {
    end_.kind = CaptureEndKind::kCorrupt;
    end_.message = "out of memory while indexing";
  }
  return {};
}

CaptureLookup CaptureReader::find(std::uint64_t fingerprint, std::uint64_t bytes) const noexcept {
  CaptureLookup lookup;
  try {
    const auto found = by_address_.find(CaptureAddress{fingerprint, bytes});
    if (found == by_address_.end()) {
      lookup.status = CaptureLookupStatus::kAbsent;
      lookup.message = address_text(fingerprint, bytes) + " is not in the capture file";
      if (const auto same = by_fingerprint_.find(fingerprint); same != by_fingerprint_.end()) {
        const CaptureBlob& other = blobs_[same->second];
        lookup.message += "; it holds that fingerprint with " + std::to_string(other.fields.raw_bytes) + " bytes (" +
                          at_offset(other.offset) + "), not " + std::to_string(bytes) +
                          ": the size does not match the call";
      }
      if (end_.kind == CaptureEndKind::kCorrupt) {
        lookup.status = CaptureLookupStatus::kDamaged;
        lookup.message += ", whose readable part ends " + at_offset(end_.offset) + ": " + end_.message;
      }
      return lookup;
    }
    const CaptureBlob& blob = blobs_[found->second];
    const std::byte* data =
        data_.data() + blob.offset + kFrameBytes + load<RecordFrame>(data_.data() + blob.offset).fixed_bytes;
    const auto damaged = [&](const std::string& problem) {
      lookup.status = CaptureLookupStatus::kDamaged;
      lookup.bytes.clear();
      lookup.message = address_text(fingerprint, bytes) + ", the blob " + at_offset(blob.offset) + ", " + problem;
      return lookup;
    };
    switch (blob.fields.codec) {
      case CaptureCodec::kRaw:
        lookup.bytes.assign(data, data + blob.fields.stored_bytes);
        break;
      case CaptureCodec::kZstd: {
        // RATIONALE: the frame's header says how much it holds, so a stated raw size it contradicts is refused before
        // anything is allocated: a few damaged bytes cannot make the reader allocate and fill gigabytes.
        const ZstdFrameSize frame = zstd_frame_size(data, blob.fields.stored_bytes);
        if (frame.whole && frame.content_known && frame.content_bytes != blob.fields.raw_bytes) {
          return damaged("decompresses to " + std::to_string(frame.content_bytes) + " bytes, not the " +
                         std::to_string(blob.fields.raw_bytes) + " it states");
        }
        lookup.bytes.resize(blob.fields.raw_bytes);
        const long long content =
            zstd_decompress(lookup.bytes.data(), lookup.bytes.size(), data, blob.fields.stored_bytes);
        if (content < 0) {
          return damaged(zstd_available() ? "does not decompress (a damaged zstd frame)"
                                          : "cannot be decompressed: " + std::string(zstd_unavailable_reason()));
        }
        if (static_cast<std::uint64_t>(content) != blob.fields.raw_bytes) {
          return damaged("decompresses to " + std::to_string(content) + " bytes, not the " +
                         std::to_string(blob.fields.raw_bytes) + " it states");
        }
        break;
      }
      default:
        return damaged("has codec " + std::to_string(static_cast<std::uint32_t>(blob.fields.codec)) +
                       ", which this reader does not know (a newer detnccl wrote it?)");
    }
    if (capture_data_checksum(lookup.bytes.data(), lookup.bytes.size()) != blob.fields.raw_checksum) {
      return damaged("fails its data checksum");
    }
    lookup.status = CaptureLookupStatus::kFound;
  } catch (const std::exception&) {  // bad_alloc, or length_error for an absurd raw size
    lookup.status = CaptureLookupStatus::kDamaged;
    lookup.bytes.clear();
    lookup.message = address_text(fingerprint, bytes) + " cannot be read: out of memory";
  }
  return lookup;
}

}  // namespace detnccl::records
