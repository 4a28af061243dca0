// detnccl shim: the tracer's digest pipeline — fingerprints of a traced call's buffers (on the CPU for host memory,
// by kernels on the call's stream for device memory, hash/device_fingerprints.h) and the ordered queue, drained by
// a collector thread, that writes each record once its digests are in.
//
// Internal to the tracer (tracer_process.h holds the one DigestQueue of the process).
#ifndef DETNCCL_INTERPOSE_DIGEST_PIPELINE_H
#define DETNCCL_INTERPOSE_DIGEST_PIPELINE_H

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "abi/nccl_abi.h"
#include "hash/device_copies.h"
#include "hash/device_fingerprints.h"
#include "records/log_format.h"

namespace detnccl::interpose {

struct Process;

// Fingerprints of a buffer about to be recorded: whole, per-peer blocks, segments (the same on CPU and GPU).
using Digests = hash::DeviceDigests;

// Where one side's digests come from: computed on the CPU (host memory), or by kernels on the call's stream
// (device memory: a ticket the collector polls).
struct DigestSource {
  bool known = false;  // digests holds the result
  Digests digests;
  std::unique_ptr<hash::DeviceDigestTicket> ticket;
};

// One side's buffer to save in the capture file (DETNCCL_CAPTURE), taken when its fingerprint is: copied on the CPU
// for host memory, on the call's stream for device memory (a ticket the collector polls). The collector stores it
// (records/capture_writer.h) before it writes the call's record, and the record's flags say whether it did.
struct CaptureSource {
  bool wanted = false;          // capture was asked for this side (DETNCCL_CAPTURE=1 and the call fingerprinted)
  bool already_stored = false;  // the capture file holds this content already: nothing was copied
  std::uint64_t bytes = 0;
  std::vector<std::byte> host;  // the host copy
  std::unique_ptr<hash::DeviceCopyTicket> ticket;
};

// A call between its real NCCL call and its record: waiting for the outermost ncclGroupEnd, or for device
// fingerprints.
struct PendingCall {
  records::CallFields fields;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int device = -1;  // the communicator's (ncclCommCuDevice), -1 if unknown: a default stream's device
  DigestSource input, output;
  CaptureSource input_copy, output_copy;
  const void* output_data = nullptr;
  std::uint64_t output_bytes = 0;
  std::uint64_t output_blocks = 0;  // per-peer blocks to fingerprint (0: none)
  bool hash_output = false;
  bool capture_output = false;
};

// Records waiting for device fingerprints, in the order their calls completed; the collector thread writes them
// once the kernels are done. A record that needs no wait goes straight to the log while this queue is empty.
struct DigestQueue {
  std::mutex queue_mutex;
  std::condition_variable queue_changed;
  std::deque<PendingCall> queue;  // guarded by queue_mutex
  std::thread collector;          // started at the first queued record
  bool stopping = false;          // guarded by queue_mutex
  std::atomic<bool> warned_device_unavailable{false};
  std::atomic<bool> warned_location_unknown{false};
  std::atomic<bool> warned_device_failure{false};
  std::atomic<bool> warned_hash_failure{false};
  std::atomic<bool> warned_capture_pageable{false};
  std::atomic<std::uint64_t> failed_device_sides{0};  // call sides whose device fingerprint failed, so far
  std::once_flag exit_drain_registered;               // see register_exit_drain
};

// Starts the digests of one side of a call: on the CPU now for host memory, by kernels on the call's stream for
// device memory (the result comes later through the ticket), or not at all (one warning) when neither is possible.
// `device`: the communicator's, for a default stream (see hash::DeviceDigestRequest::default_stream_device).
void start_digests(const void* data, std::uint64_t bytes, std::uint64_t blocks, cudaStream_t stream, int device,
                   DigestSource& out) noexcept;

// Starts the capture of one side of a call whose digests start_digests has just started (`digests`): a host copy now
// (unless the capture file holds that content already), a copy on the call's stream for device memory, or nothing
// when the side has no fingerprint coming or capture has stopped. Capture's own failures turn it off with one warning.
void start_capture(const void* data, std::uint64_t bytes, cudaStream_t stream, int device, const DigestSource& digests,
                   CaptureSource& out) noexcept;

// A call that has run (its group too): fingerprints its outputs and hands its record to the log, now or through the
// queue.
void complete(PendingCall&& call) noexcept;

// At exit: lets the collector write what is queued (device work still running gets up to 10 s), then stops it.
void drain_queue_at_exit(Process& process);

// RATIONALE: the CUDA runtime linked into the shim registers its own exit handlers when it initialises, which is
// after the tracer's (registered at its configuration), so they would run first and tear the runtime down under the
// exit drain: the last records would lose their fingerprints. Called once device fingerprints are available (the
// runtime initialised), this registers a drain that runs before them (exit handlers run in reverse order).
void register_exit_drain(Process& process) noexcept;

// In a fork()ed child (queue_mutex held): the parent's collector thread and queued records are the parent's.
void digests_start_over_in_child(DigestQueue& digests);

}  // namespace detnccl::interpose

#endif  // DETNCCL_INTERPOSE_DIGEST_PIPELINE_H
