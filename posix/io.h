// posix/io.h: the POSIX loops every caller would otherwise write again: write everything, read everything, fill a
// buffer from getrandom, and replace a file atomically (temporary file, fsync, rename).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <string_view>

namespace detnccl::posix {

// Writes all `size` bytes of `data` to `fd`, retrying after EINTR and short writes. Returns false on any other
// error (errno says which, e.g. EPIPE when the reader has gone away); some bytes may have been written by then.
bool write_all(int fd, const void* data, std::size_t size) noexcept;
// The same for a piece of text.
inline bool write_all(int fd, std::string_view text) noexcept { return write_all(fd, text.data(), text.size()); }

// Reads from `fd` until `size` bytes are in `data` or the file ends, retrying after EINTR and short reads.
// Returns the number of bytes read (less than `size` only at the end of the file), or -1 on an error (errno says
// which).
ssize_t read_full(int fd, void* data, std::size_t size) noexcept;

// Fills `data` with `size` random bytes from getrandom(2) (the kernel's pool; blocks only until it is initialised
// after boot), retrying after EINTR and short reads. Returns 0, or the errno value of the failure.
int fill_random(void* data, std::size_t size) noexcept;

// How replace_file creates and publishes the file.
struct ReplaceFileOptions {
  mode_t mode = 0600;           // permissions of the new file (before the umask)
  bool exclusive = false;       // refuse (EEXIST) a temporary file already there, rather than truncate it
  bool sync_directory = false;  // fsync the directory after the rename, so the rename itself survives a crash
};

// Replaces the file at `path` with `size` bytes of `data` so that no reader ever sees part of them: writes a
// temporary file `PATH.tmp.PID` in the same directory, fsyncs it and renames it over `path`. On failure removes the
// temporary file, sets *error to "cannot create|write|rename ...: <reason>" and returns false; `path` is then
// unchanged.
bool replace_file(const std::string& path, const void* data, std::size_t size, std::string* error,
                  const ReplaceFileOptions& options = {});

}  // namespace detnccl::posix
