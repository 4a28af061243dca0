// detnccl analysis: what a run's logs hold (`detnccl stats`): calls and bytes per operation, communicator and rank,
// the steps covered, and how each log ends (closed, truncated, torn).
#ifndef DETNCCL_CLI_ANALYSIS_RUN_STATS_H
#define DETNCCL_CLI_ANALYSIS_RUN_STATS_H

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cli/analysis/run_jobs.h"
#include "cli/analysis/run_logs.h"

namespace detnccl::analysis {

// Calls and bytes. A call's bytes are the larger of its input and output buffers on the calling rank.
struct Volume {
  std::uint64_t calls = 0;
  std::uint64_t bytes = 0;          // saturates at 2^64-1 (then bytes_overflowed is set): never wraps
  std::uint64_t fingerprinted = 0;  // calls with at least one fingerprint
  // The bytes do not fit in 64 bits: counts no job can move, from a corrupt or crafted log. `bytes` is then 2^64-1,
  // a lower bound, never a total to print as such.
  bool bytes_overflowed = false;
  // Sums saturate. RATIONALE: calls and fingerprinted count records read, which cannot reach 2^64; bytes come from
  // the records' counts, which can say anything.
  void add(const Volume& other) noexcept;
};

// One rank's log.
struct RankStats {
  std::uint32_t rank = 0;
  Volume total;
  std::map<records::OpId, Volume> per_op;
  std::optional<std::uint64_t> first_step;
  std::optional<std::uint64_t> last_step;
  std::uint32_t step_sources = 0;  // step_source_bit of each call's step source (run_logs.h)
  records::LogEndKind end = records::LogEndKind::kNotReached;
  std::string end_message;
  // The file holds no header (empty or zeros: its writer was killed before writing it): no records; end_message
  // says so, naming the file.
  bool no_header = false;
  std::uint64_t unknown_records = 0;
  std::uint32_t world_size = 0;
  std::vector<records::CommunicatorRecord> communicators;  // the log's communicator records
};

// One communicator, over every rank.
struct CommunicatorStats {
  std::uint64_t id = 0;
  std::uint32_t nranks = 0;
  std::uint32_t members_seen = 0;  // ranks whose logs hold its record
  Volume total;
};

// The whole run.
struct RunStats {
  std::string error;  // non-empty: unusable input (exit status 2)
  std::vector<RankStats> ranks;
  Volume total;
  std::map<records::OpId, Volume> per_op;
  std::map<std::uint64_t, CommunicatorStats> per_communicator;  // by id
  std::optional<std::uint64_t> first_step;
  std::optional<std::uint64_t> last_step;
  std::uint32_t step_sources = 0;  // every rank's step_sources
  JobGroups jobs;                  // mixed(): the logs come from more than one job (run_jobs.h)
};

// Reads every log of a run (ranks in parallel). Never throws.
// `numbering` renumbers unmarked steps (--infer-steps).
RunStats run_stats(const RunLogs& run, unsigned threads = 0, std::atomic<std::size_t>* ranks_done = nullptr,
                   const StepNumbering& numbering = {});

}  // namespace detnccl::analysis

#endif  // DETNCCL_CLI_ANALYSIS_RUN_STATS_H
