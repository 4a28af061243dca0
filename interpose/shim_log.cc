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

}  // namespace

void configure_log(const config::Config& config) noexcept {
  try {
    const std::lock_guard<std::mutex> lock(g_log_mutex);
    logger();
    if (!config.log_file.empty()) {
      // Created here, 0600 like the logs, and only in an existing directory: spdlog would create missing parent
      // directories (0755) and the file with the umask's mode.
      const int fd = ::open(config.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
      if (fd < 0) throw std::runtime_error(std::strerror(errno));
      ::close(fd);
      auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(config.log_file, /*truncate=*/false);
      g_logger = std::make_shared<spdlog::logger>("detnccl", sink);
      apply_pattern();
    }
    static constexpr spdlog::level::level_enum kLevels[] = {spdlog::level::trace, spdlog::level::debug,
                                                            spdlog::level::info,  spdlog::level::warn,
                                                            spdlog::level::err,   spdlog::level::off};
    g_logger->set_level(kLevels[static_cast<int>(config.log_level)]);
  } catch (const std::exception& error) {
    // An unusable log file: keep stderr, and say so there.
    std::fprintf(stderr, "[detnccl] WARNING: cannot log to DETNCCL_LOG_FILE=%s (%s); logging to stderr\n",
                 config.log_file.c_str(), error.what());
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
