// detnccl check: renders the cross-rank consistency check of one run (cli/analysis/run_check.h) — verdict first,
// then the findings in step order, then notes. With --partial, writes one rank range's partial result instead
// (cli/analysis/partial_diff.h), which `detnccl merge` renders.
#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/analysis/call_matching.h"
#include "cli/analysis/partial_diff.h"
#include "cli/analysis/run_check.h"
#include "cli/check_report.h"
#include "cli/commands.h"
#include "cli/rank_range_option.h"
#include "cli/step_numbering_options.h"
#include "cli/terminal.h"
#include "hash/fingerprint.h"

namespace detnccl::cli {
namespace {

using analysis::CheckFinding;
using analysis::CheckResult;
using nlohmann::json;

constexpr std::size_t kFindingsShown = 20;

// `check --partial`: checks the run and writes the share of the range as a partial result on standard output. Exit
// status 0 when it was written, 2 when the run is unusable (the part still says so, and merge reports it as one
// process would).
int write_partial(const CheckCommandOptions& options, const analysis::RunLogs& run,
                  const analysis::CheckOptions& check_options, std::atomic<std::size_t>& done) {
  analysis::PartialCheck part;
  part.run = options.run;
  part.infer_steps = check_options.step_numbering.infer;
  part.step_boundary = options.step_numbering.step_boundary;
  part.findings_kept = check_options.findings_kept;
  if (options.ranks) part.range = parse_rank_range(*options.ranks);
  {
    const Progress progress("detnccl check", 0, "calls read", done);
    part.result = analysis::check_rank_range(run, check_options, part.range);
  }
  std::cout << analysis::write_partial_check(part) << "\n";
  if (part.result.error.empty()) return kExitSame;
  std::cerr << "detnccl check: unusable input: " << part.result.error << "\n";
  return kExitUnusable;
}

}  // namespace

int check_command(const CheckCommandOptions& options) {
  const analysis::RunLogs run = analysis::list_run(options.run);
  std::atomic<std::size_t> done{0};
  analysis::CheckOptions check_options;
  check_options.threads = options.threads;
  check_options.calls_done = &done;
  check_options.step_numbering = step_numbering_of(options.step_numbering);
  if (options.partial) return write_partial(options, run, check_options, done);
  CheckResult result;
  {
    const Progress progress("detnccl check", 0, "calls read", done);
    result = analysis::check_run(run, check_options);
  }
  return print_check_report(options, result, "check");
}

json check_json(const CheckCommandOptions& options, const CheckResult& result) {
  json out = {{"run", options.run}};
  if (!result.error.empty()) {
    out["verdict"] = "unusable";
    out["error"] = result.error;
  } else {
    out["verdict"] = result.undecided() ? "undecided" : result.clean() ? "consistent" : "inconsistent";
    out["ranks"] = result.ranks;
    out["calls"] = result.calls;
    out["collectives"] = result.collectives;
    out["point_to_point_pairs"] = result.point_to_point_pairs;
    out["content_checks"] = result.content_checks;
    out["content_unchecked"] = result.content_unchecked;
    if (result.folded_blocks_unchecked > 0) out["folded_blocks_unchecked"] = result.folded_blocks_unchecked;
    out["truncated_ranks"] = result.truncated_ranks;
    out["not_checked"] = result.not_checked;
    json counts = json::object();
    for (const auto& [kind, count] : result.finding_counts)
      counts[std::string(analysis::check_finding_name(kind))] = count;
    out["finding_counts"] = counts;
    json findings = json::array();
    for (const CheckFinding& f : result.findings) {
      findings.push_back({{"kind", analysis::check_finding_name(f.kind)},
                          {"comm_id", hash::format_digest(f.comm_id)},
                          {"index", f.index},
                          {"count", f.count},
                          {"op", records::op_name(f.op)},
                          {"step", f.step},
                          {"ranks", f.ranks},
                          {"message", f.message}});
    }
    out["findings"] = findings;
    out["notes"] = result.notes;
    out["config_notes"] = result.config_notes;
    out["unknown_records"] = result.unknown_records;
  }
  return out;
}

int check_exit_status(const CheckResult& result) {
  if (!result.error.empty() || result.undecided()) return kExitUnusable;
  return result.clean() ? kExitSame : kExitDiffers;
}

std::string check_verdict_text(const CheckResult& result) {
  if (!result.error.empty()) return "UNUSABLE";
  if (result.undecided()) return "UNDECIDED";
  return result.clean() ? "CONSISTENT" : "INCONSISTENT";
}

int print_check_report(const CheckCommandOptions& options, const CheckResult& result, const char* command) {
  if (options.json) {
    std::cout << check_json(options, result).dump(2, ' ', false, json::error_handler_t::replace) << "\n";
  }
  if (!result.error.empty()) {
    std::cerr << "detnccl " << command << ": unusable input: " << result.error << "\n";
    return kExitUnusable;
  }
  if (!options.json) {
    const Style style = Style::for_stdout();
    const std::string scope = std::to_string(result.ranks) + " rank" + (result.ranks == 1 ? "" : "s") + ", " +
                              std::to_string(result.calls) + " calls, " + std::to_string(result.collectives) +
                              " collectives and " + std::to_string(result.point_to_point_pairs) +
                              " send/recv pairs matched, " + std::to_string(result.content_checks) +
                              " content relations checked";
    if (result.undecided() && result.digests_only && result.truncated_ranks.empty()) {
      std::cout << style.warn("UNDECIDED") << ": the logs hold step digests only (DETNCCL_TRACE=steps): no call "
                << "records to match across ranks; " << scope << "\n";
    } else if (result.undecided()) {
      std::cout << style.warn("UNDECIDED") << ": no inconsistency in what the ranks recorded, but the truncated log"
                << (result.truncated_ranks.size() > 1 ? "s of ranks " : " of rank ")
                << analysis::rank_list(result.truncated_ranks) << " hide"
                << (result.truncated_ranks.size() > 1 ? "" : "s") << " the rest"
                << (result.not_checked > 0 ? " (" + std::to_string(result.not_checked) + " calls not checked)" : "")
                << "; " << scope << "\n";
    } else if (result.clean()) {
      std::cout << style.good("CONSISTENT") << ": " << scope << "\n";
    } else {
      std::uint64_t total = 0;
      std::string kinds;
      for (const auto& [kind, count] : result.finding_counts) {
        total += count;
        kinds +=
            (kinds.empty() ? "" : ", ") + std::to_string(count) + " " + std::string(analysis::check_finding_name(kind));
      }
      std::cout << style.bad("INCONSISTENT") << ": " << total << " finding" << (total == 1 ? "" : "s") << " (" << kinds
                << "); " << scope << "\n";
      if (result.finding_counts.count(analysis::CheckFindingKind::kContentMismatch) != 0) {
        std::cout << style.bad("  Content differs inside one run: corrupted data or a broken collective.") << "\n";
      }
      std::cout << "\n" << style.bold("Findings") << " (in step order)\n";
      const std::size_t shown =
          options.verbose ? result.findings.size() : std::min(result.findings.size(), kFindingsShown);
      for (std::size_t i = 0; i < shown; ++i) {
        std::cout << "  - " << result.findings[i].message << "\n";
      }
      if (shown < result.findings.size()) {
        std::cout << "  ... " << result.findings.size() - shown << " more (--verbose lists all)\n";
      }
    }
    std::vector<std::string> notes = result.notes;
    notes.insert(notes.end(), result.config_notes.begin(), result.config_notes.end());
    if (!notes.empty()) {
      std::cout << "\n" << style.bold("Notes") << "\n";
      const std::size_t shown = options.verbose ? notes.size() : std::min<std::size_t>(notes.size(), 10);
      for (std::size_t i = 0; i < shown; ++i) std::cout << "  " << notes[i] << "\n";
      if (shown < notes.size()) std::cout << "  ... " << notes.size() - shown << " more (--verbose lists all)\n";
    }
  }
  if (result.undecided()) return kExitUnusable;
  return result.clean() ? kExitSame : kExitDiffers;
}

}  // namespace detnccl::cli

namespace detnccl::cli {

CommandRun add_check_arguments(CLI::App& app) {
  auto options = std::make_shared<CheckCommandOptions>();
  app.add_option("RUN", options->run, "Run directory")->required();
  add_step_numbering_options(app, options->step_numbering);
  app.add_option("--ranks", options->ranks,
                 "With --partial: keep the share of ranks A to B (both included) of the run, A-B or one rank A: their "
                 "logs' counts and the communicators whose lowest member they hold; `detnccl merge` combines the "
                 "parts of every range");
  app.add_flag("--partial", options->partial,
               "Write this process's partial result (JSON, on standard output) for `detnccl merge` instead of a "
               "report: split a large check across processes or machines");
  add_report_options(app, *options, "List every finding");
  return [options] {
    if (options->ranks && !options->partial) {
      throw BadArguments("--ranks checks part of the run: it needs --partial (then merge the parts)");
    }
    if (options->partial && options->json) {
      throw BadArguments("--partial writes a partial result (JSON already); --json is merge's option");
    }
    if (options->ranks) parse_rank_range(*options->ranks);  // bad arguments before anything is read
    return check_command(*options);
  };
}

}  // namespace detnccl::cli
