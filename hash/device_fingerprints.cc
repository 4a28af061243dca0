// Device fingerprints through the CUDA runtime, linked statically (device_fingerprints.h).
//
// RATIONALE: the static runtime shares the driver's primary context with the job's own runtime (PyTorch's, say),
// so the job's cudaStream_t handles, device pointers and current device all mean the same to both; and the shim
// stays free of any libcudart.so the job might load in another version.
#include "hash/device_fingerprints.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <exception>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "cuda/driver_version.h"
#include "cuda/scopes.h"
#include "hash/fingerprint_cuda.h"
#include "hash/reference_fingerprint.h"
#include "hash/xxh3_portable.h"

namespace detnccl::hash {
namespace {

// Result slots are carved from pinned slabs of this many digests (64 KiB): a slab serves many small requests.
constexpr std::uint64_t kSlabDigests = 8192;

std::string describe(const char* what, cudaError_t status) {
  return std::string(what) + " failed: " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")";
}

using detnccl::cuda::DeviceScope;
using detnccl::cuda::RelaxedCaptureMode;

struct Availability {
  bool available = false;
  std::string reason;
};

Availability probe_availability() noexcept {
  Availability result;
  try {
    // RATIONALE: the driver is looked up, never loaded (the static runtime would dlopen it at its first call): a
    // process that does not use CUDA must not get it from the shim. The NOLOAD reference is kept on purpose.
    if (dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD) == nullptr) {
      result.reason = "the CUDA driver (libcuda.so.1) is not loaded in this process";
      return result;
    }
    // RATIONALE: on an older driver every call of our CUDA runtime would fail; the reason names both versions.
    if (const int version = detnccl::cuda::loaded_driver_version(); detnccl::cuda::driver_too_old(version)) {
      result.reason = detnccl::cuda::driver_too_old_text(version);
      return result;
    }
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
      result.reason = describe("cudaGetDeviceCount", status);
    } else if (count == 0) {
      result.reason = "no CUDA device is visible to this process";
    } else {
      result.available = true;
    }
  } catch (const std::exception&) {
    result.available = false;
    result.reason = "out of host memory while probing CUDA";
  }
  return result;
}

const Availability& availability() noexcept {
  static const Availability probed = probe_availability();
  return probed;
}

std::uint64_t portable_xxh3(const std::uint8_t* data, std::uint64_t bytes, std::uint64_t seed) {
  return hash::xxh3::hash(data, bytes, seed);
}

// Every empty block has this fingerprint; no kernel is needed for it.
std::uint64_t empty_buffer_fingerprint() {
  static const std::uint64_t digest = hash::reference::fingerprint(nullptr, 0, portable_xxh3);
  return digest;
}

struct ResultSlot {
  std::uint64_t* host = nullptr;    // where the CPU reads the digests
  std::uint64_t* device = nullptr;  // the same pinned memory as the kernels address it
  std::uint64_t capacity = 0;       // digests (a size class of result_slot_digests)
};

struct ScratchBlock {
  void* memory = nullptr;
  std::uint64_t bytes = 0;  // a size class of scratch_block_bytes; 0: none needed
};

// What one enqueued request holds until its kernels have completed.
struct Resources {
  int device = -1;
  cudaEvent_t event = nullptr;  // recorded after the kernels; null until recorded
  ResultSlot slot;
  ScratchBlock scratch;
};

// Events, result slots and scratch blocks, recycled once the work that used them has completed. Nothing is ever
// freed: cudaFree may synchronise the device, and a job's steady state needs the same resources again.
//
// RATIONALE: scratch belongs to a ticket rather than to a stream. Sharing scratch by stream would be safe only while
// the stream handle means the same stream, but a job may destroy a stream and get the same handle for a new one
// without our knowing; a block gated by its ticket's own completion event is safe whatever the job does, and costs
// only the scratch of tickets in flight (1/2048 of the bytes being fingerprinted).
class Pools {
 public:
  // Takes an event, a slot of at least `digests` digests and a scratch block of at least `scratch_bytes` bytes for
  // work on `stream` of `device`, which must be current. A new scratch block is allocated in stream order on
  // `stream`, so it is valid for the work enqueued after it there. On failure returns the error and says why.
  cudaError_t acquire(int device, std::uint64_t digests, std::uint64_t scratch_bytes, cudaStream_t stream,
                      Resources& out, std::string& why) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!deferred_.empty()) sweep_locked();
    DevicePools& pools = devices_[device];
    out.device = device;
    cudaError_t status = cudaSuccess;
    if (!pools.events.empty()) {
      out.event = pools.events.back();
      pools.events.pop_back();
    } else if ((status = cudaEventCreateWithFlags(&out.event, cudaEventDisableTiming)) != cudaSuccess) {
      why = describe("cudaEventCreateWithFlags", status);
      return status;
    }
    if ((status = take_slot_locked(result_slot_digests(digests), out.slot, why)) != cudaSuccess) {
      release_locked(out);
      return status;
    }
    if ((status = take_scratch_locked(pools, device, scratch_block_bytes(scratch_bytes), stream, out.scratch, why)) !=
        cudaSuccess) {
      release_locked(out);
      return status;
    }
    return cudaSuccess;
  }

  // Returns the resources of completed work (or of work never enqueued) to the pools.
  void release(Resources& resources) noexcept {
    const std::lock_guard<std::mutex> lock(mutex_);
    release_locked(resources);
  }

  // Returns the resources once their event has completed (checked at later acquisitions).
  void release_when_done(Resources& resources) noexcept {
    const std::lock_guard<std::mutex> lock(mutex_);
    try {
      deferred_.push_back(resources);
    } catch (const std::exception&) {
      // No room to remember them: leaking them is the only safe choice, their kernels may still be running.
    }
    resources = Resources{};
  }

 private:
  struct DevicePools {
    cudaMemPool_t memory_pool = nullptr;
    std::vector<cudaEvent_t> events;
    std::map<std::uint64_t, std::vector<void*>> scratch;  // free blocks by size
  };

  cudaError_t take_slot_locked(std::uint64_t capacity, ResultSlot& slot, std::string& why) {
    std::vector<ResultSlot>& free = slots_[capacity];
    if (free.empty()) {
      const std::uint64_t slab_digests = std::max(capacity, kSlabDigests);
      void* host = nullptr;
      // Portable: any device's kernels may write a slot; mapped: they write it directly, with no copy to enqueue.
      cudaError_t status =
          cudaHostAlloc(&host, slab_digests * sizeof(std::uint64_t), cudaHostAllocPortable | cudaHostAllocMapped);
      if (status != cudaSuccess) {
        why = describe("cudaHostAlloc of result memory", status);
        return status;
      }
      void* device = nullptr;
      if ((status = cudaHostGetDevicePointer(&device, host, 0)) != cudaSuccess) {
        // Left allocated: cudaFreeHost may synchronise, and this path should never be taken.
        why = describe("cudaHostGetDevicePointer", status);
        return status;
      }
      // Both are powers of two, so the slab divides evenly.
      free.reserve(free.size() + slab_digests / capacity);
      for (std::uint64_t first = 0; first < slab_digests; first += capacity) {
        free.push_back(
            {static_cast<std::uint64_t*>(host) + first, static_cast<std::uint64_t*>(device) + first, capacity});
      }
    }
    slot = free.back();
    free.pop_back();
    return cudaSuccess;
  }

  cudaError_t take_scratch_locked(DevicePools& pools, int device, std::uint64_t bytes, cudaStream_t stream,
                                  ScratchBlock& block, std::string& why) {
    if (bytes == 0) return cudaSuccess;
    std::vector<void*>& free = pools.scratch[bytes];
    if (!free.empty()) {
      block = {free.back(), bytes};
      free.pop_back();
      return cudaSuccess;
    }
    cudaError_t status = cudaSuccess;
    if (pools.memory_pool == nullptr) {
      // RATIONALE: a private pool, never the device's current one, which the job may have configured (PyTorch's
      // cudaMallocAsync backend); stream-ordered allocation, because cudaMalloc may synchronise.
      int supported = 0;
      status = cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device);
      if (status == cudaSuccess && supported == 0) status = cudaErrorNotSupported;
      if (status == cudaSuccess) {
        cudaMemPoolProps properties{};
        properties.allocType = cudaMemAllocationTypePinned;
        properties.handleTypes = cudaMemHandleTypeNone;
        properties.location.type = cudaMemLocationTypeDevice;
        properties.location.id = device;
        status = cudaMemPoolCreate(&pools.memory_pool, &properties);
      }
      if (status != cudaSuccess) {
        pools.memory_pool = nullptr;
        why = describe("creating a stream-ordered memory pool for fingerprint scratch", status);
        return status;
      }
    }
    void* memory = nullptr;
    if ((status = cudaMallocFromPoolAsync(&memory, bytes, pools.memory_pool, stream)) != cudaSuccess) {
      why = describe("cudaMallocFromPoolAsync of fingerprint scratch", status);
      return status;
    }
    block = {memory, bytes};
    return cudaSuccess;
  }

  void release_locked(Resources& resources) noexcept {
    try {
      DevicePools& pools = devices_[resources.device];
      if (resources.event != nullptr) pools.events.push_back(resources.event);
      if (resources.slot.host != nullptr) slots_[resources.slot.capacity].push_back(resources.slot);
      if (resources.scratch.memory != nullptr)
        pools.scratch[resources.scratch.bytes].push_back(resources.scratch.memory);
    } catch (const std::exception&) {
      // Out of host memory: these resources are lost to the pools (they stay allocated), nothing worse.
    }
    resources = Resources{};
  }

  void sweep_locked() noexcept {
    auto still_running = [&](Resources& resources) {
      const cudaError_t status = cudaEventQuery(resources.event);
      if (status == cudaErrorNotReady) return true;
      // Completed: recycle. Failed: the context is broken, and the memory is best left alone.
      if (status == cudaSuccess) release_locked(resources);
      return false;
    };
    deferred_.erase(std::remove_if(deferred_.begin(), deferred_.end(),
                                   [&](Resources& resources) { return !still_running(resources); }),
                    deferred_.end());
  }

  std::mutex mutex_;
  std::map<int, DevicePools> devices_;
  std::map<std::uint64_t, std::vector<ResultSlot>> slots_;  // free result slots by capacity
  std::vector<Resources> deferred_;                         // of tickets destroyed while their work ran
};

// RATIONALE: never destroyed: at exit the CUDA runtime may be torn down before static destructors would run, and
// the driver reclaims everything with the process.
Pools& pools() {
  static Pools* const instance = new Pools;
  return *instance;
}

}  // namespace

// The resources of a pending ticket, and how to read its slot.
struct DeviceDigestTicket::InFlight {
  Resources resources;
  std::uint64_t blocks = 0;
  std::uint64_t segments = 0;
};

namespace {

// Enqueues every pipeline of `plan` on `stream`, the results into resources.slot in the order of DeviceDigests.
cudaError_t enqueue_pipelines(const DeviceDigestRequest& request, const DeviceDigestPlan& plan,
                              const Resources& resources, cudaStream_t stream) {
  namespace cuda = hash::cuda;
  const auto* data = static_cast<const std::uint8_t*>(request.data);
  void* scratch = resources.scratch.memory;
  const std::size_t scratch_bytes = resources.scratch.bytes;
  std::uint64_t* out = resources.slot.device;
  cudaError_t status = cuda::enqueue_fingerprint(data, request.bytes, out, scratch, scratch_bytes, stream);
  out += 1;
  if (status == cudaSuccess && request.blocks > 0) {
    if (plan.blocks_as_segments) {
      status = cuda::enqueue_segment_digests(data, request.blocks * plan.block_bytes, plan.block_bytes, out, scratch,
                                             scratch_bytes, stream);
    } else if (plan.block_bytes == 0) {
      // No kernel writes these: the slot is ours alone until the ticket is settled.
      std::fill_n(resources.slot.host + 1, request.blocks, empty_buffer_fingerprint());
    } else {
      for (std::uint64_t block = 0; block < request.blocks && status == cudaSuccess; ++block) {
        status = cuda::enqueue_fingerprint(data + block * plan.block_bytes, plan.block_bytes, out + block, scratch,
                                           scratch_bytes, stream);
      }
    }
    out += request.blocks;
  }
  if (status == cudaSuccess && plan.segments > 0) {
    status =
        cuda::enqueue_segment_digests(data, request.bytes, request.segment_bytes, out, scratch, scratch_bytes, stream);
  }
  return status;
}

// The device whose kernels must hash this buffer: the stream's, which must also own the buffer when it is
// device memory. Empty `why` on success.
int launch_device(const DeviceDigestRequest& request, cudaStream_t stream, std::string& why) {
  int stream_device = -1;
  cudaError_t status = detnccl::cuda::stream_device(stream, request.default_stream_device, &stream_device);
  if (status != cudaSuccess) {
    why = describe("cudaStreamGetDevice", status);
    return -1;
  }
  if (request.bytes == 0) return stream_device;
  cudaPointerAttributes attributes{};
  if ((status = cudaPointerGetAttributes(&attributes, request.data)) != cudaSuccess) {
    why = describe("cudaPointerGetAttributes", status);
    return -1;
  }
  if (attributes.type == cudaMemoryTypeUnregistered) {
    why = "the buffer is host memory that CUDA does not know (the CPU can fingerprint it)";
    return -1;
  }
  if (attributes.type == cudaMemoryTypeDevice && attributes.device != stream_device) {
    why = "the buffer is on device " + std::to_string(attributes.device) + " but the stream on device " +
          std::to_string(stream_device);
    return -1;
  }
  return stream_device;
}

std::unique_ptr<DeviceDigestTicket> enqueue_or_throw(const DeviceDigestRequest& request, cudaStream_t stream) {
  const Availability& available = availability();
  if (!available.available)
    return DeviceDigestTicket::failed("device fingerprints are unavailable: " + available.reason);
  const DeviceDigestPlan plan = plan_device_digests(request);
  if (!plan.failure.empty()) return DeviceDigestTicket::failed(std::string(plan.failure));

  const RelaxedCaptureMode relaxed;
  // A default stream of a known device: that device first, since the capture query below is about the current
  // device's default stream.
  DeviceScope scope;
  const bool early = request.default_stream_device >= 0 && detnccl::cuda::is_default_stream(stream);
  if (early) {
    if (const cudaError_t status = scope.enter(request.default_stream_device); status != cudaSuccess) {
      return DeviceDigestTicket::failed(describe("making the communicator's device current", status));
    }
  }
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  const cudaError_t capturing = cudaStreamIsCapturing(stream, &capture);
  // The legacy stream while a blocking stream of its device captures: work there would join that capture.
  if (capturing == cudaErrorStreamCaptureImplicit) return DeviceDigestTicket::captured();
  if (capturing != cudaSuccess) return DeviceDigestTicket::failed(describe("cudaStreamIsCapturing", capturing));
  // An invalidated capture still owns the stream until the job ends it: enqueue nothing there either.
  if (capture != cudaStreamCaptureStatusNone) return DeviceDigestTicket::captured();

  std::string why;
  const int device = launch_device(request, stream, why);
  if (device < 0) return DeviceDigestTicket::failed(why);
  if (!early) {
    if (const cudaError_t status = scope.enter(device); status != cudaSuccess) {
      return DeviceDigestTicket::failed(describe("making the stream's device current", status));
    }
  }
  // Normally done when the communicator was created (prepare_device_fingerprints); a device seen first here is
  // loaded now rather than at the launch.
  (void)hash::cuda::preload_kernels(device);

  // Allocated before any CUDA work, so that enqueued work always has a ticket to release its resources.
  auto in_flight = std::make_unique<DeviceDigestTicket::InFlight>();
  DeviceDigestTicket::InFlight& flight = *in_flight;
  auto ticket = std::make_unique<DeviceDigestTicket>(std::move(in_flight));
  flight.blocks = request.blocks;
  flight.segments = plan.segments;

  Resources resources;
  if (pools().acquire(device, plan.result_digests, plan.scratch_bytes, stream, resources, why) != cudaSuccess) {
    return DeviceDigestTicket::failed(why);
  }
  // RATIONALE: the kernels' launch status is read with cudaGetLastError, which would also return an error left
  // by an earlier call of ours in this thread (cudaStreamIsCapturing on the legacy stream, say).
  (void)cudaGetLastError();
  const cudaError_t enqueued = enqueue_pipelines(request, plan, resources, stream);
  const cudaError_t recorded = cudaEventRecord(resources.event, stream);
  if (recorded != cudaSuccess) {
    // Without the event nothing says when the kernels stop using this memory: it is left allocated, unused.
    return DeviceDigestTicket::failed(describe("cudaEventRecord", recorded));
  }
  flight.resources = resources;  // from here the ticket releases them, when their work has completed
  if (enqueued != cudaSuccess)
    return DeviceDigestTicket::failed(describe("enqueueing the fingerprint kernels", enqueued));
  return ticket;
}

}  // namespace

DeviceDigestTicket::DeviceDigestTicket(std::unique_ptr<InFlight> in_flight) noexcept
    : in_flight_(std::move(in_flight)) {}
DeviceDigestTicket::DeviceDigestTicket(State state, std::string failure) noexcept
    : state_(state), failure_(std::move(failure)) {}

DeviceDigestTicket::~DeviceDigestTicket() {
  if (in_flight_ != nullptr && in_flight_->resources.event != nullptr) {
    pools().release_when_done(in_flight_->resources);
  }
}

std::unique_ptr<DeviceDigestTicket> DeviceDigestTicket::captured() {
  return std::unique_ptr<DeviceDigestTicket>(new DeviceDigestTicket(kCaptured, {}));
}

std::unique_ptr<DeviceDigestTicket> DeviceDigestTicket::failed(std::string reason) {
  return std::unique_ptr<DeviceDigestTicket>(new DeviceDigestTicket(kFailed, std::move(reason)));
}

DeviceDigestTicket::State DeviceDigestTicket::poll() noexcept {
  if (state_ != kPending || in_flight_ == nullptr) return state_;
  Resources& resources = in_flight_->resources;
  // RATIONALE: the collector thread polls, and a thread with no current device would make the runtime create a
  // primary context on device 0 at its first call (about 0.5 GiB on GPU 0 for every rank of a node; torchcomms had
  // this bug). The ticket's device already has one, made current before any other call here.
  DeviceScope device;
  if (resources.device >= 0) device.enter(resources.device);
  const RelaxedCaptureMode relaxed;
  const cudaError_t status = cudaEventQuery(resources.event);
  if (status == cudaErrorNotReady) return kPending;
  try {
    if (status != cudaSuccess) {
      // The context reports an error: the memory is best left alone (not recycled).
      resources = Resources{};
      failure_ = status == cudaErrorCudartUnloading
                     ? "the CUDA runtime had shut down (process exit) before the fingerprint kernels' results were "
                       "read: that call's device fingerprints are lost"
                     : describe("the fingerprint kernels", status);
      state_ = kFailed;
      return state_;
    }
    const std::uint64_t* digests = resources.slot.host;
    result_.whole = digests[0];
    result_.blocks.assign(digests + 1, digests + 1 + in_flight_->blocks);
    result_.segments.assign(digests + 1 + in_flight_->blocks, digests + 1 + in_flight_->blocks + in_flight_->segments);
    pools().release(resources);
    state_ = kReady;
  } catch (const std::exception&) {
    pools().release(resources);
    result_ = DeviceDigests{};
    state_ = kFailed;  // failure_ stays empty: there is no memory to say more
  }
  return state_;
}

bool device_fingerprints_available() noexcept { return availability().available; }

bool prepare_device_fingerprints(int device) noexcept {
  if (device < 0 || !availability().available) return false;
  const RelaxedCaptureMode relaxed;
  return hash::cuda::preload_kernels(device) == cudaSuccess;
}

std::string_view device_fingerprints_unavailable_reason() noexcept { return availability().reason; }

std::unique_ptr<DeviceDigestTicket> enqueue_device_digests(const DeviceDigestRequest& request,
                                                           CUstream_st* stream) noexcept {
  try {
    return enqueue_or_throw(request, stream);
  } catch (const std::exception&) {
    try {
      return DeviceDigestTicket::failed("out of host memory");
    } catch (const std::exception&) {
      return nullptr;
    }
  }
}

}  // namespace detnccl::hash
