// Fuzz target: config::parse_config over an environment decoded from the input, and the other readers of the
// environment (global rank, world size, run name, NCCL_* variables).
//
// The input is a list of "NAME=value" entries separated by '\n' or, when the input starts with a NUL byte, by NUL
// bytes (so values may hold newlines). Checked, beyond "no crash": every message is printable ASCII on one line
// (config.h promises escaped values); a valid configuration printed with format_config() parses back to itself
// (when its paths are printable, since format_config escapes the others); a derived run name is a valid one.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"

namespace {

namespace config = detnccl::config;

void require(bool condition) {
  if (!condition) std::abort();
}

bool printable(std::string_view text, bool newlines_allowed = false) {
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if ((byte < 0x20 || byte >= 0x7f) && !(newlines_allowed && c == '\n')) return false;
  }
  return true;
}

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> entries;
  while (!text.empty()) {
    const std::size_t end = text.find(separator);
    entries.push_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return entries;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  const bool nul_separated = !input.empty() && input.front() == '\0';
  if (nul_separated) input.remove_prefix(1);
  const std::vector<std::string_view> environment = split(input, nul_separated ? '\0' : '\n');

  const config::ParsedConfig parsed = config::parse_config(environment);
  for (const config::ConfigError& error : parsed.errors()) require(printable(error.message));
  if (parsed.ok()) {
    const config::Config& parsed_config = parsed.config();
    const std::string text = config::format_config(parsed_config);
    require(printable(text, /*newlines_allowed=*/true));
    if (printable(parsed_config.dir) && printable(parsed_config.log_file) &&
        parsed_config.dir.find('\\') == std::string::npos && parsed_config.log_file.find('\\') == std::string::npos) {
      const std::vector<std::string_view> printed = split(text, '\n');
      const config::ParsedConfig again = config::parse_config(printed);
      require(again.ok());
      require(again.config() == parsed_config);
    }
    if (const auto run = config::run_name_from_environment(parsed_config, environment)) {
      require(config::is_valid_run_name(*run));
    }
  }
  require(printable(config::nccl_variables(environment), /*newlines_allowed=*/true));
  if (const auto rank = config::global_rank_from_environment(environment)) require(!rank->source.empty());
  (void)config::world_size_from_environment(environment);
  return 0;
}
