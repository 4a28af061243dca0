// Fuzz target: records::LogReader over arbitrary bytes (headers, every record type, torn and corrupt tails).
//
// Beyond "no crash, no sanitizer report", it checks what log_reader.h promises: records come out at increasing
// offsets inside the input, each at least one frame long; the reader always ends with a verdict and a message; and
// every decoded span lies inside the reader's copy (touched here so that ASan sees a read past it). Then the step
// index: whatever offsets the bytes state, it names entries and records inside the log, and reading from a group it
// names ends. Last, the same bytes as a file read streamed (pread()s into a buffer of a page, so that records
// straddle its refills): every record, array and the verdict are those of the reader of the bytes in memory. And the
// log cut short (where its last byte says) reads as a prefix of it: the same first records at the same offsets.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <variant>

#include "fuzz/log_mutator.h"
#include "records/log_reader.h"

namespace {

using detnccl::records::CallRecord;
using detnccl::records::LogEndKind;
using detnccl::records::LogReader;
using detnccl::records::LogRecord;
using detnccl::records::RecordFrame;

// Stops the fuzzer with a crash libFuzzer reports (and keeps the input).
void require(bool condition) {
  if (!condition) std::abort();
}

std::uint64_t sum(std::span<const std::uint64_t> values) {
  std::uint64_t total = 0;
  for (std::uint64_t v : values) total += v;
  return total;
}

bool same_words(std::span<const std::uint64_t> a, std::span<const std::uint64_t> b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end());
}

// Whether two readers hand out the same record.
bool same_record(const LogRecord& a, const LogRecord& b) {
  if (a.offset != b.offset || a.record.index() != b.record.index()) return false;
  const auto* x = std::get_if<CallRecord>(&a.record);
  const auto* y = std::get_if<CallRecord>(&b.record);
  if (x == nullptr) return true;
  return static_cast<const detnccl::records::CallFields&>(*x) == static_cast<const detnccl::records::CallFields&>(*y) &&
         same_words(x->input_blocks, y->input_blocks) && same_words(x->output_blocks, y->output_blocks) &&
         same_words(x->input_segments, y->input_segments) && same_words(x->output_segments, y->output_segments);
}

// The bytes read streamed from a file (a memfd, created once: emptied and refilled for each input) say what they say
// in memory.
void check_streamed(const std::uint8_t* data, std::size_t size) {
  static const int fd = memfd_create("fuzz-log", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, 0) != 0) return;
  std::size_t written = 0;
  while (written < size) {
    const ssize_t n = pwrite(fd, data + written, size - written, static_cast<off_t>(written));
    if (n <= 0) break;
    written += static_cast<std::size_t>(n);
  }
  if (written == size) {
    auto in_memory = LogReader::from_bytes(std::as_bytes(std::span(data, size)));
    auto streamed = LogReader::open_file("/proc/self/fd/" + std::to_string(fd), detnccl::records::LogAccess::kStreamed);
    require(!in_memory.reader == !streamed.reader && in_memory.no_header == streamed.no_header);
    require(streamed.reader || streamed.error.ends_with(in_memory.error));
    if (streamed.reader) {
      streamed.reader->set_page_release_bytes(1);  // a page at a time
      LogRecord a;
      LogRecord b;
      bool more = true;
      while (more) {
        more = in_memory.reader->next(a);
        require(streamed.reader->next(b) == more);
        if (more) require(same_record(a, b));
      }
      const auto& x = in_memory.reader->end();
      const auto& y = streamed.reader->end();
      require(x.kind == y.kind && x.offset == y.offset && x.message == y.message &&
              x.truncation.text == y.truncation.text);
      require(in_memory.reader->step_digests() == streamed.reader->step_digests());
      require(in_memory.reader->read_step_index().has_value() == streamed.reader->read_step_index().has_value());
    }
  }
}

// A log cut anywhere reads as a prefix (log_reader.h: a reader hands out only complete, intact records): the records
// of its first `cut` bytes are the first records of the whole, the same ones at the same offsets.
void check_prefix(const std::uint8_t* data, std::size_t size, std::size_t cut) {
  auto whole = LogReader::from_bytes(std::as_bytes(std::span(data, size)));
  auto prefix = LogReader::from_bytes(std::as_bytes(std::span(data, cut)));
  if (!whole.reader || !prefix.reader) return;  // cut inside the header
  LogRecord a;
  LogRecord b;
  while (prefix.reader->next(b)) {
    require(whole.reader->next(a));
    require(same_record(a, b));
  }
  require(prefix.reader->end().offset <= cut);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto opened = LogReader::from_bytes(std::as_bytes(std::span(data, size)));
  if (!opened.reader) {
    require(!opened.error.empty());
    return 0;
  }
  LogReader& reader = *opened.reader;
  const auto& header = reader.header();
  volatile std::size_t header_bytes = header.host.size() + header.run.size() + header.config_text.size() +
                                      header.nccl_environment.size() + header.detnccl_version_text.size();
  (void)header_bytes;

  LogRecord record;
  std::uint64_t previous_end = 0;
  std::uint64_t records = 0;
  volatile std::uint64_t digest_sum = 0;
  while (reader.next(record)) {
    require(record.offset >= previous_end);
    require(record.offset + sizeof(RecordFrame) <= size);
    previous_end = record.offset + sizeof(RecordFrame);
    if (const auto* call = std::get_if<CallRecord>(&record.record)) {
      require(call->input_blocks.size() == call->input_block_count);
      require(call->output_segments.size() == call->output_segment_count);
      digest_sum = digest_sum + sum(call->input_blocks) + sum(call->output_blocks) + sum(call->input_segments) +
                   sum(call->output_segments);
    }
    ++records;
  }
  require(reader.records_read() == records);
  const auto& end = reader.end();
  require(end.kind != LogEndKind::kNotReached);
  require(end.offset <= size);
  require(!end.message.empty() || end.kind == LogEndKind::kCorrupt);
  if (end.kind == LogEndKind::kTruncated) {
    volatile char first = end.truncation.text.empty() ? '\0' : end.truncation.text.front();
    volatile char last = end.truncation.text.empty() ? '\0' : end.truncation.text.back();
    (void)first;
    (void)last;
  }
  // Reading on after the end hands out nothing more.
  require(!reader.next(record));

  check_streamed(data, size);
  // A cut chosen by the last byte: mutations of it move the cut over the whole log.
  check_prefix(data, size, size * data[size - 1] / 256);

  // The step index (read from the end, through offsets the bytes state), and reads from each group it names.
  auto indexed = LogReader::from_bytes(std::as_bytes(std::span(data, size)));
  if (!indexed.reader) return 0;
  const auto index = indexed.reader->read_step_index();
  if (!index) return 0;
  require(index->end_offset < size);
  require(index->communicators.size() == index->communicator_offsets.size());
  for (const auto& pair : index->pairs) require(pair.entry < index->entries.size());
  for (std::size_t i = 0; i < index->entries.size() && i < 8; ++i) {
    require(index->entries[i].group_offset < index->end_offset);
    auto reader_at = LogReader::from_bytes(std::as_bytes(std::span(data, size)));
    if (!reader_at.reader || !reader_at.reader->seek(index->entries[i].group_offset)) continue;
    std::uint64_t after = 0;
    while (reader_at.reader->next(record)) {
      require(record.offset >= index->entries[i].group_offset && record.offset + sizeof(RecordFrame) <= size);
      if (++after > size) std::abort();  // every record takes bytes: the reading ends
    }
    require(reader_at.reader->end().kind != LogEndKind::kNotReached);
  }
  return 0;
}

#ifdef DETNCCL_LIBFUZZER
extern "C" std::size_t LLVMFuzzerMutate(std::uint8_t* data, std::size_t size, std::size_t max_size);

// libFuzzer's mutations, then the checksums fixed up (fuzz/log_mutator.h), so that mutated records are read.
extern "C" std::size_t LLVMFuzzerCustomMutator(std::uint8_t* data, std::size_t size, std::size_t max_size,
                                               unsigned int seed) {
  size = LLVMFuzzerMutate(data, size, max_size);
  if (detnccl::fuzz::fix_checksums_this_time(seed)) detnccl::fuzz::fix_log_checksums(data, size);
  return size;
}
#endif
