// detnccl diff: renders the comparison of two runs (cli/analysis/run_diff.h) — verdict first, then the evidence:
// configuration differences, the first divergent call and why, receivers, a per-rank table, notes. With --partial,
// writes one rank range's partial result instead (cli/analysis/partial_diff.h), which `detnccl merge` renders.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <system_error>

#include "cli/analysis/divergence_magnitude.h"
#include "cli/analysis/magnitude_report.h"
#include "cli/analysis/partial_diff.h"
#include "cli/analysis/run_diff.h"
#include "cli/call_field_output.h"
#include "cli/commands.h"
#include "cli/diff_report.h"
#include "cli/rank_range_option.h"
#include "cli/step_numbering_options.h"
#include "cli/terminal.h"
#include "hash/fingerprint.h"

namespace detnccl::cli {
namespace {

using analysis::CallDivergence;
using analysis::CallSide;
using analysis::DivergenceKind;
using analysis::RankDiff;
using analysis::RunDiff;
using nlohmann::json;

// Ranks shown in the per-rank table before it is summarised (--verbose shows all).
constexpr std::size_t kRanksShown = 32;

std::string hex(std::uint64_t value) { return hash::format_digest(value); }

json ranges_json(const std::vector<analysis::DifferingRange>& ranges) {
  json list = json::array();
  for (const auto& range : ranges) {
    list.push_back({{"first_byte", range.first_byte},
                    {"end_byte", range.end_byte},
                    {"first_element", range.first_element},
                    {"end_element", range.end_element}});
  }
  return list;
}

json side_json(const CallSide& side) {
  if (!side.present) return nullptr;
  json out = {{"comm_id", hex(side.communicator.id)}};
  add_call_fields_json(out, side.fields, records::call_field::kDiff);  // records/call_record_fields.h
  return out;
}

// " (inferred)": where the divergent call's step came from, when the job did not mark it (empty for marked steps
// and logs that do not say).
std::string step_source_text(const CallDivergence& d) {
  const records::StepSource source = d.present_side().fields.step_source;
  if (source == records::StepSource::kMarked || source == records::StepSource::kUnknown) return "";
  return " (" + std::string(records::step_source_name(source)) + ")";
}

// What differs in a step by its digests: "input" (the calls' metadata or inputs), "output" (only their results and
// outputs), "missing" (one run has no digest for the step).
std::string step_kind(const analysis::StepDivergence& s) {
  if (!s.in_a || !s.in_b) return "missing";
  return s.input_differs ? "input" : "output";
}

// A magnitude's number: its value, or "inf" (JSON has no infinity).
json magnitude_number(double value) { return std::isinf(value) ? json("inf") : json(value); }

// The "magnitude" object (issue #18, docs/cli.md): keys exactly as documented; within_reordering_bound only for an
// output divergence of a reduction whose members' inputs were captured.
json magnitude_json(const analysis::MagnitudeOutcome& m) {
  const numerics::Magnitude& g = m.magnitude.magnitude;
  json out = {{"elements_differing", g.elements_differing},
              {"first_index", g.first_index},
              {"worst_index", g.worst_index},
              {"max_ulp", g.max_ulp == numerics::kInfiniteUlp ? json("inf") : json(g.max_ulp)},
              {"max_abs_error", magnitude_number(g.max_abs_error)},
              {"max_rel_error", magnitude_number(g.max_rel_error)}};
  if (m.magnitude.reordering) out["within_reordering_bound"] = m.magnitude.reordering->within_reordering_bound;
  return out;
}

// The magnitude measured for rank's first divergence, if any.
const analysis::MagnitudeOutcome* magnitude_of(const DiffMagnitudes* magnitudes, std::uint32_t rank) {
  if (magnitudes == nullptr) return nullptr;
  const auto it = magnitudes->find(rank);
  return it == magnitudes->end() ? nullptr : &it->second;
}

// The first divergence's "why", corrected by what its capture files measured: an output divergence of equal inputs
// that goes beyond the reordering bound is not the reduction's nondeterminism (which the analysis of fingerprints
// alone must assume), and saying "deterministic mode removes this" would send the user the wrong way.
std::string cause_of(const CallDivergence& d, const analysis::MagnitudeOutcome* m) {
  if (d.kind != analysis::DivergenceKind::kOutput || d.role != analysis::DivergenceRole::kOrigin || m == nullptr ||
      !m->measured || !m->magnitude.reordering || m->magnitude.reordering->within_reordering_bound) {
    return d.cause;
  }
  return "every member's input matches but the output differs beyond what any summation order allows: not the " +
         std::string(records::op_name(d.present_side().fields.op)) +
         "'s nondeterminism but a fault (a bad reduction, memory or link); deterministic mode will not remove this";
}

json divergence_json(const CallDivergence& d, const DiffMagnitudes* magnitudes) {
  const CallSide& side = d.present_side();
  json out = {{"kind", analysis::divergence_kind_name(d.kind)},
              {"role", analysis::divergence_role_name(d.role)},
              {"rank", d.rank},
              {"step", d.step()},
              {"seq", d.seq()},
              {"comm_ordinal", side.fields.comm_ordinal},
              {"comm_id", hex(side.communicator.id)},
              {"comm_seq", side.fields.comm_seq},
              {"op", records::op_name(side.fields.op)},
              {"datatype", records::datatype_name(side.fields.datatype)},
              {"count", side.fields.count},
              {"redop", records::redop_name(side.fields.redop)},
              {"cause", cause_of(d, magnitude_of(magnitudes, d.rank))},
              {"a", side_json(d.a)},
              {"b", side_json(d.b)}};
  if (analysis::is_point_to_point(side.fields.op)) {
    out["peer"] = side.fields.peer;
  } else if (analysis::is_rooted(side.fields.op)) {
    out["root"] = side.fields.peer;
  }
  if (!d.metadata_differences.empty()) out["metadata_differences"] = d.metadata_differences;
  if (d.input_differs || d.output_differs) {
    out["input_differs"] = d.input_differs;
    out["output_differs"] = d.output_differs;
  }
  if (!d.input_ranges.empty()) out["input_ranges"] = ranges_json(d.input_ranges);
  if (!d.output_ranges.empty()) out["output_ranges"] = ranges_json(d.output_ranges);
  if (!d.input_blocks.empty()) out["input_blocks"] = d.input_blocks;
  if (!d.output_blocks.empty()) out["output_blocks"] = d.output_blocks;
  if (d.input_blocks_folded) out["input_blocks_folded"] = true;
  if (d.output_blocks_folded) out["output_blocks_folded"] = true;
  if (d.source) {
    out["source"] = {{"rank", d.source->rank},
                     {"op", records::op_name(d.source->op)},
                     {"step", d.source->step},
                     {"seq", d.source->seq},
                     {"comm_seq", d.source->comm_seq}};
  }
  if (const analysis::MagnitudeOutcome* m = magnitude_of(magnitudes, d.rank); m != nullptr && m->measured) {
    out["magnitude"] = magnitude_json(*m);
  }
  return out;
}

// How a rank's log ends, or "no header" for a file whose writer died before writing one (no records).
std::string end_name(records::LogEndKind kind, const std::string& no_header) {
  return no_header.empty() ? std::string(analysis::log_end_name(kind)) : std::string("no header");
}

json rank_json(const RankDiff& rank, const DiffMagnitudes* magnitudes) {
  json out = {{"rank", rank.rank},
              {"in_a", rank.in_a},
              {"in_b", rank.in_b},
              {"calls_a", rank.calls_a},
              {"calls_b", rank.calls_b},
              {"matching", rank.matching},
              {"differing", rank.differing},
              {"unverified", rank.unverified},
              {"missing_in_a", rank.missing_in_a},
              {"missing_in_b", rank.missing_in_b},
              {"not_compared", rank.not_compared},
              {"end_a", end_name(rank.end_a, rank.no_header_a)},
              {"end_b", end_name(rank.end_b, rank.no_header_b)},
              {"unknown_records_a", rank.unknown_records_a},
              {"unknown_records_b", rank.unknown_records_b}};
  out["calls_read"] = rank.calls_read;
  out["calls_matched_by_digest"] = rank.calls_matched_by_digest;
  out["calls_not_read"] = rank.calls_not_read;
  out["read_through_step"] = rank.read_through_step ? json(*rank.read_through_step) : json(nullptr);
  if (rank.late_start_a) out["late_start_a"] = *rank.late_start_a;
  if (rank.late_start_b) out["late_start_b"] = *rank.late_start_b;
  out["first"] = rank.first ? divergence_json(*rank.first, magnitudes) : json(nullptr);
  return out;
}

std::string verdict(const RunDiff& diff) {
  if (!diff.error.empty()) return "unusable";
  if (diff.undecided) return "undecided";
  if (diff.metadata_only()) return "identical_metadata";
  return diff.identical() ? "identical" : "diverged";
}

std::string ranges_text(const std::vector<analysis::DifferingRange>& ranges) {
  std::string text;
  for (std::size_t i = 0; i < ranges.size() && i < 6; ++i) {
    const auto& r = ranges[i];
    text +=
        (i ? ", " : "") + std::string("bytes ") + std::to_string(r.first_byte) + "-" + std::to_string(r.end_byte - 1);
    if (r.end_element > r.first_element) {
      text += " (elements " + std::to_string(r.first_element) + "-" + std::to_string(r.end_element - 1) + ")";
    }
  }
  if (ranges.size() > 6) text += " and " + std::to_string(ranges.size() - 6) + " more ranges";
  return text;
}

std::string blocks_text(const std::vector<std::uint32_t>& blocks) {
  std::string text;
  for (std::size_t i = 0; i < blocks.size() && i < 16; ++i) text += (i ? ", " : "") + std::to_string(blocks[i]);
  if (blocks.size() > 16) text += " and " + std::to_string(blocks.size() - 16) + " more";
  return text;
}

std::string short_call(const CallDivergence& d) {
  const CallSide& side = d.present_side();
  return std::string(records::op_name(side.fields.op)) + " step " + std::to_string(d.step()) + " seq " +
         std::to_string(d.seq());
}

void print_first(const Style& style, const CallDivergence& d, const DiffMagnitudes* magnitudes) {
  const CallSide& side = d.present_side();
  std::cout << "  call      " << analysis::describe_call(side.fields) << "\n";
  std::cout << "            communicator " << side.fields.comm_ordinal << " (id " << hex(side.communicator.id)
            << "), call #" << side.fields.comm_seq << " on it, seq " << d.seq() << " in the log\n";
  std::cout << "  why       " << cause_of(d, magnitude_of(magnitudes, d.rank)) << "\n";
  for (const std::string& difference : d.metadata_differences) {
    std::cout << "  differs   " << difference << " (run A vs run B)\n";
  }
  const auto fingerprints = [&](const char* label, bool differs, std::uint64_t a, std::uint64_t b,
                                const std::vector<analysis::DifferingRange>& ranges,
                                const std::vector<std::uint32_t>& blocks, bool blocks_folded) {
    if (!differs) return;
    std::cout << "  " << label << "  " << style.bad(hex(a)) << " (A) vs " << style.bad(hex(b)) << " (B)\n";
    if (!ranges.empty()) std::cout << "            differ at " << ranges_text(ranges) << "\n";
    if (!blocks.empty()) std::cout << "            per-peer blocks that differ: " << blocks_text(blocks) << "\n";
    if (blocks_folded) {
      std::cout << "            per-peer blocks recorded folded (DETNCCL_TRACE=hash): the peers whose blocks differ "
                   "cannot be named; DETNCCL_TRACE=segments names them\n";
    }
  };
  fingerprints("input   ", d.input_differs, d.a.fields.input_fingerprint, d.b.fields.input_fingerprint, d.input_ranges,
               d.input_blocks, d.input_blocks_folded);
  fingerprints("output  ", d.output_differs, d.a.fields.output_fingerprint, d.b.fields.output_fingerprint,
               d.output_ranges, d.output_blocks, d.output_blocks_folded);
  if (const analysis::MagnitudeOutcome* m = magnitude_of(magnitudes, d.rank); m != nullptr) {
    std::cout << "  magnitude " << magnitude_text(*m) << "\n";
  }
  if (d.source) {
    std::cout << "  source    rank " << d.source->rank << "'s " << records::op_name(d.source->op) << " (step "
              << d.source->step << ", seq " << d.source->seq << ")\n";
  }
}

void print_rank_table(const DiffCommandOptions& options, const RunDiff& diff, const Style& style);

// The per-rank call counts, summed over the ranks.
struct CallTotals {
  std::uint64_t matching = 0, differing = 0, unverified = 0, missing = 0;
};
CallTotals call_totals(const RunDiff& diff) {
  CallTotals totals;
  for (const RankDiff& rank : diff.ranks) {
    totals.matching += rank.matching;
    totals.differing += rank.differing;
    totals.unverified += rank.unverified;
    totals.missing += rank.missing_in_a + rank.missing_in_b;
  }
  return totals;
}

void print_text(const DiffCommandOptions& options, const RunDiff& diff, const DiffMagnitudes* magnitudes) {
  const Style style = Style::for_stdout();
  const auto [matching, differing, unverified, missing] = call_totals(diff);
  const std::string scope = std::to_string(diff.ranks.size()) + " rank" + (diff.ranks.size() == 1 ? "" : "s");
  if (diff.undecided) {
    std::cout << style.warn("UNDECIDED") << ": no divergence in what both runs recorded, but a truncated log hides the "
              << "rest (" << scope << ", " << matching << " calls match)\n";
  } else if (diff.identical()) {
    if (diff.metadata_only()) {
      std::cout << style.good("IDENTICAL METADATA") << ": " << scope << ", " << unverified
                << " calls with equal metadata; no fingerprints to compare their contents\n";
    } else if (matching == 0 && unverified == 0 && diff.steps_matching > 0) {
      std::cout << style.good("IDENTICAL") << ": " << scope << ", " << diff.steps_matching
                << " step digests match (DETNCCL_TRACE=steps: fingerprints of every call folded per communicator "
                   "and step)\n";
    } else {
      std::cout << style.good("IDENTICAL") << ": " << scope << ", " << matching << " calls match by fingerprint"
                << (unverified > 0 ? ", " + std::to_string(unverified) + " more by metadata only" : "") << "\n";
    }
  } else if (!diff.first && diff.first_step) {
    const analysis::StepDivergence& s = *diff.first_step;
    std::cout << style.bad("DIVERGED") << ": first divergence at step " << s.step << " on rank " << s.rank
              << ", communicator " << s.comm_ordinal << ": " << style.bold(step_kind(s)) << " ("
              << analysis::divergence_role_name(s.role) << ")\n";
  } else if (diff.first) {
    const CallDivergence& d = *diff.first;
    std::cout << style.bad("DIVERGED") << ": first divergence at step " << d.step() << step_source_text(d)
              << " on rank " << d.rank << ": " << style.bold(std::string(analysis::divergence_kind_name(d.kind)))
              << " (" << analysis::divergence_role_name(d.role) << ")\n";
  } else {
    std::cout << style.bad("DIVERGED") << ": the runs' configurations differ (the calls match)\n";
  }

  if (!diff.config_differences.empty()) {
    std::cout << "\n" << style.bold("Configuration differs") << " (shown first: it can explain everything after)\n";
    for (const auto& c : diff.config_differences) {
      std::cout << "  " << c.field << ": " << c.a << " (A) vs " << c.b << " (B) on " << c.rank_count << " rank"
                << (c.rank_count == 1 ? "" : "s") << " (first: rank " << c.first_rank << ")\n";
    }
  }
  if (diff.first) {
    const CallDivergence& d = *diff.first;
    std::cout << "\n"
              << style.bold("First divergence") << ": rank " << d.rank << ", step " << d.step() << step_source_text(d)
              << ", " << analysis::divergence_kind_name(d.kind) << "\n";
    print_first(style, d, magnitudes);
    if (!diff.stopped.empty()) {
      std::cout << "  stopped   ranks whose first difference is a missing call at this step:";
      for (std::size_t i = 0; i < diff.stopped.size() && i < 32; ++i) std::cout << ' ' << diff.stopped[i];
      if (diff.stopped.size() > 32) std::cout << " ... (" << diff.stopped.size() << " ranks)";
      std::cout << "\n";
    }
  }
  if (!diff.first && diff.first_step) {
    const analysis::StepDivergence& s = *diff.first_step;
    std::cout << "\n"
              << style.bold("First divergence") << ": rank " << s.rank << ", step " << s.step << ", step digest\n";
    std::cout << "  communicator  " << s.comm_ordinal << " (id " << hex(s.comm_id) << ")\n";
    const auto side = [](bool present, const records::StepDigestRecord& digest) {
      return present ? std::to_string(digest.calls) + (digest.calls == 1 ? " call" : " calls") + ", inputs " +
                           hex(digest.input_digest) + ", outputs " + hex(digest.output_digest)
                     : std::string("no digest (its log ends before this step, or it made no call here)");
    };
    std::cout << "  run A         " << side(s.in_a, s.a) << "\n";
    std::cout << "  run B         " << side(s.in_b, s.b) << "\n";
    std::cout << "  ranks         first differing at this step: " << diff.first_step_ranks.size() << "\n";
    std::cout << "  trace it      " << analysis::rerun_settings(diff) << "\n";
  }
  if (!diff.receivers.empty()) {
    std::cout << "\n" << style.bold("Receivers") << " (ranks whose first difference came from another rank)\n";
    const std::size_t shown =
        options.verbose ? diff.receivers.size() : std::min<std::size_t>(16, diff.receivers.size());
    for (std::size_t i = 0; i < shown; ++i) {
      const RankDiff& rank = *std::find_if(diff.ranks.begin(), diff.ranks.end(),
                                           [&](const RankDiff& r) { return r.rank == diff.receivers[i]; });
      const CallDivergence& d = *rank.first;
      std::cout << "  rank " << rank.rank << ": " << short_call(d);
      if (d.source) {
        std::cout << " <- rank " << d.source->rank << "'s " << records::op_name(d.source->op) << " (step "
                  << d.source->step << ", seq " << d.source->seq << ")";
      }
      std::cout << "\n";
    }
    if (shown < diff.receivers.size()) {
      std::cout << "  ... " << diff.receivers.size() - shown << " more (--verbose lists all)\n";
    }
  }

  // Logs of step digests only (DETNCCL_TRACE=steps): each rank's first differing step instead of calls.
  const bool digests_only = std::all_of(diff.ranks.begin(), diff.ranks.end(),
                                        [](const RankDiff& rank) { return rank.calls_a == 0 && rank.calls_b == 0; }) &&
                            (diff.steps_matching > 0 || diff.first_step);
  if (digests_only) {
    std::cout << "\n" << style.bold("Per rank") << " (first differing step by digest)\n";
    std::size_t listed = 0;
    for (const RankDiff& rank : diff.ranks) {
      if (!rank.first_step) continue;
      if (!options.verbose && listed == kRanksShown) {
        std::cout << "  ... more (--verbose lists all)\n";
        break;
      }
      ++listed;
      std::cout << "  rank " << rank.rank << ": step " << rank.first_step->step << ", communicator "
                << rank.first_step->comm_ordinal << " (" << rank.steps_matching << " digests equal before)\n";
    }
    if (listed == 0) std::cout << "  every rank's digests are equal\n";
  } else {
    print_rank_table(options, diff, style);
  }
  // --verbose: every rank's first divergence measured, listed once any was (no capture at all: nothing to list).
  if (options.verbose && magnitudes != nullptr &&
      std::any_of(magnitudes->begin(), magnitudes->end(), [](const auto& entry) { return entry.second.measured; })) {
    std::cout << "\n" << style.bold("Magnitudes") << " (each rank's first divergent call, from the capture files)\n";
    for (const auto& [rank, m] : *magnitudes) std::cout << "  rank " << rank << ": " << magnitude_text(m) << "\n";
  }
  if (!diff.notes.empty()) {
    std::cout << "\n" << style.bold("Notes") << "\n";
    for (const std::string& note : diff.notes) std::cout << "  " << note << "\n";
  }
}

// The per-rank table: diverging ranks first (by their first divergence), then the rest.
void print_rank_table(const DiffCommandOptions& options, const RunDiff& diff, const Style& style) {
  const auto [matching, differing, unverified, missing] = call_totals(diff);
  // Per-rank table: diverging ranks first (by their first divergence), then the rest.
  std::vector<const RankDiff*> rows;
  for (const RankDiff& rank : diff.ranks) rows.push_back(&rank);
  std::stable_sort(rows.begin(), rows.end(), [](const RankDiff* x, const RankDiff* y) {
    if (x->first.has_value() != y->first.has_value()) return x->first.has_value();
    if (!x->first) return false;
    return std::make_tuple(x->first->step(), x->first->seq(), x->rank) <
           std::make_tuple(y->first->step(), y->first->seq(), y->rank);
  });
  const std::size_t shown = options.verbose ? rows.size() : std::min(rows.size(), kRanksShown);
  std::cout << "\n" << style.bold("Per rank") << " (first divergent call; counts over the compared calls)\n";
  TextTable table({{6, true, "  "},
                   {28, false, "  "},
                   {8, false, "  "},
                   {12, false, "  "},
                   {9, true, "  "},
                   {9, true, "  "},
                   {10, true, "  "},
                   {7, true, "  "}});
  table.add_row({"rank", "first divergent call", "kind", "role", "matching", "differing", "unverified", "missing"});
  for (std::size_t i = 0; i < shown; ++i) {
    const RankDiff& rank = *rows[i];
    table.add_row({std::to_string(rank.rank), rank.first ? short_call(*rank.first) : "-",
                   rank.first ? std::string(analysis::divergence_kind_name(rank.first->kind)) : "-",
                   rank.first ? std::string(analysis::divergence_role_name(rank.first->role)) : "-",
                   std::to_string(rank.matching), std::to_string(rank.differing), std::to_string(rank.unverified),
                   std::to_string(rank.missing_in_a + rank.missing_in_b)});
  }
  std::cout << table.render();
  if (shown < rows.size()) {
    std::size_t diverged = 0;
    for (const RankDiff* rank : rows) diverged += rank->first.has_value() ? 1 : 0;
    std::cout << "  ... " << rows.size() - shown << " more ranks (" << diverged << " of " << rows.size()
              << " diverge in all; --verbose lists every rank)\n";
  }
  std::cout << "  total: " << matching << " matching, " << differing << " differing, " << unverified << " unverified, "
            << missing << " missing\n";
}

// `diff --partial`: compares the ranks of the range and writes the partial result on standard output. Exit status
// 0 when every rank of the range was compared, 2 when the runs or a log of the range are unusable (the part still
// says so, and merge reports it as one process would).
int write_partial(const DiffCommandOptions& options, const analysis::RunLogs& a, const analysis::RunLogs& b,
                  const analysis::DiffOptions& diff_options, std::atomic<std::size_t>& done) {
  analysis::PartialDiff part;
  part.run_a = options.run_a;
  part.run_b = options.run_b;
  part.from_step = options.from_step;
  part.to_step = options.to_step;
  part.infer_steps = diff_options.step_numbering.infer;
  part.step_boundary = options.step_numbering.step_boundary;
  part.use_step_index = diff_options.use_step_index;
  part.divergent_calls_kept = diff_options.divergent_calls_kept;
  if (options.ranks) part.range = parse_rank_range(*options.ranks);
  std::set<std::uint32_t> ranks;
  for (const analysis::RunLogs* run : {&a, &b}) {
    for (const analysis::RankLogFile& file : run->logs) {
      if (part.range.contains(file.rank)) ranks.insert(file.rank);
    }
  }
  {
    const Progress progress("detnccl diff", ranks.size(), "ranks compared", done);
    part.result = analysis::compare_rank_range(a, b, diff_options, part.range);
  }
  std::cout << analysis::write_partial_diff(part) << "\n";
  std::string error = part.result.error;
  for (const RankDiff& rank : part.result.ranks) {
    if (error.empty()) error = !rank.unusable.empty() ? rank.unusable : rank.header_error;
  }
  if (error.empty()) return kExitSame;
  std::cerr << "detnccl diff: unusable input: " << error << "\n";
  return kExitUnusable;
}

}  // namespace

std::string magnitude_text(const analysis::MagnitudeOutcome& m) {
  if (!m.measured) return "not captured (" + m.not_captured + ")";
  std::string text = analysis::magnitude_sentence(m.magnitude, m.side);
  if (!m.no_bound.empty()) text += "; reordering bound not computed: " + m.no_bound;
  return text;
}

int diff_command(const DiffCommandOptions& options) {
  const analysis::RunLogs a = analysis::list_run(options.run_a);
  const analysis::RunLogs b = analysis::list_run(options.run_b);
  std::atomic<std::size_t> done{0};
  analysis::DiffOptions diff_options;
  diff_options.from_step = options.from_step;
  diff_options.to_step = options.to_step;
  diff_options.step_numbering = step_numbering_of(options.step_numbering);
  diff_options.use_step_index = !options.all_records;
  diff_options.threads = options.threads;
  diff_options.ranks_done = &done;
  if (options.partial) return write_partial(options, a, b, diff_options, done);
  RunDiff diff;
  {
    const Progress progress("detnccl diff", std::max(a.logs.size(), b.logs.size()), "ranks compared", done);
    diff = analysis::diff_runs(a, b, diff_options);
  }
  DiffMagnitudes magnitudes;
  if (!measure_magnitudes(options, diff, "diff", &magnitudes)) return kExitUnusable;
  return print_diff_report(options, diff, "diff", &magnitudes);
}

bool measure_magnitudes(const DiffCommandOptions& options, const RunDiff& diff, const char* command,
                        DiffMagnitudes* magnitudes) {
  if (!diff.error.empty()) return true;
  analysis::RunCaptures captures_a(options.run_a), captures_b(options.run_b);
  std::vector<const CallDivergence*> measured;
  if (diff.first) measured.push_back(&*diff.first);
  if (options.verbose) {
    for (const RankDiff& rank : diff.ranks) {
      if (rank.first) measured.push_back(&*rank.first);
    }
  }
  for (const CallDivergence* d : measured) {
    if (magnitudes->contains(d->rank)) continue;
    std::string error;
    std::optional<analysis::MagnitudeOutcome> outcome =
        analysis::measure_call_divergence(captures_a, captures_b, *d, &error);
    if (!error.empty()) {
      std::cerr << "detnccl " << command << ": unusable input: damaged capture file " << error << "\n";
      return false;
    }
    if (outcome) magnitudes->emplace(d->rank, std::move(*outcome));
  }
  return true;
}

json diff_json(const DiffCommandOptions& options, const RunDiff& diff, const DiffMagnitudes* magnitudes) {
  json out = {{"verdict", verdict(diff)}, {"run_a", options.run_a}, {"run_b", options.run_b}};
  if (!diff.error.empty()) {
    out["error"] = diff.error;
  } else {
    out["from_step"] = options.from_step ? json(*options.from_step) : json(nullptr);
    out["to_step"] = options.to_step ? json(*options.to_step) : json(nullptr);
    json config = json::array();
    for (const auto& c : diff.config_differences) {
      config.push_back(
          {{"field", c.field}, {"a", c.a}, {"b", c.b}, {"first_rank", c.first_rank}, {"ranks", c.rank_count}});
    }
    out["config_differences"] = config;
    json notes = json::array();
    for (const auto& c : diff.config_notes) {
      notes.push_back(
          {{"field", c.field}, {"a", c.a}, {"b", c.b}, {"first_rank", c.first_rank}, {"ranks", c.rank_count}});
    }
    out["config_notes"] = notes;
    out["first_divergence"] = diff.first ? divergence_json(*diff.first, magnitudes) : json(nullptr);
    out["receivers"] = diff.receivers;
    out["stopped"] = diff.stopped;
    json ranks = json::array();
    for (const RankDiff& rank : diff.ranks) ranks.push_back(rank_json(rank, magnitudes));
    out["ranks"] = ranks;
    out["notes"] = diff.notes;
    out["unknown_records"] = diff.unknown_records;
    out["step_sources"] = {{"a", analysis::step_source_names(diff.step_sources_a)},
                           {"b", analysis::step_source_names(diff.step_sources_b)}};
    out["steps_comparable"] = diff.steps_comparable;
    out["steps_matching"] = diff.steps_matching;
    {
      json shortcut = {{"ranks", 0}, {"calls_read", 0}, {"calls_matched_by_digest", 0}, {"calls_not_read", 0}};
      std::optional<std::uint64_t> read_through;
      for (const RankDiff& rank : diff.ranks) {
        shortcut["ranks"] = shortcut["ranks"].get<std::uint64_t>() + (rank.digest_shortcut ? 1 : 0);
        shortcut["calls_read"] = shortcut["calls_read"].get<std::uint64_t>() + rank.calls_read;
        shortcut["calls_matched_by_digest"] =
            shortcut["calls_matched_by_digest"].get<std::uint64_t>() + rank.calls_matched_by_digest;
        shortcut["calls_not_read"] = shortcut["calls_not_read"].get<std::uint64_t>() + rank.calls_not_read;
        if (rank.read_through_step) read_through = rank.read_through_step;
      }
      shortcut["read_through_step"] = read_through ? json(*read_through) : json(nullptr);
      out["step_index"] = shortcut;
    }
    if (diff.first_step) {
      const analysis::StepDivergence& s = *diff.first_step;
      json step = {{"rank", s.rank},
                   {"step", s.step},
                   {"kind", step_kind(s)},
                   {"role", analysis::divergence_role_name(s.role)},
                   {"comm_ordinal", s.comm_ordinal},
                   {"comm_id", hex(s.comm_id)},
                   {"in_a", s.in_a},
                   {"in_b", s.in_b},
                   {"calls_a", s.a.calls},
                   {"calls_b", s.b.calls},
                   {"input_differs", s.input_differs},
                   {"output_differs", s.output_differs}};
      out["first_step_divergence"] = step;
      out["first_step_ranks"] = diff.first_step_ranks;
      out["rerun"] = analysis::rerun_settings(diff);
    } else {
      out["first_step_divergence"] = nullptr;
    }
  }
  return out;
}

std::string diff_verdict_text(const RunDiff& diff) {
  if (!diff.error.empty()) return "UNUSABLE";
  if (diff.undecided) return "UNDECIDED";
  if (diff.identical()) return diff.metadata_only() ? "IDENTICAL METADATA" : "IDENTICAL";
  return "DIVERGED";
}

int diff_exit_status(const RunDiff& diff) {
  if (!diff.error.empty() || diff.undecided) return kExitUnusable;
  return diff.identical() ? kExitSame : kExitDiffers;
}

int print_diff_report(const DiffCommandOptions& options, const RunDiff& diff, const char* command,
                      const DiffMagnitudes* magnitudes) {
  if (options.json) {
    std::cout << diff_json(options, diff, magnitudes).dump(2, ' ', false, json::error_handler_t::replace) << "\n";
  } else if (diff.error.empty()) {
    print_text(options, diff, magnitudes);
  }
  if (!diff.error.empty()) {
    std::cerr << "detnccl " << command << ": "
              << (diff.nothing_in_range || !diff.steps_comparable ? "" : "unusable input: ") << diff.error << "\n";
  }
  return diff_exit_status(diff);
}

}  // namespace detnccl::cli

namespace detnccl::cli {

CommandRun add_diff_arguments(CLI::App& app) {
  auto options = std::make_shared<DiffCommandOptions>();
  app.add_option("RUN_A", options->run_a, "First run directory")->required();
  app.add_option("RUN_B", options->run_b, "Second run directory")->required();
  app.add_option("--from-step", options->from_step,
                 "Compare only calls of steps >= K, aligned from the first call of that range (a run resumed "
                 "from a checkpoint at step K against the run that never stopped)")
      ->check(kStepNumber);
  app.add_option("--to-step", options->to_step, "Compare only calls of steps <= K")->check(kStepNumber);
  add_step_numbering_options(app, options->step_numbering);
  app.add_flag("--all-records", options->all_records,
               "Read and compare every call record, not only those from each rank's first step whose step digests "
               "differ (slower; the counts of matching and differing calls then cover every call)");
  app.add_option("--ranks", options->ranks,
                 "With --partial: compare only ranks A to B (both included) of the runs, A-B or one rank A; "
                 "`detnccl merge` combines the parts of every range");
  app.add_flag("--partial", options->partial,
               "Write this process's partial result (JSON, on standard output) for `detnccl merge` instead of a "
               "report: split a large diff across processes or machines");
  add_report_options(app, *options, "List every rank and receiver");
  return [options] {
    if (options->from_step && options->to_step && *options->from_step > *options->to_step) {
      throw BadArguments("--from-step " + std::to_string(*options->from_step) + " is after --to-step " +
                         std::to_string(*options->to_step));
    }
    if (options->ranks && !options->partial) {
      throw BadArguments("--ranks compares part of the runs: it needs --partial (then merge the parts)");
    }
    if (options->partial && options->json) {
      throw BadArguments("--partial writes a partial result (JSON already); --json is merge's option");
    }
    if (options->ranks) parse_rank_range(*options->ranks);  // bad arguments before anything is read
    return diff_command(*options);
  };
}

}  // namespace detnccl::cli
