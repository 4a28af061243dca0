// detnccl: zstd loaded at run time (see zstd_codec.h).
#include "records/zstd_codec.h"

#include <dlfcn.h>
#include <zstd.h>

#include <mutex>
#include <string>

namespace detnccl::records {
namespace {

struct ZstdLibrary {
  decltype(&ZSTD_compress) compress = nullptr;
  decltype(&ZSTD_decompress) decompress = nullptr;
  decltype(&ZSTD_compressBound) compress_bound = nullptr;
  decltype(&ZSTD_isError) is_error = nullptr;
  decltype(&ZSTD_getFrameContentSize) frame_content_size = nullptr;
  decltype(&ZSTD_findFrameCompressedSize) frame_compressed_size = nullptr;
  std::string unavailable;
};

const ZstdLibrary& library() noexcept {
  static ZstdLibrary loaded;
  static std::once_flag once;
  try {
    std::call_once(once, [] {
      void* handle = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) {
        const char* why = dlerror();
        loaded.unavailable = std::string("cannot load libzstd.so.1 (") + (why != nullptr ? why : "?") + ")";
        return;
      }
      loaded.compress = reinterpret_cast<decltype(&ZSTD_compress)>(dlsym(handle, "ZSTD_compress"));
      loaded.decompress = reinterpret_cast<decltype(&ZSTD_decompress)>(dlsym(handle, "ZSTD_decompress"));
      loaded.compress_bound = reinterpret_cast<decltype(&ZSTD_compressBound)>(dlsym(handle, "ZSTD_compressBound"));
      loaded.is_error = reinterpret_cast<decltype(&ZSTD_isError)>(dlsym(handle, "ZSTD_isError"));
      loaded.frame_content_size =
          reinterpret_cast<decltype(&ZSTD_getFrameContentSize)>(dlsym(handle, "ZSTD_getFrameContentSize"));
      loaded.frame_compressed_size =
          reinterpret_cast<decltype(&ZSTD_findFrameCompressedSize)>(dlsym(handle, "ZSTD_findFrameCompressedSize"));
      if (loaded.compress == nullptr || loaded.decompress == nullptr || loaded.compress_bound == nullptr ||
          loaded.is_error == nullptr || loaded.frame_content_size == nullptr ||
          loaded.frame_compressed_size == nullptr) {
        loaded = ZstdLibrary{};
        loaded.unavailable =
            "libzstd.so.1 lacks ZSTD_compress, ZSTD_decompress, ZSTD_compressBound, ZSTD_isError, "
            "ZSTD_getFrameContentSize or ZSTD_findFrameCompressedSize (libzstd 1.3 or later has them)";
      }
    });
  } catch (...) {
    // call_once may throw std::system_error: zstd stays unavailable, with no reason but this one.
  }
  return loaded;
}

}  // namespace

bool zstd_available() noexcept { return library().compress != nullptr; }

std::string_view zstd_unavailable_reason() noexcept {
  const ZstdLibrary& zstd = library();
  if (zstd.compress != nullptr) return {};
  return zstd.unavailable.empty() ? std::string_view("libzstd.so.1 could not be loaded") : zstd.unavailable;
}

std::size_t zstd_compress_bound(std::size_t bytes) noexcept {
  const ZstdLibrary& zstd = library();
  return zstd.compress_bound != nullptr ? zstd.compress_bound(bytes) : 0;
}

std::size_t zstd_compress(void* out, std::size_t capacity, const void* data, std::size_t bytes, int level) noexcept {
  const ZstdLibrary& zstd = library();
  if (zstd.compress == nullptr) return 0;
  const std::size_t written = zstd.compress(out, capacity, data, bytes, level);
  return zstd.is_error(written) ? 0 : written;
}

ZstdFrameSize zstd_frame_size(const void* data, std::size_t bytes) noexcept {
  const ZstdLibrary& zstd = library();
  ZstdFrameSize size;
  if (zstd.frame_content_size == nullptr) return size;
  const unsigned long long content = zstd.frame_content_size(data, bytes);
  if (content == ZSTD_CONTENTSIZE_ERROR) return size;
  const std::size_t frame = zstd.frame_compressed_size(data, bytes);
  size.readable = true;
  size.whole = !zstd.is_error(frame) && frame == bytes;
  size.content_known = content != ZSTD_CONTENTSIZE_UNKNOWN;
  if (size.content_known) size.content_bytes = content;
  return size;
}

long long zstd_decompress(void* out, std::size_t capacity, const void* data, std::size_t bytes) noexcept {
  const ZstdLibrary& zstd = library();
  if (zstd.decompress == nullptr) return -1;
  const std::size_t content = zstd.decompress(out, capacity, data, bytes);
  return zstd.is_error(content) ? -1 : static_cast<long long>(content);
}

}  // namespace detnccl::records
