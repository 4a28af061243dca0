// Fingerprints of device buffers, taken by kernels enqueued on a stream: a "hash on a stream" service, used by the
// shim's tracer with each NCCL call's own stream. It knows no NCCL.
//
// The tracer asks for a buffer's digests at the moment they must describe it — inputs before the real call (an
// in-place call overwrites them), outputs after it (after the outermost ncclGroupEnd for a grouped call) — by
// enqueueing the hash kernels (hash/fingerprint_cuda.h) on the call's stream. Stream order then gives exactly that
// moment, without any host synchronisation: the results land in pinned host memory and a CUDA event recorded
// after the kernels says when; the tracer's background thread polls the returned ticket.
//
// Under CUDA stream capture nothing is enqueued (the graph would hash on every replay, into memory this ticket no
// longer owns): the ticket says kCaptured and the tracer marks the record as captured. No function here makes a
// call that would break a capture in progress on any thread.
//
// In a build without CUDA (device_fingerprints_none.cc) the same API exists and says "unavailable".
// No CUDA header is needed to use this one: a cudaStream_t is a CUstream_st*.
#ifndef DETNCCL_HASH_DEVICE_FINGERPRINTS_H
#define DETNCCL_HASH_DEVICE_FINGERPRINTS_H

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

struct CUstream_st;  // cudaStream_t is `CUstream_st*` (cuda_runtime_api.h, abi/nccl_abi.h)

namespace detnccl::hash {

// One buffer whose digests are wanted.
struct DeviceDigestRequest {
  const void* data = nullptr;       // device (or device-accessible) address; may be null when bytes is 0
  std::uint64_t bytes = 0;          // length of the buffer
  std::uint64_t blocks = 0;         // 0, or n: also fingerprint n equal consecutive blocks of bytes / n bytes
  std::uint64_t segment_bytes = 0;  // 0: no segment digests; else a positive multiple of hash::kLeafBytes
  // The call's communicator's device, -1 if unknown: a default stream (0, per-thread) is that device's, as NCCL
  // makes it current in the call; without it, the thread's current device's.
  int default_stream_device = -1;
};

// The digests of one request, equal bit for bit to hash::fingerprint / hash::segment_digests of the same bytes.
struct DeviceDigests {
  std::uint64_t whole = 0;              // fingerprint of the whole buffer
  std::vector<std::uint64_t> blocks;    // request.blocks fingerprints, in buffer order
  std::vector<std::uint64_t> segments;  // ceil(bytes / segment_bytes) segment digests
};

// ------------------------------------------------------------------------------------------------------------
// The work a request becomes: pure arithmetic, no CUDA (device_fingerprints_plan.cc, in every build).

// Digests one request may ask for at most (1 + blocks + segments); larger requests are refused.
inline constexpr std::uint64_t kMaxDeviceDigestsPerRequest = std::uint64_t{1} << 24;
// Smallest device scratch block and smallest result slot the pools hand out (see the sizing functions below).
inline constexpr std::uint64_t kMinScratchBlockBytes = std::uint64_t{4} << 10;
inline constexpr std::uint64_t kMinResultSlotDigests = 8;

struct DeviceDigestPlan {
  std::string_view failure;          // empty when the request can be served; otherwise why not
  std::uint64_t block_bytes = 0;     // bytes / blocks (a remainder, if any, belongs to no block)
  bool blocks_as_segments = false;   // the block fingerprints are the segment digests of the first
                                     // blocks * block_bytes bytes with segments of block_bytes: one pipeline
                                     // instead of `blocks` (possible when block_bytes is a multiple of a leaf)
  std::uint64_t segments = 0;        // segment digests to compute
  std::uint64_t result_digests = 0;  // 1 + blocks + segments: the result slot's length
  std::uint64_t pipelines = 0;       // fingerprint / segment-digest enqueues, one after another on the stream
  std::uint64_t scratch_bytes = 0;   // device scratch they need: the largest any one of them needs, since stream
                                     // order runs them one after another over the same scratch
};

// Validates `request` and computes its plan. Never throws; a refused request has a non-empty `failure`.
DeviceDigestPlan plan_device_digests(const DeviceDigestRequest& request) noexcept;

// Size class of a result slot holding `digests` digests: the next power of two, at least kMinResultSlotDigests.
std::uint64_t result_slot_digests(std::uint64_t digests) noexcept;

// Size class of a device scratch block of at least `bytes` bytes: 0 for 0, else the next power of two, at least
// kMinScratchBlockBytes. Blocks are recycled by size class, so a job's steady state allocates nothing.
std::uint64_t scratch_block_bytes(std::uint64_t bytes) noexcept;

// ------------------------------------------------------------------------------------------------------------
// Enqueueing and collecting (device_fingerprints.cc with CUDA, device_fingerprints_none.cc without).

// Whether device fingerprints can be taken in this process: a CUDA build, the CUDA driver already loaded by the
// job (it is never loaded by us), a driver recent enough for the CUDA runtime the shim links
// (cuda/driver_version.h), and at least one usable device. Evaluated once, at the first call — call it
// once the job uses CUDA (e.g. at the first device buffer); cheap afterwards. Thread-safe.
bool device_fingerprints_available() noexcept;

// Loads the hash kernels into `device`'s context now (once per device), so that no first launch loads them lazily,
// which may wait for the device's queued work (cuda/kernel_preload.h). Call it when a communicator of `device` is
// created, outside any capture. Returns whether they are loaded; false without device fingerprints. Thread-safe.
bool prepare_device_fingerprints(int device) noexcept;

// Why device_fingerprints_available() is false (empty when it is true), for the tracer's one warning.
std::string_view device_fingerprints_unavailable_reason() noexcept;

// The digests of one enqueued request, collected later. A ticket is used by one thread at a time (any thread).
// It holds its pooled resources (event, result slot, scratch) until poll() sees its work complete, so poll
// pending tickets promptly; destroying a ticket whose kernels still run is safe (they are recycled afterwards).
class DeviceDigestTicket {
 public:
  enum State {
    kPending,   // kernels enqueued, results not there yet
    kReady,     // result() holds the digests
    kCaptured,  // the stream was capturing a CUDA graph: nothing was enqueued, there will be no digests
    kFailed,    // nothing to collect; failure() says why
  };
  struct InFlight;  // the CUDA resources of a pending ticket (defined by the implementation)

  // A ticket that is already settled: kCaptured, or kFailed with a reason.
  static std::unique_ptr<DeviceDigestTicket> captured();
  static std::unique_ptr<DeviceDigestTicket> failed(std::string reason);
  // A pending ticket owning the resources of enqueued work (implementation only: InFlight is incomplete here).
  explicit DeviceDigestTicket(std::unique_ptr<InFlight> in_flight) noexcept;
  ~DeviceDigestTicket();
  DeviceDigestTicket(const DeviceDigestTicket&) = delete;
  DeviceDigestTicket& operator=(const DeviceDigestTicket&) = delete;

  // The current state; never blocks (one cudaEventQuery while pending). Turns kPending into kReady once the
  // kernels have completed, or kFailed if CUDA reports an error for them.
  State poll() noexcept;

  // The digests; meaningful once poll() returned kReady (empty before).
  const DeviceDigests& result() const noexcept { return result_; }

  // Why the ticket is kFailed (empty otherwise).
  std::string_view failure() const noexcept { return failure_; }

 private:
  DeviceDigestTicket(State state, std::string failure) noexcept;
  State state_ = kPending;
  DeviceDigests result_;
  std::string failure_;
  std::unique_ptr<InFlight> in_flight_;
};

// Enqueues the digests of `request` on `stream` (a cudaStream_t of the job; 0 is the legacy default stream) and
// returns their ticket. Never synchronises with the host or the device; after warm-up it allocates no device or
// pinned memory (scratch blocks, result slots and events come from pools that grow only when empty). When
// `stream` is capturing a CUDA graph it enqueues nothing and returns a kCaptured ticket. On any failure (not
// available, invalid request, host memory, CUDA error) it returns a kFailed ticket with the reason; the caller
// records the call without fingerprints. Thread-safe; never throws (nullptr only if even a ticket cannot be
// allocated).
std::unique_ptr<DeviceDigestTicket> enqueue_device_digests(const DeviceDigestRequest& request,
                                                           CUstream_st* stream) noexcept;

}  // namespace detnccl::hash

#endif  // DETNCCL_HASH_DEVICE_FINGERPRINTS_H
