/* detnccl collectives: deterministic AllReduce, ReduceScatter and Reduce built from the real NCCL's send/recv.
 *
 * This is the only header the shim needs. Every reduction computed here adds each element's contributions in one
 * fixed association tree over the logical ranks (docs/deterministic.md, "Order of operations"): the tree depends
 * only on the number of ranks, never on the message size, the chunking, the algorithm chosen, NCCL's own choices or
 * the rank-to-GPU mapping. So an element's bits are the same alone or fused into any bucket, at any size, and every
 * rank of an AllReduce receives the same bits.
 *
 * Contract with the caller (the shim):
 *   - Call the entry points OUTSIDE any NCCL group: they open and close their own groups on the real NCCL. A call
 *     the user made between ncclGroupStart and ncclGroupEnd is deferred by the shim and run after the outermost
 *     ncclGroupEnd returns.
 *   - Pass the REAL NCCL's ncclSend/ncclRecv/ncclGroupStart/ncclGroupEnd (never the public names, which would
 *     re-enter the shim).
 *   - Every rank of the communicator must call with the same collective, count, datatype, reduction kind, root and
 *     Options (the options decide the chunking, and so which messages are exchanged).
 *   - Keep one Workspace per communicator and use it from one thread at a time.
 */
#ifndef DETNCCL_COLLECTIVES_DETERMINISTIC_H
#define DETNCCL_COLLECTIVES_DETERMINISTIC_H

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "abi/nccl_abi.h"
#include "collectives/algorithm_names.h"

namespace detnccl::collectives {

/* The real NCCL entry points the algorithms are built from (the shim passes its real-function table's pointers;
 * tests pass hostnccl's pnccl* functions, or wrappers that count bytes). */
struct P2pFunctions {
  ncclResult_t (*send)(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                       cudaStream_t stream) = nullptr;
  ncclResult_t (*recv)(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                       cudaStream_t stream) = nullptr;
  ncclResult_t (*group_start)() = nullptr;
  ncclResult_t (*group_end)() = nullptr;
  /* Needed for non-blocking communicators only: after a ncclGroupEnd that returned ncclInProgress, the algorithms
   * poll it until the transfers are enqueued (or failed) before they go on. Without it ncclInProgress is an error. */
  ncclResult_t (*comm_get_async_error)(ncclComm_t comm, ncclResult_t* async_error) = nullptr;
};

/* The reductions this library computes. */
enum class Collective : std::uint8_t { kAllReduce, kReduceScatter, kReduce };

/* Algorithm and Accumulate, with their names: collectives/algorithm_names.h. */

/* The name of an algorithm (DETNCCL_ALGORITHMS: "auto", "mixed_radix", ...). */
const char* algorithm_name(Algorithm algorithm) noexcept;

/* The algorithm a DETNCCL_ALGO value names (case-insensitive; "-" and "_" alike), or nullopt. */
std::optional<Algorithm> algorithm_from_name(std::string_view name) noexcept;

/* The name of an accumulation mode (DETNCCL_ACCUMULATIONS: "native", "fp32"). */
const char* accumulate_name(Accumulate accumulate) noexcept;

/* The mode a DETNCCL_ACCUMULATE value names (case-insensitive; "-" and "_" alike), or nullopt. */
std::optional<Accumulate> accumulate_from_name(std::string_view name) noexcept;

/* Default cap on the scratch memory one communicator holds (host or device): 32 MiB. Larger messages are processed
 * in chunks that fit. */
inline constexpr std::size_t kDefaultScratchBytes = std::size_t{32} << 20;

/* Settings that every rank must share (the shim reads them from DETNCCL_ALGO, DETNCCL_ACCUMULATE and records them). */
struct Options {
  Algorithm algorithm = Algorithm::kAuto;
  Accumulate accumulate = Accumulate::kNative;
  // Cap on scratch memory per communicator (host or device). A chunk always holds at least one element per rank,
  // so a cap smaller than that chunk's scratch is exceeded by the difference.
  std::size_t scratch_bytes = kDefaultScratchBytes;
};

/* What a reduction computes, with one fixed meaning (docs/deterministic.md, "Operators"):
 *   kSum, kProd, kMin, kMax: as NCCL. Min/max: NaN wins and -0 < +0, so they are order independent.
 *   kAvg: floating types pre-multiply each input by 1/n (computed in fp32, fp64 for double) and sum; integer types
 *         sum and divide by n, truncating.
 *   kPreMulSum: each rank multiplies its own input by its own scalar (rounded to the datatype, except in fp32
 *         accumulation), then the products are summed. */
enum class ReductionKind : std::uint8_t { kSum, kProd, kMin, kMax, kAvg, kPreMulSum };

struct Reduction {
  ReductionKind kind = ReductionKind::kSum;
  // kPreMulSum only. ncclScalarHostImmediate: the scalar's bits (an element of the call's datatype, little end
  // first) copied when the op was created. ncclScalarDevice: the scalar is read through scalar_pointer when the
  // reduction runs (on the device for device buffers, so the read is stream ordered).
  ncclScalarResidence_t residence = ncclScalarHostImmediate;
  std::uint64_t scalar_bits = 0;
  const void* scalar_pointer = nullptr;
};

/* The Reduction for a built-in op (ncclSum .. ncclAvg), or nullopt for any other value. */
std::optional<Reduction> builtin_reduction(ncclRedOp_t op) noexcept;

/* The Reduction for ncclRedOpCreatePreMulSum(scalar, datatype, residence): call it when the op is created (a
 * host-immediate scalar is copied now, as NCCL does). */
Reduction premul_sum_reduction(const void* scalar, ncclDataType_t datatype, ncclScalarResidence_t residence) noexcept;

/* What deterministic mode does with a reduction. */
enum class Handling : std::uint8_t {
  kSubstitute,   // floating-point: computed here
  kPassThrough,  // integer: every order gives the same bits, so the real NCCL call is already deterministic
  kUnsupported,  // cannot be made deterministic: the shim stops the job (or warns, with DETNCCL_DETERMINISTIC=warn)
};

struct Classification {
  Handling handling = Handling::kUnsupported;
  std::string reason;  // for kPassThrough and kUnsupported: one sentence naming the datatype/op/communicator
};

/* Polls comm_get_async_error (the real ncclCommGetAsyncError) while `comm`, a non-blocking communicator, says
 * ncclInProgress, i.e. until NCCL has enqueued the work of its last call or group; returns the state it settled in
 * (ncclSuccess or the communicator's error), or the query's own failure. Returns at once when nothing is in progress.
 */
ncclResult_t wait_while_in_progress(ncclResult_t (*comm_get_async_error)(ncclComm_t, ncclResult_t*),
                                    ncclComm_t comm) noexcept;

/* Decides how deterministic mode handles a reduction of `datatype` with `reduction`: floating-point ones are
 * substituted, integer ones passed through, anything this library does not know refused. Non-blocking communicators
 * are supported when P2pFunctions::comm_get_async_error is given: each exchange waits until NCCL has enqueued its
 * transfers, so the reduce steps that follow are ordered after them. */
Classification classify(ncclDataType_t datatype, const Reduction& reduction);

/* The algorithm DETNCCL_ALGO=auto picks: a pure function of the call's shape, identical on every rank
 * (docs/deterministic.md, "Choosing an algorithm"). `count` is the NCCL call's count (per-rank count for
 * ReduceScatter). */
Algorithm select_algorithm(Collective collective, std::size_t count, ncclDataType_t datatype, int nranks) noexcept;

/* The algorithm a call runs: options.algorithm unless it is kAuto, then select_algorithm(). */
Algorithm resolve_algorithm(Collective collective, std::size_t count, ncclDataType_t datatype, int nranks,
                            const Options& options) noexcept;

/* The radices of the association tree for `nranks`: its prime factors in ascending order (empty for 1). */
std::vector<int> association_radices(int nranks);

/* The largest number of additions on the path from one rank's input to the result: sum of (p_i - 1) over the prime
 * factors p_i of nranks. The error bounds in docs/deterministic.md are in terms of it. */
int association_height(int nranks);

/* Bytes one rank sends for a call of this shape with `algorithm` (not kAuto), as the algorithm schedules it. For
 * Reduce this is the most any rank sends. */
std::size_t planned_bytes_sent(Collective collective, Algorithm algorithm, std::size_t count, ncclDataType_t datatype,
                               int nranks, int rank, int root, Accumulate accumulate);

/* Scratch memory (bytes) reused by every deterministic call of one communicator. Host scratch grows on demand up
 * to the cap; device scratch is allocated by prepare_device() (or on the first device call, when the stream is not
 * being captured into a CUDA graph) and freed with the workspace. */
class Workspace {
 public:
  Workspace() = default;
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  /* Allocates `bytes` of device scratch now (call outside CUDA graph capture, e.g. at communicator creation, with
   * Options::scratch_bytes). Returns ncclUnhandledCudaError with *error set when the allocation fails or this build
   * has no CUDA. */
  ncclResult_t prepare_device(std::size_t bytes, std::string* error);

  /* The most host scratch this workspace has held, in bytes. */
  std::size_t host_bytes() const noexcept { return host_bytes_; }

  /* Device scratch held now, in bytes. */
  std::size_t device_bytes() const noexcept { return device_bytes_; }

  /* Internal: host scratch of at least `bytes` (64-byte aligned), kept for later calls. */
  void* host_scratch(std::size_t bytes);
  /* Internal: the device scratch and its size (nullptr, 0 before prepare_device). */
  void* device_scratch() const noexcept { return device_; }

  /* Internal: stream order between device calls (backend.h). Before a call's first work on `stream`: when the last
   * call ran on another stream, `stream` waits for its end (NCCL orders a communicator's operations whatever their
   * streams, and every call uses this scratch). After the call's last work: marks its end. Not while `stream` is
   * being captured into a CUDA graph (the graph's launches are ordered by the stream they are launched on). */
  ncclResult_t order_after_last_call(cudaStream_t stream, std::string* error);
  ncclResult_t mark_end_of_call(cudaStream_t stream, std::string* error);

 private:
  void* host_ = nullptr;
  std::size_t host_bytes_ = 0;
  void* device_ = nullptr;
  std::size_t device_bytes_ = 0;
  void* end_event_ = nullptr;          // recorded at the end of the last device call outside capture
  cudaStream_t end_stream_ = nullptr;  // that call's stream
  bool end_recorded_ = false;
};

/* Where and how a call runs. */
struct CallContext {
  ncclComm_t comm = nullptr;
  int rank = 0;
  int nranks = 1;
  cudaStream_t stream = nullptr;
  // true: buffers are device memory; the reduce steps run as CUDA kernels on `stream`, stream ordered with the
  // transfers and with no host synchronisation (capturable). false: host memory; the CPU reduces.
  bool buffers_on_device = false;
  // The communicator's device, -1 if unknown: a default stream (0, per-thread) is that device's, as NCCL makes it
  // current in the call, not the thread's current one (one thread driving several GPUs).
  int device = -1;
};

/* What a call did, for the records. */
struct Report {
  Algorithm algorithm = Algorithm::kAuto;  // the algorithm that ran (never kAuto after a call that got that far)
  std::size_t chunks = 0;                  // how many chunks the scratch cap split the call into
  std::size_t bytes_sent = 0;              // bytes this rank passed to send
  std::string error;                       // when the call fails: what failed, in one sentence
};

/* Deterministic ncclAllReduce: recvbuff[i] = the reduction over ranks of sendbuff[i], i < count. In place when
 * sendbuff == recvbuff. */
ncclResult_t all_reduce(const P2pFunctions& nccl, const CallContext& context, const void* sendbuff, void* recvbuff,
                        std::size_t count, ncclDataType_t datatype, const Reduction& reduction, Workspace& workspace,
                        const Options& options, Report* report = nullptr);

/* Deterministic ncclReduceScatter: recvbuff[i] = the reduction over ranks of sendbuff[rank * recvcount + i]. In
 * place when recvbuff == sendbuff + rank * recvcount elements. */
ncclResult_t reduce_scatter(const P2pFunctions& nccl, const CallContext& context, const void* sendbuff, void* recvbuff,
                            std::size_t recvcount, ncclDataType_t datatype, const Reduction& reduction,
                            Workspace& workspace, const Options& options, Report* report = nullptr);

/* Deterministic ncclReduce: the root's recvbuff gets the AllReduce result; other ranks' recvbuff is not touched
 * (may be null). */
ncclResult_t reduce(const P2pFunctions& nccl, const CallContext& context, const void* sendbuff, void* recvbuff,
                    std::size_t count, ncclDataType_t datatype, const Reduction& reduction, int root,
                    Workspace& workspace, const Options& options, Report* report = nullptr);

}  // namespace detnccl::collectives

#endif  // DETNCCL_COLLECTIVES_DETERMINISTIC_H
