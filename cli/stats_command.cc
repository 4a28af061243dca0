// detnccl stats: renders what a run's logs hold (cli/analysis/run_stats.h).
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/analysis/call_matching.h"
#include "cli/analysis/run_stats.h"
#include "cli/commands.h"
#include "cli/stats_report.h"
#include "cli/step_numbering_options.h"
#include "cli/terminal.h"
#include "hash/fingerprint.h"

namespace detnccl::cli {
namespace {

using analysis::Volume;
using nlohmann::json;

constexpr std::size_t kRanksShown = 32;

json volume_json(const Volume& v) {
  return {{"calls", v.calls},
          {"bytes", v.bytes},
          {"bytes_overflowed", v.bytes_overflowed},
          {"fingerprinted", v.fingerprinted}};
}

// The bytes of a volume, in binary units; "over 16 EiB" when they overflowed (never the saturated value as a size).
std::string bytes_text(const Volume& v) {
  if (v.bytes_overflowed) return "over 16 EiB";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(v.bytes);
  std::size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(units)) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", value, units[unit]);
  return text;
}

// How a rank's log ends: "closed", "torn tail"..., or "no header" when its writer died before writing one.
std::string end_name(const analysis::RankStats& rank) {
  return rank.no_header ? std::string("no header") : std::string(analysis::log_end_name(rank.end));
}

// "rank 3" or "ranks 1, 4, 9" (the first 8, then how many more).
std::string ranks_text(const std::vector<std::uint32_t>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  text += analysis::rank_list(ranks);
  return text;
}

std::string steps_text(const std::optional<std::uint64_t>& first, const std::optional<std::uint64_t>& last) {
  if (!first) return "none";
  return *first == *last ? std::to_string(*first) : std::to_string(*first) + "-" + std::to_string(*last);
}

// " (inferred)", " (marked and optimizer)": where the steps came from; empty when no log says (version 1).
std::string step_sources_text(std::uint32_t sources) {
  std::vector<std::string> names = analysis::step_source_names(sources);
  std::erase(names, "unknown");
  if (names.empty()) return "";
  std::string text = " (";
  for (std::size_t i = 0; i < names.size(); ++i) text += (i == 0 ? "" : " and ") + names[i];
  return text + ")";
}

}  // namespace

json stats_json(const std::string& run, const analysis::RunStats& stats, bool every_rank) {
  json out = {{"run", run}, {"ranks", stats.ranks.size()}, {"total", volume_json(stats.total)}};
  out["first_step"] = stats.first_step ? json(*stats.first_step) : json(nullptr);
  out["last_step"] = stats.last_step ? json(*stats.last_step) : json(nullptr);
  out["step_sources"] = analysis::step_source_names(stats.step_sources);
  json per_op = json::object();
  for (const auto& [op, volume] : stats.per_op) per_op[std::string(records::op_name(op))] = volume_json(volume);
  out["per_op"] = per_op;
  json communicators = json::array();
  for (const auto& [id, c] : stats.per_communicator) {
    json entry = volume_json(c.total);
    entry["id"] = hash::format_digest(id);
    entry["nranks"] = c.nranks;
    entry["members_seen"] = c.members_seen;
    communicators.push_back(entry);
  }
  out["per_communicator"] = communicators;
  json ranks = json::array();
  for (const auto& rank : stats.ranks) {
    if (!every_rank && rank.end == records::LogEndKind::kClosed && !rank.no_header) continue;
    json entry = volume_json(rank.total);
    entry["rank"] = rank.rank;
    entry["end"] = end_name(rank);
    entry["end_message"] = rank.end_message;
    entry["unknown_records"] = rank.unknown_records;
    entry["first_step"] = rank.first_step ? json(*rank.first_step) : json(nullptr);
    entry["last_step"] = rank.last_step ? json(*rank.last_step) : json(nullptr);
    json ops = json::object();
    for (const auto& [op, volume] : rank.per_op) ops[std::string(records::op_name(op))] = volume_json(volume);
    entry["per_op"] = ops;
    ranks.push_back(entry);
  }
  out["per_rank"] = ranks;
  if (stats.jobs.mixed()) {
    // Present only when the directory mixes jobs (docs/cli.md): each job's ranks and world communicator.
    json jobs = json::array();
    for (std::size_t g = 0; g < stats.jobs.ranks.size(); ++g) {
      jobs.push_back({{"ranks", stats.jobs.ranks[g]},
                      {"world_communicator", hash::format_digest(stats.jobs.world_communicators[g].id)}});
    }
    out["jobs"] = jobs;
    out["jobs_message"] = analysis::describe_job_groups(stats.jobs);
  }
  return out;
}

int stats_command(const StatsCommandOptions& options) {
  const analysis::RunLogs run = analysis::list_run(options.run);
  std::atomic<std::size_t> done{0};
  analysis::RunStats stats;
  {
    const Progress progress("detnccl stats", run.logs.size(), "ranks read", done);
    stats = analysis::run_stats(run, options.threads, &done, step_numbering_of(options.step_numbering));
  }
  if (!stats.error.empty()) {
    if (options.json) {
      std::cout << json({{"run", options.run}, {"verdict", "unusable"}, {"error", stats.error}}).dump(2) << "\n";
    }
    std::cerr << "detnccl stats: unusable input: " << stats.error << "\n";
    return kExitUnusable;
  }
  std::vector<const analysis::RankStats*> incomplete;
  std::uint64_t unknown_records = 0;
  std::vector<std::uint32_t> ranks_with_unknown_records;
  std::vector<std::uint32_t> ranks_overflowed;
  for (const auto& rank : stats.ranks) {
    if (rank.end != records::LogEndKind::kClosed) incomplete.push_back(&rank);
    unknown_records += rank.unknown_records;
    if (rank.unknown_records > 0) ranks_with_unknown_records.push_back(rank.rank);
    if (rank.total.bytes_overflowed) ranks_overflowed.push_back(rank.rank);
  }
  if (options.json) {
    std::cout << stats_json(options.run, stats, true).dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    return kExitSame;
  }

  const Style style = Style::for_stdout();
  std::cout << style.bold("Run " + options.run) << ": " << stats.ranks.size() << " rank"
            << (stats.ranks.size() == 1 ? "" : "s") << ", " << stats.total.calls << " calls, "
            << bytes_text(stats.total) << ", steps " << steps_text(stats.first_step, stats.last_step)
            << step_sources_text(stats.step_sources) << ", " << stats.total.fingerprinted << " calls fingerprinted\n";
  if (incomplete.empty()) {
    std::cout << "  every log was closed cleanly\n";
  } else {
    std::cout << "  "
              << style.warn(std::to_string(incomplete.size()) +
                            (incomplete.size() == 1 ? " log did not close cleanly" : " logs did not close cleanly"))
              << ":\n";
    const std::size_t shown = options.verbose ? incomplete.size() : std::min<std::size_t>(incomplete.size(), 10);
    for (std::size_t i = 0; i < shown; ++i) {
      std::cout << "    rank " << incomplete[i]->rank << " (" << end_name(*incomplete[i])
                << "): " << incomplete[i]->end_message << "\n";
    }
    if (shown < incomplete.size()) std::cout << "    ... " << incomplete.size() - shown << " more\n";
  }
  if (unknown_records > 0) {
    // A newer detnccl of the same format version wrote record types this one does not know: they were skipped.
    std::cout << "  "
              << style.warn(std::to_string(unknown_records) + " record" + (unknown_records == 1 ? "" : "s") +
                            " of a type this detnccl does not know skipped")
              << " (" << ranks_text(ranks_with_unknown_records) << "; written by a newer detnccl?)\n";
  }
  if (stats.jobs.mixed()) std::cout << "  " << style.warn(analysis::describe_job_groups(stats.jobs)) << "\n";

  if (!ranks_overflowed.empty()) {
    std::cout << "  " << style.warn("the byte count overflowed 64 bits") << " (" << ranks_text(ranks_overflowed)
              << "; shown as over 16 EiB): its calls' counts are larger than any buffer (a corrupt or crafted log?)\n";
  }
  std::cout << "\n" << style.bold("Per operation") << "\n";
  TextTable per_op({{14, false, "  "}, {12, true, " "}, {12, true, " calls  "}, {12, true, "  "}, {0, false, " "}});
  for (const auto& [op, v] : stats.per_op) {
    per_op.add_row({std::string(records::op_name(op)), std::to_string(v.calls), bytes_text(v),
                    std::to_string(v.fingerprinted), "fingerprinted"});
  }
  std::cout << per_op.render();
  std::cout << "\n" << style.bold("Per communicator") << "\n";
  TextTable per_communicator(
      {{16, false, "  "}, {5, true, "  "}, {0, false, " ranks "}, {12, true, "  "}, {12, true, " calls  "}});
  for (const auto& [id, c] : stats.per_communicator) {
    per_communicator.add_row(
        {hash::format_digest(id), std::to_string(c.nranks),
         std::string("(").append(std::to_string(c.members_seen)).append(c.members_seen == 1 ? " log)" : " logs)"),
         std::to_string(c.total.calls), bytes_text(c.total)});
  }
  std::cout << per_communicator.render();
  std::cout << "\n" << style.bold("Per rank") << "\n";
  const std::size_t shown = options.verbose ? stats.ranks.size() : std::min(stats.ranks.size(), kRanksShown);
  TextTable per_rank(
      {{6, true, "  rank "}, {12, true, "  "}, {12, true, " calls  "}, {12, false, "  steps "}, {0, false, "  "}});
  for (std::size_t i = 0; i < shown; ++i) {
    const auto& rank = stats.ranks[i];
    per_rank.add_row({std::to_string(rank.rank), std::to_string(rank.total.calls), bytes_text(rank.total),
                      steps_text(rank.first_step, rank.last_step), end_name(rank)});
  }
  std::cout << per_rank.render();
  if (shown < stats.ranks.size()) {
    std::cout << "  ... " << stats.ranks.size() - shown << " more ranks (--verbose lists every rank)\n";
  }
  return kExitSame;
}

}  // namespace detnccl::cli

namespace detnccl::cli {

CommandRun add_stats_arguments(CLI::App& app) {
  auto options = std::make_shared<StatsCommandOptions>();
  app.add_option("RUN", options->run, "Run directory or one rank-NNNNN.dnc file")->required();
  add_step_numbering_options(app, options->step_numbering);
  add_report_options(app, *options, "List every rank");
  return [options] { return stats_command(*options); };
}

}  // namespace detnccl::cli
