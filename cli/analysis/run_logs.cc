// detnccl analysis: run listing and per-rank call streams (see run_logs.h).
#include "cli/analysis/run_logs.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <system_error>

#include "cli/analysis/call_layout.h"
#include "config/env_vars.h"
#include "records/step_index.h"

namespace detnccl::analysis {

namespace fs = std::filesystem;

std::optional<std::uint32_t> rank_from_file_name(std::string_view file_name) {
  constexpr std::string_view kPrefix = "rank-";
  constexpr std::string_view kSuffix = ".dnc";
  if (file_name.size() <= kPrefix.size() + kSuffix.size() || !file_name.starts_with(kPrefix) ||
      !file_name.ends_with(kSuffix)) {
    return std::nullopt;
  }
  const std::string_view digits = file_name.substr(kPrefix.size(), file_name.size() - kPrefix.size() - kSuffix.size());
  std::uint32_t rank = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), rank);
  if (error != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return rank;
}

RunLogs list_run(const std::string& path) {
  RunLogs run;
  run.path = path;
  try {
    std::error_code error;
    const fs::file_status status = fs::status(path, error);
    if (error || !fs::exists(status)) {
      run.error = path + ": no such run directory or log file";
      return run;
    }
    if (fs::is_regular_file(status)) {
      const auto rank = rank_from_file_name(fs::path(path).filename().string());
      run.logs.push_back({rank.value_or(0), path, rank.has_value(), std::nullopt});
      run.single_file = true;
      return run;
    }
    if (!fs::is_directory(status)) {
      run.error = path + ": neither a run directory nor a log file";
      return run;
    }
    for (fs::directory_iterator it(path, error), end; !error && it != end; it.increment(error)) {
      const std::string name = it->path().filename().string();
      if (const auto rank = rank_from_file_name(name))
        run.logs.push_back({*rank, it->path().string(), true, std::nullopt});
    }
    if (error) {
      run.error = path + ": cannot list the directory: " + error.message();
      return run;
    }
    std::sort(run.logs.begin(), run.logs.end(),
              [](const RankLogFile& a, const RankLogFile& b) { return a.rank < b.rank; });
    const auto duplicate = std::adjacent_find(
        run.logs.begin(), run.logs.end(), [](const RankLogFile& a, const RankLogFile& b) { return a.rank == b.rank; });
    if (duplicate != run.logs.end()) {
      run.error = path + ": two logs for rank " + std::to_string(duplicate->rank) + " (" + duplicate->path + ", " +
                  std::next(duplicate)->path + ")";
      run.logs.clear();
      return run;
    }
    if (run.logs.empty()) run.error = path + ": no rank-NNNNN.dnc logs in this directory (is it DETNCCL_DIR/RUN?)";
  } catch (const std::exception& e) {
    run.error = path + ": " + e.what();
    run.logs.clear();
  }
  return run;
}

RunLogs run_in_memory(const std::string& path, const std::vector<std::span<const std::byte>>& logs) {
  RunLogs run;
  run.path = path;
  run.logs.reserve(logs.size());
  for (std::size_t i = 0; i < logs.size(); ++i) {
    const auto rank = static_cast<std::uint32_t>(i);
    run.logs.push_back({rank, path + "/" + records::rank_log_file_name(rank), true, logs[i]});
  }
  if (run.logs.empty()) run.error = path + ": no rank-NNNNN.dnc logs in this directory (is it DETNCCL_DIR/RUN?)";
  return run;
}

std::string rank_mismatch(const RankLogFile& file, const records::LogHeader& header) {
  if (!file.named_by_rank || header.rank == file.rank) return {};
  return file.path + ": the header says this is the log of rank " + std::to_string(header.rank) +
         ", but the file is named for rank " + std::to_string(file.rank) + " (renamed or copied?); rename it " +
         records::rank_log_file_name(header.rank) + " or remove it";
}

std::string refuse_single_file(const RunLogs& run, std::string_view command) {
  if (!run.single_file) return {};
  std::string message = run.path;
  message += " is one log file, but ";
  message += command;
  message += " reads a run directory (DETNCCL_DIR/RUN, holding every rank's rank-NNNNN.dnc): name the directory";
  message += " (`detnccl dump` and `detnccl stats` read a single file)";
  return message;
}

std::unique_ptr<RankLogStream> RankLogStream::open(const RankLogFile& file, std::string& error, bool* no_header,
                                                   records::LogAccess access) {
  std::unique_ptr<RankLogStream> stream;
  if (file.in_memory) {
    records::OpenedLog opened = records::LogReader::from_bytes(*file.in_memory);
    if (no_header != nullptr) *no_header = opened.no_header;
    if (!opened.reader) {
      error = file.path + ": " + opened.error;
      return nullptr;
    }
    stream.reset(new RankLogStream());
    stream->reader_ = std::move(opened.reader);
    stream->path_ = file.path;
    stream->in_memory_ = file.in_memory;
  } else {
    stream = open(file.path, error, no_header, access);
  }
  if (stream) {
    if (std::string mismatch = rank_mismatch(file, stream->header()); !mismatch.empty()) {
      error = std::move(mismatch);
      return nullptr;
    }
  }
  return stream;
}

std::unique_ptr<RankLogStream> RankLogStream::open(const std::string& path, std::string& error, bool* no_header,
                                                   records::LogAccess access) {
  records::OpenedLog opened = records::LogReader::open_file(path, access);
  if (no_header != nullptr) *no_header = opened.no_header;
  if (!opened.reader) {
    error = opened.error;
    return nullptr;
  }
  std::unique_ptr<RankLogStream> stream(new RankLogStream());
  stream->reader_ = std::move(opened.reader);
  stream->path_ = path;
  return stream;
}

void CallInRun::keep_arrays() {
  const records::CallRecord& c = call;
  std::vector<std::uint64_t> arrays;
  arrays.reserve(c.input_blocks.size() + c.output_blocks.size() + c.input_segments.size() + c.output_segments.size());
  for (const auto span : {c.input_blocks, c.output_blocks, c.input_segments, c.output_segments}) {
    arrays.insert(arrays.end(), span.begin(), span.end());
  }
  kept_ = std::move(arrays);
  point_into_kept();
}

void CallInRun::point_into_kept() noexcept {
  const std::uint64_t* at = kept_.data();
  for (auto* span : {&call.input_blocks, &call.output_blocks, &call.input_segments, &call.output_segments}) {
    *span = {at, span->size()};
    at += span->size();
  }
}

CallInRun::CallInRun(const CallInRun& other)
    : call(other.call),
      communicator(other.communicator),
      collective_index(other.collective_index),
      pair_index(other.pair_index),
      kept_(other.kept_) {
  // Only spans that point into other's kept arrays move to this one's: after keep_arrays(), a stream's next() may
  // have put a new call (pointing into its reader) into other.
  const auto into_other = [&](std::span<const std::uint64_t> span) {
    return span.empty() ||
           (span.data() >= other.kept_.data() && span.data() + span.size() <= other.kept_.data() + other.kept_.size());
  };
  const records::CallRecord& c = other.call;
  if (!kept_.empty() && into_other(c.input_blocks) && into_other(c.output_blocks) && into_other(c.input_segments) &&
      into_other(c.output_segments)) {
    point_into_kept();
  }
}

CallInRun& CallInRun::operator=(const CallInRun& other) {
  if (this != &other) *this = CallInRun(other);
  return *this;
}

namespace {

// Whether a version-1 log's calls carry steps other than 0. Version-1 writers did not record where a step came from,
// but numbered nothing themselves: such steps were marked by the job.
bool version_1_log_has_marked_steps(const std::string& path, std::optional<std::span<const std::byte>> in_memory) {
  records::OpenedLog opened =
      in_memory ? records::LogReader::from_bytes(*in_memory) : records::LogReader::open_file(path);
  if (!opened.reader) return false;
  records::LogRecord record;
  while (opened.reader->next(record)) {
    const auto* call = std::get_if<records::CallRecord>(&record.record);
    if (call != nullptr && call->step != 0) return true;
  }
  return false;
}

}  // namespace

void RankLogStream::number_steps(const StepNumbering& numbering) {
  step_inference_ = nullptr;
  if (!numbering.infer) return;
  // RATIONALE: renumbering a version-1 log that the job marked would throw its real steps away.
  if (reader_->header().format_version < 2 && version_1_log_has_marked_steps(path_, in_memory_)) return;
  step_inference_ = std::make_unique<steps::StepInference>(numbering.boundary);
}

const records::StepIndex* RankLogStream::step_index() {
  if (!step_index_read_) {
    step_index_read_ = true;
    step_index_ = reader_->read_step_index();
  }
  return step_index_ ? &*step_index_ : nullptr;
}

bool RankLogStream::seek_to_group(std::size_t entry) {
  const records::StepIndex* index = step_index();
  if (index == nullptr || seeked_ || calls_read_ != 0 || entry > index->entries.size()) return false;
  const auto& entries = index->entries;
  if (entry > 0 && entry < entries.size() && entries[entry - 1].group_offset == entries[entry].group_offset) {
    return false;
  }
  const std::uint64_t offset = entry < entries.size() ? entries[entry].group_offset : index->end_offset;
  if (!reader_->seek(offset)) return false;
  for (std::size_t i = 0; i < index->communicators.size() && index->communicator_offsets[i] < offset; ++i) {
    const records::CommunicatorRecord& communicator = index->communicators[i];
    by_ordinal_.get(communicator.ordinal) = {communicator.id, communicator.nranks, communicator.rank, true};
    communicators_.push_back(communicator);
  }
  seeked_ = true;
  next_group_ = entry;
  next_pair_ = 0;
  while (next_pair_ < index->pairs.size() && index->pairs[next_pair_].entry < entry) ++next_pair_;
  return true;
}

void RankLogStream::enter_group() {
  const auto& entries = step_index_->entries;
  const auto& pairs = step_index_->pairs;
  const std::uint64_t group = entries[next_group_].group_offset;
  for (; next_group_ < entries.size() && entries[next_group_].group_offset == group; ++next_group_) {
    Counters& counters = counters_.get(entries[next_group_].comm_ordinal);
    counters.collectives = entries[next_group_].collectives_before;
    for (; next_pair_ < pairs.size() && pairs[next_pair_].entry == next_group_; ++next_pair_) {
      const records::StepIndexPair& pair = pairs[next_pair_];
      counters.pairs[records::pair_key(static_cast<records::OpId>(pair.op), pair.peer)] = pair.count_before;
    }
  }
}

bool RankLogStream::next(CallInRun& out) {
  records::LogRecord& record = record_;
  while (reader_->next(record)) {
    if (seeked_) {
      while (next_group_ < step_index_->entries.size() &&
             record.offset >= step_index_->entries[next_group_].group_offset) {
        enter_group();
      }
    }
    if (const auto* communicator = std::get_if<records::CommunicatorRecord>(&record.record)) {
      by_ordinal_.get(communicator->ordinal) = {communicator->id, communicator->nranks, communicator->rank, true};
      communicators_.push_back(*communicator);
      continue;
    }
    out.call = std::get<records::CallRecord>(record.record);
    const CommunicatorInfo* communicator = by_ordinal_.find(out.call.comm_ordinal);
    out.communicator = communicator != nullptr ? *communicator : CommunicatorInfo{};
    Counters& counters = counters_.get(out.call.comm_ordinal);
    if (is_point_to_point(out.call.op)) {
      // RATIONALE: NCCL matches the k-th Send from a to b with the k-th Recv on b from a (per communicator), so a
      // per-(op, peer) count names the partner call on the other rank.
      out.pair_index = counters.pairs[records::pair_key(out.call.op, out.call.peer)]++;
      out.collective_index = counters.collectives;
    } else {
      out.pair_index = 0;
      out.collective_index = counters.collectives++;
    }
    if (step_inference_ != nullptr && out.call.step_source != records::StepSource::kMarked &&
        out.call.step_source != records::StepSource::kOptimizer) {
      out.call.step = step_inference_->next(out.call, out.communicator.rank, out.communicator.nranks);
      out.call.step_source = records::StepSource::kInferred;
    }
    ++calls_read_;
    return true;
  }
  return false;
}

std::vector<std::string> step_source_names(std::uint32_t sources) {
  std::vector<std::string> names;
  for (std::uint32_t value = 0; value < 32; ++value) {
    if ((sources >> value & 1u) == 0) continue;
    names.emplace_back(value == 31 ? std::string_view("?")
                                   : records::step_source_name(static_cast<records::StepSource>(value)));
  }
  return names;
}

bool step_sources_comparable(std::uint32_t a, std::uint32_t b) noexcept {
  const std::uint32_t unnumbered =
      step_source_bit(records::StepSource::kNone) | step_source_bit(records::StepSource::kUnknown);
  const auto numbered = [&](std::uint32_t sources) { return sources & ~unnumbered; };
  return numbered(a) == numbered(b);
}

bool log_end_is_unusable(const records::LogEnd& end) noexcept { return end.kind == records::LogEndKind::kCorrupt; }

bool is_diagnostic_setting(std::string_view name) noexcept {
  // The DETNCCL_* rows of config/env_vars.h marked diagnostic.
  static constexpr std::string_view kDiagnosticVariables[] = {
#define DETNCCL_DIAGNOSTIC_NAME(id, variable, kind, field, refines, shown, ...) DETNCCL_ENV_SHOWN_##shown(variable, )
      DETNCCL_ENV_VARS(DETNCCL_DIAGNOSTIC_NAME)
#undef DETNCCL_DIAGNOSTIC_NAME
  };
  // NCCL's debug output.
  static constexpr std::string_view kNcclDebugVariables[] = {"NCCL_DEBUG", "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS",
                                                             "NCCL_DEBUG_TIMESTAMP_FORMAT",
                                                             "NCCL_DEBUG_TIMESTAMP_LEVELS"};
  const auto listed = [name](const auto& names) {
    return std::find(std::begin(names), std::end(names), name) != std::end(names);
  };
  return listed(kDiagnosticVariables) || listed(kNcclDebugVariables);
}

std::string_view log_end_name(records::LogEndKind kind) noexcept {
  switch (kind) {
    case records::LogEndKind::kClosed:
      return "closed";
    case records::LogEndKind::kTruncated:
      return "truncated";
    case records::LogEndKind::kTornTail:
      return "torn tail";
    case records::LogEndKind::kCorrupt:
      return "corrupt";
    case records::LogEndKind::kNotReached:
      break;
  }
  return "open";
}

}  // namespace detnccl::analysis
