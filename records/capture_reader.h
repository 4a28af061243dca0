// detnccl: CaptureReader, the reader of one rank's capture file (format: capture_format.h; DETNCCL_CAPTURE=1).
//
// Opening a file indexes its valid prefix: every complete record whose checksum holds, up to the end marker, a stop
// marker, the end of the data (a killed writer's torn tail) or the first damaged record; end() says which, with the
// offset. find() then looks a buffer up by its content address, the (fingerprint, byte size) a call record of the
// log gives, and returns its raw bytes only once they are decompressed and checked against the stored size and
// checksum. Nothing damaged is ever returned as found. Never throws.
#ifndef DETNCCL_RECORDS_CAPTURE_READER_H
#define DETNCCL_RECORDS_CAPTURE_READER_H

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "records/capture_format.h"

namespace detnccl::records {

// What a lookup found.
enum class CaptureLookupStatus : std::uint8_t {
  kFound,    // bytes holds the buffer, checked
  kAbsent,   // the file (its readable part) has no buffer of that fingerprint and size: message says what it has
  kDamaged,  // the buffer's record is there but cannot be trusted, or the file is damaged before the place it would
             // be: message names the offset and the problem
};

struct CaptureLookup {
  CaptureLookupStatus status = CaptureLookupStatus::kAbsent;
  std::vector<std::byte> bytes;  // the raw bytes, for kFound
  std::string message;           // one sentence for kAbsent and kDamaged (empty for kFound)
};

// Why indexing stopped.
enum class CaptureEndKind : std::uint8_t {
  kClosed,    // an end marker: the writer closed the file cleanly
  kStopped,   // a stop marker: capture stopped early (budget spent, write error); see CaptureEnd::stop_reason
  kTornTail,  // the data ends without a marker (a killed writer, a cut file): every record before offset is complete
  kCorrupt,   // the record at offset is damaged (bad length or checksum with data after it, bad fields)
};

struct CaptureEnd {
  CaptureEndKind kind = CaptureEndKind::kTornTail;
  std::uint64_t offset = 0;                                     // of the marker, the torn record or the corrupt record
  CaptureStopReason stop_reason = CaptureStopReason::kUnknown;  // kStopped only
  std::string message;                                          // one sentence, with the offset
};

// One indexed blob.
struct CaptureBlob {
  std::uint64_t offset = 0;  // of its record
  CaptureBlobFields fields;
};

class CaptureReader;

// What open_file and from_bytes return: a reader, or why there is none (one sentence naming the problem).
struct OpenedCapture {
  std::unique_ptr<CaptureReader> reader;
  std::string error;
};

class CaptureReader {
 public:
  // Maps the file read-only and indexes its valid prefix. Fails (error set) only when the file cannot be opened or
  // its header is not a capture header this reader reads (bad magic, other byte order, newer version, checksum).
  static OpenedCapture open_file(const std::string& path) noexcept;
  // The same over bytes in memory (copied; the fuzz target's and the tests' entry).
  static OpenedCapture from_bytes(std::span<const std::byte> bytes) noexcept;

  ~CaptureReader();
  CaptureReader(const CaptureReader&) = delete;
  CaptureReader& operator=(const CaptureReader&) = delete;

  std::uint32_t rank() const noexcept { return header_.rank; }
  const CaptureFileHeader& header() const noexcept { return header_; }
  // Blobs indexed (in the valid prefix).
  std::uint64_t blob_count() const noexcept { return blobs_.size(); }
  // The indexed blobs, in file order.
  const std::vector<CaptureBlob>& blobs() const noexcept { return blobs_; }

  // The raw bytes of the buffer with this fingerprint and size: decompressed and checked against the stored
  // checksum and size (kDamaged with a message giving the offset otherwise); kAbsent when not in the file — the
  // message then says whether the file holds that fingerprint with another size ("wrong size for the call"), and
  // kDamaged replaces kAbsent when indexing stopped at a corrupt record (the buffer may have been beyond it).
  CaptureLookup find(std::uint64_t fingerprint, std::uint64_t bytes) const noexcept;

  // Why indexing stopped: clean end, stop marker, torn tail (offset), corrupt record (offset).
  const CaptureEnd& end() const noexcept { return end_; }

 private:
  CaptureReader() = default;
  // Checks the header and indexes the records; returns the open error, empty on success.
  std::string index() noexcept;


  std::vector<std::byte> owned_;  // from_bytes
  void* mapping_ = nullptr;       // open_file
  std::size_t mapping_bytes_ = 0;
  std::span<const std::byte> data_;
  CaptureFileHeader header_;
  std::vector<CaptureBlob> blobs_;
  std::unordered_map<CaptureAddress, std::size_t, CaptureAddressHash> by_address_;       // index into blobs_
  std::unordered_map<std::uint64_t, std::size_t> by_fingerprint_;  // the first blob of each fingerprint
  CaptureEnd end_;
};

}  // namespace detnccl::records

#endif  // DETNCCL_RECORDS_CAPTURE_READER_H
