#include "launcher/bootstrap.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

#include "hostnccl/timeout_setting.h"
#include "posix/io.h"

namespace detnccl {
namespace {

std::string errno_text() { return std::strerror(errno); }

bool publish_unique_id(const std::string& path, ncclUniqueId* id, std::string* error) {
  const ncclResult_t result = ncclGetUniqueId(id);
  if (result != ncclSuccess) {
    *error = std::string("ncclGetUniqueId failed: ") + ncclGetErrorString(result);
    return false;
  }
  // RATIONALE: write, fsync, then rename: a reader sees either no file or the whole id, never part of it.
  return posix::replace_file(path, id->internal, sizeof(id->internal), error,
                             {.mode = 0600, .exclusive = true, .sync_directory = false});
}

// Reads the published id; returns 1 on success, 0 if the file does not exist yet, -1 on an error.
int read_unique_id(const std::string& path, ncclUniqueId* id, std::string* error) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return 0;
    *error = "cannot open " + path + ": " + errno_text();
    return -1;
  }
  const ssize_t count = posix::read_full(fd, id->internal, sizeof(id->internal));
  const bool failed = count < 0;
  const std::size_t total = failed ? 0 : static_cast<std::size_t>(count);
  char extra = 0;
  const bool longer = !failed && total == sizeof(id->internal) && read(fd, &extra, 1) > 0;
  const std::string read_error = errno_text();
  close(fd);
  if (failed) {
    *error = "cannot read " + path + ": " + read_error;
    return -1;
  }
  if (total != sizeof(id->internal) || longer) {
    // The file is renamed into place whole, so a wrong size means it is not an id written by rank 0.
    *error = path + " does not hold a unique id (expected exactly " + std::to_string(sizeof(id->internal)) + " bytes)";
    return -1;
  }
  return 1;
}

bool wait_for_unique_id(const std::string& path, std::chrono::milliseconds timeout, ncclUniqueId* id,
                        std::string* error) {
  using Clock = std::chrono::steady_clock;
  const std::optional<Clock::time_point> deadline =
      timeout.count() != 0 ? std::optional(Clock::now() + timeout) : std::nullopt;  // none: wait forever
  // Start with short sleeps (rank 0 usually publishes within milliseconds), back off to 50 ms.
  std::chrono::microseconds pause(500);
  while (true) {
    const int found = read_unique_id(path, id, error);
    if (found != 0) return found > 0;
    Clock::duration sleep = pause;
    if (deadline) {
      const auto now = Clock::now();
      if (now >= *deadline) {
        *error = "rank 0 did not publish the unique id in " + path + " within " +
                 std::to_string(std::chrono::duration<double>(timeout).count()) + " s (is rank 0 running?)";
        return false;
      }
      sleep = std::min<Clock::duration>(sleep, *deadline - now);
    }
    std::this_thread::sleep_for(sleep);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(50));
  }
}

}  // namespace

bool share_unique_id_through_file(const std::string& path, int rank, std::chrono::milliseconds timeout,
                                  ncclUniqueId* id, std::string* error) {
  if (rank < 0) {
    *error = "invalid rank " + std::to_string(rank);
    return false;
  }
  if (path.empty()) {
    *error = "the unique-id file path is empty";
    return false;
  }
  return rank == 0 ? publish_unique_id(path, id, error) : wait_for_unique_id(path, timeout, id, error);
}

bool share_unique_id(int rank, ncclUniqueId* id, std::string* error) {
  std::string path;
  if (!hostnccl::read_setting<hostnccl::Setting::kIdFile>(&path, error)) return false;
  if (path.empty()) {
    *error = std::string(kUniqueIdFileVariable) +
             " is not set: start the program with hostnccl-run (or set it to a file path that all ranks share)";
    return false;
  }
  double seconds = 0;
  if (!hostnccl::read_timeout_seconds(&seconds, error)) return false;
  // Whole milliseconds, rounded up: a positive time never becomes 0, which would mean "wait forever".
  const std::chrono::milliseconds timeout(static_cast<long long>(std::ceil(seconds * 1000.0)));
  return share_unique_id_through_file(path, rank, timeout, id, error);
}

}  // namespace detnccl
