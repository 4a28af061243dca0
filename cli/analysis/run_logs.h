// detnccl analysis: finding the per-rank logs of a run and streaming one rank's calls with their communicators.
//
// Everything the offline commands (dump, diff, check, stats) read goes through here, so that "unusable input" has
// one meaning: a path that holds no log, a log whose header cannot be read (not a log, other byte order, newer
// format, damaged header), or a log with a corrupt record. A torn tail (a killed rank) or a truncation marker
// (disk full) is not unusable: the records before it are complete, and the commands report how the log ends. Nor
// is a file with no header at all (empty or zeros: its writer was killed between creating it and writing the
// header): that rank has no records, and the commands treat it like a rank without a log, with a note naming the
// file.
#ifndef DETNCCL_CLI_ANALYSIS_RUN_LOGS_H
#define DETNCCL_CLI_ANALYSIS_RUN_LOGS_H

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "records/log_reader.h"
#include "steps/step_inference.h"

namespace detnccl::analysis {

// A map keyed by communicator ordinal, which is small and dense in practice (0, 1, 2... in creation order): a vector
// below kDense, a hash map above it, so that the per-call lookups of the offline tools cost an index.
template <typename T>
class OrdinalMap {
 public:
  // The value for `ordinal`, default-constructed and inserted when absent; `inserted` says whether it was.
  T& get(std::uint64_t ordinal, bool* inserted = nullptr) {
    if (ordinal < kDense) {
      if (ordinal >= dense_.size()) dense_.resize(ordinal + 1);
      auto& [present, value] = dense_[ordinal];
      if (inserted != nullptr) *inserted = !present;
      present = true;
      return value;
    }
    const auto [found, fresh] = sparse_.try_emplace(ordinal);
    if (inserted != nullptr) *inserted = fresh;
    return found->second;
  }
  // The value for `ordinal`, or null.
  const T* find(std::uint64_t ordinal) const {
    if (ordinal < kDense) return ordinal < dense_.size() && dense_[ordinal].first ? &dense_[ordinal].second : nullptr;
    const auto found = sparse_.find(ordinal);
    return found == sparse_.end() ? nullptr : &found->second;
  }

 private:
  static constexpr std::uint64_t kDense = 1024;
  std::vector<std::pair<bool, T>> dense_;
  std::unordered_map<std::uint64_t, T> sparse_;
};

// One rank's log file of a run.
struct RankLogFile {
  std::uint32_t rank = 0;  // from the file name (rank-NNNNN.dnc)
  std::string path;
  bool named_by_rank = true;  // false: a single file not named rank-NNNNN.dnc (its rank is then 0)
  // Set: the log's bytes, held in memory by the caller (a fuzzer, a test), read in place of the file at `path` (then
  // only a name in messages). They must outlive every stream opened on this file.
  std::optional<std::span<const std::byte>> in_memory;
};

// The logs of one run, sorted by rank, or why there are none.
struct RunLogs {
  std::string path;               // what the user named
  std::vector<RankLogFile> logs;  // sorted by rank, no duplicates
  std::string error;              // non-empty: the run cannot be read (names the path and why)
  bool single_file = false;       // the path named one log file, not a run directory
};

// The rank number of a log file name ("rank-00042.dnc" gives 42); nullopt for any other name.
std::optional<std::uint32_t> rank_from_file_name(std::string_view file_name);

// Whether a log's header rank disagrees with its file name; returns the message naming both, empty when they agree
// (or the file is not named rank-NNNNN.dnc).
std::string rank_mismatch(const RankLogFile& file, const records::LogHeader& header);

// The error for a single log file given to a command that compares ranks (diff, check); empty for a directory.
std::string refuse_single_file(const RunLogs& run, std::string_view command);

// Lists a run: `path` is a run directory (DETNCCL_DIR/RUN) holding rank-NNNNN.dnc files, or a single .dnc file
// (its rank then comes from its name, else 0). Never throws; failures are reported in RunLogs::error.
RunLogs list_run(const std::string& path);

// A run whose logs are held in memory: logs[i] is rank i's log (rank_log_file_name(i) inside `path`, a name for
// messages). The bytes must outlive the RunLogs and every stream opened on it. Nothing is read from files.
RunLogs run_in_memory(const std::string& path, const std::vector<std::span<const std::byte>>& logs);

// What a call's communicator is, as far as the log says (zeros when its record is missing).
struct CommunicatorInfo {
  std::uint64_t id = 0;      // CommunicatorRecord::id: the key between ranks of one run
  std::uint32_t nranks = 0;  // 0 when unknown
  std::uint32_t rank = 0;    // this process's rank in it
  bool known = false;
};

// A call record with its communicator and the positions that match it across ranks of the same run.
struct CallInRun {
  // Its spans point into the stream's reader: valid while the stream lives (a mapped log), or until the stream's next
  // next() (a streamed one: records::LogAccess), unless keep_arrays() made them the CallInRun's own.
  records::CallRecord call;
  CommunicatorInfo communicator;
  std::uint64_t collective_index = 0;  // collectives (not Send/Recv) issued on this communicator before it
  std::uint64_t pair_index = 0;        // Send/Recv: earlier calls of the same op to/from the same peer on it

  // Copies the call's four arrays into this CallInRun and points its spans there, so that it outlives what its
  // stream reads next. Copies and moves of it keep their own arrays.
  void keep_arrays();

  CallInRun() = default;
  CallInRun(const CallInRun& other);
  CallInRun& operator=(const CallInRun& other);
  CallInRun(CallInRun&&) noexcept = default;  // a vector's move keeps its storage: the spans stay valid
  CallInRun& operator=(CallInRun&&) noexcept = default;

 private:
  std::vector<std::uint64_t> kept_;  // the arrays, when kept: input blocks, output blocks, input and output segments
  // Points the spans into kept_.
  void point_into_kept() noexcept;
};

// How the offline tools number the steps of calls the job did not mark (--infer-steps, --step-boundary): the shim's
// rule (steps/step_inference.h) over the log's calls in file order. Calls with step_source none, unknown (version-1
// logs) or inferred get a new step and step_source inferred; marked and optimizer steps are kept, and so are the
// steps of a version-1 log whose calls carry steps other than 0 (its job marked them; version 1 did not say so).
struct StepNumbering {
  bool infer = false;
  steps::StepBoundary boundary;  // no rule: the call pattern
};

// A set of step sources (records::StepSource) as bits: step_source_bit(source) for each source seen.
constexpr std::uint32_t step_source_bit(records::StepSource source) noexcept {
  return static_cast<std::uint32_t>(source) < 31 ? std::uint32_t{1} << static_cast<std::uint32_t>(source) : 1u << 31;
}

// The names of the sources in a set, in StepSource order ("marked", "inferred"; "?" for values this detnccl does
// not know).
std::vector<std::string> step_source_names(std::uint32_t sources);

// Whether two logs' steps number the same iterations: their calls' steps come from the same source, or neither log
// numbered steps (none, unknown). A job's own marks, the optimizer's and detnccl's inference may each count from
// another start or another boundary.
bool step_sources_comparable(std::uint32_t a, std::uint32_t b) noexcept;

// Streams one rank's calls in file order. Communicator records are absorbed; each call carries its communicator.
class RankLogStream {
 public:
  // Opens and validates a log; on failure returns null and sets error (names the file and why). no_header, when
  // given, is set to whether the file holds no header at all (records::OpenedLog::no_header: empty or zeros, left by
  // a writer killed before writing it): then error is a note, not unusable input, and the rank has no records.
  // access: how the file is read (records::LogAccess; streamed is faster, but each call's spans then last only until
  // the next next(): CallInRun::keep_arrays).
  static std::unique_ptr<RankLogStream> open(const std::string& path, std::string& error, bool* no_header = nullptr,
                                             records::LogAccess access = records::LogAccess::kMapped);

  // The same for a run's log (from memory when file.in_memory is set), also refusing a header whose rank is not the
  // one in the file's name (a renamed or copied file: its calls would be compared and matched as another rank's).
  static std::unique_ptr<RankLogStream> open(const RankLogFile& file, std::string& error, bool* no_header = nullptr,
                                             records::LogAccess access = records::LogAccess::kMapped);

  // The log's header.
  const records::LogHeader& header() const noexcept { return reader_->header(); }

  // Numbers the steps of the calls that follow as `numbering` says (nothing when numbering.infer is false). Call it
  // before the first next().
  void number_steps(const StepNumbering& numbering);

  // The next call; false at the end of what can be read (then end() says why).
  bool next(CallInRun& out);

  // The log's step index (records::LogReader::read_step_index), read when first asked for; null when it has none (then
  // the log is read from its start).
  const records::StepIndex* step_index();

  // Moves the stream to the calls of the group that starts at step index entry `entry` (entries().size(): to the end
  // marker), as if every call before it had been read: the communicator records before it are taken from the index
  // and each communicator's collective and Send/Recv counts set from it, here and at each later group. Call it
  // before the first next(), after step_index(); false when it cannot (no index, `entry` starts no group).
  bool seek_to_group(std::size_t entry);

  // Why the stream ended (kNotReached before next() returned false).
  const records::LogEnd& end() const noexcept { return reader_->end(); }
  // Records of types this reader does not know, skipped (a newer detnccl of the same format version wrote them).
  std::uint64_t unknown_records_skipped() const noexcept { return reader_->unknown_records_skipped(); }

  // How much of the log stays resident behind the cursor (records::LogReader::set_page_release_bytes).
  void set_page_release_bytes(std::uint64_t bytes) noexcept { reader_->set_page_release_bytes(bytes); }

  // Step digest records read so far, in file order (records/step_digest.h).
  const std::vector<records::StepDigestRecord>& step_digests() const noexcept { return reader_->step_digests(); }

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
  records::LogRecord record_;  // reused: the reader decodes each call into the one it holds
  std::string path_;
  std::optional<std::span<const std::byte>> in_memory_;  // the log's bytes when it was opened from memory
  std::vector<records::CommunicatorRecord> communicators_;
  OrdinalMap<CommunicatorInfo> by_ordinal_;  // the latest communicator record of each ordinal
  OrdinalMap<Counters> counters_;            // per communicator ordinal
  std::uint64_t calls_read_ = 0;
  std::unique_ptr<steps::StepInference> step_inference_;  // null: steps as written
  std::optional<records::StepIndex> step_index_;
  bool step_index_read_ = false;
  // After seek_to_group: the next index entry whose group has not been entered, and its first Send/Recv pair.
  bool seeked_ = false;
  std::size_t next_group_ = 0;
  std::size_t next_pair_ = 0;
  // Sets the counters of every communicator of the group starting at entry next_group_ from the index.
  void enter_group();
};

// Whether a log end makes the log unusable (a corrupt record); torn tails and truncation markers do not.
bool log_end_is_unusable(const records::LogEnd& end) noexcept;

// Whether a header setting cannot change any call's metadata or data, only what detnccl and NCCL print or what
// detnccl fingerprints: the DETNCCL_* variables whose row in config/env_vars.h is marked diagnostic (DETNCCL_LOG_LEVEL,
// DETNCCL_LOG_FILE, DETNCCL_PRINT_CONFIG, the fingerprinting level and windows: DETNCCL_TRACE, DETNCCL_STEPS,
// DETNCCL_RANKS, DETNCCL_OPS, DETNCCL_MIN_BYTES, DETNCCL_SEGMENT_BYTES, and the step numbering:
// DETNCCL_STEP_INFERENCE, DETNCCL_STEP_BOUNDARY) and NCCL's debug output (NCCL_DEBUG,
// NCCL_DEBUG_FILE, NCCL_DEBUG_SUBSYS, NCCL_DEBUG_TIMESTAMP_FORMAT, NCCL_DEBUG_TIMESTAMP_LEVELS). Every other setting,
// version and the world size can change results. diff and check report differences in these as notes, never as
// divergences or findings.
bool is_diagnostic_setting(std::string_view name) noexcept;

// A short name of a log end: "closed", "truncated", "torn tail", "corrupt", "open".
std::string_view log_end_name(records::LogEndKind kind) noexcept;

}  // namespace detnccl::analysis

#endif  // DETNCCL_CLI_ANALYSIS_RUN_LOGS_H
