// detnccl replay: one captured reduction recomputed (issue #18). Finds rank R's call number S in the run's log, every
// member's record of that collective and their captured inputs (DETNCCL_CAPTURE=1), and prints what the reduction
// gives in rank order (hostnccl's HOSTNCCL_REDUCE_ORDER=rank), in detnccl's deterministic order, in random arrival
// orders, each measured against an exact reference (numerics/replay.h), and which of them gives the output the run
// recorded for that rank.
#include <cmath>
#include <cstring>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "abi/nccl_datatypes.h"
#include "cli/analysis/call_layout.h"
#include "cli/analysis/call_members.h"
#include "cli/analysis/divergence_magnitude.h"
#include "cli/analysis/run_logs.h"
#include "cli/commands.h"
#include "numerics/replay.h"

namespace detnccl::cli {
namespace {

using nlohmann::json;

// The call and where it is.
struct FoundCall {
  records::CallFields fields;
  analysis::CommunicatorInfo communicator;
  std::uint64_t collective_index = 0;
};

json number_json(double value) { return std::isinf(value) ? json("inf") : json(value); }

json magnitude_json(const numerics::Magnitude& m) {
  return {{"elements_differing", m.elements_differing},
          {"first_index", m.first_index},
          {"worst_index", m.worst_index},
          {"max_ulp", m.max_ulp == numerics::kInfiniteUlp ? json("inf") : json(m.max_ulp)},
          {"max_abs_error", number_json(m.max_abs_error)},
          {"max_rel_error", number_json(m.max_rel_error)}};
}

std::string ulp_text(std::uint64_t ulp) { return ulp == numerics::kInfiniteUlp ? "inf" : std::to_string(ulp); }

int fail(const ReplayCommandOptions& options, const std::string& message) {
  if (options.json) {
    std::cout << json{{"run", options.run}, {"verdict", "unusable"}, {"error", message}}.dump(2) << "\n";
  }
  std::cerr << "detnccl replay: " << message << "\n";
  return kExitUnusable;
}

}  // namespace

int replay_command(const ReplayCommandOptions& options) {
  const analysis::RunLogs run = analysis::list_run(options.run);
  if (!run.error.empty()) return fail(options, run.error);
  const analysis::RankLogFile* file = nullptr;
  for (const analysis::RankLogFile& log : run.logs) {
    if (log.rank == options.rank) file = &log;
  }
  if (file == nullptr) return fail(options, options.run + " has no log for rank " + std::to_string(options.rank));
  std::string error;
  std::unique_ptr<analysis::RankLogStream> stream = analysis::RankLogStream::open(*file, error);
  if (stream == nullptr) return fail(options, error);
  std::optional<FoundCall> found;
  analysis::CallInRun call;
  while (stream->next(call)) {
    if (call.call.seq != options.seq) continue;
    found = FoundCall{static_cast<const records::CallFields&>(call.call), call.communicator, call.collective_index};
    break;
  }
  const std::string where = "rank " + std::to_string(options.rank) + "'s call seq " + std::to_string(options.seq);
  if (!found) return fail(options, file->path + " has no call with seq " + std::to_string(options.seq));
  const records::CallFields& fields = found->fields;
  numerics::ReplayCall replayed;
  switch (fields.op) {
    case records::OpId::kAllReduce:
      replayed.collective = numerics::ReplayCollective::kAllReduce;
      break;
    case records::OpId::kReduceScatter:
      replayed.collective = numerics::ReplayCollective::kReduceScatter;
      break;
    case records::OpId::kReduce:
      replayed.collective = numerics::ReplayCollective::kReduce;
      break;
    default:
      return fail(options, where + " is a " + std::string(records::op_name(fields.op)) +
                               ", not a reduction (AllReduce, ReduceScatter, Reduce)");
  }
  if (!found->communicator.known) return fail(options, where + ": its communicator is not recorded");
  const std::uint32_t nranks = found->communicator.nranks;
  const std::optional<std::vector<analysis::MemberCall>> members =
      analysis::find_member_calls(options.run, found->communicator.id, nranks, found->collective_index, &error);
  if (!members) return fail(options, error);

  replayed.datatype = static_cast<ncclDataType_t>(fields.datatype);
  replayed.op.redop = fields.redop;
  replayed.op.premulsum_scalar_bits = fields.premulsum_scalar;
  replayed.count = fields.count;
  replayed.root = fields.peer;
  const std::uint64_t element = analysis::datatype_bytes(fields.datatype);
  analysis::RunCaptures captures(options.run);
  for (const analysis::MemberCall& member : *members) {
    const records::CaptureReader* reader = captures.reader(member.global_rank, &error);
    if (!error.empty()) return fail(options, "damaged capture file " + error);
    if (reader == nullptr) {
      return fail(options, "not captured: " + captures.path(member.global_rank) +
                               " does not exist (run the job with DETNCCL_CAPTURE=1)");
    }
    if ((member.fields.flags & records::kCallInputSaved) == 0) {
      return fail(options, "not captured: rank " + std::to_string(member.global_rank) +
                               "'s input of this call was not saved (outside the fingerprint windows, or the capture "
                               "budget was spent)");
    }
    // Saturated, never wrapped: a forged count must not match a small blob (numerics::replay refuses it too).
    const std::uint64_t bytes =
        analysis::saturating_product(analysis::input_elements(member.fields, nranks, member.comm_rank), element);
    records::CaptureLookup lookup = analysis::find_saved_buffer(*reader, member.fields.input_fingerprint, bytes);
    if (lookup.status != records::CaptureLookupStatus::kFound) {
      return fail(options, "damaged capture file " + captures.path(member.global_rank) + ": " + lookup.message);
    }
    std::vector<unsigned char> input(lookup.bytes.size());
    if (!input.empty()) std::memcpy(input.data(), lookup.bytes.data(), input.size());
    replayed.inputs.push_back(std::move(input));
  }
  numerics::ReplayOptions replay_options;
  replay_options.arrival_orders = options.orders;
  replay_options.seed = options.seed;
  const std::optional<numerics::Replay> result = numerics::replay(replayed, replay_options, &error);
  if (!result) return fail(options, where + ": " + error);

  // The rank's recorded output, when captured: which recomputed order gives it (this rank's part of the result).
  const std::uint32_t comm_rank = found->communicator.rank;
  const bool scatter = replayed.collective == numerics::ReplayCollective::kReduceScatter;
  const std::size_t part_offset = scatter ? static_cast<std::size_t>(comm_rank) * fields.count * element : 0;
  const std::size_t part_bytes = fields.count * element;
  std::optional<std::vector<std::byte>> recorded;
  if ((fields.flags & records::kCallOutputSaved) != 0) {
    const records::CaptureReader* reader = captures.reader(options.rank, &error);
    if (reader != nullptr) {
      records::CaptureLookup lookup = analysis::find_saved_buffer(*reader, fields.output_fingerprint, part_bytes);
      if (lookup.status != records::CaptureLookupStatus::kFound) {
        return fail(options, "damaged capture file " + captures.path(options.rank) + ": " + lookup.message);
      }
      recorded = std::move(lookup.bytes);
    }
  }
  const auto matches_recorded = [&](const std::vector<unsigned char>& output) {
    return recorded && output.size() >= part_offset + part_bytes && recorded->size() == part_bytes &&
           std::memcmp(output.data() + part_offset, recorded->data(), part_bytes) == 0;
  };
  std::optional<numerics::Magnitude> recorded_distance;
  if (recorded && result->reference.size() >= part_offset + part_bytes) {
    recorded_distance = numerics::compare_buffers(replayed.datatype, result->reference.data() + part_offset,
                                                  recorded->data(), fields.count);
  }

  if (options.json) {
    json orders = json::array();
    for (const numerics::ReplayedOutput& o : result->outputs) {
      json entry = {
          {"order", o.order}, {"permutation", o.permutation}, {"from_reference", magnitude_json(o.from_reference)}};
      if (recorded) entry["matches_recorded"] = matches_recorded(o.output);
      orders.push_back(entry);
    }
    json out = {{"run", options.run},
                {"rank", options.rank},
                {"seq", options.seq},
                {"op", records::op_name(fields.op)},
                {"datatype", abi::datatype_name(fields.datatype)},
                {"redop", abi::redop_name(fields.redop)},
                {"count", fields.count},
                {"nranks", nranks},
                {"orders", orders}};
    out["recorded"] = recorded_distance ? json{{"from_reference", magnitude_json(*recorded_distance)}} : json(nullptr);
    std::cout << out.dump(2) << "\n";
    return kExitSame;
  }
  std::cout << "replay of " << where << ": " << records::op_name(fields.op) << " "
            << abi::datatype_name(fields.datatype) << " " << abi::redop_name(fields.redop) << ", " << fields.count
            << " elements, " << nranks << " ranks (communicator rank " << comm_rank << ")\n";
  std::cout << "distance of each order's result from the exact one (long double, rounded to "
            << abi::datatype_name(fields.datatype) << "):\n";
  for (const numerics::ReplayedOutput& o : result->outputs) {
    std::string name = o.order;
    if (!o.permutation.empty() && o.order != "rank") {
      name += " [";
      for (std::size_t i = 0; i < o.permutation.size(); ++i) name += (i ? " " : "") + std::to_string(o.permutation[i]);
      name += "]";
    }
    const numerics::Magnitude& m = o.from_reference;
    std::cout << "  " << name << ": " << m.elements_differing << " elements differ, max " << ulp_text(m.max_ulp)
              << " ulp, max rel " << m.max_rel_error << (matches_recorded(o.output) ? "  = the recorded output" : "")
              << "\n";
  }
  if (recorded_distance) {
    std::cout << "recorded output of rank " << options.rank << ": " << recorded_distance->elements_differing
              << " elements differ from the exact result, max " << ulp_text(recorded_distance->max_ulp) << " ulp\n";
  } else {
    std::cout << "recorded output of rank " << options.rank << ": not captured\n";
  }
  return kExitSame;
}

CommandRun add_replay_arguments(CLI::App& app) {
  auto options = std::make_shared<ReplayCommandOptions>();
  app.add_option("RUN", options->run, "Run directory (written with DETNCCL_CAPTURE=1)")->required();
  app.add_option("--rank", options->rank, "The rank whose call is replayed")->required();
  app.add_option("--seq", options->seq, "The call's seq in that rank's log (as diff and dump show it)")->required();
  app.add_option("--orders", options->orders, "Random arrival orders to try (default 8)")->check(CLI::Range(0, 100000));
  app.add_option("--seed", options->seed, "Seed of the arrival orders (default 1)");
  app.add_flag("--json", options->json, "Print the result as JSON for tools");
  return [options] { return replay_command(*options); };
}

}  // namespace detnccl::cli
