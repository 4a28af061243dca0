// detnccl shim: the tracer's log (see trace_log.h).
#include "interpose/trace_log.h"

#include <unistd.h>

#include <array>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "config/config.h"
#include "detnccl_version.h"
#include "hash/fingerprint.h"
#include "interpose/real_nccl.h"
#include "interpose/shim_log.h"
#include "interpose/tracer.h"
#include "interpose/tracer_process.h"

namespace detnccl::interpose {
namespace {

std::string hex64(std::uint64_t value) { return hash::format_digest(value); }

// The run directory's name: from the environment, else from the id of the first communicator this process created
// (equal on all ranks; a timestamp is not, since ranks start at different moments and the tracer adds no
// communication of its own).
std::string run_name(Process& process) {
  const auto environment = views_of(process.environment_copy);
  if (auto name = config::run_name_from_environment(process.config, environment)) return *name;
  if (process.registry.first_id_known && process.registry.first_id_is_shared)
    return "run-" + hex64(process.registry.first_id);
  return config::run_name_from_time(static_cast<std::int64_t>(now_ns() / 1000000000ull));
}

void create_capture(Process& process, const std::string& run_directory, std::uint32_t rank);

}  // namespace

// Creates the log at the first communicator recorded (ready: its size and rank are known). Caller holds
// process.mutex.
void create_writer(Process& process, const Communicator& first) {
  process.log.writer_attempted = true;
  if (process.forked_child) {
    // A fork()ed child may have been given its own rank in the environment (RANK=...) after the parent read it.
    process.environment_copy.clear();
    for (std::string_view entry : config::process_environment()) process.environment_copy.emplace_back(entry);
  }
  const auto environment = views_of(process.environment_copy);
  records::LogHeader header;
  header.start_time_ns = now_ns();
  header.pid = static_cast<std::uint32_t>(getpid());
  const auto world = config::world_size_from_environment(environment);
  if (auto rank = config::global_rank_from_environment(environment)) {
    header.rank = rank->rank;
    header.rank_source = records::RankSource::kEnvironment;
  } else if (!world || *world == first.nranks) {
    header.rank = first.rank;
    header.rank_source = records::RankSource::kCommunicator;
  } else {
    header.rank = header.pid;
    header.rank_source = records::RankSource::kProcessId;
  }
  header.world_size = world ? *world : first.nranks;
  // Without a launcher's world size the start-up check could not tell whether DETNCCL_RANKS selects a rank of this
  // job; the first communicator's size is only a guess at it, so this is a warning.
  if (!world && process.config.trace >= config::TraceLevel::kSteps) {
    if (auto problem = config::rank_window_problem(process.config, header.world_size)) {
      log_warning("no launcher variable gives the world size; if it is the first communicator's: " + *problem);
    }
  }
  int nccl_version = 0;
  if (DETNCCL_REAL(ncclGetVersion)(&nccl_version) == ncclSuccess) header.nccl_version = nccl_version;
  header.fingerprint_version = hash::kFingerprintVersion;
  header.detnccl_version = DETNCCL_VERSION_NUMBER;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  header.host = host;
  header.detnccl_version_text = DETNCCL_VERSION_TEXT;
  header.run = run_name(process);
  header.config_text = config::format_config(process.config);
  header.nccl_environment = config::nccl_variables(environment);

  process.log.global_rank = header.rank;
  set_log_rank(header.rank);
  records::WriterOptions options;
  options.write_calls = process.config.call_records();  // DETNCCL_TRACE=steps: digests only
  // The writer's message already says that tracing stopped and that the log is marked truncated.
  options.on_stop = [](std::string_view message) { log_warning(message); };
  records::CreatedWriter created = records::RecordWriter::create(
      {process.config.dir, header.run, records::rank_log_file_name(header.rank)}, header, std::move(options));
  if (!created.writer) {
    stop_tracing_with_warning(created.error);
    return;
  }
  log_info("tracing to " + created.writer->path());
  const std::string log_path = created.writer->path();
  process.log.writer = std::move(created.writer);
  process.log.active_writer.store(process.log.writer.get(), std::memory_order_release);
  if (process.config.capture) create_capture(process, log_path.substr(0, log_path.rfind('/')), header.rank);
}

namespace {

// The capture file next to the log (DETNCCL_CAPTURE=1): DIR/RUN/rank-NNNNN.cap. Without it the job goes on, traced.
void create_capture(Process& process, const std::string& run_directory, std::uint32_t rank) {
  if (!process.config.call_records()) {
    log_warning(
        "DETNCCL_CAPTURE=1 has no effect at DETNCCL_TRACE=steps: no call record would say which buffers a "
        "capture holds; nothing is captured");
    return;
  }
  records::CaptureWriterOptions options;
  options.budget_bytes = process.config.capture_bytes;
  // The writer's message says that capture stopped and that later calls are recorded as not captured.
  options.on_stop = [](std::string_view message) { log_warning(message); };
  records::CreatedCaptureWriter created = records::CaptureWriter::create(run_directory, rank, std::move(options));
  if (!created.writer) {
    log_warning("capture is off: " + created.error + " (tracing goes on)");
    return;
  }
  log_info("capturing buffers to " + created.writer->path());
  process.log.capture = std::move(created.writer);
  process.log.active_capture.store(process.log.capture.get(), std::memory_order_release);
}

}  // namespace

// RATIONALE: shim_active() stays on, so that group brackets stay balanced; with no active writer every traced
// call returns at its first check. The message is built without allocating: this runs when memory ran out.
void stop_tracing_with_warning(std::string_view what, std::string_view detail) noexcept {
  std::array<char, 400> why{};
  std::snprintf(why.data(), why.size(), "%.*s%s%.*s", static_cast<int>(what.size()), what.data(),
                detail.empty() ? "" : ": ", static_cast<int>(detail.size()), detail.data());
  records::RecordWriter* writer =
      g_process != nullptr ? g_process->log.active_writer.exchange(nullptr, std::memory_order_acq_rel) : nullptr;
  std::array<char, 512> message{};
  std::snprintf(message.data(), message.size(), "tracing is off for the rest of this process: %s (%sthe job goes on)",
                why.data(), writer != nullptr ? "the log is marked truncated; " : "");
  log_warning(message.data());
  if (writer != nullptr) writer->stop_early(why.data());
}

void stop_capture_with_warning(std::string_view why) noexcept {
  records::CaptureWriter* capture =
      g_process != nullptr ? g_process->log.active_capture.load(std::memory_order_acquire) : nullptr;
  if (capture == nullptr || capture->stopped()) return;
  capture->stop_early(why);
  std::array<char, 512> message{};
  std::snprintf(message.data(), message.size(),
                "capture is off for the rest of this process: %.*s; later calls are recorded as not captured "
                "(tracing goes on)",
                static_cast<int>(why.size()), why.data());
  log_warning(message.data());
}

void close_log(Process& process) {
  const std::lock_guard<std::mutex> lock(process.mutex);
  if (process.log.writer) process.log.writer->close();
  if (process.log.capture) process.log.capture->close();
}

namespace {

// What a fork()ed child keeps of its parent's log: the writer, untouched and never freed (its mutex may have been
// held by a parent thread at fork time; see tracer_process.cc). Volatile: the compiler must not drop the store.
records::RecordWriter* volatile g_parent_writer = nullptr;
records::CaptureWriter* volatile g_parent_capture = nullptr;

}  // namespace

void log_start_over_in_child(TraceLog& log) {
  records::RecordWriter* const writer = log.writer.release();
  g_parent_writer = writer;
  if (writer != nullptr) writer->detach_after_fork();
  log.active_writer.store(nullptr, std::memory_order_release);
  records::CaptureWriter* const capture = log.capture.release();
  g_parent_capture = capture;
  if (capture != nullptr) capture->detach_after_fork();
  log.active_capture.store(nullptr, std::memory_order_release);
  log.writer_attempted = false;
  log.global_rank = 0;
}

void flush_log() noexcept {
  if (g_process == nullptr) return;
  if (records::RecordWriter* writer = g_process->log.active_writer.load(std::memory_order_acquire)) writer->flush();
}

}  // namespace detnccl::interpose
