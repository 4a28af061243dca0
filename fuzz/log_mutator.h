// Structure-aware mutation for the fuzz targets that read logs: libFuzzer's own mutations, then (most of the time)
// every checksum recomputed, so that a mutated record reaches the code that reads its fields instead of stopping
// at its checksum. Header-only: each target is one translation unit.
#ifndef DETNCCL_FUZZ_LOG_MUTATOR_H
#define DETNCCL_FUZZ_LOG_MUTATOR_H

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "records/log_format.h"

namespace detnccl::fuzz {

// Rewrites the header checksum and the checksum of every record of the log in log[0, size) whose frame is plausible
// (the walk stops at the first length that is not), as the writer would have written them. The bytes may be
// unaligned (a log inside a fuzzer's input).
inline void fix_log_checksums(std::uint8_t* log, std::size_t size) {
  namespace records = detnccl::records;
  if (size < sizeof(records::FileHeaderFixed)) return;
  std::uint32_t header_bytes = 0;
  std::memcpy(&header_bytes, log + offsetof(records::FileHeaderFixed, header_bytes), sizeof(header_bytes));
  if (header_bytes < sizeof(records::FileHeaderFixed) + sizeof(std::uint64_t) || header_bytes > size) return;
  const std::uint64_t header_checksum = records::header_checksum(log, header_bytes - sizeof(std::uint64_t));
  std::memcpy(log + header_bytes - sizeof(std::uint64_t), &header_checksum, sizeof(header_checksum));
  std::size_t offset = header_bytes;
  while (size - offset >= sizeof(records::RecordFrame)) {
    records::RecordFrame frame;
    std::memcpy(&frame, log + offset, sizeof(frame));
    if (frame.length < sizeof(frame) || frame.length % records::kRecordAlignment != 0 || frame.length > size - offset) {
      return;
    }
    frame.checksum = records::record_checksum(frame.length, frame.type, frame.fixed_bytes, log + offset + sizeof(frame),
                                              frame.length - sizeof(frame));
    std::memcpy(log + offset, &frame, sizeof(frame));
    offset += frame.length;
  }
}

// Whether this mutation should have its checksums fixed: three times in four, so that damaged checksums (torn and
// corrupt records) stay in the mix.
inline bool fix_checksums_this_time(unsigned int seed) { return seed % 4 != 0; }

}  // namespace detnccl::fuzz

#endif  // DETNCCL_FUZZ_LOG_MUTATOR_H
