// detnccl analysis: finding the per-rank logs of a run and streaming one rank's calls with their communicators.
//
// Everything the offline commands (dump, diff, check, stats) read goes through here, so that "unusable input" has
// one meaning: a path that holds no log, a log whose header cannot be read (not a log, other byte order, newer
// format, damaged header), or a log with a corrupt record. A torn tail (a killed rank) or a truncation marker
// (disk full) is not unusable: the records before it are complete, and the commands report how the log ends.
#ifndef DETNCCL_CLI_ANALYSIS_RUN_LOGS_H
#define DETNCCL_CLI_ANALYSIS_RUN_LOGS_H

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "records/log_reader.h"

namespace detnccl::analysis {

// One rank's log file of a run.
struct RankLogFile {
  std::uint32_t rank = 0;  // from the file name (rank-NNNNN.dnc)
  std::string path;
};

// The logs of one run, sorted by rank, or why there are none.
struct RunLogs {
  std::string path;               // what the user named
  std::vector<RankLogFile> logs;  // sorted by rank, no duplicates
  std::string error;              // non-empty: the run cannot be read (names the path and why)
};

// The rank number of a log file name ("rank-00042.dnc" gives 42); nullopt for any other name.
std::optional<std::uint32_t> rank_from_file_name(std::string_view file_name);

// Lists a run: `path` is a run directory (DETNCCL_DIR/RUN) holding rank-NNNNN.dnc files, or a single .dnc file
// (its rank then comes from its name, else 0). Never throws; failures are reported in RunLogs::error.
RunLogs list_run(const std::string& path);

// What a call's communicator is, as far as the log says (zeros when its record is missing).
struct CommunicatorInfo {
  std::uint64_t id = 0;      // CommunicatorRecord::id: the key between ranks of one run
  std::uint32_t nranks = 0;  // 0 when unknown
  std::uint32_t rank = 0;    // this process's rank in it
  bool known = false;
};

// A call record with its communicator and the positions that match it across ranks of the same run.
struct CallInRun {
  records::CallRecord call;  // spans point into the stream's reader (valid while the stream lives)
  CommunicatorInfo communicator;
  std::uint64_t collective_index = 0;  // collectives (not Send/Recv) issued on this communicator before it
  std::uint64_t pair_index = 0;        // Send/Recv: earlier calls of the same op to/from the same peer on it
};

// Streams one rank's calls in file order. Communicator records are absorbed; each call carries its communicator.
class RankLogStream {
 public:
  // Opens and validates a log; on failure returns null and sets error (names the file and why).
  static std::unique_ptr<RankLogStream> open(const std::string& path, std::string& error);

  // The log's header.
  const records::LogHeader& header() const noexcept { return reader_->header(); }

  // The next call; false at the end of what can be read (then end() says why).
  bool next(CallInRun& out);

  // Why the stream ended (kNotReached before next() returned false).
  const records::LogEnd& end() const noexcept { return reader_->end(); }

  // Communicator records read so far, in file order.
  const std::vector<records::CommunicatorRecord>& communicators() const noexcept { return communicators_; }

  // Call records handed out so far.
  std::uint64_t calls_read() const noexcept { return calls_read_; }

  // The log's path.
  const std::string& path() const noexcept { return path_; }

 private:
  struct Counters {
    std::uint64_t collectives = 0;
    std::unordered_map<std::uint64_t, std::uint64_t> pairs;  // (op, peer) -> calls so far
  };
  std::unique_ptr<records::LogReader> reader_;
  std::string path_;
  std::vector<records::CommunicatorRecord> communicators_;
  std::unordered_map<std::uint64_t, std::size_t> by_ordinal_;  // ordinal -> index in communicators_
  std::unordered_map<std::uint64_t, Counters> counters_;       // per communicator ordinal
  std::uint64_t calls_read_ = 0;
};

// Whether a log end makes the log unusable (a corrupt record); torn tails and truncation markers do not.
bool log_end_is_unusable(const records::LogEnd& end) noexcept;

// A short name of a log end: "closed", "truncated", "torn tail", "corrupt", "open".
std::string_view log_end_name(records::LogEndKind kind) noexcept;

}  // namespace detnccl::analysis

#endif  // DETNCCL_CLI_ANALYSIS_RUN_LOGS_H
