// detnccl shim: logging through spdlog (header-only build, so the shim brings no shared library into the job).
#include "interpose/shim_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace detnccl::interpose {
namespace {

std::mutex g_log_mutex;
std::shared_ptr<spdlog::logger> g_logger;  // guarded by g_log_mutex
std::string g_host;
std::string g_rank = "?";

std::string host_name() {
  char buffer[256] = {};
  if (gethostname(buffer, sizeof buffer - 1) != 0) return "unknown-host";
  return buffer;
}

void apply_pattern() {
  // Every line carries host, pid and rank, like NCCL's own "host:pid:tid [rank]" prefix.
  g_logger->set_pattern("[detnccl " + g_host + ":%P rank " + g_rank + "] %l: %v");
}

spdlog::logger& logger() {
  if (!g_logger) {
    g_host = host_name();
    g_logger = std::make_shared<spdlog::logger>("detnccl", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    g_logger->set_level(spdlog::level::warn);
    apply_pattern();
  }
  return *g_logger;
}

void write(spdlog::level::level_enum level, std::string_view message) noexcept {
  try {
    const std::lock_guard<std::mutex> lock(g_log_mutex);
    logger().log(level, "{}", message);
    logger().flush();
  } catch (...) {
    // Logging must never break the job.
  }
}

// Points the logger at DETNCCL_LOG_FILE. Caller holds g_log_mutex. Throws, leaving the logger as it was, when the
// file cannot be opened.
void open_log_file(const std::string& path) {
  // Created here, 0600 like the logs, and only in an existing directory: spdlog would create missing parent
  // directories (0755) and the file with the umask's mode.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) throw std::runtime_error(std::strerror(errno));
  ::close(fd);
  auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, /*truncate=*/false);
  auto file_logger = std::make_shared<spdlog::logger>("detnccl", sink);
  g_logger = std::move(file_logger);
  apply_pattern();
}

}  // namespace

void configure_log(const config::Config& config) noexcept {
  std::string file_problem;
  try {
    const std::lock_guard<std::mutex> lock(g_log_mutex);
    logger();
    if (!config.log_file.empty()) {
      try {
        open_log_file(config.log_file);
      } catch (const std::exception& error) {
        file_problem = error.what();
      } catch (...) {
        file_problem = "unknown error";
      }
    }
    // RATIONALE: the level applies to whichever destination the messages end up in: a log file that cannot be
    // opened must not also turn DETNCCL_LOG_LEVEL into the default (silencing info, or un-silencing "off").
    static constexpr spdlog::level::level_enum kLevels[] = {spdlog::level::trace, spdlog::level::debug,
                                                            spdlog::level::info,  spdlog::level::warn,
                                                            spdlog::level::err,   spdlog::level::off};
    g_logger->set_level(kLevels[static_cast<int>(config.log_level)]);
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
    logger();
    g_rank = std::to_string(rank);
    apply_pattern();
  } catch (...) {
  }
}

void log_info(std::string_view message) noexcept { write(spdlog::level::info, message); }
void log_warning(std::string_view message) noexcept { write(spdlog::level::warn, message); }

void log_warning_once(std::atomic<bool>& once, std::string_view message) noexcept {
  if (!once.exchange(true, std::memory_order_relaxed)) log_warning(message);
}

}  // namespace detnccl::interpose
