// detnccl shim: the tracer's digest pipeline (see digest_pipeline.h).
#include "interpose/digest_pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <utility>

#include "hash/fingerprint.h"
#include "interpose/buffer_location.h"
#include "interpose/non_blocking.h"
#include "interpose/shim_log.h"
#include "interpose/tracer_process.h"
#include "records/block_digests.h"

namespace detnccl::interpose {
namespace {

using hash::device_fingerprints_available;
using hash::device_fingerprints_unavailable_reason;
using hash::DeviceDigestTicket;
using hash::enqueue_device_digests;

bool fingerprint_into(const void* data, std::uint64_t bytes, std::uint64_t blocks, bool segments,
                      std::uint64_t segment_bytes, Digests& out) noexcept {
  try {
    out.whole = hash::fingerprint(data, bytes);
    if (blocks > 0) {
      const std::uint64_t block_bytes = bytes / blocks;
      out.blocks.resize(blocks);
      for (std::uint64_t b = 0; b < blocks; ++b) {
        out.blocks[b] = hash::fingerprint(static_cast<const std::byte*>(data) + b * block_bytes, block_bytes);
      }
    }
    if (segments) out.segments = hash::segment_digests(data, bytes, segment_bytes);
    return true;
  } catch (const std::exception& error) {
    log_warning_once(g_process->digests.warned_hash_failure, std::string("cannot fingerprint a buffer (") +
                                                                 error.what() + "); such calls are recorded without");
    return false;
  }
}

}  // namespace

// Starts the digests of one side of a call: on the CPU now for host memory, by kernels on the call's stream for
// device memory (the result comes later through the ticket), or not at all (one warning) when neither is possible.
void start_digests(const void* data, std::uint64_t bytes, std::uint64_t blocks, cudaStream_t stream, int device,
                   DigestSource& out) noexcept {
  const config::Config& config = g_process->config;
  const bool segments = config.trace >= config::TraceLevel::kSegments;
  if (data == nullptr && bytes > 0) return;
  int driver_status = 0;
  const BufferLocation location = bytes == 0 ? BufferLocation::kHost : locate_buffer(data, &driver_status);
  if (location == BufferLocation::kHost) {
    out.known = fingerprint_into(data, bytes, blocks, segments, config.segment_bytes, out.digests);
    return;
  }
  if (location == BufferLocation::kUnknown) {
    // RATIONALE: neither reading it here (device memory: a crash) nor in a kernel (pageable host memory: a fault
    // that ends the job's CUDA context) is safe.
    log_warning_once(g_process->digests.warned_location_unknown,
                     "the CUDA driver cannot say whether a buffer is device or host memory (cuPointerGetAttribute "
                     "returned " +
                         std::to_string(driver_status) + "): such buffers are recorded without fingerprints");
    return;
  }
  if (!device_fingerprints_available()) {
    log_warning_once(g_process->digests.warned_device_unavailable,
                     std::string("device buffers are recorded without fingerprints: ") +
                         std::string(device_fingerprints_unavailable_reason()));
    return;
  }
  register_exit_drain(*g_process);
  out.ticket = enqueue_device_digests({data, bytes, blocks, segments ? config.segment_bytes : 0, device}, stream);
}

namespace {

// Collects finished device digests into the call's fields. False while a ticket is still pending.
bool settle(PendingCall& call) noexcept {
  for (DigestSource* side : {&call.input, &call.output}) {
    if (!side->ticket) continue;
    switch (side->ticket->poll()) {
      case DeviceDigestTicket::kPending:
        return false;
      case DeviceDigestTicket::kReady:
        side->digests = side->ticket->result();
        side->known = true;
        break;
      case DeviceDigestTicket::kCaptured:
        call.fields.flags |= records::kCallCaptured;
        break;
      case DeviceDigestTicket::kFailed:
        g_process->digests.failed_device_sides.fetch_add(1, std::memory_order_relaxed);
        log_warning_once(g_process->digests.warned_device_failure,
                         "a device fingerprint failed (" + std::string(side->ticket->failure()) +
                             "); such calls are recorded without fingerprints");
        break;
    }
    side->ticket.reset();
  }
  if (call.input.known) {
    call.fields.input_fingerprint = call.input.digests.whole;
    call.fields.flags |= records::kCallInputFingerprint;
  }
  if (call.output.known) {
    call.fields.output_fingerprint = call.output.digests.whole;
    call.fields.flags |= records::kCallOutputFingerprint;
  }
  return true;
}

void write_record(const PendingCall& call) noexcept {
  records::RecordWriter* writer = g_process->log.active_writer.load(std::memory_order_acquire);
  if (writer == nullptr) return;
  records::CallRecord record;
  static_cast<records::CallFields&>(record) = call.fields;
  record.input_blocks = call.input.digests.blocks;
  record.output_blocks = call.output.digests.blocks;
  record.input_segments = call.input.digests.segments;
  record.output_segments = call.output.digests.segments;
  // RATIONALE: one digest per peer would make the record grow with the world size; below DETNCCL_TRACE=segments
  // the record carries their fold only (records/block_digests.h says what that loses).
  records::fold_call_blocks(record, g_process->config.trace >= config::TraceLevel::kSegments);
  writer->append(record);
}

// The collector: writes queued records in order, each once its device fingerprints are in. Polls (no host
// synchronisation with the job's streams), backing off while the head record's kernels are still running.
void collect_queued_records() {
  Process& process = *g_process;
  auto pause = std::chrono::microseconds(50);
  std::unique_lock<std::mutex> lock(process.digests.queue_mutex);
  for (;;) {
    process.digests.queue_changed.wait(lock,
                                       [&] { return process.digests.stopping || !process.digests.queue.empty(); });
    if (process.digests.queue.empty()) return;  // stopping, and everything is written
    PendingCall& head = process.digests.queue.front();
    lock.unlock();
    const bool ready = settle(head);
    if (ready) write_record(head);
    lock.lock();
    if (ready) {
      process.digests.queue.pop_front();
      pause = std::chrono::microseconds(50);
    } else {
      process.digests.queue_changed.wait_for(lock, pause);
      pause = std::min(pause * 2, std::chrono::microseconds(2000));
    }
  }
}

// Hands a completed call to the log: directly when nothing is queued and it needs no wait, else through the queue
// (so that one thread's records keep their order).
void submit(PendingCall&& call) noexcept {
  Process& process = *g_process;
  try {
    const bool waits = call.input.ticket || call.output.ticket;
    std::unique_lock<std::mutex> lock(process.digests.queue_mutex);
    if (!waits && process.digests.queue.empty()) {
      lock.unlock();
      settle(call);
      write_record(call);
      return;
    }
    process.digests.queue.push_back(std::move(call));
    if (!process.digests.collector.joinable()) process.digests.collector = std::thread(collect_queued_records);
    process.digests.queue_changed.notify_one();
  } catch (const std::exception& error) {
    stop_tracing_with_warning("cannot queue a record", error.what());
  }
}

}  // namespace

// Outputs are fingerprinted once the call (or its group) has run. A non-blocking communicator's call may return
// ncclInProgress before NCCL has enqueued its work: its outputs are fingerprinted once it has (the kernels then come
// after the operation on the stream), and the record keeps the state the call settled in.
void complete(PendingCall&& call) noexcept {
  if (call.hash_output && call.fields.result == ncclInProgress) call.fields.result = wait_until_enqueued(call.comm);
  if (call.hash_output && call.fields.result == ncclSuccess) {
    start_digests(call.output_data, call.output_bytes, call.output_blocks, call.stream, call.device, call.output);
  }
  submit(std::move(call));
}

// At exit: lets the collector write what is queued (device work still running gets up to 10 s), then stops it.
void drain_queue_at_exit(Process& process) {
  const std::uint64_t failed_before = process.digests.failed_device_sides.load(std::memory_order_relaxed);
  std::size_t queued = 0;
  {
    const std::lock_guard<std::mutex> lock(process.digests.queue_mutex);
    process.digests.stopping = true;
    process.digests.queue_changed.notify_all();
    queued = process.digests.queue.size();
  }
  if (!process.digests.collector.joinable()) return;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    {
      const std::lock_guard<std::mutex> lock(process.digests.queue_mutex);
      if (process.digests.queue.empty()) break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      // The log then ends with a truncation marker naming this (close() writes no end marker after it).
      stop_tracing_with_warning(
          "device fingerprints of the last calls did not complete within 10 s of exit; "
          "their records are lost");
      process.digests.collector.detach();
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  process.digests.collector.join();
  // Said precisely, not only as the first failure's one warning: how many of the records drained here lost what.
  if (const std::uint64_t failed = process.digests.failed_device_sides.load(std::memory_order_relaxed) - failed_before;
      failed != 0) {
    log_warning("at exit, " + std::to_string(failed) + " device fingerprint(s) of the last " + std::to_string(queued) +
                " queued record(s) failed (see the warning above for the first reason); those records are written "
                "without them, all other fields intact");
  }
}

void register_exit_drain(Process& process) noexcept {
  try {
    std::call_once(process.digests.exit_drain_registered, [] {
      std::atexit([] {
        Process* current = g_process;
        // As close_log_at_exit: a fork()ed child that traced nothing has nothing of its own to drain.
        if (current == nullptr || (current->forked_child && !current->log.writer_attempted)) return;
        drain_queue_at_exit(*current);
      });
    });
  } catch (const std::exception&) {
    // call_once may throw std::system_error: the drain at close_log_at_exit is still there.
  }
}

// What a fork()ed child keeps of its parent's queued records, untouched and never freed (see tracer_process.cc).
std::deque<PendingCall>* volatile g_parent_queue = nullptr;

void digests_start_over_in_child(DigestQueue& digests) {
  // RATIONALE: the parent's collector thread does not exist here (joining it would wait forever): its handle is
  // abandoned in place (placement new, no destructor runs). Its queued records are the parent's (leftovers).
  if (digests.collector.joinable()) new (&digests.collector) std::thread();
  if (!digests.queue.empty()) {
    try {
      g_parent_queue = new std::deque<PendingCall>(std::move(digests.queue));
      digests.queue.clear();
    } catch (...) {
      new (&digests.queue) std::deque<PendingCall>();  // out of memory: abandoned without a trace
    }
  }
  digests.stopping = false;
}

}  // namespace detnccl::interpose
