// detnccl: zstd for capture files (capture_format.h), loaded at run time from libzstd.so.1 (Debian's libzstd1).
//
// RATIONALE: loaded with dlopen, not linked, because records/ goes into the shim, which may need nothing beyond the C
// and C++ runtimes (tests/test_interpose.cc's NeedsOnlyTheCAndCxxRuntimes): a job that never captures never loads
// it, and a machine without it captures uncompressed (the writer) or says why a blob cannot be read (the reader).
#ifndef DETNCCL_RECORDS_ZSTD_CODEC_H
#define DETNCCL_RECORDS_ZSTD_CODEC_H

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace detnccl::records {

// Whether libzstd could be loaded (once per process, at the first call; thread-safe).
bool zstd_available() noexcept;

// Why it could not (empty when it could).
std::string_view zstd_unavailable_reason() noexcept;

// The most bytes zstd_compress may write for `bytes` bytes of input (0 without zstd).
std::size_t zstd_compress_bound(std::size_t bytes) noexcept;

// Compresses `bytes` bytes at `data` into one zstd frame at `out` (room for `capacity` bytes) at `level`. Returns
// the frame's size, or 0 on any failure (no zstd, too little room).
std::size_t zstd_compress(void* out, std::size_t capacity, const void* data, std::size_t bytes, int level) noexcept;

// What the zstd data of `bytes` bytes at `data` says about its content, read from its first frame's header without
// decompressing anything (ZSTD_getFrameContentSize, ZSTD_findFrameCompressedSize).
struct ZstdFrameSize {
  bool readable = false;       // false: no zstd, or not the start of a zstd frame (a damaged header)
  bool whole = false;          // the first frame spans all `bytes` (one frame, nothing after it)
  bool content_known = false;  // the frame's header states its content size (detnccl's writer always does)
  std::uint64_t content_bytes = 0;
};
ZstdFrameSize zstd_frame_size(const void* data, std::size_t bytes) noexcept;

// Decompresses the zstd frame of `bytes` bytes at `data` into `out` (room for `capacity` bytes). Returns the
// content's size, or -1 on any failure (no zstd, a damaged frame, too little room).
long long zstd_decompress(void* out, std::size_t capacity, const void* data, std::size_t bytes) noexcept;

}  // namespace detnccl::records

#endif  // DETNCCL_RECORDS_ZSTD_CODEC_H
