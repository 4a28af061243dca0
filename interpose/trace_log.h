// detnccl shim: the tracer's log — the per-process log file, its header (rank, world size, versions, configuration)
// and the run's name, created at the first communicator recorded; and the one way tracing stops on a failure.
//
// Internal to the tracer (tracer_process.h holds the one TraceLog of the process).
#ifndef DETNCCL_INTERPOSE_TRACE_LOG_H
#define DETNCCL_INTERPOSE_TRACE_LOG_H

#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>

#include "records/capture_writer.h"
#include "records/record_writer.h"

namespace detnccl::interpose {

struct Process;
struct Communicator;

// The log of this process. `writer` and `writer_attempted` are guarded by Process::mutex; the per-call path reads
// `active_writer` without it (null: tracing is off, or stopped).
struct TraceLog {
  std::unique_ptr<records::RecordWriter> writer;
  bool writer_attempted = false;
  std::uint32_t global_rank = 0;
  std::atomic<records::RecordWriter*> active_writer{nullptr};
  // DETNCCL_CAPTURE: the rank's capture file, created with the log (guarded likewise); `active_capture` is null when
  // capture is off or could not start. Once it stops (budget, failure) the writer stays, saying stopped().
  std::unique_ptr<records::CaptureWriter> capture;
  std::atomic<records::CaptureWriter*> active_capture{nullptr};
};

// Creates the log at the first communicator recorded (ready: its size and rank are known). Caller holds
// Process::mutex.
void create_writer(Process& process, const Communicator& first);

// Turns tracing off after a failure of the tracer's own (`what`, then `detail`, e.g. an exception's text), with one
// warning. A log already open ends with a truncation marker naming the failure (never the normal end marker), so
// that readers and `detnccl diff`/`check` know that records are missing.
void stop_tracing_with_warning(std::string_view what, std::string_view detail = {}) noexcept;

// Turns capture off after a failure of the shim's own (`why`), with one warning: the capture file ends with a stop
// marker, and later calls are recorded as not captured (records::kCallSaveSkipped). Tracing goes on.
void stop_capture_with_warning(std::string_view why) noexcept;

// At exit, after the digest queue is drained: writes the end marker and closes the log (and the capture file).
void close_log(Process& process);

// In a fork()ed child (Process::mutex held): the parent's writer is abandoned unclosed (see tracer_process.cc).
void log_start_over_in_child(TraceLog& log);

}  // namespace detnccl::interpose

#endif  // DETNCCL_INTERPOSE_TRACE_LOG_H
