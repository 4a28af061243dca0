// detnccl shim: the tracer's digest pipeline (see digest_pipeline.h).
#include "interpose/digest_pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <new>
#include <span>
#include <string>
#include <thread>
#include <utility>

#include "hash/fingerprint.h"
#include "interpose/buffer_location.h"
#include "interpose/non_blocking.h"
#include "interpose/shim_log.h"
#include "interpose/trace_log.h"
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

void start_capture(const void* data, std::uint64_t bytes, cudaStream_t stream, int device, const DigestSource& digests,
                   CaptureSource& out) noexcept {
  records::CaptureWriter* capture = g_process->log.active_capture.load(std::memory_order_acquire);
  if (capture == nullptr) return;
  out.wanted = true;
  out.bytes = bytes;
  if (capture->stopped()) return;  // budget spent or a failure: the record says "not saved"
  if (digests.known) {
    // RATIONALE: the fingerprint is known now (host memory): content the file holds already is not copied again.
    if (capture->contains(digests.digests.whole, bytes)) {
      out.already_stored = true;
      return;
    }
    try {
      const auto* first = static_cast<const std::byte*>(data);
      out.host.assign(first, first + bytes);
    } catch (const std::exception& error) {
      stop_capture_with_warning(std::string("cannot copy a buffer of ") + std::to_string(bytes) + " bytes (" +
                                error.what() + ")");
    }
    return;
  }
  if (digests.ticket) {
    out.ticket = hash::enqueue_device_copy({data, bytes, device}, stream);
    if (!out.ticket) stop_capture_with_warning("out of memory while enqueueing a device copy");
  }
  // Otherwise no fingerprint is coming (the buffer's location is unknown, or fingerprinting failed): there is no
  // content address to store it under, and the record says "not saved".
}

namespace {

// Stores one side's buffer in the capture file, once its fingerprint is known, and says so in the flags.
void save_capture(const DigestSource& digests, CaptureSource& copy, std::uint16_t saved_flag,
                  records::CallFields& fields) noexcept {
  if (!copy.wanted) return;
  bool saved = false;
  records::CaptureWriter* capture = g_process->log.active_capture.load(std::memory_order_acquire);
  // RATIONALE: stopped() is asked here, where calls are settled in their order (on the collector, or directly when
  // nothing is queued): a call the job thread found already stored before an earlier call's save stopped capture is
  // "not saved" all the same, so which calls after the stop say so never depends on how far the job ran ahead.
  if (digests.known && capture != nullptr && !capture->stopped()) {
    if (copy.already_stored) {
      saved = true;
    } else {
      std::span<const std::byte> bytes;
      bool have = !copy.ticket;  // a host copy (possibly of 0 bytes)
      if (!copy.ticket) bytes = copy.host;
      if (copy.ticket) {
        switch (copy.ticket->poll()) {
          case hash::DeviceCopyTicket::kReady:
            bytes = copy.ticket->bytes();
            have = true;
            if (copy.ticket->pageable()) {
              log_warning_once(g_process->digests.warned_capture_pageable,
                               "capture: pinned host memory could not be allocated, so device buffers are copied "
                               "into pageable memory, which makes the job wait for each copy");
            }
            break;
          case hash::DeviceCopyTicket::kFailed:
            stop_capture_with_warning("a device buffer could not be copied (" + std::string(copy.ticket->failure()) +
                                      ")");
            break;
          default:  // kCaptured (the record says so), or kPending (never here: settle waits)
            break;
        }
      }
      if (have && bytes.size() == copy.bytes) {
        const records::CaptureSaveStatus status = capture->save(digests.digests.whole, bytes);
        saved = status == records::CaptureSaveStatus::kStored || status == records::CaptureSaveStatus::kAlreadyStored;
      }
    }
  }
  fields.flags |= saved ? saved_flag : std::uint16_t{records::kCallSaveSkipped};
  copy.host = {};  // the copy's memory goes back now, not when the record leaves the queue
  copy.ticket.reset();
  copy.wanted = false;
}

// Collects finished device digests into the call's fields. False while a ticket is still pending.
bool settle(PendingCall& call) noexcept {
  for (const CaptureSource* copy : {&call.input_copy, &call.output_copy}) {
    if (copy->ticket && copy->ticket->poll() == hash::DeviceCopyTicket::kPending) return false;
  }
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
  save_capture(call.input, call.input_copy, records::kCallInputSaved, call.fields);
  save_capture(call.output, call.output_copy, records::kCallOutputSaved, call.fields);
  return true;
}

// Whether a call's capture has bytes to write: that is the collector's work, never the job thread's.
bool capture_to_write(const PendingCall& call) noexcept {
  for (const CaptureSource* copy : {&call.input_copy, &call.output_copy}) {
    if (copy->wanted && !copy->already_stored && (copy->ticket || !copy->host.empty())) return true;
  }
  return false;
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
    const bool waits = call.input.ticket || call.output.ticket || capture_to_write(call);
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
    if (call.capture_output) {
      start_capture(call.output_data, call.output_bytes, call.stream, call.device, call.output, call.output_copy);
    }
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
