// detnccl shim: its own messages, one line each, written whole with one write(2) to standard error or
// DETNCCL_LOG_FILE. RATIONALE: a logging library compiled into the shim (spdlog and fmt, header-only) cost more build
// time than the rest of the shim and brought nothing these few lines need.
#include "interpose/shim_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>

namespace detnccl::interpose {
namespace {

// The names of config::LogLevel's values in a message line (those of spdlog, which the shim used to log through).
constexpr const char* kLevelNames[] = {"trace", "debug", "info", "warning", "error", "off"};

std::mutex g_log_mutex;
// All guarded by g_log_mutex.
std::string g_host;
std::string g_rank = "?";
config::LogLevel g_level = config::LogLevel::kWarn;
// DETNCCL_LOG_FILE's descriptor, or -1 for standard error. Never closed: the shim may log from exit handlers, after
// static destructors, and a closed number can be reused by a file of the job.
int g_file_fd = -1;

void ensure_host() {
  if (!g_host.empty()) return;
  char buffer[256] = {};
  g_host = gethostname(buffer, sizeof buffer - 1) == 0 ? buffer : "unknown-host";
}

// Writes all of `line`, retrying short writes and interruptions; gives up silently on an error.
void write_all(int fd, std::string_view line) noexcept {
  while (!line.empty()) {
    const ssize_t written = ::write(fd, line.data(), line.size());
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return;
    line.remove_prefix(static_cast<std::size_t>(written));
  }
}

void write(config::LogLevel level, std::string_view message) noexcept {
  try {
    const std::lock_guard<std::mutex> lock(g_log_mutex);
    if (level < g_level || level == config::LogLevel::kOff) return;
    ensure_host();
    // Every line carries host, pid and rank, like NCCL's own "host:pid:tid [rank]" prefix.
    std::string line = "[detnccl ";
    line.append(g_host).append(":").append(std::to_string(::getpid())).append(" rank ").append(g_rank);
    line.append("] ").append(kLevelNames[static_cast<int>(level)]).append(": ").append(message).append("\n");
    write_all(g_file_fd >= 0 ? g_file_fd : STDERR_FILENO, line);
  } catch (...) {
    // Logging must never break the job.
  }
}

}  // namespace

void configure_log(const config::Config& config) noexcept {
  std::string file_problem;
  try {
    const std::lock_guard<std::mutex> lock(g_log_mutex);
    if (!config.log_file.empty()) {
      // Appended to, created 0600 like the logs, and only in an existing directory.
      const int fd = ::open(config.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
      if (fd >= 0) {
        if (g_file_fd >= 0) ::close(g_file_fd);
        g_file_fd = fd;
      } else {
        file_problem = std::strerror(errno);
      }
    }
    // RATIONALE: the level applies to whichever destination the messages end up in: a log file that cannot be
    // opened must not also turn DETNCCL_LOG_LEVEL into the default (silencing info, or un-silencing "off").
    g_level = config.log_level;
  } catch (...) {
  }
  try {
    if (!file_problem.empty()) {
      // An unusable log file is the shim's failure to honour a setting, not an invalid one (the directory may be
      // missing on one node only): say so, at the requested level, and keep standard error.
      std::string message = "cannot log to DETNCCL_LOG_FILE=";
      config::append_escaped(message, config.log_file);
      message.append(" (").append(file_problem).append("); messages go to standard error");
      log_warning(message);
    }
    for (const config::ConfigError& warning : config::ineffective_settings(config)) log_warning(warning.message);
  } catch (...) {
  }
}

void set_log_rank(std::uint32_t rank) noexcept {
  try {
    const std::lock_guard<std::mutex> lock(g_log_mutex);
    g_rank = std::to_string(rank);
  } catch (...) {
  }
}

void log_info(std::string_view message) noexcept { write(config::LogLevel::kInfo, message); }
void log_warning(std::string_view message) noexcept { write(config::LogLevel::kWarn, message); }

void log_warning_once(std::atomic<bool>& once, std::string_view message) noexcept {
  if (!once.exchange(true, std::memory_order_relaxed)) log_warning(message);
}

}  // namespace detnccl::interpose
