// posix/file_descriptor.h: a file descriptor that is closed when it goes out of scope.
#pragma once

#include <unistd.h>

#include <utility>

namespace detnccl::posix {

// Owns one file descriptor (or none: a negative value, e.g. the -1 of a failed open) and closes it on every path
// out of its scope unless release() hands it on. Nothing here throws, so the shim may use it in the host job.
class FileDescriptor {
 public:
  // Takes ownership of `fd`; a negative `fd` owns nothing.
  explicit FileDescriptor(int fd) noexcept : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;

  // The descriptor, still owned (negative when none).
  int get() const noexcept { return fd_; }
  // Whether a descriptor is owned.
  bool valid() const noexcept { return fd_ >= 0; }
  // Gives up ownership without closing and returns the descriptor (negative when none).
  int release() noexcept { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

}  // namespace detnccl::posix
