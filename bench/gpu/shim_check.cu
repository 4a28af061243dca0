// GPU check of the shim's device fingerprints (hash/device_fingerprints.h): tickets enqueued on a stream must
// settle to the CPU reference digests of the same bytes copied back, for many sizes, alignments, block counts and
// segment sizes, with hundreds of tickets in flight on two streams; they must follow stream order (an in-place
// update between an input and an output ticket) without waiting for the stream; under stream capture they must
// say kCaptured and leave the capture intact (it still instantiates and replays), also while other streams are
// fingerprinted and polled; then the host cost of one enqueue against a cudaMemsetAsync measured in the same run.
//
// --lazy-load (issue #21 item 2, run in a process of its own under CUDA_MODULE_LOADING=LAZY): the hash kernels are
// loaded at "communicator creation" (prepare_device_fingerprints), a kernel then spins on a host flag, and the first
// fingerprint call must return while it spins. --lazy-load-control does the same without the preload, to show
// whether this driver's lazy load waits for the spinning kernel (an info row: the reason the preload exists).
//
// Self-contained like fingerprint_check.cu: the reference is hash/reference_fingerprint.h over the portable XXH3.
// --dry-run launches no kernel and makes no CUDA call (no GPU needed): it checks the unavailable path and the
// plan arithmetic the kernels rely on.
//
// Prints a table "check | result | figure"; exits 1 if any check fails.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/gpu/check_table.h"
#include "cuda/driver_version.h"
#include "hash/device_fingerprints.h"
#include "hash/reference_fingerprint.h"
#include "hash/tree_shape.h"
#include "hash/xxh3_portable.h"

namespace {

namespace hash = detnccl::hash;
using namespace detnccl::gpu_check;
using detnccl::hash::DeviceDigestRequest;
using detnccl::hash::DeviceDigests;
using detnccl::hash::DeviceDigestTicket;
using detnccl::hash::enqueue_device_digests;
using hash::kLeafBytes;
using Ticket = std::unique_ptr<DeviceDigestTicket>;

const char* state_name(DeviceDigestTicket::State state) {
  switch (state) {
    case DeviceDigestTicket::kPending:
      return "pending";
    case DeviceDigestTicket::kReady:
      return "ready";
    case DeviceDigestTicket::kCaptured:
      return "captured";
    case DeviceDigestTicket::kFailed:
      return "failed";
  }
  return "?";
}

// The digests a request must produce, from the reference over host bytes.
DeviceDigests expected_digests(const std::uint8_t* data, const DeviceDigestRequest& request) {
  DeviceDigests digests;
  digests.whole = hash::reference::fingerprint(data, request.bytes, portable_xxh3);
  if (request.blocks > 0) {
    const std::uint64_t block_bytes = request.bytes / request.blocks;
    for (std::uint64_t b = 0; b < request.blocks; ++b) {
      digests.blocks.push_back(hash::reference::fingerprint(data + b * block_bytes, block_bytes, portable_xxh3));
    }
  }
  if (request.segment_bytes > 0) {
    digests.segments = hash::reference::segment_digests(data, request.bytes, request.segment_bytes, portable_xxh3);
  }
  return digests;
}

bool same(const DeviceDigests& a, const DeviceDigests& b) {
  return a.whole == b.whole && a.blocks == b.blocks && a.segments == b.segments;
}

// Polls every ticket until none is pending (the tracer's background thread does this); false on timeout.
bool settle(const std::vector<DeviceDigestTicket*>& tickets, double timeout_s = 120) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    bool pending = false;
    for (DeviceDigestTicket* ticket : tickets) pending |= ticket->poll() == DeviceDigestTicket::kPending;
    if (!pending) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

__global__ void spin_for(unsigned long long nanoseconds) {
  unsigned long long start = 0;
  unsigned long long now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(10000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < nanoseconds);
}

struct Case {
  std::size_t offset;
  DeviceDigestRequest request;
};

// Blocks and segments asked for with every size: none; leaf-aligned blocks (one segment pipeline) for the larger
// sizes; unaligned blocks (a pipeline each); many blocks, empty for the small sizes.
struct Variant {
  std::uint64_t blocks;
  std::uint64_t segment_bytes;
};
constexpr Variant kVariants[] = {{0, 0}, {8, kLeafBytes}, {3, 4 * kLeafBytes}, {1024, 0}};

std::vector<std::size_t> sweep_sizes() {
  std::vector<std::size_t> sizes = {0,
                                    1,
                                    17,
                                    240,
                                    241,
                                    4095,
                                    kLeafBytes - 1,
                                    kLeafBytes,
                                    kLeafBytes + 1,
                                    3 * kLeafBytes + 5,
                                    8 * kLeafBytes + 3,
                                    (std::size_t{1} << 20) - 1,
                                    hash::kFanout * kLeafBytes,
                                    (hash::kFanout + 1) * kLeafBytes,
                                    (hash::kFanout + 2) * kLeafBytes - 3,
                                    (std::size_t{40} << 20) + 13};
  std::mt19937_64 rng(11);
  for (int i = 0; i < 8; ++i) sizes.push_back(rng() % (std::size_t{8} << 20));
  return sizes;
}

// ------------------------------------------------------------------------------------------------------------

void run_dry() {
  // Nothing in this process has used CUDA: the shim must say unavailable, and must not load the driver.
  const bool loaded_before = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD) != nullptr;
  const bool available = detnccl::hash::device_fingerprints_available();
  std::vector<std::uint8_t> host(1000);
  Ticket ticket = enqueue_device_digests({host.data(), host.size(), 0, 0}, nullptr);
  const bool loaded_after = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD) != nullptr;
  row("dry run: unavailable without a loaded driver; none loaded",
      !loaded_before && !available && !loaded_after && ticket && ticket->poll() == DeviceDigestTicket::kFailed,
      ticket ? std::string(ticket->failure()) : "no ticket");

  // Issue #21 item 3: no driver loaded says nothing (the shim refuses only a driver it has seen to be too old).
  row("dry run: no driver loaded: version unknown, nothing refused",
      detnccl::cuda::loaded_driver_version() == -1 && detnccl::cuda::kDriverVersionNeeded > 0 &&
          !detnccl::cuda::driver_too_old(detnccl::cuda::loaded_driver_version()),
      "device code needs driver " + detnccl::cuda::driver_version_text(detnccl::cuda::kDriverVersionNeeded));

  // The plans of the sweep: the pipelines and digests the GPU run will enqueue.
  std::uint64_t requests = 0;
  std::uint64_t pipelines = 0;
  std::uint64_t as_segments = 0;
  bool valid = true;
  for (std::size_t bytes : sweep_sizes()) {
    for (const Variant& variant : kVariants) {
      const auto plan = detnccl::hash::plan_device_digests({host.data(), bytes, variant.blocks, variant.segment_bytes});
      valid &= plan.failure.empty();
      ++requests;
      pipelines += plan.pipelines;
      as_segments += plan.blocks_as_segments ? 1 : 0;
    }
  }
  row("dry run: every sweep request has a plan", valid,
      std::to_string(requests) + " requests, " + std::to_string(pipelines) + " pipelines, " +
          std::to_string(as_segments) + " with blocks as segments");

  // What blocks_as_segments relies on, with the reference itself.
  std::vector<std::uint8_t> data(12 * kLeafBytes + 5);
  std::mt19937_64 rng(3);
  for (auto& byte : data) byte = static_cast<std::uint8_t>(rng());
  bool equal = true;
  for (std::uint64_t blocks : {2u, 3u, 4u, 6u, 12u}) {
    const std::uint64_t block_bytes = data.size() / blocks;
    const auto segments =
        hash::reference::segment_digests(data.data(), blocks * block_bytes, block_bytes, portable_xxh3);
    for (std::uint64_t b = 0; b < blocks; ++b) {
      equal &= segments[b] == hash::reference::fingerprint(data.data() + b * block_bytes, block_bytes, portable_xxh3);
    }
  }
  row("dry run: leaf-aligned blocks == segments over them", equal, "2, 3, 4, 6, 12 blocks");
}

// ------------------------------------------------------------------------------------------------------------

struct Device {
  std::uint8_t* data = nullptr;  // random bytes, also kept on the host
  std::size_t bytes = 0;
  std::vector<std::uint8_t> copied_back;  // the device bytes copied back: what the reference hashes
  cudaStream_t streams[2] = {nullptr, nullptr};
};

void check_sweep(Device& device) {
  std::vector<Case> cases;
  for (std::size_t bytes : sweep_sizes()) {
    for (std::size_t offset : {0, 1, 3, 8, 100}) {
      if (bytes > (std::size_t{4} << 20) && offset != 0 && offset != 3) continue;  // keep the big ones quick
      for (const Variant& variant : kVariants) {
        cases.push_back({offset, {device.data + offset, bytes, variant.blocks, variant.segment_bytes}});
      }
    }
  }
  // Everything in flight at once, alternating between the streams: no wait between enqueues.
  const auto start = std::chrono::steady_clock::now();
  std::vector<Ticket> tickets;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    tickets.push_back(enqueue_device_digests(cases[i].request, device.streams[i % 2]));
  }
  const double enqueue_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<DeviceDigestTicket*> raw;
  for (const Ticket& ticket : tickets) raw.push_back(ticket.get());
  const bool settled = settle(raw);
  int bad = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const DeviceDigestTicket::State state = tickets[i]->poll();
    const bool ok = state == DeviceDigestTicket::kReady &&
                    same(tickets[i]->result(), expected_digests(device.copied_back.data() + c.offset, c.request));
    if (!ok && ++bad <= 10) {
      std::printf("  mismatch: %llu bytes at +%zu, %llu blocks, segments of %llu: %s %s\n",
                  static_cast<unsigned long long>(c.request.bytes), c.offset,
                  static_cast<unsigned long long>(c.request.blocks),
                  static_cast<unsigned long long>(c.request.segment_bytes), state_name(state),
                  std::string(tickets[i]->failure()).c_str());
    }
  }
  char figure[120];
  std::snprintf(figure, sizeof figure, "%d/%zu tickets, all enqueued in %.1f ms", static_cast<int>(cases.size()) - bad,
                cases.size(), enqueue_s * 1e3);
  row("tickets == CPU reference (sizes x alignments x blocks x segments)", settled && bad == 0, figure);
}

// Input ticket, in-place update, output ticket, all behind a kernel that keeps the stream busy.
void check_stream_order(Device& device) {
  const std::size_t bytes = (std::size_t{5} << 20) + 7;
  std::uint8_t* buffer = nullptr;
  cuda_check(cudaMalloc(&buffer, bytes), "cudaMalloc in-place buffer");
  cuda_check(cudaMemcpy(buffer, device.data, bytes, cudaMemcpyDeviceToDevice), "fill in-place buffer");
  cudaStream_t stream = device.streams[0];
  spin_for<<<1, 1, 0, stream>>>(300ULL * 1000 * 1000);
  cuda_check(cudaGetLastError(), "spin kernel");
  Ticket input = enqueue_device_digests({buffer, bytes, 4, kLeafBytes}, stream);
  cuda_check(cudaMemsetAsync(buffer, 0xAB, bytes, stream), "in-place update");
  Ticket output = enqueue_device_digests({buffer, bytes, 4, kLeafBytes}, stream);
  const cudaError_t busy = cudaStreamQuery(stream);
  row("enqueue returns while the stream is still busy (no host sync)",
      busy == cudaErrorNotReady && input->poll() == DeviceDigestTicket::kPending, cudaGetErrorName(busy));
  const bool settled = settle({input.get(), output.get()});
  const std::vector<std::uint8_t> updated(bytes, 0xAB);
  const DeviceDigestRequest shape{nullptr, bytes, 4, kLeafBytes};
  const bool in_ok = settled && input->poll() == DeviceDigestTicket::kReady &&
                     same(input->result(), expected_digests(device.copied_back.data(), shape));
  const bool out_ok = settled && output->poll() == DeviceDigestTicket::kReady &&
                      same(output->result(), expected_digests(updated.data(), shape));
  row("in-place: input ticket sees the data before, output after", in_ok && out_ok,
      std::string("input ") + state_name(input->poll()) + ", output " + state_name(output->poll()));
  cudaFree(buffer);
}

// Tickets destroyed while their kernels run: their memory must not be reused before the kernels end.
void check_abandoned_tickets(Device& device) {
  cudaStream_t stream = device.streams[1];
  spin_for<<<1, 1, 0, stream>>>(100ULL * 1000 * 1000);
  cuda_check(cudaGetLastError(), "spin kernel");
  for (int i = 0; i < 50; ++i) enqueue_device_digests({device.data, std::size_t{3} << 20, 3, kLeafBytes}, stream);
  std::vector<Ticket> later;
  std::vector<DeviceDigestTicket*> raw;
  for (int i = 0; i < 50; ++i) {
    later.push_back(
        enqueue_device_digests({device.data + i, (std::size_t{3} << 20) - i, 3, kLeafBytes}, device.streams[i % 2]));
    raw.push_back(later.back().get());
  }
  const bool settled = settle(raw);
  int good = 0;
  for (int i = 0; i < 50; ++i) {
    const DeviceDigestRequest shape{nullptr, (std::size_t{3} << 20) - i, 3, kLeafBytes};
    good += later[i]->poll() == DeviceDigestTicket::kReady &&
            same(later[i]->result(), expected_digests(device.copied_back.data() + i, shape));
  }
  row("50 tickets destroyed in flight, then 50 more: all correct", settled && good == 50, std::to_string(good) + "/50");
}

void check_capture(Device& device) {
  // 1. A capturing stream gets kCaptured, while another stream is fingerprinted (a new scratch size: the pools
  //    grow during the capture) and polled from another thread; the capture must survive all of it.
  cudaStream_t capturing = device.streams[0];
  cudaStream_t other = device.streams[1];
  std::uint8_t* target = nullptr;
  cuda_check(cudaMalloc(&target, 4096), "cudaMalloc capture target");
  cuda_check(cudaMemset(target, 0, 4096), "clear capture target");
  const std::size_t big = std::min(device.bytes - 64, (std::size_t{600} << 20) + 5);
  cuda_check(cudaStreamBeginCapture(capturing, cudaStreamCaptureModeGlobal), "begin capture");
  cuda_check(cudaMemsetAsync(target, 0x5A, 4096, capturing), "captured memset");
  Ticket in_capture = enqueue_device_digests({target, 4096, 2, 0}, capturing);
  Ticket beside = enqueue_device_digests({device.data + 1, big, 0, 0}, other);
  std::atomic<int> polled_state{-1};
  std::thread poller([&] {
    DeviceDigestTicket::State state = DeviceDigestTicket::kPending;
    for (int i = 0; i < 100000 && state == DeviceDigestTicket::kPending; ++i) state = beside->poll();
    polled_state = state;
  });
  poller.join();
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(capturing, &graph);
  row("enqueue on a capturing stream says kCaptured", in_capture->poll() == DeviceDigestTicket::kCaptured,
      state_name(in_capture->poll()));
  cudaGraphExec_t exec = nullptr;
  cudaError_t replayed = ended;
  if (ended == cudaSuccess) replayed = cudaGraphInstantiate(&exec, graph, 0);
  if (replayed == cudaSuccess) replayed = cudaGraphLaunch(exec, capturing);
  if (replayed == cudaSuccess) replayed = cudaStreamSynchronize(capturing);
  std::vector<std::uint8_t> result(4096);
  if (replayed == cudaSuccess) replayed = cudaMemcpy(result.data(), target, 4096, cudaMemcpyDeviceToHost);
  const bool replay_ok =
      replayed == cudaSuccess && std::all_of(result.begin(), result.end(), [](std::uint8_t b) { return b == 0x5A; });
  row("the capture still ends, instantiates and replays", replay_ok,
      std::string("end capture: ") + cudaGetErrorName(ended) + ", replay: " + cudaGetErrorName(replayed));
  const bool beside_ok =
      settle({beside.get()}) && beside->poll() == DeviceDigestTicket::kReady &&
      beside->result().whole == hash::reference::fingerprint(device.copied_back.data() + 1, big, portable_xxh3);
  row("another stream fingerprinted and polled during the capture", beside_ok,
      std::string("polled from a thread during capture: ") +
          (polled_state >= 0 ? state_name(static_cast<DeviceDigestTicket::State>(polled_state.load())) : "?"));
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  if (graph != nullptr) cudaGraphDestroy(graph);

  // 2. The legacy stream while a blocking stream captures: work there would join the capture.
  cudaStream_t blocking = nullptr;
  cuda_check(cudaStreamCreate(&blocking), "cudaStreamCreate blocking");
  cuda_check(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeThreadLocal), "begin capture (blocking)");
  cuda_check(cudaMemsetAsync(target, 0x11, 4096, blocking), "captured memset (blocking)");
  Ticket legacy = enqueue_device_digests({target, 4096, 0, 0}, nullptr);
  graph = nullptr;
  const cudaError_t legacy_ended = cudaStreamEndCapture(blocking, &graph);
  row("legacy stream during a blocking stream's capture says kCaptured",
      legacy->poll() == DeviceDigestTicket::kCaptured && legacy_ended == cudaSuccess,
      std::string(state_name(legacy->poll())) + ", end capture: " + cudaGetErrorName(legacy_ended));
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaStreamDestroy(blocking);
  cudaFree(target);
}

void check_failures(Device& device) {
  std::vector<std::uint8_t> host(1 << 16);
  Ticket pageable = enqueue_device_digests({host.data(), host.size(), 0, 0}, device.streams[0]);
  Ticket null_data = enqueue_device_digests({nullptr, 10, 0, 0}, device.streams[0]);
  Ticket bad_segments = enqueue_device_digests({device.data, 100, 0, 1000}, device.streams[0]);
  const bool ok = pageable->poll() == DeviceDigestTicket::kFailed && !pageable->failure().empty() &&
                  null_data->poll() == DeviceDigestTicket::kFailed &&
                  bad_segments->poll() == DeviceDigestTicket::kFailed;
  row("pageable host memory, null data, bad segment size: kFailed", ok, std::string(pageable->failure()));
}

// Host cost of one enqueue (whole fingerprint of 1 MiB, after warm-up) against a cudaMemsetAsync of 1 MiB.
void measure_enqueue_cost(Device& device) {
  cudaStream_t stream = device.streams[0];
  constexpr int kCalls = 2000;
  std::vector<Ticket> tickets;
  tickets.reserve(kCalls);
  auto time_us = [&](auto enqueue) {
    tickets.clear();
    for (int i = 0; i < kCalls; ++i) enqueue();  // warm-up: the pools reach the size this many tickets need
    cuda_check(cudaStreamSynchronize(stream), "synchronize");
    for (Ticket& ticket : tickets) ticket->poll();
    tickets.clear();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) enqueue();
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    cuda_check(cudaStreamSynchronize(stream), "synchronize");
    for (Ticket& ticket : tickets) ticket->poll();
    return us / kCalls;
  };
  const double digest_us = time_us([&] {
    tickets.push_back(enqueue_device_digests({device.data, std::size_t{1} << 20, 0, 0}, stream));
  });
  const double memset_us =
      time_us([&] { cuda_check(cudaMemsetAsync(device.data + 64, 0, 1 << 20, stream), "memset"); });
  char figure[120];
  std::snprintf(figure, sizeof figure, "enqueue %.2f us, cudaMemsetAsync %.2f us, enqueue/memset %.1fx", digest_us,
                memset_us, digest_us / memset_us);
  info("host cost per call, 1 MiB (same run)", figure);
}

// Issue #21 item 1: a ticket polled from a thread with no current context (the collector thread) leaves that thread
// with none, and never creates a context on GPU 0. Runs first, before this program touches GPU 0: with two GPUs or
// more the ticket is on device 1 and GPU 0's primary context must still be inactive (cuDevicePrimaryCtxGetState);
// with one, only the thread's context afterwards can be checked.
void check_no_context_left_by_polling() {
  int count = 0;
  cuda_check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  const int device = count >= 2 ? 1 : 0;
  cuda_check(cudaSetDevice(device), "cudaSetDevice (context check)");
  void* data = nullptr;
  cudaStream_t stream = nullptr;
  cuda_check(cudaMalloc(&data, 1 << 20), "cudaMalloc (context check)");
  cuda_check(cudaMemset(data, 0x3C, 1 << 20), "cudaMemset (context check)");
  cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate (context check)");
  Ticket ticket = enqueue_device_digests({static_cast<const std::uint8_t*>(data), 1 << 20, 0, 0}, stream);
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  using GetCurrent = int (*)(void**);
  using PrimaryState = int (*)(int, unsigned*, int*);
  auto get_current = reinterpret_cast<GetCurrent>(driver != nullptr ? dlsym(driver, "cuCtxGetCurrent") : nullptr);
  auto primary_state =
      reinterpret_cast<PrimaryState>(driver != nullptr ? dlsym(driver, "cuDevicePrimaryCtxGetState") : nullptr);
  DeviceDigestTicket::State state = DeviceDigestTicket::kPending;
  void* left = reinterpret_cast<void*>(1);
  std::thread collector([&] {  // a fresh thread: no current context
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while ((state = ticket->poll()) == DeviceDigestTicket::kPending && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (get_current != nullptr) get_current(&left);
  });
  collector.join();
  row("poll from a thread with no context: ready, thread left with none",
      state == DeviceDigestTicket::kReady && get_current != nullptr && left == nullptr,
      std::string(state_name(state)) + ", context after " + (left == nullptr ? "none" : "set") + ", device " +
          std::to_string(device));
  if (count >= 2) {
    unsigned flags = 0;
    int active = -1;
    const bool queried = primary_state != nullptr && primary_state(0, &flags, &active) == 0;
    row("... and GPU 0's primary context inactive (ticket on GPU 1)", queried && active == 0,
        queried ? "active " + std::to_string(active) : std::string("cuDevicePrimaryCtxGetState unavailable"));
  } else {
    info("... and GPU 0's primary context inactive (ticket on GPU 1)", "needs 2 GPUs; this machine has 1");
  }
  ticket.reset();
  cuda_check(cudaStreamSynchronize(stream), "synchronize (context check)");
  cudaStreamDestroy(stream);
  cudaFree(data);
  cuda_check(cudaSetDevice(0), "cudaSetDevice 0");
}

// Issue #21 item 6: a default stream (0) names the current device's; one thread driving several GPUs calls NCCL on
// stream 0 with another device current, and NCCL runs the call on the communicator's device. A request that says
// its communicator's device (default_stream_device) must hash there; without it, the buffer's device and the
// current device disagree and the request fails. Needs two GPUs.
void check_default_stream_of_another_device() {
  int count = 0;
  cuda_check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (count < 2) {
    info("stream 0, device 0 current, buffer of GPU 1: hashed on GPU 1", "needs 2 GPUs; this machine has 1");
    return;
  }
  constexpr std::size_t kBytes = 1 << 20;
  std::vector<std::uint8_t> host(kBytes);
  fill_pseudo_random(host);
  void* data = nullptr;
  cuda_check(cudaSetDevice(1), "cudaSetDevice 1");
  cuda_check(cudaMalloc(&data, kBytes), "cudaMalloc on GPU 1");
  cuda_check(cudaMemcpy(data, host.data(), kBytes, cudaMemcpyHostToDevice), "copy to GPU 1");
  cuda_check(cudaSetDevice(0), "cudaSetDevice 0");
  const auto* bytes = static_cast<const std::uint8_t*>(data);
  Ticket with_device = enqueue_device_digests({bytes, kBytes, 0, 0, 1}, nullptr);
  Ticket without = enqueue_device_digests({bytes, kBytes, 0, 0, -1}, nullptr);
  DeviceDigestTicket::State state = DeviceDigestTicket::kPending;
  for (int i = 0; i < 100000 && (state = with_device->poll()) == DeviceDigestTicket::kPending; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  int current = -1;
  cuda_check(cudaGetDevice(&current), "cudaGetDevice");
  const bool equal = state == DeviceDigestTicket::kReady &&
                     with_device->result().whole == hash::reference::fingerprint(host.data(), kBytes, portable_xxh3);
  row("stream 0, device 0 current, buffer of GPU 1: hashed on GPU 1", equal && current == 0,
      std::string(state_name(state)) + ", device after " + std::to_string(current));
  row("... and without the communicator's device: kFailed", without->poll() == DeviceDigestTicket::kFailed,
      std::string(without->failure()));
  with_device.reset();
  cuda_check(cudaSetDevice(1), "cudaSetDevice 1");
  cuda_check(cudaDeviceSynchronize(), "synchronize GPU 1");
  cudaFree(data);
  cuda_check(cudaSetDevice(0), "cudaSetDevice 0");
}

// Spins until the host sets *flag (mapped pinned memory): a kernel in flight that waits for the host, as NCCL's
// kernels wait for peers.
__global__ void spin_until_set(const volatile int* flag) {
  while (*flag == 0) {
    __nanosleep(1000);
  }
}

// Issue #21 item 2 (see the header). `preload`: as the shim does at communicator creation.
int run_lazy_load(bool preload) {
  constexpr std::size_t kBytes = 1 << 20;
  constexpr auto kPatience = std::chrono::seconds(10);
  const char* mode = std::getenv("CUDA_MODULE_LOADING");
  info("CUDA_MODULE_LOADING", mode != nullptr ? mode : "(unset: lazy by default since CUDA 12.2)");
  cuda_check(cudaSetDevice(0), "cudaSetDevice 0");
  cuda_check(cudaFree(nullptr), "context of GPU 0");
  const bool preloaded = preload && detnccl::hash::prepare_device_fingerprints(0);
  if (preload) row("lazy: kernels loaded at communicator creation", preloaded, "prepare_device_fingerprints(0)");

  std::vector<std::uint8_t> host(kBytes);
  fill_pseudo_random(host);
  void* data = nullptr;
  int* flag = nullptr;
  int* device_flag = nullptr;
  cudaStream_t spinning = nullptr, hashing = nullptr;
  cuda_check(cudaMalloc(&data, kBytes), "cudaMalloc (lazy load)");
  cuda_check(cudaMemcpy(data, host.data(), kBytes, cudaMemcpyHostToDevice), "copy (lazy load)");
  cuda_check(cudaHostAlloc(reinterpret_cast<void**>(&flag), sizeof(int), cudaHostAllocMapped), "cudaHostAlloc flag");
  *flag = 0;
  cuda_check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_flag), flag, 0), "flag's device pointer");
  cuda_check(cudaStreamCreateWithFlags(&spinning, cudaStreamNonBlocking), "cudaStreamCreate (spinning)");
  cuda_check(cudaStreamCreateWithFlags(&hashing, cudaStreamNonBlocking), "cudaStreamCreate (hashing)");
  spin_until_set<<<1, 1, 0, spinning>>>(device_flag);
  cuda_check(cudaGetLastError(), "launch of the spinning kernel");

  std::atomic<bool> returned{false};
  Ticket ticket;
  const auto started = std::chrono::steady_clock::now();
  double seconds = 0;
  std::thread caller([&] {
    ticket = enqueue_device_digests({data, kBytes, 0, 0, 0}, hashing);
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    returned = true;
  });
  while (!returned && std::chrono::steady_clock::now() - started < kPatience) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const bool before_flag = returned.load();
  __atomic_store_n(flag, 1, __ATOMIC_RELEASE);  // the spinning kernel ends (and a blocked call with it)
  caller.join();
  char figure[160];
  std::snprintf(figure, sizeof figure, "%s after %.3f s", before_flag ? "returned while the kernel spun" : "BLOCKED",
                seconds);
  if (preload) {
    row("lazy: a kernel spinning on a host flag: first fingerprint call returns", before_flag, figure);
  } else {
    info("lazy control, no preload: first fingerprint call",
         std::string(figure) + (before_flag ? " (this driver's lazy load did not wait)" : " (the load waited)"));
  }
  cuda_check(cudaDeviceSynchronize(), "synchronize (lazy load)");
  DeviceDigestTicket::State state = ticket ? ticket->poll() : DeviceDigestTicket::kFailed;
  const bool equal = state == DeviceDigestTicket::kReady &&
                     ticket->result().whole == hash::reference::fingerprint(host.data(), kBytes, portable_xxh3);
  row(preload ? "lazy: ... and its digest = CPU reference" : "lazy control: digest = CPU reference", equal,
      state_name(state));
  cudaStreamDestroy(spinning);
  cudaStreamDestroy(hashing);
  cudaFreeHost(flag);
  cudaFree(data);
  return finish_table();
}

void run_device() {
  check_no_context_left_by_polling();
  check_default_stream_of_another_device();
  // Issue #21 item 3: the driver this machine runs can run the shim's device code (read as the shim reads it).
  const int version = detnccl::cuda::loaded_driver_version();
  row("driver: cuDriverGetVersion >= the shim's runtime needs",
      version >= detnccl::cuda::kDriverVersionNeeded && detnccl::cuda::kDriverVersionNeeded > 0,
      "driver " + (version < 0 ? std::string("not loaded") : detnccl::cuda::driver_version_text(version)) +
          ", needed " + detnccl::cuda::driver_version_text(detnccl::cuda::kDriverVersionNeeded));
  Device device;
  print_device_row();
  for (cudaStream_t& stream : device.streams) {
    cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  row("available once the job uses CUDA", detnccl::hash::device_fingerprints_available(),
      std::string(detnccl::hash::device_fingerprints_unavailable_reason()));

  device.bytes = (std::size_t{640} << 20) + 512;
  std::vector<std::uint8_t> host(device.bytes);
  fill_pseudo_random(host);
  cuda_check(cudaMalloc(&device.data, device.bytes), "cudaMalloc data");
  cuda_check(cudaMemcpy(device.data, host.data(), device.bytes, cudaMemcpyHostToDevice), "copy to device");
  device.copied_back.resize(device.bytes);
  cuda_check(cudaMemcpy(device.copied_back.data(), device.data, device.bytes, cudaMemcpyDeviceToHost), "copy back");
  row("bytes copied back == bytes sent", device.copied_back == host, std::to_string(device.bytes) + " bytes");

  check_sweep(device);
  check_stream_order(device);
  check_abandoned_tickets(device);
  check_capture(device);
  check_failures(device);
  measure_enqueue_cost(device);

  cuda_check(cudaDeviceSynchronize(), "final synchronize");
  cudaFree(device.data);
  for (cudaStream_t stream : device.streams) cudaStreamDestroy(stream);
}

}  // namespace

int main(int argc, char** argv) {
  bool dry_run = false;
  int lazy_load = 0;  // 1: --lazy-load, 2: --lazy-load-control
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--dry-run") {
      dry_run = true;
    } else if (arg == "--lazy-load" || arg == "--lazy-load-control") {
      lazy_load = arg == "--lazy-load" ? 1 : 2;
    } else {
      std::printf("usage: %s [--dry-run | --lazy-load | --lazy-load-control]\n", argv[0]);
      return arg == "--help" ? 0 : 2;
    }
  }
  std::printf("detnccl GPU check of the shim's device fingerprints, definition v%u%s\n", hash::kFingerprintVersion,
              dry_run ? " (dry run: no kernels)" : "");
  print_table_header();
  if (lazy_load != 0) return run_lazy_load(lazy_load == 1);
  if (dry_run) {
    run_dry();
  } else {
    run_device();
  }
  return finish_table();
}
