// detnccl: what the rest of the environment tells detnccl (global rank, world size, run name, NCCL_* settings).
#include <unistd.h>

#include <algorithm>
#include <array>
#include <ctime>

#include "config/config.h"

extern "C" char** environ;  // NOLINT: POSIX declares it nowhere in a header under strict C++

namespace detnccl::config {
namespace {

constexpr std::size_t kMaxRunNameBytes = 128;

// The value of the first entry named name, as getenv() would find it.
std::optional<std::string_view> lookup(std::span<const std::string_view> environment, std::string_view name) {
  for (std::string_view entry : environment) {
    if (entry.size() > name.size() && entry[name.size()] == '=' && entry.substr(0, name.size()) == name) {
      return entry.substr(name.size() + 1);
    }
  }
  return std::nullopt;
}

// A decimal number that fits in 32 bits, nothing else (no sign, no spaces, no suffix).
std::optional<std::uint32_t> parse_u32(std::string_view text) {
  if (text.empty() || text.size() > 10) return std::nullopt;
  std::uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (value > 0xffffffffu) return std::nullopt;
  return static_cast<std::uint32_t>(value);
}

bool is_run_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

// A launcher's identifier turned into a run name: forbidden characters become '_', and it is cut to length.
std::optional<std::string> sanitized_run_name(std::string_view text) {
  std::string name(text.substr(0, kMaxRunNameBytes));
  std::replace_if(
      name.begin(), name.end(), [](char c) { return !is_run_name_char(c); }, '_');
  if (!is_valid_run_name(name)) return std::nullopt;
  return name;
}

}  // namespace

std::string nccl_variables(std::span<const std::string_view> environment) {
  std::vector<std::string_view> entries;
  for (std::string_view entry : environment) {
    if (entry.substr(0, 5) == "NCCL_" && entry.find('=') != std::string_view::npos) entries.push_back(entry);
  }
  std::stable_sort(entries.begin(), entries.end(), [](std::string_view a, std::string_view b) {
    return a.substr(0, a.find('=')) < b.substr(0, b.find('='));
  });
  std::string out;
  for (std::string_view entry : entries) {
    append_escaped(out, entry);
    out += '\n';
  }
  return out;
}

std::optional<GlobalRank> global_rank_from_environment(std::span<const std::string_view> environment) noexcept {
  static constexpr std::array<std::string_view, 4> kSources = {"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID",
                                                               "PMI_RANK"};
  for (std::string_view source : kSources) {
    if (auto value = lookup(environment, source)) {
      if (auto rank = parse_u32(*value)) return GlobalRank{*rank, source};
    }
  }
  return std::nullopt;
}

std::optional<std::uint32_t> world_size_from_environment(std::span<const std::string_view> environment) noexcept {
  static constexpr std::array<std::string_view, 4> kSources = {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS",
                                                               "PMI_SIZE"};
  for (std::string_view source : kSources) {
    if (auto value = lookup(environment, source)) {
      if (auto size = parse_u32(*value); size && *size > 0) return size;
    }
  }
  return std::nullopt;
}

std::optional<std::string> run_name_from_environment(const Config& config,
                                                     std::span<const std::string_view> environment) {
  if (!config.run.empty()) return config.run;
  // RATIONALE: torchrun's default rendezvous id is "none" on every job, so it names no run. An elastic restart
  // reuses the run id; without the restart count its ranks would find the first attempt's logs and refuse them.
  if (auto run_id = lookup(environment, "TORCHELASTIC_RUN_ID"); run_id && !run_id->empty() && *run_id != "none") {
    std::string name(*run_id);
    auto restarts = lookup(environment, "TORCHELASTIC_RESTART_COUNT");
    if (auto count = restarts ? parse_u32(*restarts) : std::nullopt; count && *count > 0) {
      name.append("-restart").append(std::to_string(*count));
    }
    if (auto sanitized = sanitized_run_name(name)) return sanitized;
  }
  // RATIONALE: one Slurm job may run several job steps (srun calls); each is its own run.
  if (auto job = lookup(environment, "SLURM_JOB_ID"); job && !job->empty()) {
    std::string name(*job);
    if (auto step = lookup(environment, "SLURM_STEP_ID"); step && !step->empty()) name.append(".").append(*step);
    if (auto sanitized = sanitized_run_name(name)) return sanitized;
  }
  return std::nullopt;
}

std::string run_name_from_time(std::int64_t unix_seconds) {
  const auto seconds = static_cast<std::time_t>(unix_seconds);
  std::tm utc{};
  if (gmtime_r(&seconds, &utc) == nullptr) return "run-" + std::to_string(unix_seconds);
  std::array<char, 32> text{};
  const std::size_t length = std::strftime(text.data(), text.size(), "run-%Y%m%d-%H%M%S", &utc);
  return length == 0 ? "run-" + std::to_string(unix_seconds) : std::string(text.data(), length);
}

bool is_valid_run_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > kMaxRunNameBytes || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), is_run_name_char);
}

std::vector<std::string_view> process_environment() {
  std::vector<std::string_view> entries;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) entries.emplace_back(*entry);
  return entries;
}

}  // namespace detnccl::config
