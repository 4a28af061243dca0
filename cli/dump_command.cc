// detnccl dump: a run's records in readable form, one line per record (text, JSON lines or CSV).
#include <atomic>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli/analysis/run_logs.h"
#include "cli/call_field_output.h"
#include "cli/commands.h"
#include "cli/step_numbering_options.h"
#include "cli/terminal.h"
#include "hash/fingerprint.h"

namespace detnccl::cli {
namespace {

using analysis::RankLogFile;
using records::CallRecord;
using records::CommunicatorRecord;

std::string origin_name(records::CommOrigin origin) {
  switch (origin) {
    case records::CommOrigin::kInitRank:
      return "InitRank";
    case records::CommOrigin::kInitAll:
      return "InitAll";
    case records::CommOrigin::kInitRankScalable:
      return "InitRankScalable";
    case records::CommOrigin::kSplit:
      return "Split";
    case records::CommOrigin::kShrink:
      return "Shrink";
    case records::CommOrigin::kUnknown:
      break;
  }
  return "unknown";
}

class Dumper {
 public:
  explicit Dumper(std::string format) : format_(std::move(format)) {
    if (format_ == "csv") {
      std::cout << call_csv_header();
    }
  }

  void header(const RankLogFile& file, const records::LogHeader& h) {
    if (format_ == "text") {
      std::cout << "# rank " << h.rank << " (" << file.path << "): run " << h.run << ", host " << h.host << ", pid "
                << h.pid << ", world size " << h.world_size << ", NCCL " << h.nccl_version << ", detnccl "
                << h.detnccl_version_text << ", fingerprint version " << h.fingerprint_version << '\n';
    } else if (format_ == "jsonl") {
      nlohmann::json line = {{"type", "header"},
                             {"path", file.path},
                             {"rank", h.rank},
                             {"world_size", h.world_size},
                             {"run", h.run},
                             {"host", h.host},
                             {"pid", h.pid},
                             {"nccl_version", h.nccl_version},
                             {"detnccl_version", h.detnccl_version_text},
                             {"fingerprint_version", h.fingerprint_version},
                             {"format_version", h.format_version},
                             {"start_time_ns", h.start_time_ns},
                             {"config", h.config_text},
                             {"nccl_environment", h.nccl_environment}};
      std::cout << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    }
  }

  void communicator(std::uint32_t rank, const CommunicatorRecord& c) {
    if (format_ == "text") {
      std::cout << "comm " << c.ordinal << "  id " << hash::format_digest(c.id) << "  rank " << c.rank << " of "
                << c.nranks << "  " << origin_name(c.origin);
      if (c.parent_ordinal != records::kNoParent) std::cout << " of comm " << c.parent_ordinal;
      if (c.split_color != records::kNotSplit) std::cout << " color " << c.split_color << " key " << c.split_key;
      if (c.device >= 0) std::cout << "  device " << c.device;
      std::cout << '\n';
    } else if (format_ == "jsonl") {
      nlohmann::json line = {
          {"type", "communicator"}, {"rank", rank},        {"ordinal", c.ordinal}, {"id", hash::format_digest(c.id)},
          {"nranks", c.nranks},     {"comm_rank", c.rank}, {"device", c.device},   {"origin", origin_name(c.origin)}};
      if (c.parent_ordinal != records::kNoParent) {
        line["parent_ordinal"] = c.parent_ordinal;
        line["parent_id"] = hash::format_digest(c.parent_id);
      }
      if (c.split_color != records::kNotSplit) {
        line["split_color"] = c.split_color;
        line["split_key"] = c.split_key;
      }
      std::cout << line.dump() << '\n';
    }
  }

  // The call's line, generated from the call-record field table (records/call_record_fields.h).
  void call(std::uint32_t rank, const CallRecord& c) {
    if (format_ == "text") {
      std::cout << call_text_line(c);
    } else if (format_ == "jsonl") {
      std::cout << call_json_line(rank, c).dump() << '\n';
    } else {
      std::cout << call_csv_row(rank, c);
    }
  }

  // A file with no header (records::OpenedLog::no_header): its header and end lines, in place of its records.
  void no_header(const RankLogFile& file, const std::string& message) {
    if (format_ == "text") {
      std::cout << "# rank " << file.rank << " (" << file.path << "): no header\n# end (no header): " << message
                << '\n';
    } else if (format_ == "jsonl") {
      std::cout << nlohmann::json({{"type", "end"},
                                   {"rank", file.rank},
                                   {"path", file.path},
                                   {"kind", "no header"},
                                   {"offset", 0},
                                   {"message", message}})
                       .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                << '\n';
    }
  }

  // How the rank's log ends; `unknown_records`: records of types this detnccl does not know, skipped.
  void end(std::uint32_t rank, const records::LogEnd& e, std::uint64_t unknown_records) {
    if (format_ == "text") {
      std::cout << "# end (" << analysis::log_end_name(e.kind) << "): " << e.message;
      if (unknown_records > 0) {
        std::cout << "; " << unknown_records << " record" << (unknown_records == 1 ? "" : "s")
                  << " of a type this detnccl does not know skipped (written by a newer detnccl?)";
      }
      std::cout << '\n';
    } else if (format_ == "jsonl") {
      std::cout << nlohmann::json({{"type", "end"},
                                   {"rank", rank},
                                   {"kind", analysis::log_end_name(e.kind)},
                                   {"offset", e.offset},
                                   {"message", e.message},
                                   {"unknown_records", unknown_records}})
                       .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                << '\n';
    } else if (unknown_records > 0) {
      std::cerr << "detnccl dump: rank " << rank << ": " << unknown_records << " record"
                << (unknown_records == 1 ? "" : "s") << " of a type this detnccl does not know skipped\n";
    }
  }

 private:
  std::string format_;
};

}  // namespace

int dump_command(const DumpOptions& options) {
  const analysis::StepNumbering numbering = step_numbering_of(options.step_numbering);
  const analysis::RunLogs run = analysis::list_run(options.run);
  if (!run.error.empty()) {
    std::cerr << "detnccl dump: " << run.error << '\n';
    return kExitUnusable;
  }
  std::vector<RankLogFile> files;
  for (const RankLogFile& file : run.logs) {
    if (!options.rank || file.rank == *options.rank) files.push_back(file);
  }
  if (files.empty()) {
    std::cerr << "detnccl dump: " << options.run << ": no log for rank " << *options.rank << '\n';
    return kExitUnusable;
  }
  Dumper dumper(options.format);
  int status = kExitSame;
  // RATIONALE: dump streams to stdout as it reads; when stderr is the same file (a terminal, `2>&1`) progress lines
  // would cut into the records, and the records scrolling by are progress enough.
  std::atomic<std::size_t> calls_dumped{0};
  std::optional<Progress> progress;
  if (!stderr_shares_stdout()) progress.emplace("detnccl dump", 0, "calls dumped", calls_dumped);
  for (const RankLogFile& file : files) {
    if (!std::cout) break;
    std::string error;
    bool no_header = false;
    const auto stream = analysis::RankLogStream::open(file.path, error, &no_header);
    if (!stream && no_header) {
      // Not unusable: the writer died before writing anything, so there is nothing to dump. Said on stdout (text
      // and jsonl) and on stderr (every format: CSV has no place for it).
      dumper.no_header(file, error);
      std::cout.flush();
      std::cerr << "detnccl dump: warning: " << error << '\n';
      continue;
    }
    if (!stream) {
      std::cout.flush();
      std::cerr << "detnccl dump: " << error << '\n';
      status = kExitUnusable;
      continue;
    }
    if (const std::string mismatch = analysis::rank_mismatch(file, stream->header()); !mismatch.empty()) {
      std::cout.flush();
      std::cerr << "detnccl dump: warning: " << mismatch << '\n';  // dumped anyway: dump shows what is there
    }
    stream->number_steps(numbering);
    dumper.header(file, stream->header());
    std::size_t communicators = 0;
    analysis::CallInRun call;
    const auto flush_communicators = [&] {
      for (; communicators < stream->communicators().size(); ++communicators) {
        dumper.communicator(file.rank, stream->communicators()[communicators]);
      }
    };
    while (stream->next(call)) {
      if (!std::cout) break;  // the output cannot be written (full disk...): main reports it
      flush_communicators();
      dumper.call(file.rank, call.call);
      calls_dumped.fetch_add(1, std::memory_order_relaxed);
    }
    flush_communicators();
    dumper.end(file.rank, stream->end(), stream->unknown_records_skipped());
    if (analysis::log_end_is_unusable(stream->end())) {
      std::cout.flush();
      std::cerr << "detnccl dump: " << file.path << ": " << stream->end().message << '\n';
      status = kExitUnusable;
    }
  }
  return status;
}

}  // namespace detnccl::cli

namespace detnccl::cli {

CommandRun add_dump_arguments(CLI::App& app) {
  auto options = std::make_shared<DumpOptions>();
  app.add_option("RUN", options->run, "Run directory (DETNCCL_DIR/RUN) or one rank-NNNNN.dnc file")->required();
  app.add_option("--rank", options->rank, "Only this rank's log");
  app.add_option("--format", options->format, "Output format")
      ->check(CLI::IsMember({"text", "jsonl", "csv"}))
      ->capture_default_str();
  add_step_numbering_options(app, options->step_numbering);
  return [options] { return dump_command(*options); };
}

}  // namespace detnccl::cli
