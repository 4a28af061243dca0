// detnccl analysis: `detnccl check`'s comparison of the ranks' configurations (see check_parts.h).
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cli/analysis/check_parts.h"
#include "cli/analysis/run_logs.h"

namespace detnccl::analysis {
namespace {

// What every rank of a run must share, one "name=value" line each: the effective DETNCCL_* configuration and the
// versions that decide what the records mean. (NCCL_* variables may legitimately differ per rank.)
std::vector<std::string> shared_settings(const records::LogHeader& header) {
  std::vector<std::string> lines;
  std::string_view text = header.config_text;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    lines.emplace_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  const auto setting = [&](const char* name, const std::string& value) {
    std::string entry = name;
    entry += '=';
    entry += value;
    lines.push_back(std::move(entry));
  };
  setting("detnccl version", header.detnccl_version_text);
  setting("NCCL version", std::to_string(header.nccl_version));
  setting("fingerprint version", std::to_string(header.fingerprint_version));
  setting("world size", std::to_string(header.world_size));
  return lines;
}

// "NAME=value" or "NAME unset".
std::string setting_text(const std::string& name, const std::optional<std::string>& value) {
  return value ? name + "=" + *value : name + " unset";
}

}  // namespace

// Settings that differ between ranks: for each setting, the ranks of each value. A value held by more ranks than
// any other (and by at least two) is the reference and the other ranks are named against it; without one, every
// value is listed. Diagnostic settings (is_diagnostic_setting) are notes, not findings.
void check_configurations(const std::vector<std::unique_ptr<RankLogStream>>& streams, const RunLogs& run,
                          CheckResult& result, std::size_t findings_kept) {
  // setting name -> value (nullopt: unset) -> ranks
  std::map<std::string, std::map<std::optional<std::string>, std::vector<std::uint32_t>>> by_name;
  std::vector<std::map<std::string, std::string>> per_rank(streams.size());
  for (std::size_t i = 0; i < streams.size(); ++i) {
    for (const std::string& line : shared_settings(streams[i]->header())) {
      const std::size_t equals = line.find('=');
      per_rank[i][line.substr(0, equals)] = equals == std::string::npos ? std::string() : line.substr(equals + 1);
    }
    for (const auto& [name, value] : per_rank[i]) by_name[name];
  }
  for (auto& [name, values] : by_name) {
    for (std::size_t i = 0; i < streams.size(); ++i) {
      const auto found = per_rank[i].find(name);
      values[found == per_rank[i].end() ? std::nullopt : std::optional<std::string>(found->second)].push_back(
          run.logs[i].rank);
    }
  }
  constexpr std::size_t kValuesListed = 8;
  for (const auto& [name, values] : by_name) {
    if (values.size() <= 1) continue;
    if (is_diagnostic_setting(name)) {
      std::string note = name + " differs between ranks (" + std::to_string(values.size()) + " values";
      std::size_t listed = 0;
      for (const auto& [value, ranks] : values) {
        if (listed++ == 3) {
          note += ", ...";
          break;
        }
        note += listed == 1 ? ": " : "; ";
        note += ranks_text(ranks) + " " + (value ? *value : "unset");
      }
      note += "): it cannot change any call, only what is logged or fingerprinted";
      result.config_notes.push_back(std::move(note));
      continue;
    }
    auto reference = values.end();
    bool unique_largest = false;
    for (auto it = values.begin(); it != values.end(); ++it) {
      if (reference == values.end() || it->second.size() > reference->second.size()) {
        reference = it;
        unique_largest = true;
      } else if (it->second.size() == reference->second.size()) {
        unique_largest = false;
      }
    }
    const auto add = [&](CheckFinding finding) {
      ++result.finding_counts[finding.kind];
      if (result.findings.size() < findings_kept) result.findings.push_back(std::move(finding));
    };
    if (unique_largest && reference->second.size() >= 2) {
      for (const auto& [value, ranks] : values) {
        if (value == reference->first) continue;
        CheckFinding finding;
        finding.kind = CheckFindingKind::kConfigMismatch;
        finding.ranks = ranks;
        // RATIONALE: appended piece by piece; GCC 12 warns (-Wrestrict) on some `"literal" + std::string` chains.
        std::string& message = finding.message;
        message = "configuration mismatch: ";
        message += setting_text(name, value);
        message += " on ";
        message += ranks_text(ranks);
        message += ", but ";
        message += setting_text(name, reference->first);
        if (values.size() == 2) {
          message += " on the other ";
          message += std::to_string(reference->second.size());
          message += " ranks";
        } else {
          message += " on ";
          message += std::to_string(reference->second.size());
          message += " of the ";
          message += std::to_string(streams.size());
          message += " ranks (the most common value)";
        }
        message += ": they did not run with the same settings";
        add(std::move(finding));
      }
      continue;
    }
    // No value is shared by more ranks than any other: name them all, none as the reference.
    CheckFinding finding;
    finding.kind = CheckFindingKind::kConfigMismatch;
    std::string& message = finding.message;
    message = "configuration mismatch: the ranks ran with ";
    message += std::to_string(values.size());
    message += " different values of ";
    message += name;
    message += " and no value is shared by most of them: ";
    std::size_t listed = 0;
    for (const auto& [value, ranks] : values) {
      finding.ranks.insert(finding.ranks.end(), ranks.begin(), ranks.end());
      if (listed == kValuesListed) {
        message += "; ...";
      } else if (listed < kValuesListed) {
        if (listed > 0) message += "; ";
        message += setting_text(name, value);
        message += " on ";
        message += ranks_text(ranks);
      }
      ++listed;
    }
    std::sort(finding.ranks.begin(), finding.ranks.end());
    add(std::move(finding));
  }
}

}  // namespace detnccl::analysis
