// detnccl-fingerprint: prints the fingerprint (docs/fingerprint.md) of each file, and optionally its segment
// digests, so that a dumped buffer can be checked against a record on any machine.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "hash/fingerprint.h"
#include "hash/parallel_fingerprint.h"
#include "posix/file_descriptor.h"

namespace {

namespace hash = detnccl::hash;
using detnccl::cli::kExitUnusable;

// More threads than this is a typo, not a machine: refused as a bad argument rather than tried.
constexpr unsigned kMaxThreads = 4096;

struct Digests {
  std::uint64_t bytes = 0;
  std::uint64_t fingerprint = 0;
  std::vector<std::uint64_t> segments;
};

using detnccl::posix::FileDescriptor;

std::runtime_error system_error(const std::string& what) {
  return std::runtime_error(what + ": " + std::strerror(errno));
}

// A regular file, mapped: the whole buffer at once, hashed on all threads.
Digests digest_mapped(int fd, std::uint64_t bytes, std::size_t segment_bytes, hash::ParallelFingerprinter& hasher) {
  void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  if (map == MAP_FAILED) throw system_error("cannot map");
  ::madvise(map, bytes, MADV_SEQUENTIAL);
  Digests out;
  out.bytes = bytes;
  try {
    out.fingerprint = hasher.fingerprint(map, bytes);
    if (segment_bytes > 0) out.segments = hasher.segment_digests(map, bytes, segment_bytes);
  } catch (...) {
    ::munmap(map, bytes);
    throw;
  }
  ::munmap(map, bytes);
  return out;
}

// Anything else (a pipe, a terminal, an empty or special file): read in pieces and hashed as it arrives.
Digests digest_streamed(int fd, std::size_t segment_bytes) {
  constexpr std::size_t kPieceBytes = std::size_t{1} << 20;
  std::vector<std::uint8_t> piece(kPieceBytes);
  hash::StreamingFingerprint whole;
  std::optional<hash::StreamingFingerprint> segment;
  Digests out;
  for (;;) {
    const ssize_t got = ::read(fd, piece.data(), piece.size());
    if (got < 0) {
      if (errno == EINTR) continue;
      throw system_error("cannot read");
    }
    if (got == 0) break;
    whole.update(piece.data(), static_cast<std::size_t>(got));
    for (std::size_t done = 0; segment_bytes > 0 && done < static_cast<std::size_t>(got);) {
      if (!segment) segment.emplace();
      const std::size_t take =
          std::min<std::size_t>(static_cast<std::size_t>(got) - done, segment_bytes - segment->bytes());
      segment->update(piece.data() + done, take);
      done += take;
      if (segment->bytes() == segment_bytes) {
        out.segments.push_back(segment->finish());
        segment.reset();
      }
    }
  }
  if (segment) out.segments.push_back(segment->finish());
  out.bytes = whole.bytes();
  out.fingerprint = whole.finish();
  return out;
}

Digests digest_file(const std::string& path, std::size_t segment_bytes, hash::ParallelFingerprinter& hasher) {
  const bool is_stdin = path == "-";
  FileDescriptor fd(is_stdin ? ::dup(STDIN_FILENO) : ::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw system_error("cannot open");
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) throw system_error("cannot stat");
  if (S_ISDIR(info.st_mode)) throw std::runtime_error("is a directory");
  if (S_ISREG(info.st_mode) && info.st_size > 0 && !is_stdin) {
    return digest_mapped(fd.get(), static_cast<std::uint64_t>(info.st_size), segment_bytes, hasher);
  }
  return digest_streamed(fd.get(), segment_bytes);
}

void print(const std::string& path, const Digests& digests, std::size_t segment_bytes) {
  std::printf("%s  %s\n", hash::format_digest(digests.fingerprint).c_str(), path.c_str());
  for (std::size_t k = 0; k < digests.segments.size(); ++k) {
    const std::uint64_t offset = static_cast<std::uint64_t>(k) * segment_bytes;
    const std::uint64_t length = std::min<std::uint64_t>(segment_bytes, digests.bytes - offset);
    std::printf("  %s  segment %zu offset %llu bytes %llu\n", hash::format_digest(digests.segments[k]).c_str(), k,
                static_cast<unsigned long long>(offset), static_cast<unsigned long long>(length));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Prints the detnccl fingerprint (definition version " + std::to_string(hash::kFingerprintVersion) +
                   ", docs/fingerprint.md) of each FILE as 16 hex digits, and with --segment-bytes the fingerprint of "
                   "each segment of that size, to check a dumped buffer against a record.",
               "detnccl-fingerprint"};
  std::vector<std::string> files;
  std::optional<std::size_t> segment_option;  // given: checked, 0 included (it is not a positive multiple)
  unsigned threads = 0;
  app.add_option("FILE", files, "Files to fingerprint ('-' reads standard input)")->required();
  app.add_option("--segment-bytes", segment_option,
                 "Also print a digest per segment of this size (a multiple of 16KiB; units like 1MiB accepted)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--threads", threads, "Threads that hash large files (default: one per hardware thread)")
      ->check(CLI::Range(0u, kMaxThreads));
  // RATIONALE: the exit statuses of `detnccl` (cli/commands.h): 2 for bad arguments as for unusable input; this
  // tool has no 1, since it compares nothing.
  app.footer(
      "Output: '<fingerprint>  <file>', then per segment '  <digest>  segment <k> offset <o> bytes <n>'.\n"
      "Exit status: 0 success, 2 bad arguments or a file that could not be read (the others are still printed).");
  try {
    app.parse(argc, argv);
    if (segment_option) hash::check_segment_bytes(*segment_option);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitUnusable;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "detnccl-fingerprint: --segment-bytes: %s\n", e.what());
    return kExitUnusable;
  }

  const std::size_t segment_bytes = segment_option.value_or(0);
  std::optional<hash::ParallelFingerprinter> hasher;
  try {
    hasher.emplace(threads);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "detnccl-fingerprint: cannot start %u threads: %s\n", threads, e.what());
    return kExitUnusable;
  }
  int status = 0;
  for (const std::string& path : files) {
    try {
      print(path, digest_file(path, segment_bytes, *hasher), segment_bytes);
    } catch (const std::exception& e) {
      std::fflush(stdout);
      std::fprintf(stderr, "detnccl-fingerprint: %s: %s\n", path.c_str(), e.what());
      status = kExitUnusable;
    }
  }
  return status;
}
