// A job for the GPU validation (bench/gpu/run.sh) that calls NCCL through whatever libnccl.so.2 the loader finds and
// whatever shim LD_PRELOAD puts in front of it; run.sh then reads the shim's log with `detnccl dump` and compares.
//
//   gpu_traced_job calls  --memory host|device --expect FILE [--nonblocking]
//       one single-rank communicator: every collective, Send/Recv to self, a group of two calls and an in-place
//       call; after each call the buffers are copied back and fingerprinted on the CPU (hash/reference_fingerprint.h),
//       and FILE gets one line per call: "seq op input_fingerprint output_fingerprint" ("-" where a call has none).
//       --nonblocking creates the communicator with ncclConfig_t.blocking = 0: calls may return ncclInProgress, and
//       the job polls ncclCommGetAsyncError until each is enqueued (the shim must fingerprint outputs after that).
//   gpu_traced_job exit   --memory host|device --expect FILE
//       one single-rank communicator, four 32 MiB AllReduces, and main returns as soon as the last is enqueued: no
//       synchronisation, no ncclCommDestroy, buffers never freed (cudaFree would wait for the device). The shim's
//       exit drain must still record every call with both fingerprints, which the CUDA runtime's own exit handlers
//       must not cut short. FILE as for calls (one rank: every output equals its input).
//   gpu_traced_job streams --memory host|device
//       one single-rank communicator, 16 bf16 AllReduces alternating between two streams without synchronisation
//       (run with DETNCCL_DETERMINISTIC=1 DETNCCL_ACCUMULATE=fp32: deterministic mode must order them as NCCL does);
//       every output must equal its input.
//   gpu_traced_job graph  --memory device
//       captures an AllReduce in a CUDA graph (traced, or deterministic when DETNCCL_DETERMINISTIC=1 is set), then
//       replays it; checks that every replay completes and leaves the expected values.
//   gpu_traced_job time   --memory host|device --bytes N --iterations K
//       a float AllReduce of N bytes, K times after a warm-up; prints "seconds_per_call S".
//   gpu_traced_job ranks  --ranks N --memory host|device|pinned --out PREFIX [--distinct-hosts]
//       forks N ranks (before any CUDA call) that share one communicator (the unique id goes through a file) and run
//       a fixed list of reductions on counter-based inputs; each rank writes its outputs, raw, to PREFIX.rank-R and
//       checks them against a double-precision sum (a loose bound: the exact bits are what run.sh compares).
//       --distinct-hosts gives each rank its own NCCL_HOSTID (real NCCL then accepts two ranks on one GPU).
//       --memory pinned: buffers in pinned host memory, each input copied in on the stream just before the call.
//
// Exit status 0 when every check passed, 1 on a failed check, 2 on a usage error. Without a GPU only --memory host
// runs (over hostnccl): that is the dry run of every mode but graph.
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "abi/nccl_abi.h"
#include "hash/reference_fingerprint.h"
#include "hash/xxh3_portable.h"

namespace {

namespace hash = detnccl::hash;

std::map<std::string, std::string> g_options;
bool g_device = false;
// --memory pinned (ranks only): buffers in pinned host memory (cudaHostAlloc), written on the stream (g_device too).
bool g_pinned = false;
int g_failures = 0;

std::string option(const std::string& name, const std::string& fallback = "") {
  const auto found = g_options.find(name);
  return found == g_options.end() ? fallback : found->second;
}

void fail(const std::string& what) {
  ++g_failures;
  std::fprintf(stderr, "FAIL: %s\n", what.c_str());
}

// Aborts on an error of the job's own setup: nothing after it would mean anything.
void require(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "FAIL (setup): %s\n", what.c_str());
  std::exit(1);
}
void cuda(cudaError_t status, const char* what) {
  require(status == cudaSuccess, std::string(what) + ": " + cudaGetErrorString(status));
}
// With --nonblocking, the communicator whose calls may return ncclInProgress.
ncclComm_t g_non_blocking_comm = nullptr;

bool nccl(ncclResult_t result, const std::string& what) {
  while (result == ncclInProgress && g_non_blocking_comm != nullptr) {  // as NCCL requires before the next call
    ncclResult_t state = ncclInProgress;
    if (ncclCommGetAsyncError(g_non_blocking_comm, &state) != ncclSuccess) break;
    result = state;
    if (state == ncclInProgress) std::this_thread::yield();
  }
  if (result == ncclSuccess) return true;
  fail(what + " returned " + ncclGetErrorString(result) + " (" + ncclGetLastError(nullptr) + ")");
  return false;
}

std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A buffer in device or host memory, with host-side access by copy.
class Buffer {
 public:
  // shift: the buffer starts that many bytes past the allocation's (aligned) start.
  explicit Buffer(std::size_t bytes, std::size_t shift = 0) : bytes_(bytes) {
    if (g_pinned) {
      cuda(cudaHostAlloc(&allocation_, bytes + shift + 1, cudaHostAllocDefault), "cudaHostAlloc");
    } else if (g_device) {
      cuda(cudaMalloc(&allocation_, bytes + shift + 1), "cudaMalloc");
    } else {
      allocation_ = std::malloc(bytes + shift + 1);
      require(allocation_ != nullptr, "malloc");
    }
    data_ = static_cast<unsigned char*>(allocation_) + shift;
  }
  ~Buffer() {
    if (g_pinned) {
      cudaFreeHost(allocation_);
    } else if (g_device) {
      cudaFree(allocation_);
    } else {
      std::free(allocation_);
    }
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  void upload(const std::vector<std::uint8_t>& host) const {
    if (g_pinned) {
      std::memcpy(data_, host.data(), host.size());
    } else if (g_device) {
      cuda(cudaMemcpy(data_, host.data(), host.size(), cudaMemcpyHostToDevice), "cudaMemcpy to device");
    } else {
      std::memcpy(data_, host.data(), host.size());
    }
  }
  std::vector<std::uint8_t> download() const {
    std::vector<std::uint8_t> host(bytes_);
    if (g_pinned) {
      cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      std::memcpy(host.data(), data_, bytes_);
    } else if (g_device) {
      cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      cuda(cudaMemcpy(host.data(), data_, bytes_, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
    } else {
      std::memcpy(host.data(), data_, bytes_);
    }
    return host;
  }

 private:
  void* allocation_ = nullptr;
  void* data_ = nullptr;
  std::size_t bytes_;
};

// Random bytes whose float32 reading is an ordinary value in [-1, 1) (sums stay finite and meaningful).
std::vector<std::uint8_t> random_floats(std::size_t bytes, std::uint64_t seed) {
  std::vector<std::uint8_t> host(bytes);
  for (std::size_t i = 0; i + 4 <= bytes; i += 4) {
    const float value = static_cast<float>(static_cast<double>(mix(seed * 0x100000001B3ull + i) >> 40) / 8388608.0 - 1);
    std::memcpy(&host[i], &value, 4);
  }
  return host;
}

std::string fingerprint(const std::vector<std::uint8_t>& bytes) {
  const std::uint64_t digest = hash::reference::fingerprint(
      bytes.data(), bytes.size(),
      [](const std::uint8_t* p, std::uint64_t n, std::uint64_t seed) { return hash::xxh3::hash(p, n, seed); });
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(digest));
  return text;
}

cudaStream_t make_stream() {
  cudaStream_t stream = nullptr;
  if (g_device) cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  return stream;
}

void synchronize(cudaStream_t stream) {
  if (g_device) cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

ncclComm_t single_rank_comm() {
  ncclComm_t comm = nullptr;
  if (g_options.count("nonblocking") != 0) {
    ncclUniqueId id;
    require(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t result = ncclCommInitRankConfig(&comm, 1, id, 0, &config);
    g_non_blocking_comm = comm;
    require(nccl(result, "ncclCommInitRankConfig (blocking = 0)"), "a non-blocking single-rank communicator");
    return comm;
  }
  int device = 0;
  require(ncclCommInitAll(&comm, 1, &device) == ncclSuccess, "ncclCommInitAll with one rank");
  return comm;
}

// ---------------------------------------------------------------------------------------------------------------
// calls: every operation on a single-rank communicator, with the CPU fingerprints of what each call saw.
int run_calls() {
  const std::string expect_path = option("expect");
  if (expect_path.empty()) return 2;
  ncclComm_t comm = single_rank_comm();
  cudaStream_t stream = make_stream();
  std::ofstream expect(expect_path);
  std::uint64_t seq = 0;
  constexpr std::size_t kCount = 300007;  // odd, so that no size is a multiple of anything convenient
  constexpr std::size_t kBytes = kCount * sizeof(float);

  // One call: fills its input, records the input's fingerprint, calls, records the output's.
  struct Call {
    const char* op;
    bool has_input, has_output, in_place;
  };
  const auto run = [&](const Call& call, const auto& issue) {
    Buffer send(kBytes), recv(kBytes);
    send.upload(random_floats(kBytes, seq + 1));
    recv.upload(random_floats(kBytes, seq + 1000));
    void* output = call.in_place ? send.data() : recv.data();
    const std::string in = call.has_input ? fingerprint(send.download()) : "-";
    const bool ok = nccl(issue(send.data(), output), call.op);
    synchronize(stream);
    const std::string out = call.has_output ? fingerprint(call.in_place ? send.download() : recv.download()) : "-";
    if (ok) expect << seq << ' ' << call.op << ' ' << in << ' ' << out << '\n';
    ++seq;
  };
  run({"AllReduce", true, true, false},
      [&](void* s, void* r) { return ncclAllReduce(s, r, kCount, ncclFloat32, ncclSum, comm, stream); });
  run({"AllReduce", true, true, true},
      [&](void* s, void* r) { return ncclAllReduce(s, r, kCount, ncclFloat32, ncclSum, comm, stream); });
  run({"Reduce", true, true, false},
      [&](void* s, void* r) { return ncclReduce(s, r, kCount, ncclFloat32, ncclMax, 0, comm, stream); });
  run({"Broadcast", true, true, false},
      [&](void* s, void* r) { return ncclBroadcast(s, r, kCount, ncclFloat32, 0, comm, stream); });
  run({"Bcast", true, true, true}, [&](void* s, void*) { return ncclBcast(s, kCount, ncclFloat32, 0, comm, stream); });
  run({"AllGather", true, true, false},
      [&](void* s, void* r) { return ncclAllGather(s, r, kCount, ncclFloat32, comm, stream); });
  run({"ReduceScatter", true, true, false},
      [&](void* s, void* r) { return ncclReduceScatter(s, r, kCount, ncclFloat32, ncclSum, comm, stream); });
  run({"AlltoAll", true, true, false},
      [&](void* s, void* r) { return ncclAlltoAll(s, r, kCount, ncclFloat32, comm, stream); });
  run({"Gather", true, true, false},
      [&](void* s, void* r) { return ncclGather(s, r, kCount, ncclFloat32, 0, comm, stream); });
  run({"Scatter", true, true, false},
      [&](void* s, void* r) { return ncclScatter(s, r, kCount, ncclFloat32, 0, comm, stream); });

  // Send/Recv to self, in one group (as NCCL requires): two records, the Send's input and the Recv's output.
  {
    Buffer send(kBytes), recv(kBytes);
    send.upload(random_floats(kBytes, 77));
    recv.upload(random_floats(kBytes, 78));
    const std::string in = fingerprint(send.download());
    bool ok = nccl(ncclGroupStart(), "ncclGroupStart");
    ok = nccl(ncclSend(send.data(), kCount, ncclFloat32, 0, comm, stream), "ncclSend") && ok;
    ok = nccl(ncclRecv(recv.data(), kCount, ncclFloat32, 0, comm, stream), "ncclRecv") && ok;
    ok = nccl(ncclGroupEnd(), "ncclGroupEnd (send/recv)") && ok;
    synchronize(stream);
    const auto received = recv.download();
    if (fingerprint(received) != in) fail("Send/Recv to self: the received bytes differ from the sent ones");
    if (ok) {
      expect << seq << " Send " << in << " -\n" << seq + 1 << " Recv - " << fingerprint(received) << '\n';
    }
    seq += 2;
  }
  // A group of two AllReduces of different sizes and types: the outputs are fingerprinted after the group ends.
  {
    constexpr std::size_t kHalf = kCount / 2;  // int32 elements of the second call
    Buffer a(kBytes), b(kHalf * 4), out_a(kBytes), out_b(kHalf * 4);
    a.upload(random_floats(kBytes, 91));
    b.upload(random_floats(kHalf * 4, 92));
    const std::string in_a = fingerprint(a.download()), in_b = fingerprint(b.download());
    bool ok = nccl(ncclGroupStart(), "ncclGroupStart");
    ok = nccl(ncclAllReduce(a.data(), out_a.data(), kCount, ncclFloat32, ncclSum, comm, stream), "grouped AllReduce") &&
         ok;
    ok =
        nccl(ncclAllReduce(b.data(), out_b.data(), kHalf, ncclInt32, ncclMin, comm, stream), "grouped AllReduce") && ok;
    ok = nccl(ncclGroupEnd(), "ncclGroupEnd (AllReduce x2)") && ok;
    synchronize(stream);
    if (ok) {
      expect << seq << " AllReduce " << in_a << ' ' << fingerprint(out_a.download()) << '\n'
             << seq + 1 << " AllReduce " << in_b << ' ' << fingerprint(out_b.download()) << '\n';
    }
    seq += 2;
  }
  ncclCommDestroy(comm);
  std::printf("calls: %llu calls issued, %d failures\n", static_cast<unsigned long long>(seq), g_failures);
  return g_failures == 0 ? 0 : 1;
}

// ---------------------------------------------------------------------------------------------------------------
// streams: AllReduces of one communicator alternating between two streams, with no synchronisation between them.
// NCCL orders a communicator's operations whatever their streams; under DETNCCL_DETERMINISTIC=1 with
// DETNCCL_ACCUMULATE=fp32 every call also uses the communicator's scratch, so deterministic mode must order them
// too. One rank: each output must equal its input exactly (bf16 -> fp32 -> bf16).
int run_streams() {
  ncclComm_t comm = single_rank_comm();
  const cudaStream_t streams[2] = {make_stream(), make_stream()};
  constexpr int kCalls = 16;
  constexpr std::size_t kCount = std::size_t{4} << 20;  // bf16 elements: 8 MiB per buffer
  constexpr std::size_t kBytes = kCount * 2;
  std::vector<std::unique_ptr<Buffer>> sends, recvs;
  std::vector<std::vector<std::uint8_t>> inputs;
  for (int k = 0; k < kCalls; ++k) {
    const std::vector<std::uint8_t> floats = random_floats(kCount * 4, static_cast<std::uint64_t>(k) + 7);
    std::vector<std::uint8_t> bf16(kBytes);
    for (std::size_t i = 0; i < kCount; ++i) std::memcpy(&bf16[i * 2], &floats[i * 4 + 2], 2);  // the upper halves
    sends.push_back(std::make_unique<Buffer>(kBytes));
    recvs.push_back(std::make_unique<Buffer>(kBytes));
    sends.back()->upload(bf16);
    inputs.push_back(std::move(bf16));
  }
  for (int k = 0; k < kCalls; ++k) {
    nccl(ncclAllReduce(sends[k]->data(), recvs[k]->data(), kCount, ncclBfloat16, ncclSum, comm, streams[k % 2]),
         "AllReduce on stream " + std::to_string(k % 2));
  }
  for (const cudaStream_t stream : streams) synchronize(stream);
  int wrong = 0;
  for (int k = 0; k < kCalls; ++k) wrong += recvs[k]->download() == inputs[k] ? 0 : 1;
  std::printf("streams: %d AllReduces on 2 streams, %d with a wrong output\n", kCalls, wrong);
  if (wrong != 0) fail(std::to_string(wrong) + " outputs differ from their inputs");
  ncclCommDestroy(comm);
  return g_failures == 0 ? 0 : 1;
}

// ---------------------------------------------------------------------------------------------------------------
// graph: an AllReduce captured in a CUDA graph and replayed. On one rank a sum leaves the input unchanged, so each
// replay must reproduce the input in the output; between replays the output is cleared.
int run_graph() {
  if (!g_device) {
    std::printf("graph: needs --memory device (CUDA graphs)\n");
    return 2;
  }
  constexpr std::size_t kCount = 1 << 20;
  ncclComm_t comm = single_rank_comm();
  cudaStream_t stream = make_stream();
  Buffer send(kCount * 4), recv(kCount * 4);
  const auto input = random_floats(kCount * 4, 5);
  send.upload(input);
  // Eager call first: NCCL sets up its connections outside the capture.
  nccl(ncclAllReduce(send.data(), recv.data(), kCount, ncclFloat32, ncclSum, comm, stream), "eager AllReduce");
  synchronize(stream);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  const bool issued =
      nccl(ncclAllReduce(send.data(), recv.data(), kCount, ncclFloat32, ncclSum, comm, stream), "captured AllReduce");
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (!issued || ended != cudaSuccess) {
    fail(std::string("capture: ") + cudaGetErrorString(ended));
    return 1;
  }
  cuda(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  constexpr int kReplays = 3;
  for (int replay = 0; replay < kReplays; ++replay) {
    cuda(cudaMemsetAsync(recv.data(), 0, kCount * 4, stream), "cudaMemsetAsync");
    const cudaError_t launched = cudaGraphLaunch(exec, stream);
    const cudaError_t synced = cudaStreamSynchronize(stream);
    if (launched != cudaSuccess || synced != cudaSuccess) {
      fail(std::string("graph replay: ") + cudaGetErrorString(launched != cudaSuccess ? launched : synced));
      return 1;
    }
    if (recv.download() != input) fail("graph replay " + std::to_string(replay) + ": output differs from the input");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  ncclCommDestroy(comm);
  std::printf("graph: %d replays, %d failures\n", kReplays, g_failures);
  return g_failures == 0 ? 0 : 1;
}

// ---------------------------------------------------------------------------------------------------------------
// time: seconds per AllReduce of a large float buffer (run.sh runs it with and without the shim).
int run_time() {
  const std::size_t bytes = std::stoull(option("bytes", "268435456")) / 4 * 4;
  const int iterations = std::stoi(option("iterations", "20"));
  ncclComm_t comm = single_rank_comm();
  cudaStream_t stream = make_stream();
  Buffer send(bytes), recv(bytes);
  send.upload(random_floats(bytes, 3));
  for (int i = 0; i < 3; ++i)
    nccl(ncclAllReduce(send.data(), recv.data(), bytes / 4, ncclFloat32, ncclSum, comm, stream), "warm-up");
  synchronize(stream);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) {
    nccl(ncclAllReduce(send.data(), recv.data(), bytes / 4, ncclFloat32, ncclSum, comm, stream), "timed AllReduce");
  }
  synchronize(stream);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ncclCommDestroy(comm);
  std::printf("seconds_per_call %.9f\n", seconds / iterations);
  return g_failures == 0 ? 0 : 1;
}

// ---------------------------------------------------------------------------------------------------------------
// exit: calls whose fingerprints may still be in flight when main returns.
int run_exit() {
  const std::string expect_path = option("expect");
  if (expect_path.empty()) return 2;
  ncclComm_t comm = single_rank_comm();
  cudaStream_t stream = make_stream();
  std::ofstream expect(expect_path);
  constexpr std::size_t kBytes = std::size_t{32} << 20;
  for (std::uint64_t seq = 0; seq < 4; ++seq) {
    // RATIONALE: never freed (the process ends with them): freeing device memory waits for the device.
    auto* send = new Buffer(kBytes);
    auto* recv = new Buffer(kBytes);
    const std::vector<std::uint8_t> input = random_floats(kBytes, seq + 1);
    send->upload(input);
    const std::string digest = fingerprint(input);
    if (nccl(ncclAllReduce(send->data(), recv->data(), kBytes / sizeof(float), ncclFloat32, ncclSum, comm, stream),
             "AllReduce")) {
      expect << seq << " AllReduce " << digest << ' ' << digest << '\n';
    }
  }
  expect.flush();
  return g_failures == 0 ? 0 : 1;
}

// ---------------------------------------------------------------------------------------------------------------
// ranks: N processes, one communicator, a fixed list of reductions.
struct Reduction {
  const char* name;
  ncclDataType_t type;
  std::size_t element_bytes;
  ncclRedOp_t op;
  std::size_t count;
  bool reduce_scatter;
  std::size_t send_shift = 0, recv_shift = 0;  // bytes past an aligned address (NCCL accepts any)
};
constexpr Reduction kReductions[] = {
    {"AllReduce float32 sum", ncclFloat32, 4, ncclSum, 1000003, false},
    {"AllReduce float32 sum, small", ncclFloat32, 4, ncclSum, 17, false},
    {"AllReduce float64 sum", ncclFloat64, 8, ncclSum, 262147, false},
    {"AllReduce float32 avg", ncclFloat32, 4, ncclAvg, 65537, false},
    {"AllReduce float16 sum", ncclFloat16, 2, ncclSum, 131071, false},
    {"AllReduce bfloat16 sum", ncclBfloat16, 2, ncclSum, 131071, false},
    {"ReduceScatter float32 sum", ncclFloat32, 4, ncclSum, 250001, true},
    {"AllReduce float32 sum, buffers 1 and 3 bytes off", ncclFloat32, 4, ncclSum, 100003, false, 1, 3},
    {"ReduceScatter bfloat16 sum, buffers 1 byte off", ncclBfloat16, 2, ncclSum, 20011, true, 1, 1},
};

// Element i of rank r's input for reduction k: a value in [-1, 1), exactly representable in every type used.
double input_value(int k, int rank, std::size_t i) {
  return static_cast<double>(
             mix((static_cast<std::uint64_t>(k) << 48) ^ (static_cast<std::uint64_t>(rank) << 40) ^ i) >> 56) /
             128.0 -
         1.0;
}

std::vector<std::uint8_t> encode(const std::vector<double>& values, ncclDataType_t type) {
  std::vector<std::uint8_t> bytes;
  for (const double v : values) {
    std::uint8_t raw[8] = {};
    std::size_t size = 0;
    if (type == ncclFloat64) {
      std::memcpy(raw, &v, size = 8);
    } else {
      const float f = static_cast<float>(v);
      std::uint32_t bits = 0;
      std::memcpy(&bits, &f, 4);
      if (type == ncclFloat32) {
        std::memcpy(raw, &bits, size = 4);
      } else if (type == ncclBfloat16) {
        const std::uint16_t half = static_cast<std::uint16_t>(bits >> 16);  // exact: values have 8 significant bits
        std::memcpy(raw, &half, size = 2);
      } else {  // float16: the values are k/128 with |k| <= 128, exact in half precision
        const int k = static_cast<int>(std::lround(v * 128));
        std::uint16_t half = 0;
        if (k != 0) {
          const unsigned magnitude = static_cast<unsigned>(std::abs(k));
          int exponent = 0;
          while ((magnitude >> (exponent + 1)) != 0) ++exponent;  // floor(log2(magnitude))
          const unsigned mantissa = (magnitude << (10 - exponent)) & 0x3FFu;
          half = static_cast<std::uint16_t>(((k < 0) ? 0x8000u : 0u) | ((exponent - 7 + 15) << 10) | mantissa);
        }
        std::memcpy(raw, &half, size = 2);
      }
    }
    bytes.insert(bytes.end(), raw, raw + size);
  }
  return bytes;
}

double decode(const std::uint8_t* p, ncclDataType_t type) {
  if (type == ncclFloat64) {
    double v;
    std::memcpy(&v, p, 8);
    return v;
  }
  std::uint32_t bits = 0;
  if (type == ncclFloat32) {
    std::memcpy(&bits, p, 4);
  } else if (type == ncclBfloat16) {
    std::uint16_t half;
    std::memcpy(&half, p, 2);
    bits = static_cast<std::uint32_t>(half) << 16;
  } else {
    std::uint16_t half;
    std::memcpy(&half, p, 2);
    const int exponent = (half >> 10) & 0x1F;
    const double mantissa = half & 0x3FF;
    const double magnitude = exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1024 + mantissa, exponent - 25);
    return (half & 0x8000) ? -magnitude : magnitude;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Pinned memory (#21 item 4): the input reaches the pinned send buffer by a copy on the stream queued behind
// ~2 GiB of memsets, and the call follows at once, unsynchronised: hostnccl must read it in stream order (it read
// pinned memory directly, before the copy landed, and the rank's exact-sum check fails then).
void upload_late(const Buffer& send, const std::vector<std::uint8_t>& host, cudaStream_t stream) {
  static void* delay = nullptr;
  constexpr std::size_t kDelayBytes = std::size_t{1} << 30;
  if (delay == nullptr) cuda(cudaMalloc(&delay, kDelayBytes), "cudaMalloc (delay)");
  void* staged = nullptr;
  cuda(cudaMalloc(&staged, host.size()), "cudaMalloc (staged input)");
  cuda(cudaMemcpy(staged, host.data(), host.size(), cudaMemcpyHostToDevice), "cudaMemcpy (staged input)");
  std::memset(send.data(), 0, host.size());
  for (int i = 0; i < 2; ++i) cuda(cudaMemsetAsync(delay, i, kDelayBytes, stream), "cudaMemsetAsync (delay)");
  cuda(cudaMemcpyAsync(send.data(), staged, host.size(), cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
  cuda(cudaFreeAsync(staged, stream), "cudaFreeAsync");
}

int run_rank(int rank, int nranks, const std::string& prefix) {
  const std::string id_path = prefix + ".id";
  ncclUniqueId id;
  if (rank == 0) {
    require(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
    std::ofstream(id_path + ".tmp", std::ios::binary).write(id.internal, sizeof id.internal);
    require(std::rename((id_path + ".tmp").c_str(), id_path.c_str()) == 0, "publishing the unique id");
  } else {
    for (int tries = 0;; ++tries) {
      std::ifstream in(id_path, std::ios::binary);
      if (in && in.read(id.internal, sizeof id.internal)) break;
      require(tries < 6000, "waiting for rank 0's unique id");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  if (g_device) cuda(cudaSetDevice(0), "cudaSetDevice");
  ncclComm_t comm = nullptr;
  require(nccl(ncclCommInitRank(&comm, nranks, id, rank), "ncclCommInitRank"), "ncclCommInitRank");
  cudaStream_t stream = make_stream();
  std::ofstream out(prefix + ".rank-" + std::to_string(rank), std::ios::binary);
  for (int k = 0; k < static_cast<int>(std::size(kReductions)); ++k) {
    const Reduction& red = kReductions[k];
    const std::size_t total = red.reduce_scatter ? red.count * static_cast<std::size_t>(nranks) : red.count;
    std::vector<double> values(total);
    for (std::size_t i = 0; i < total; ++i) values[i] = input_value(k, rank, i);
    Buffer send(total * red.element_bytes, red.send_shift), recv(red.count * red.element_bytes, red.recv_shift);
    if (g_pinned) {
      upload_late(send, encode(values, red.type), stream);
    } else {
      send.upload(encode(values, red.type));
    }
    const bool ok =
        red.reduce_scatter
            ? nccl(ncclReduceScatter(send.data(), recv.data(), red.count, red.type, red.op, comm, stream), red.name)
            : nccl(ncclAllReduce(send.data(), recv.data(), red.count, red.type, red.op, comm, stream), red.name);
    synchronize(stream);
    const auto result = recv.download();
    out.write(reinterpret_cast<const char*>(result.data()), static_cast<std::streamsize>(result.size()));
    if (!ok) continue;
    // Each output element against the exact sum of the inputs (every input is exact in the type; the bound allows
    // one rounding per addition in the type's precision).
    const double epsilon = red.type == ncclFloat64 ? 1e-15 : red.type == ncclFloat32 ? 1e-6 : 1e-2;
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < red.count; ++i) {
      const std::size_t element = (red.reduce_scatter ? static_cast<std::size_t>(rank) * red.count : 0) + i;
      double exact = 0;
      for (int r = 0; r < nranks; ++r) exact += input_value(k, r, element);
      if (red.op == ncclAvg) exact /= nranks;
      const double got = decode(&result[i * red.element_bytes], red.type);
      if (!(std::fabs(got - exact) <= epsilon * nranks * 4)) ++wrong;
    }
    if (wrong != 0) fail(std::string(red.name) + ": " + std::to_string(wrong) + " elements far from the exact sum");
  }
  ncclCommDestroy(comm);
  return g_failures == 0 ? 0 : 1;
}

int run_ranks() {
  const int nranks = std::stoi(option("ranks", "4"));
  const std::string prefix = option("out");
  if (nranks < 1 || prefix.empty()) return 2;
  std::remove((prefix + ".id").c_str());
  std::vector<pid_t> children;
  for (int rank = 0; rank < nranks; ++rank) {
    const pid_t pid = fork();
    require(pid >= 0, "fork");
    if (pid == 0) {
      alarm(240);  // a hung rank must not hold the whole check
      const std::string rank_text = std::to_string(rank);
      setenv("RANK", rank_text.c_str(), 1);
      setenv("LOCAL_RANK", "0", 1);  // every rank on GPU 0
      if (g_options.count("distinct-hosts") != 0) setenv("NCCL_HOSTID", ("detnccl-rank-" + rank_text).c_str(), 1);
      std::_Exit(run_rank(rank, nranks, prefix));
    }
    children.push_back(pid);
  }
  int status_all = 0;
  for (std::size_t rank = 0; rank < children.size(); ++rank) {
    int status = 0;
    waitpid(children[rank], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "FAIL: rank %zu ended with status 0x%x\n", rank, status);
      status_all = 1;
    }
  }
  std::remove((prefix + ".id").c_str());
  std::printf("ranks: %d ranks, %zu reductions, %s\n", nranks, std::size(kReductions), status_all == 0 ? "ok" : "FAIL");
  return status_all;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s calls|exit|streams|graph|time|ranks [--name value | --flag]...\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string name = argv[i];
    if (name.rfind("--", 0) != 0) {
      std::fprintf(stderr, "unexpected argument %s\n", argv[i]);
      return 2;
    }
    name = name.substr(2);
    const bool has_value = i + 1 < argc && std::strncmp(argv[i + 1], "--", 2) != 0;
    g_options[name] = has_value ? argv[++i] : "";
  }
  const std::string memory = option("memory", "host");
  if (memory != "host" && memory != "device" && !(memory == "pinned" && mode == "ranks")) {
    std::fprintf(stderr, "--memory must be host or device (or pinned, for ranks)\n");
    return 2;
  }
  g_pinned = memory == "pinned";
  g_device = memory == "device" || g_pinned;
  if (mode == "calls") return run_calls();
  if (mode == "exit") return run_exit();
  if (mode == "streams") return run_streams();
  if (mode == "graph") return run_graph();
  if (mode == "time") return run_time();
  if (mode == "ranks") return run_ranks();
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
