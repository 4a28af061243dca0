// Fuzz target: records::CaptureReader over arbitrary bytes (headers, blobs raw and zstd, stop and end markers, torn
// and corrupt tails), in memory, with the checksums of mutated inputs fixed up most of the time (fuzz/log_mutator.h).
//
// Beyond "no crash, no sanitizer report", it checks what capture_reader.h promises: a reader always has a verdict
// with a message; indexed blobs lie inside the input, at increasing offsets; find() on each returns bytes only when
// they have the size looked up and the stated data checksum, a message otherwise; an address not indexed is never
// found.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "fuzz/log_mutator.h"
#include "records/capture_format.h"
#include "records/capture_reader.h"
#include "records/log_format.h"

namespace {

using detnccl::records::CaptureLookupStatus;
using detnccl::records::CaptureReader;

void require(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = std::span(reinterpret_cast<const std::byte*>(data), size);
  const detnccl::records::OpenedCapture opened = CaptureReader::from_bytes(bytes);
  if (!opened.reader) {
    require(!opened.error.empty());
    return 0;
  }
  const CaptureReader& reader = *opened.reader;
  require(!reader.end().message.empty());
  require(reader.end().offset <= size);
  std::uint64_t previous = 0;
  for (const detnccl::records::CaptureBlob& blob : reader.blobs()) {
    require(blob.offset >= previous && blob.offset + sizeof(detnccl::records::RecordFrame) <= size);
    previous = blob.offset + 1;
    // RATIONALE: a forged zstd blob may state any raw size; lookups allocate it, so only plausible ones are tried.
    if (blob.fields.raw_bytes > (std::uint64_t{1} << 20)) continue;
    const detnccl::records::CaptureLookup lookup = reader.find(blob.fields.fingerprint, blob.fields.raw_bytes);
    if (lookup.status == CaptureLookupStatus::kFound) {
      require(lookup.bytes.size() == blob.fields.raw_bytes && lookup.message.empty());
      require(detnccl::records::capture_data_checksum(lookup.bytes.data(), lookup.bytes.size()) ==
              blob.fields.raw_checksum);
    } else {
      require(lookup.bytes.empty() && !lookup.message.empty());
    }
    const detnccl::records::CaptureLookup other = reader.find(blob.fields.fingerprint, blob.fields.raw_bytes + 1);
    require(other.status != CaptureLookupStatus::kFound || reader.blob_count() > 1);
  }
  return 0;
}

#ifdef DETNCCL_LIBFUZZER
// A capture file is framed as a log (capture_format.h): its header states its length where a log's does, and its
// records are log records, so the log's checksum fix-up applies.
static_assert(offsetof(detnccl::records::CaptureFileHeader, header_bytes) ==
              offsetof(detnccl::records::FileHeaderFixed, header_bytes));

extern "C" std::size_t LLVMFuzzerMutate(std::uint8_t* data, std::size_t size, std::size_t max_size);

// libFuzzer's mutations, then the header and record checksums fixed up (fuzz/log_mutator.h), so that mutated
// records reach the reader's index and lookups (blobs' data checksums are left to the reader to find wrong).
extern "C" std::size_t LLVMFuzzerCustomMutator(std::uint8_t* data, std::size_t size, std::size_t max_size,
                                               unsigned int seed) {
  size = LLVMFuzzerMutate(data, size, max_size);
  if (detnccl::fuzz::fix_checksums_this_time(seed)) detnccl::fuzz::fix_log_checksums(data, size);
  return size;
}
#endif
