// Tests of capture files (DETNCCL_CAPTURE): records/capture_writer.h and capture_reader.h — round trips, dedup,
// compression, the budget, the crash promise (every cut of a file reads as a prefix), hostile files.
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "hash/fingerprint.h"
#include "records/capture_format.h"
#include "records/capture_reader.h"
#include "records/capture_writer.h"
#include "records/log_format.h"
#include "tests/test_support.h"

namespace detnccl::records {
namespace {

using test::TempDir;

std::vector<std::byte> random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937_64 random(seed);
  std::vector<std::byte> bytes(n);
  for (std::byte& b : bytes) b = static_cast<std::byte>(random());
  return bytes;
}

// Compressible: a float ramp (many repeated high bytes).
std::vector<std::byte> ramp_bytes(std::size_t n) {
  std::vector<std::byte> bytes(n);
  for (std::size_t i = 0; i < n; ++i) bytes[i] = static_cast<std::byte>((i / 64) % 7);
  return bytes;
}

std::vector<std::byte> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(chars.size());
  std::memcpy(bytes.data(), chars.data(), chars.size());
  return bytes;
}

std::uint64_t fingerprint_of(const std::vector<std::byte>& bytes) {
  return hash::fingerprint(bytes.data(), bytes.size());
}

std::unique_ptr<CaptureWriter> make_writer(const TempDir& dir, std::uint32_t rank, CaptureWriterOptions options = {}) {
  CreatedCaptureWriter created = CaptureWriter::create(dir.path(), rank, std::move(options));
  EXPECT_NE(created.writer, nullptr) << created.error;
  return std::move(created.writer);
}

TEST(CaptureFormat, FileNameFollowsTheLogs) {
  EXPECT_EQ(capture_file_name(3), "rank-00003.cap");
  EXPECT_EQ(capture_file_name(123456), "rank-123456.cap");
  EXPECT_EQ(rank_log_file_name(3).substr(0, 10), capture_file_name(3).substr(0, 10));
}

TEST(CaptureWriter, RoundTripCompressedAndRawWithDedup) {
  TempDir dir;
  const std::vector<std::byte> compressible = ramp_bytes(1 << 20);
  const std::vector<std::byte> incompressible = random_bytes(100000, 7);
  std::vector<std::byte> prefix(incompressible.begin(), incompressible.begin() + 4096);  // same start, other size
  const std::vector<std::byte> tiny = random_bytes(5, 8);
  const std::vector<std::byte> empty;
  auto writer = make_writer(dir, 3);
  EXPECT_EQ(writer->save(fingerprint_of(compressible), compressible), CaptureSaveStatus::kStored);
  EXPECT_EQ(writer->save(fingerprint_of(incompressible), incompressible), CaptureSaveStatus::kStored);
  const std::uint64_t bytes_after_two = writer->bytes_written();
  EXPECT_EQ(writer->save(fingerprint_of(compressible), compressible), CaptureSaveStatus::kAlreadyStored);
  EXPECT_EQ(writer->bytes_written(), bytes_after_two);
  EXPECT_EQ(writer->save(fingerprint_of(prefix), prefix), CaptureSaveStatus::kStored);
  EXPECT_EQ(writer->save(fingerprint_of(tiny), tiny), CaptureSaveStatus::kStored);
  EXPECT_EQ(writer->save(fingerprint_of(empty), empty), CaptureSaveStatus::kStored);
  EXPECT_TRUE(writer->contains(fingerprint_of(prefix), prefix.size()));
  EXPECT_FALSE(writer->contains(fingerprint_of(prefix), prefix.size() + 1));
  EXPECT_EQ(writer->blobs_written(), 5u);
  const std::string path = writer->path();
  writer->close();
  EXPECT_EQ(path, dir.path() + "/rank-00003.cap");
  struct stat file_stat {};
  ASSERT_EQ(stat(path.c_str(), &file_stat), 0);
  EXPECT_EQ(file_stat.st_mode & 0777, 0600u);

  OpenedCapture opened = CaptureReader::open_file(path);
  ASSERT_NE(opened.reader, nullptr) << opened.error;
  const CaptureReader& reader = *opened.reader;
  EXPECT_EQ(reader.rank(), 3u);
  EXPECT_EQ(reader.blob_count(), 5u);
  EXPECT_EQ(reader.end().kind, CaptureEndKind::kClosed) << reader.end().message;
  for (const std::vector<std::byte>* buffer :
       std::initializer_list<const std::vector<std::byte>*>{&compressible, &incompressible, &prefix, &tiny, &empty}) {
    const CaptureLookup lookup = reader.find(fingerprint_of(*buffer), buffer->size());
    ASSERT_EQ(lookup.status, CaptureLookupStatus::kFound) << lookup.message;
    EXPECT_EQ(lookup.bytes, *buffer);
  }
  // The compressible buffer went through zstd and is a real zstd frame (libzstd, linked here, decodes it); the
  // random one is stored raw (zstd would save nothing).
  std::size_t zstd_blobs = 0, file_bytes_of_compressible = 0;
  const std::vector<std::byte> file = read_file(path);
  for (const CaptureBlob& blob : reader.blobs()) {
    if (blob.fields.fingerprint == fingerprint_of(incompressible) && blob.fields.raw_bytes == incompressible.size()) {
      EXPECT_EQ(blob.fields.codec, CaptureCodec::kRaw);
    }
    if (blob.fields.codec != CaptureCodec::kZstd) continue;
    ++zstd_blobs;
    EXPECT_EQ(blob.fields.fingerprint, fingerprint_of(compressible));
    file_bytes_of_compressible = blob.fields.stored_bytes;
    std::vector<std::byte> decoded(blob.fields.raw_bytes);
    const std::byte* frame = file.data() + blob.offset + sizeof(RecordFrame) + sizeof(CaptureBlobFields);
    EXPECT_EQ(ZSTD_decompress(decoded.data(), decoded.size(), frame, blob.fields.stored_bytes), compressible.size());
    EXPECT_EQ(decoded, compressible);
  }
  EXPECT_EQ(zstd_blobs, 1u);
  EXPECT_LT(file_bytes_of_compressible, compressible.size() / 8);
  // A fingerprint with the wrong size is absent, and the message says which size the file holds.
  const CaptureLookup wrong_size = reader.find(fingerprint_of(incompressible), incompressible.size() - 8);
  EXPECT_EQ(wrong_size.status, CaptureLookupStatus::kAbsent);
  EXPECT_TRUE(wrong_size.bytes.empty());
  EXPECT_NE(wrong_size.message.find("with " + std::to_string(incompressible.size()) + " bytes"), std::string::npos)
      << wrong_size.message;
  EXPECT_NE(wrong_size.message.find("size does not match"), std::string::npos) << wrong_size.message;
  const CaptureLookup unknown = reader.find(12345, 8);
  EXPECT_EQ(unknown.status, CaptureLookupStatus::kAbsent);
  EXPECT_NE(unknown.message.find("0000000000003039"), std::string::npos) << unknown.message;
}

TEST(CaptureWriter, RefusesToOverwriteAndNeedsTheRunDirectory) {
  TempDir dir;
  auto first = make_writer(dir, 0);
  CreatedCaptureWriter second = CaptureWriter::create(dir.path(), 0);
  EXPECT_EQ(second.writer, nullptr);
  EXPECT_NE(second.error.find("already exists"), std::string::npos) << second.error;
  CreatedCaptureWriter missing = CaptureWriter::create(dir.path() + "/nope", 0);
  EXPECT_EQ(missing.writer, nullptr);
  EXPECT_NE(missing.error.find(dir.path() + "/nope"), std::string::npos) << missing.error;
}

TEST(CaptureWriter, BudgetStopsCaptureOnceWithOneReport) {
  TempDir dir;
  std::vector<std::string> reports;
  CaptureWriterOptions options;
  const std::size_t blob = 4096;
  // Room for the header and three raw blobs of 4096 bytes, not four.
  const std::uint64_t record = (sizeof(RecordFrame) + sizeof(CaptureBlobFields) + blob + 7) / 8 * 8;
  options.budget_bytes = kMinCaptureHeaderBytes + 3 * record + record / 2;
  options.on_stop = [&](std::string_view message) { reports.emplace_back(message); };
  auto writer = make_writer(dir, 1, options);
  std::vector<std::vector<std::byte>> buffers;
  for (std::uint32_t i = 0; i < 6; ++i) buffers.push_back(random_bytes(blob, 100 + i));
  std::vector<CaptureSaveStatus> statuses;
  for (const auto& buffer : buffers) statuses.push_back(writer->save(fingerprint_of(buffer), buffer));
  const std::vector<CaptureSaveStatus> expected = {CaptureSaveStatus::kStored,  CaptureSaveStatus::kStored,
                                                   CaptureSaveStatus::kStored,  CaptureSaveStatus::kStopped,
                                                   CaptureSaveStatus::kStopped, CaptureSaveStatus::kStopped};
  EXPECT_EQ(statuses, expected);
  EXPECT_LE(writer->bytes_written(), options.budget_bytes);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_NE(reports[0].find("DETNCCL_CAPTURE_BYTES"), std::string::npos) << reports[0];
  EXPECT_EQ(writer->stop_reason(), reports[0]);
  EXPECT_TRUE(writer->stopped());
  writer->close();
  OpenedCapture opened = CaptureReader::open_file(dir.path() + "/rank-00001.cap");
  ASSERT_NE(opened.reader, nullptr) << opened.error;
  EXPECT_EQ(opened.reader->blob_count(), 3u);
  EXPECT_EQ(opened.reader->end().kind, CaptureEndKind::kStopped);
  EXPECT_EQ(opened.reader->end().stop_reason, CaptureStopReason::kBudgetSpent);
  EXPECT_NE(opened.reader->end().message.find("budget"), std::string::npos) << opened.reader->end().message;
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    EXPECT_EQ(opened.reader->find(fingerprint_of(buffers[i]), blob).status,
              i < 3 ? CaptureLookupStatus::kFound : CaptureLookupStatus::kAbsent);
  }
}

// The shim's own failure ends the file with a stop marker saying why; the writer reports nothing itself.
TEST(CaptureWriter, StopEarlyEndsTheFileWithItsReason) {
  TempDir dir;
  int reports = 0;
  CaptureWriterOptions options;
  options.on_stop = [&](std::string_view) { ++reports; };
  auto writer = make_writer(dir, 4, options);
  const std::vector<std::byte> buffer = random_bytes(100, 9);
  EXPECT_EQ(writer->save(fingerprint_of(buffer), buffer), CaptureSaveStatus::kStored);
  writer->stop_early("cannot copy a buffer of 9 bytes");
  EXPECT_TRUE(writer->stopped());
  EXPECT_EQ(writer->save(fingerprint_of(buffer), buffer), CaptureSaveStatus::kStopped);
  writer->close();
  EXPECT_EQ(reports, 0);
  OpenedCapture opened = CaptureReader::open_file(dir.path() + "/rank-00004.cap");
  ASSERT_NE(opened.reader, nullptr) << opened.error;
  EXPECT_EQ(opened.reader->end().kind, CaptureEndKind::kStopped);
  EXPECT_EQ(opened.reader->end().stop_reason, CaptureStopReason::kUserStopped);
  EXPECT_NE(opened.reader->end().message.find("cannot copy a buffer of 9 bytes"), std::string::npos)
      << opened.reader->end().message;
  EXPECT_EQ(opened.reader->find(fingerprint_of(buffer), buffer.size()).status, CaptureLookupStatus::kFound);
}

// A small file with a compressed blob, two raw ones and the end marker, and its buffers.
struct SmallFile {
  std::vector<std::byte> bytes;
  std::vector<std::vector<std::byte>> buffers;
};

SmallFile small_file() {
  TempDir dir;
  SmallFile file;
  file.buffers = {ramp_bytes(600), random_bytes(40, 1), random_bytes(24, 2)};
  auto writer = make_writer(dir, 2);
  for (const auto& buffer : file.buffers)
    EXPECT_EQ(writer->save(fingerprint_of(buffer), buffer), CaptureSaveStatus::kStored);
  writer->close();
  file.bytes = read_file(dir.path() + "/rank-00002.cap");
  return file;
}

// The crash promise: the file cut at every byte reads as a prefix: each buffer is found, intact, or absent — never
// damaged, never wrong — and the blobs found are the ones wholly before the cut.
TEST(CaptureReader, EveryCutReadsAsAPrefix) {
  const SmallFile file = small_file();
  OpenedCapture whole = CaptureReader::from_bytes(file.bytes);
  ASSERT_NE(whole.reader, nullptr) << whole.error;
  ASSERT_EQ(whole.reader->blob_count(), 3u);
  std::vector<std::uint64_t> blob_ends;
  for (const CaptureBlob& blob : whole.reader->blobs()) {
    blob_ends.push_back(blob.offset +
                        (sizeof(RecordFrame) + sizeof(CaptureBlobFields) + blob.fields.stored_bytes + 7) / 8 * 8);
  }
  for (std::size_t cut = 0; cut < file.bytes.size(); ++cut) {
    OpenedCapture opened = CaptureReader::from_bytes(std::span(file.bytes).first(cut));
    if (cut < kMinCaptureHeaderBytes) {
      EXPECT_EQ(opened.reader, nullptr) << cut;
      EXPECT_FALSE(opened.error.empty());
      continue;
    }
    ASSERT_NE(opened.reader, nullptr) << cut << ": " << opened.error;
    EXPECT_EQ(opened.reader->end().kind, CaptureEndKind::kTornTail) << cut << ": " << opened.reader->end().message;
    for (std::size_t i = 0; i < file.buffers.size(); ++i) {
      const CaptureLookup lookup = opened.reader->find(fingerprint_of(file.buffers[i]), file.buffers[i].size());
      if (cut >= blob_ends[i]) {
        ASSERT_EQ(lookup.status, CaptureLookupStatus::kFound) << cut << ": " << lookup.message;
        EXPECT_EQ(lookup.bytes, file.buffers[i]);
      } else {
        EXPECT_EQ(lookup.status, CaptureLookupStatus::kAbsent) << cut << ": " << lookup.message;
      }
    }
  }
}

// A writer killed between a record's body and its length (the hook runs there) leaves a file that reads as a torn
// tail with every earlier blob intact.
TEST(CaptureReader, KilledBeforeTheLengthIsPublishedReadsAsATornTail) {
  TempDir dir;
  const std::vector<std::byte> first = random_bytes(64, 3), second = ramp_bytes(4096);
  struct Context {
    std::string path;
    int calls = 0;
    std::vector<std::byte> snapshot;
  } context{dir.path() + "/rank-00000.cap", 0, {}};
  CaptureWriterOptions options;
  options.hook_context = &context;
  options.before_length_hook = [](void* raw, std::uint64_t) {
    auto* c = static_cast<Context*>(raw);
    if (++c->calls == 2) c->snapshot = read_file(c->path);
  };
  auto writer = make_writer(dir, 0, options);
  writer->save(fingerprint_of(first), first);
  writer->save(fingerprint_of(second), second);
  writer->close();
  OpenedCapture opened = CaptureReader::from_bytes(context.snapshot);
  ASSERT_NE(opened.reader, nullptr) << opened.error;
  EXPECT_EQ(opened.reader->end().kind, CaptureEndKind::kTornTail);
  EXPECT_NE(opened.reader->end().message.find("unfinished record"), std::string::npos) << opened.reader->end().message;
  EXPECT_EQ(opened.reader->find(fingerprint_of(first), first.size()).status, CaptureLookupStatus::kFound);
  EXPECT_EQ(opened.reader->find(fingerprint_of(second), second.size()).status, CaptureLookupStatus::kAbsent);
}

// Every single flipped byte after the header is detected: no lookup returns wrong bytes, and the damaged record's
// offset is named.
TEST(CaptureReader, FlippedBytesAreDamageNamingTheOffset) {
  const SmallFile file = small_file();
  OpenedCapture whole = CaptureReader::from_bytes(file.bytes);
  ASSERT_NE(whole.reader, nullptr);
  const std::vector<CaptureBlob> blobs = whole.reader->blobs();
  const std::uint64_t end_marker = whole.reader->end().offset;
  for (std::size_t at = kMinCaptureHeaderBytes; at < file.bytes.size(); ++at) {
    std::vector<std::byte> damaged = file.bytes;
    damaged[at] ^= std::byte{0x5a};
    OpenedCapture opened = CaptureReader::from_bytes(damaged);
    ASSERT_NE(opened.reader, nullptr) << at << ": " << opened.error;
    // The record holding the byte.
    std::uint64_t record = end_marker;
    for (const CaptureBlob& blob : blobs) {
      if (blob.offset <= at) record = blob.offset;
    }
    if (at >= end_marker) record = end_marker;
    for (std::size_t i = 0; i < file.buffers.size(); ++i) {
      const CaptureLookup lookup = opened.reader->find(fingerprint_of(file.buffers[i]), file.buffers[i].size());
      if (lookup.status == CaptureLookupStatus::kFound) {
        EXPECT_EQ(lookup.bytes, file.buffers[i]) << at;
        EXPECT_LT(blobs[i].offset, record) << at << ": a blob at or after the damage was returned";
      } else if (blobs[i].offset >= record && at < end_marker) {
        EXPECT_EQ(lookup.status, CaptureLookupStatus::kDamaged) << at << ": " << lookup.message;
        EXPECT_NE(lookup.message.find("at offset " + std::to_string(record)), std::string::npos)
            << at << ": " << lookup.message;
      }
    }
    if (at < end_marker) {
      EXPECT_EQ(opened.reader->end().kind, CaptureEndKind::kCorrupt) << at << ": " << opened.reader->end().message;
      EXPECT_EQ(opened.reader->end().offset, record) << at;
    }
  }
}

// A blob record whose frame checksum holds (a writer bug, or a forged file) but whose data checksum or size does not
// is never returned: find says damaged and names the blob's offset.
TEST(CaptureReader, DataChecksumAndSizeAreCheckedAtLookup) {
  const SmallFile file = small_file();
  OpenedCapture whole = CaptureReader::from_bytes(file.bytes);
  ASSERT_NE(whole.reader, nullptr);
  const CaptureBlob compressed = whole.reader->blobs()[0];
  ASSERT_EQ(compressed.fields.codec, CaptureCodec::kZstd);
  const CaptureBlob raw = whole.reader->blobs()[1];
  ASSERT_EQ(raw.fields.codec, CaptureCodec::kRaw);
  // Rewrites a blob's fields and recomputes its frame checksum.
  const auto forge = [&](const CaptureBlob& blob, auto change) {
    std::vector<std::byte> bytes = file.bytes;
    std::byte* at = bytes.data() + blob.offset;
    auto frame = [&] {
      RecordFrame f;
      std::memcpy(&f, at, sizeof f);
      return f;
    }();
    CaptureBlobFields fields;
    std::memcpy(&fields, at + sizeof frame, sizeof fields);
    change(fields);
    std::memcpy(at + sizeof frame, &fields, sizeof fields);
    frame.checksum =
        record_checksum(frame.length, frame.type, frame.fixed_bytes, at + sizeof frame, frame.length - sizeof frame);
    std::memcpy(at, &frame, sizeof frame);
    return bytes;
  };
  const std::string compressed_at = "at offset " + std::to_string(compressed.offset);
  const std::string raw_at = "at offset " + std::to_string(raw.offset);
  {
    OpenedCapture opened = CaptureReader::from_bytes(forge(raw, [](CaptureBlobFields& f) { f.raw_checksum ^= 1; }));
    ASSERT_NE(opened.reader, nullptr);
    const CaptureLookup lookup = opened.reader->find(raw.fields.fingerprint, raw.fields.raw_bytes);
    EXPECT_EQ(lookup.status, CaptureLookupStatus::kDamaged);
    EXPECT_TRUE(lookup.bytes.empty());
    EXPECT_NE(lookup.message.find(raw_at), std::string::npos) << lookup.message;
    EXPECT_NE(lookup.message.find("data checksum"), std::string::npos) << lookup.message;
  }
  {
    OpenedCapture opened =
        CaptureReader::from_bytes(forge(compressed, [](CaptureBlobFields& f) { f.raw_checksum ^= 1; }));
    const CaptureLookup lookup = opened.reader->find(compressed.fields.fingerprint, compressed.fields.raw_bytes);
    EXPECT_EQ(lookup.status, CaptureLookupStatus::kDamaged);
    EXPECT_NE(lookup.message.find(compressed_at), std::string::npos) << lookup.message;
  }
  {  // The compressed blob states a larger raw size than its frame holds: found under that size, it is damaged.
    OpenedCapture opened = CaptureReader::from_bytes(forge(compressed, [](CaptureBlobFields& f) { f.raw_bytes += 8; }));
    const CaptureLookup lookup = opened.reader->find(compressed.fields.fingerprint, compressed.fields.raw_bytes + 8);
    EXPECT_EQ(lookup.status, CaptureLookupStatus::kDamaged);
    EXPECT_NE(lookup.message.find(compressed_at), std::string::npos) << lookup.message;
    EXPECT_NE(lookup.message.find("decompresses to " + std::to_string(compressed.fields.raw_bytes)), std::string::npos)
        << lookup.message;
    EXPECT_EQ(opened.reader->find(compressed.fields.fingerprint, compressed.fields.raw_bytes).status,
              CaptureLookupStatus::kAbsent);
  }
  {  // A compressed blob stating an absurd raw size (1 TiB) is refused from its frame's header, before anything is
     // allocated (allocating first would fail and say "out of memory", or fill a terabyte).
    constexpr std::uint64_t kTebibyte = std::uint64_t{1} << 40;
    OpenedCapture opened =
        CaptureReader::from_bytes(forge(compressed, [](CaptureBlobFields& f) { f.raw_bytes = kTebibyte; }));
    const CaptureLookup lookup = opened.reader->find(compressed.fields.fingerprint, kTebibyte);
    EXPECT_EQ(lookup.status, CaptureLookupStatus::kDamaged);
    EXPECT_TRUE(lookup.bytes.empty());
    EXPECT_NE(lookup.message.find("decompresses to " + std::to_string(compressed.fields.raw_bytes) +
                                  " bytes, not the " + std::to_string(kTebibyte) + " it states"),
              std::string::npos)
        << lookup.message;
  }
  {  // A raw blob whose stated sizes disagree is a corrupt record: indexing stops there.
    OpenedCapture opened = CaptureReader::from_bytes(forge(raw, [](CaptureBlobFields& f) { f.raw_bytes += 8; }));
    EXPECT_EQ(opened.reader->end().kind, CaptureEndKind::kCorrupt);
    EXPECT_EQ(opened.reader->end().offset, raw.offset);
    const CaptureLookup lookup = opened.reader->find(raw.fields.fingerprint, raw.fields.raw_bytes);
    EXPECT_EQ(lookup.status, CaptureLookupStatus::kDamaged);
    EXPECT_NE(lookup.message.find(raw_at), std::string::npos) << lookup.message;
    EXPECT_EQ(opened.reader->find(compressed.fields.fingerprint, compressed.fields.raw_bytes).status,
              CaptureLookupStatus::kFound);
  }
}

TEST(CaptureReader, RefusesWhatIsNotACaptureFileItReads) {
  const SmallFile file = small_file();
  const auto refused = [](std::vector<std::byte> bytes, const std::string& expected) {
    OpenedCapture opened = CaptureReader::from_bytes(bytes);
    EXPECT_EQ(opened.reader, nullptr);
    EXPECT_NE(opened.error.find(expected), std::string::npos) << opened.error;
  };
  std::vector<std::byte> bad_magic = file.bytes;
  bad_magic[0] = std::byte{'X'};
  refused(bad_magic, "bad magic");
  std::vector<std::byte> swapped = file.bytes;
  std::reverse(swapped.begin(), swapped.begin() + 8);
  refused(swapped, "big-endian");
  std::vector<std::byte> log = file.bytes;
  std::memcpy(log.data(), &kMagic, sizeof kMagic);
  refused(log, "is a detnccl log");
  std::vector<std::byte> newer = file.bytes;
  const std::uint32_t version = kCaptureFormatVersion + 1;
  std::memcpy(newer.data() + offsetof(CaptureFileHeader, format_version), &version, sizeof version);
  refused(newer, "format version " + std::to_string(version));
  std::vector<std::byte> header_damage = file.bytes;
  header_damage[offsetof(CaptureFileHeader, rank)] ^= std::byte{1};
  refused(header_damage, "header checksum");
  refused({}, "too short");
  const TempDir dir;
  OpenedCapture missing = CaptureReader::open_file(dir.path() + "/rank-00009.cap");
  EXPECT_EQ(missing.reader, nullptr);
  EXPECT_NE(missing.error.find(dir.path() + "/rank-00009.cap"), std::string::npos) << missing.error;
}

// A truncated file (cut inside a record) says where, and what is before it is found.
TEST(CaptureReader, TruncatedFileIsATornTailAtTheCut) {
  const SmallFile file = small_file();
  OpenedCapture whole = CaptureReader::from_bytes(file.bytes);
  const CaptureBlob last = whole.reader->blobs()[2];
  OpenedCapture opened = CaptureReader::from_bytes(std::span(file.bytes).first(last.offset + 20));
  ASSERT_NE(opened.reader, nullptr);
  EXPECT_EQ(opened.reader->end().kind, CaptureEndKind::kTornTail);
  EXPECT_EQ(opened.reader->end().offset, last.offset);
  EXPECT_NE(opened.reader->end().message.find("at offset " + std::to_string(last.offset) + " is cut short"),
            std::string::npos)
      << opened.reader->end().message;
  EXPECT_EQ(opened.reader->blob_count(), 2u);
}

}  // namespace
}  // namespace detnccl::records
