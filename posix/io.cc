#include "posix/io.h"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "posix/file_descriptor.h"

namespace detnccl::posix {

bool write_all(int fd, const void* data, std::size_t size) noexcept {
  const char* next = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t written = ::write(fd, next, size);
    if (written < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    next += written;
    size -= static_cast<std::size_t>(written);
  }
  return true;
}

ssize_t read_full(int fd, void* data, std::size_t size) noexcept {
  char* next = static_cast<char*>(data);
  std::size_t total = 0;
  while (total < size) {
    const ssize_t count = ::read(fd, next + total, size - total);
    if (count < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (count == 0) break;
    total += static_cast<std::size_t>(count);
  }
  return static_cast<ssize_t>(total);
}

int fill_random(void* data, std::size_t size) noexcept {
  char* next = static_cast<char*>(data);
  std::size_t filled = 0;
  while (filled < size) {
    const ssize_t got = ::getrandom(next + filled, size - filled, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    filled += static_cast<std::size_t>(got);
  }
  return 0;
}

bool replace_file(const std::string& path, const void* data, std::size_t size, std::string* error,
                  const ReplaceFileOptions& options) {
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (options.exclusive ? O_EXCL : O_TRUNC);
  FileDescriptor file(::open(temporary.c_str(), flags, options.mode));
  if (!file.valid()) {
    *error = "cannot create " + temporary + ": " + std::strerror(errno);
    return false;
  }
  const bool written = write_all(file.get(), data, size) && ::fsync(file.get()) == 0;
  const int write_errno = errno;
  ::close(file.release());
  if (!written) {
    ::unlink(temporary.c_str());
    *error = "cannot write " + temporary + ": " + std::strerror(write_errno);
    return false;
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    *error = "cannot rename " + temporary + " to " + path + ": " + std::strerror(errno);
    ::unlink(temporary.c_str());
    return false;
  }
  if (options.sync_directory) {
    const std::size_t slash = path.rfind('/');
    const std::string directory = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    const FileDescriptor directory_fd(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (directory_fd.valid()) ::fsync(directory_fd.get());
  }
  return true;
}

}  // namespace detnccl::posix
