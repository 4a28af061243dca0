// detnccl report: one self-contained HTML page (cli/report/report.html, embedded at build time) of a diff of two runs,
// or of a check and the stats of one run. The page's data is one JSON object (report_data) built from the documents
// `diff --json`, `check --json` and `stats --json` print and from the analysis of cli/analysis/run_map.h; the page's
// script renders it. --json prints that object.
#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/analysis/run_check.h"
#include "cli/analysis/run_diff.h"
#include "cli/analysis/run_map.h"
#include "cli/analysis/run_stats.h"
#include "cli/check_report.h"
#include "cli/commands.h"
#include "cli/diff_report.h"
#include "cli/report/report_template.h"
#include "cli/stats_report.h"
#include "cli/step_numbering_options.h"
#include "cli/terminal.h"
#include "hash/fingerprint.h"
#include "posix/io.h"

namespace detnccl::cli {
namespace {

using analysis::CellStatus;
using nlohmann::json;

// The page's data format; the page refuses another.
constexpr int kReportVersion = 1;
// Per rank: the divergent calls the hover can name (the first of each step), and the calls around its first
// divergence on each communicator (the timeline). RATIONALE: the page's size must grow with ranks x steps, not calls.
constexpr std::size_t kHoverCallsPerRank = 16;
constexpr std::size_t kTimelineBefore = 8;
constexpr std::size_t kTimelineAfter = 24;

json map_json(const analysis::StepMap& map) {
  json statuses = json::array();
  for (std::uint8_t s = 0; s < analysis::kCellStatusCount; ++s) {
    statuses.push_back(analysis::cell_status_name(static_cast<CellStatus>(s)));
  }
  json rows = json::array();
  for (const analysis::RankCells& rank : map.ranks) {
    json row = json::array({rank.rank});
    for (const analysis::CellRun& run : rank.runs) {
      row.push_back(static_cast<int>(run.status));
      row.push_back(run.steps);
    }
    rows.push_back(std::move(row));
  }
  return {{"first_step", map.first_step ? json(*map.first_step) : json(nullptr)},
          {"last_step", map.last_step ? json(*map.last_step) : json(nullptr)},
          {"statuses", statuses},
          {"rows", rows}};
}

json communicators_json(const std::vector<analysis::CommunicatorMembers>& communicators) {
  json out = json::array();
  for (const auto& c : communicators) {
    json members = json::array();
    for (const std::uint32_t rank : c.members) {
      members.push_back(rank == analysis::CommunicatorMembers::kUnknownMember ? json(nullptr) : json(rank));
    }
    out.push_back({{"id", hash::format_digest(c.id)}, {"nranks", c.nranks}, {"members", members}});
  }
  return out;
}

// A divergent call as the page shows it: [step, seq, op, comm_id, comm_seq, what differs].
json brief_json(const analysis::DivergentCallBrief& call) {
  const char* what = call.input_differs && call.output_differs ? "input and output"
                     : call.input_differs                      ? "input"
                     : call.output_differs                     ? "output"
                                                               : "metadata or missing";
  return json::array(
      {call.step, call.seq, records::op_name(call.op), hash::format_digest(call.comm_id), call.comm_seq, what});
}

// The first divergence as the page's header shows it, from the diff's own document; `magnitude`: what the capture
// files say of its size (null when diff measured nothing: not an input or output divergence).
json first_json(const json& diff, const analysis::MagnitudeOutcome* magnitude) {
  if (diff.contains("first_divergence") && !diff["first_divergence"].is_null()) {
    const json& d = diff["first_divergence"];
    json out = {{"source", "call"}};
    for (const char* key : {"rank", "step", "kind", "role", "op", "seq", "comm_id", "comm_seq", "cause", "datatype",
                            "count", "input_differs", "output_differs", "input_ranges", "output_ranges"}) {
      if (d.contains(key)) out[key] = d[key];
    }
    if (d.contains("source")) out["from"] = d["source"];
    // diff's "magnitude" object (present when both runs captured the divergent buffer), and diff's line about it.
    if (d.contains("magnitude")) out["magnitude"] = d["magnitude"];
    if (magnitude != nullptr) out["magnitude_text"] = magnitude_text(*magnitude);
    return out;
  }
  if (diff.contains("first_step_divergence") && !diff["first_step_divergence"].is_null()) {
    const json& s = diff["first_step_divergence"];
    json out = {{"source", "step_digest"}};
    for (const char* key : {"rank", "step", "kind", "role", "comm_id", "input_differs", "output_differs"}) {
      if (s.contains(key)) out[key] = s[key];
    }
    out["cause"] = "the step digests of communicator " + s.value("comm_id", std::string()) + " differ";
    return out;
  }
  return nullptr;
}

// The options of the diff a two-run report shows: what diff's document and magnitudes read of them.
DiffCommandOptions diff_options_of(const ReportCommandOptions& options) {
  DiffCommandOptions diff_options;
  diff_options.run_a = options.run_a;
  diff_options.run_b = *options.run_b;
  diff_options.from_step = options.from_step;
  diff_options.to_step = options.to_step;
  return diff_options;
}

// The data of a diff report. `magnitudes`: measure_magnitudes' (the first divergence's only).
json diff_report_data(const ReportCommandOptions& options, const analysis::RunDiff& diff,
                      const DiffMagnitudes& magnitudes, const analysis::RunStats* stats_a,
                      const analysis::RunStats* stats_b) {
  json out = {{"report_version", kReportVersion},
              {"mode", "diff"},
              {"runs", {options.run_a, *options.run_b}},
              {"from_step", options.from_step ? json(*options.from_step) : json(nullptr)},
              {"to_step", options.to_step ? json(*options.to_step) : json(nullptr)},
              {"verdict_text", diff_verdict_text(diff)},
              {"exit_status", diff_exit_status(diff)}};
  json document = diff_json(diff_options_of(options), diff, &magnitudes);
  const analysis::MagnitudeOutcome* first_magnitude = nullptr;
  if (diff.first) {
    if (const auto it = magnitudes.find(diff.first->rank); it != magnitudes.end()) first_magnitude = &it->second;
  }
  out["verdict"] = document["verdict"];
  out["first"] = first_json(document, first_magnitude);
  const analysis::NextCommand next = analysis::next_command(diff, options.run_a, *options.run_b, first_magnitude);
  out["next"] = next.command.empty() ? json(nullptr) : json({{"command", next.command}, {"why", next.why}});
  out["receivers"] = diff.receivers;
  out["map"] = map_json(analysis::diff_step_map(diff, options.from_step, options.to_step));
  std::vector<std::pair<std::uint32_t, const std::vector<records::CommunicatorRecord>*>> members;
  json calls = json::object();
  json timelines = json::object();
  for (const analysis::RankDiff& rank : diff.ranks) {
    members.emplace_back(rank.rank, rank.in_a ? &rank.communicators_a : &rank.communicators_b);
    if (rank.divergent.empty()) continue;
    json list = json::array();
    std::optional<std::uint64_t> last_step;
    for (const analysis::DivergentCallBrief& call : rank.divergent) {  // sorted by (step, seq)
      if (last_step == call.step) continue;
      last_step = call.step;
      list.push_back(brief_json(call));
      if (list.size() == kHoverCallsPerRank) break;
    }
    calls[std::to_string(rank.rank)] = list;
    json lines = json::array();
    for (const auto& timeline : analysis::rank_timelines(rank, kTimelineBefore, kTimelineAfter)) {
      lines.push_back({{"comm_id", hash::format_digest(timeline.comm_id)},
                       {"first_comm_seq", timeline.first_comm_seq},
                       {"verdicts", timeline.verdicts}});
    }
    timelines[std::to_string(rank.rank)] = lines;
  }
  out["communicators"] = communicators_json(analysis::communicator_members(members));
  out["calls"] = calls;
  out["timelines"] = timelines;
  out["stats"] = nullptr;
  if (stats_a != nullptr && stats_b != nullptr) {
    out["stats"] = json::array();
    for (const auto& [run, stats] : {std::pair{options.run_a, stats_a}, std::pair{*options.run_b, stats_b}}) {
      out["stats"].push_back(stats->error.empty()
                                 ? stats_json(run, *stats, false)
                                 : json({{"run", run}, {"verdict", "unusable"}, {"error", stats->error}}));
    }
  }
  // Last: the whole diff document, as `detnccl diff --json` prints it (its per-rank counts, notes, configuration).
  out["diff"] = std::move(document);
  return out;
}

// The data of a check report.
json check_report_data(const ReportCommandOptions& options, const analysis::CheckResult& check,
                       const analysis::RunStats& stats) {
  CheckCommandOptions check_options;
  check_options.run = options.run_a;
  json document = check_json(check_options, check);
  json out = {{"report_version", kReportVersion},
              {"mode", "check"},
              {"runs", {options.run_a}},
              {"from_step", nullptr},
              {"to_step", nullptr},
              {"verdict", document["verdict"]},
              {"verdict_text", check_verdict_text(check)},
              {"exit_status", check_exit_status(check)},
              {"next", nullptr},
              {"receivers", json::array()},
              {"calls", json::object()},
              {"timelines", json::object()}};
  out["first"] = nullptr;
  if (!check.findings.empty()) {
    const analysis::CheckFinding& f = check.findings.front();
    const std::uint32_t rank = f.ranks.empty() ? 0 : f.ranks.front();
    out["first"] = {{"source", "finding"},
                    {"rank", f.ranks.empty() ? json(nullptr) : json(rank)},
                    {"step", f.step},
                    {"kind", analysis::check_finding_name(f.kind)},
                    {"op", records::op_name(f.op)},
                    {"comm_id", hash::format_digest(f.comm_id)},
                    {"cause", f.message}};
    out["next"] = {
        {"command", "detnccl dump " + options.run_a + (f.ranks.empty() ? "" : " --rank " + std::to_string(rank))},
        {"why", "look at the calls of the rank the first finding names around step " + std::to_string(f.step)}};
  }
  out["map"] = map_json(analysis::check_step_map(check, stats));
  std::vector<std::pair<std::uint32_t, const std::vector<records::CommunicatorRecord>*>> members;
  for (const analysis::RankStats& rank : stats.ranks) members.emplace_back(rank.rank, &rank.communicators);
  out["communicators"] = communicators_json(analysis::communicator_members(members));
  out["stats"] = json::array({stats.error.empty()
                                  ? stats_json(options.run_a, stats, false)
                                  : json({{"run", options.run_a}, {"verdict", "unusable"}, {"error", stats.error}})});
  out["check"] = std::move(document);
  return out;
}

// The page: the template with the data in its <script type="application/json"> element. RATIONALE: "<" only occurs
// inside JSON strings, where \u003c means the same; escaped, no "</script>" in the data can end the element early.
std::string render_page(const json& data) {
  std::string text = data.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string escaped;
  escaped.reserve(text.size() + text.size() / 64);
  for (const char c : text) {
    if (c == '<') {
      escaped += "\\u003c";
    } else if (c == '>') {
      escaped += "\\u003e";
    } else if (c == '&') {
      escaped += "\\u0026";
    } else {
      escaped += c;
    }
  }
  std::string page(report_template());
  const std::string_view marker = kReportDataMarker;
  const std::size_t at = page.find(marker);
  if (at == std::string::npos) throw std::logic_error("the report template has no data marker");
  page.replace(at, marker.size(), escaped);
  return page;
}

}  // namespace

int report_command(const ReportCommandOptions& options) {
  const bool two_runs = options.run_b.has_value();
  analysis::StepNumbering numbering = step_numbering_of(options.step_numbering);
  std::atomic<std::size_t> done{0};
  json data;
  int status = kExitSame;
  std::string error;
  if (two_runs) {
    const analysis::RunLogs a = analysis::list_run(options.run_a);
    const analysis::RunLogs b = analysis::list_run(*options.run_b);
    analysis::DiffOptions diff_options;
    diff_options.from_step = options.from_step;
    diff_options.to_step = options.to_step;
    diff_options.step_numbering = numbering;
    diff_options.use_step_index = !options.all_records;
    diff_options.threads = options.threads;
    diff_options.ranks_done = &done;
    analysis::RunDiff diff;
    {
      const Progress progress("detnccl report", std::max(a.logs.size(), b.logs.size()), "ranks compared", done);
      diff = analysis::diff_runs(a, b, diff_options);
    }
    DiffMagnitudes magnitudes;
    if (!measure_magnitudes(diff_options_of(options), diff, "report", &magnitudes)) return kExitUnusable;
    std::optional<analysis::RunStats> stats_a, stats_b;
    if (!options.no_stats && diff.error.empty()) {
      done = 0;
      const Progress progress("detnccl report", a.logs.size() + b.logs.size(), "ranks read (stats)", done);
      stats_a = analysis::run_stats(a, options.threads, &done, numbering);
      stats_b = analysis::run_stats(b, options.threads, &done, numbering);
    }
    data = diff_report_data(options, diff, magnitudes, stats_a ? &*stats_a : nullptr, stats_b ? &*stats_b : nullptr);
    status = diff_exit_status(diff);
    error = diff.error;
  } else {
    const analysis::RunLogs run = analysis::list_run(options.run_a);
    analysis::CheckOptions check_options;
    check_options.threads = options.threads;
    check_options.calls_done = &done;
    check_options.step_numbering = numbering;
    analysis::CheckResult check;
    {
      const Progress progress("detnccl report", 0, "calls read", done);
      check = analysis::check_run(run, check_options);
    }
    analysis::RunStats stats;
    if (check.error.empty()) {
      done = 0;
      const Progress progress("detnccl report", run.logs.size(), "ranks read (stats)", done);
      stats = analysis::run_stats(run, options.threads, &done, numbering);
    } else {
      stats.error = check.error;
    }
    data = check_report_data(options, check, stats);
    status = check_exit_status(check);
    error = check.error;
  }
  if (options.json) std::cout << data.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
  if (options.output) {
    const std::string page = render_page(data);
    std::string write_error;
    if (!posix::replace_file(*options.output, page.data(), page.size(), &write_error, {.mode = 0644})) {
      std::cerr << "detnccl report: " << write_error << "\n";
      return kExitUnusable;
    }
    std::cerr << "detnccl report: wrote " << *options.output << " (" << page.size()
              << " bytes): " << data["verdict_text"].get<std::string>() << "\n";
  }
  if (!error.empty()) std::cerr << "detnccl report: unusable input: " << error << "\n";
  return status;
}

CommandRun add_report_arguments(CLI::App& app) {
  auto options = std::make_shared<ReportCommandOptions>();
  app.add_option("RUN_A", options->run_a, "Run directory (alone: a check and stats report of it)")->required();
  app.add_option("RUN_B", options->run_b, "Second run directory: a diff report of RUN_A against it");
  app.add_option("-o,--output", options->output, "The HTML file to write (one file: scripts, styles and data inline)");
  app.add_option("--from-step", options->from_step, "As diff's: compare only calls of steps >= K (two runs)")
      ->check(kStepNumber);
  app.add_option("--to-step", options->to_step, "As diff's: compare only calls of steps <= K (two runs)")
      ->check(kStepNumber);
  add_step_numbering_options(app, options->step_numbering);
  app.add_flag("--all-records", options->all_records, "As diff's: read and compare every call record (two runs)");
  app.add_flag("--no-stats", options->no_stats,
               "Two runs: leave out the stats panel (stats reads every record of both runs)");
  app.add_flag("--json", options->json, "Print the data the page embeds (one JSON object) on standard output");
  app.add_flag("-v,--verbose", options->verbose, "Accepted for symmetry with diff and check (the page lists all)");
  app.add_option("-j,--jobs", options->threads, "Threads (default: the cores available)");
  return [options] {
    if (!options->output && !options->json) {
      throw BadArguments("name the page's file with -o FILE (or print its data with --json)");
    }
    if (!options->run_b && (options->from_step || options->to_step || options->all_records)) {
      throw BadArguments("--from-step, --to-step and --all-records are diff's: they need two runs");
    }
    if (options->from_step && options->to_step && *options->from_step > *options->to_step) {
      throw BadArguments("--from-step " + std::to_string(*options->from_step) + " is after --to-step " +
                         std::to_string(*options->to_step));
    }
    return report_command(*options);
  };
}

}  // namespace detnccl::cli
