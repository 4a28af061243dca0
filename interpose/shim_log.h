// detnccl shim: its own messages, one line each, tagged like NCCL's: "[detnccl host:pid rank R] ...".
#ifndef DETNCCL_INTERPOSE_SHIM_LOG_H
#define DETNCCL_INTERPOSE_SHIM_LOG_H

#include <atomic>
#include <cstdint>
#include <string_view>

#include "config/config.h"

namespace detnccl::interpose {

// Sets the level and destination (DETNCCL_LOG_LEVEL, DETNCCL_LOG_FILE), then warns about the settings that have no
// effect (config::ineffective_settings), so that those warnings go where the user asked. Before it runs, warnings
// go to stderr. A log file that cannot be opened (say, in a missing directory) leaves the messages on stderr, at the
// requested level, with one warning saying so.
void configure_log(const config::Config& config) noexcept;

// Tags every following line with the global rank, once it is known.
void set_log_rank(std::uint32_t rank) noexcept;

void log_info(std::string_view message) noexcept;
void log_warning(std::string_view message) noexcept;

// Logs a warning the first time `once` is passed, and nothing afterwards (rate limit for per-call failures).
void log_warning_once(std::atomic<bool>& once, std::string_view message) noexcept;

}  // namespace detnccl::interpose

#endif  // DETNCCL_INTERPOSE_SHIM_LOG_H
