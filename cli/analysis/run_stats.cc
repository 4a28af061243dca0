// detnccl analysis: per-run statistics (see run_stats.h).
#include "cli/analysis/run_stats.h"

#include <algorithm>
#include <exception>

#include "cli/analysis/call_layout.h"
#include "cli/analysis/parallel.h"

namespace detnccl::analysis {
namespace {

std::uint64_t saturating_sum(std::uint64_t a, std::uint64_t b, bool& overflowed) noexcept {
  std::uint64_t sum = 0;
  if (!__builtin_add_overflow(a, b, &sum)) return sum;
  overflowed = true;
  return kSaturated;
}

void widen(std::optional<std::uint64_t>& first, std::optional<std::uint64_t>& last, std::uint64_t step) {
  first = first ? std::min(*first, step) : step;
  last = last ? std::max(*last, step) : step;
}

}  // namespace

void Volume::add(const Volume& other) noexcept {
  bool ignored = false;
  calls = saturating_sum(calls, other.calls, ignored);
  fingerprinted = saturating_sum(fingerprinted, other.fingerprinted, ignored);
  bytes = saturating_sum(bytes, other.bytes, bytes_overflowed);
  bytes_overflowed = bytes_overflowed || other.bytes_overflowed;
}

RunStats run_stats(const RunLogs& run, unsigned threads, std::atomic<std::size_t>* ranks_done,
                   const StepNumbering& numbering) {
  RunStats stats;
  try {
    if (!run.error.empty()) {
      stats.error = run.error;
      return stats;
    }
    const std::size_t n = run.logs.size();
    stats.ranks.resize(n);
    std::vector<std::string> errors(n);
    std::vector<std::map<std::uint64_t, CommunicatorStats>> communicators(n);
    parallel_for(
        n, threads,
        [&](std::size_t i) {
          try {
            RankStats& rank = stats.ranks[i];
            rank.rank = run.logs[i].rank;
            bool no_header = false;
            // Streamed: each call is done with before the next is read.
            const auto stream = RankLogStream::open(run.logs[i], errors[i], &no_header, records::LogAccess::kStreamed);
            if (!stream && no_header) {
              rank.no_header = true;  // no records: counted as a rank with no calls, not unusable input
              rank.end_message = std::move(errors[i]);
              errors[i].clear();
            }
            if (!stream) return;
            stream->number_steps(numbering);
            rank.world_size = stream->header().world_size;
            CallInRun call;
            std::map<std::uint64_t, CommunicatorStats>& mine = communicators[i];
            while (stream->next(call)) {
              const std::uint32_t nranks = call.communicator.nranks;
              const std::uint64_t element = datatype_bytes(call.call.datatype);
              const std::uint64_t bytes =
                  saturating_product(element, std::max(input_elements(call.call, nranks, call.communicator.rank),
                                                       output_elements(call.call, nranks, call.communicator.rank)));
              const bool fingerprinted =
                  (call.call.flags & (records::kCallInputFingerprint | records::kCallOutputFingerprint)) != 0;
              const Volume volume{1, bytes, fingerprinted ? 1u : 0u, bytes == kSaturated};
              rank.total.add(volume);
              rank.per_op[call.call.op].add(volume);
              widen(rank.first_step, rank.last_step, call.call.step);
              rank.step_sources |= step_source_bit(call.call.step_source);
              CommunicatorStats& communicator = mine[call.communicator.id];
              communicator.id = call.communicator.id;
              communicator.nranks = nranks;
              communicator.total.add(volume);
            }
            rank.communicators = stream->communicators();
            for (const auto& record : stream->communicators()) {
              CommunicatorStats& communicator = mine[record.id];
              communicator.id = record.id;
              communicator.nranks = record.nranks;
              communicator.members_seen = 1;
            }
            rank.end = stream->end().kind;
            rank.end_message = stream->end().message;
            rank.unknown_records = stream->unknown_records_skipped();
            if (log_end_is_unusable(stream->end())) errors[i] = stream->path() + ": " + stream->end().message;
          } catch (const std::exception& e) {
            errors[i] = run.logs[i].path + ": " + e.what();
          }
        },
        ranks_done);
    for (std::size_t i = 0; i < n; ++i) {
      if (!errors[i].empty()) {
        stats.error = errors[i];
        return stats;
      }
      const RankStats& rank = stats.ranks[i];
      stats.total.add(rank.total);
      for (const auto& [op, volume] : rank.per_op) stats.per_op[op].add(volume);
      stats.step_sources |= rank.step_sources;
      if (rank.first_step) widen(stats.first_step, stats.last_step, *rank.first_step);
      if (rank.last_step) widen(stats.first_step, stats.last_step, *rank.last_step);
      for (const auto& [id, communicator] : communicators[i]) {
        CommunicatorStats& total = stats.per_communicator[id];
        total.id = id;
        total.nranks = std::max(total.nranks, communicator.nranks);
        total.members_seen += communicator.members_seen;
        total.total.add(communicator.total);
      }
    }
    std::vector<RankJobEvidence> jobs;
    for (const RankStats& rank : stats.ranks) jobs.push_back({rank.rank, rank.world_size, rank.communicators});
    stats.jobs = group_logs_by_job(jobs);
  } catch (const std::exception& e) {
    stats.error = std::string("stats failed: ") + e.what();
  }
  return stats;
}

}  // namespace detnccl::analysis
