// The entry points: validation, the choice of algorithm and backend, chunking to the scratch cap.
#include "collectives/deterministic.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <new>
#include <string>
#include <thread>

#include "collectives/algorithm.h"
#include "collectives/dtype_arith.h"
#include "collectives/element_reducer.h"

namespace detnccl::collectives {
namespace {

const char* collective_name(Collective collective) {
  switch (collective) {
    case Collective::kAllReduce:
      return "AllReduce";
    case Collective::kReduceScatter:
      return "ReduceScatter";
    case Collective::kReduce:
      return "Reduce";
  }
  return "?";
}

bool valid_kind(ReductionKind kind) {
  return kind == ReductionKind::kSum || kind == ReductionKind::kProd || kind == ReductionKind::kMin ||
         kind == ReductionKind::kMax || kind == ReductionKind::kAvg || kind == ReductionKind::kPreMulSum;
}

ncclResult_t fail(Report* report, ncclResult_t result, std::string message) {
  if (report != nullptr) report->error = std::move(message);
  return result;
}

// Everything about one call that is the same on every chunk.
struct Call {
  Collective collective;
  const P2pFunctions& nccl;
  const CallContext& context;
  const void* send;
  void* recv;
  std::size_t count;  // AllReduce/Reduce: count; ReduceScatter: recvcount
  ncclDataType_t datatype;
  const Reduction& reduction;
  int root;
  Workspace& workspace;
  const Options& options;
  Report* report;
};

ncclResult_t check(const Call& call) {
  const char* what = collective_name(call.collective);
  const CallContext& ctx = call.context;
  if (call.nccl.send == nullptr || call.nccl.recv == nullptr || call.nccl.group_start == nullptr ||
      call.nccl.group_end == nullptr) {
    return fail(call.report, ncclInvalidArgument,
                std::string("deterministic ") + what + ": a P2pFunctions pointer is null");
  }
  if (ctx.nranks < 1 || ctx.rank < 0 || ctx.rank >= ctx.nranks) {
    return fail(call.report, ncclInvalidArgument,
                std::string("deterministic ") + what + ": rank " + std::to_string(ctx.rank) + " of " +
                    std::to_string(ctx.nranks) + " ranks is invalid");
  }
  if (call.collective == Collective::kReduce && (call.root < 0 || call.root >= ctx.nranks)) {
    return fail(call.report, ncclInvalidArgument,
                std::string("deterministic Reduce: invalid root ") + std::to_string(call.root));
  }
  if (arith::dtype_size(call.datatype) == 0) {
    return fail(
        call.report, ncclInvalidArgument,
        std::string("deterministic ") + what + ": invalid datatype " + std::to_string(static_cast<int>(call.datatype)));
  }
  if (!valid_kind(call.reduction.kind)) {
    return fail(call.report, ncclInvalidArgument, std::string("deterministic ") + what + ": invalid reduction kind");
  }
  if (call.reduction.kind == ReductionKind::kPreMulSum && call.reduction.residence == ncclScalarDevice &&
      call.reduction.scalar_pointer == nullptr) {
    return fail(call.report, ncclInvalidArgument,
                std::string("deterministic ") + what + ": PreMulSum scalar pointer is null");
  }
  if (call.count > 0) {
    const bool needs_recv = call.collective != Collective::kReduce || ctx.rank == call.root;
    if (call.send == nullptr || (needs_recv && call.recv == nullptr)) {
      return fail(call.report, ncclInvalidArgument, std::string("deterministic ") + what + ": a buffer is null");
    }
    // The largest byte count any part computes: the whole message, widened to fp32 partials (at most 4x, fp8), with
    // headroom; rejecting counts near SIZE_MAX here keeps every later product in range.
    std::size_t bytes = 0;
    const std::size_t blocks = call.collective == Collective::kReduceScatter ? static_cast<std::size_t>(ctx.nranks) : 1;
    if (__builtin_mul_overflow(call.count, arith::dtype_size(call.datatype), &bytes) ||
        __builtin_mul_overflow(bytes, blocks * sizeof(double), &bytes)) {
      return fail(call.report, ncclInvalidArgument, std::string("deterministic ") + what + ": count overflows");
    }
  }
  return ncclSuccess;
}

ncclResult_t run(const Call& call) {
  if (const ncclResult_t r = check(call); r != ncclSuccess) return r;
  const CallContext& ctx = call.context;
  const Algorithm algorithm = resolve_algorithm(call.collective, call.count, call.datatype, ctx.nranks, call.options);
  if (call.report != nullptr) {
    call.report->algorithm = algorithm;
    call.report->chunks = 0;
    call.report->bytes_sent = 0;
    call.report->error.clear();
  }
  if (call.count == 0) return ncclSuccess;  // every rank has the same count: nothing to exchange anywhere
  const AlgorithmDescriptor& descriptor = algorithm_descriptor(algorithm);

  ElementSpec spec;
  spec.datatype = call.datatype;
  spec.kind = call.reduction.kind;
  spec.nranks = ctx.nranks;
  spec.float_accumulator = uses_float_accumulator(call.datatype, call.reduction.kind, call.options.accumulate);
  if (call.reduction.kind == ReductionKind::kPreMulSum) {
    if (call.reduction.residence == ncclScalarHostImmediate) {
      spec.scalar_bits = call.reduction.scalar_bits;
    } else if (ctx.buffers_on_device) {
      spec.device_scalar = call.reduction.scalar_pointer;  // read by the kernels, in stream order
    } else {
      std::memcpy(&spec.scalar_bits, call.reduction.scalar_pointer, arith::dtype_size(call.datatype));
    }
  }

  const AssociationTree tree(ctx.nranks);
  Problem problem;
  problem.collective = call.collective;
  problem.rank = ctx.rank;
  problem.nranks = ctx.nranks;
  problem.root = call.root;
  problem.tree = &tree;
  problem.type_size = spec.type_size();
  problem.acc_size = spec.acc_size();
  problem.acc_is_type = !spec.float_accumulator;

  // Chunk size: the longest block of a chunk, as large as the scratch cap allows (at least one element).
  const auto n = static_cast<std::size_t>(ctx.nranks);
  const std::size_t per_unit = descriptor.scratch_bytes_per_unit(problem);
  const std::size_t longest_block =
      call.collective == Collective::kReduceScatter ? call.count : (call.count + n - 1) / n;
  const std::size_t cap_units =
      per_unit == 0 ? longest_block : std::max<std::size_t>(1, call.options.scratch_bytes / per_unit);
  const std::size_t unit = std::min(longest_block, cap_units);
  const std::size_t scratch_bytes = per_unit * unit;

  std::string error;
  std::unique_ptr<Backend> backend;
  unsigned char* scratch = nullptr;
  bool ordered = false;  // device work outside capture: its end is marked for a later call on another stream
  if (ctx.buffers_on_device) {
    backend = make_device_backend(spec, ctx.stream, ctx.device, &error);
    if (backend == nullptr)
      return fail(call.report, ncclInvalidUsage, "deterministic mode on device buffers: " + error);
    bool capturing = false;
    if (!stream_is_capturing(ctx.stream, &capturing, &error)) return fail(call.report, ncclUnhandledCudaError, error);
    if (call.workspace.device_bytes() < scratch_bytes) {
      if (capturing) {
        return fail(call.report, ncclInvalidUsage,
                    "deterministic " + std::string(collective_name(call.collective)) + " needs " +
                        std::to_string(scratch_bytes) +
                        " bytes of device scratch, which cannot be allocated during CUDA graph capture: run one "
                        "deterministic reduction on this communicator before capturing (a warm-up step, as CUDA graphs "
                        "usually need), or call Workspace::prepare_device when using detnccl_collectives directly");
      }
      if (call.workspace.prepare_device(std::max(scratch_bytes, call.options.scratch_bytes), &error) != ncclSuccess) {
        return fail(call.report, ncclUnhandledCudaError, error);
      }
    }
    scratch = static_cast<unsigned char*>(call.workspace.device_scratch());
    if (!capturing) {
      if (call.workspace.order_after_last_call(ctx.stream, &error) != ncclSuccess) {
        return fail(call.report, ncclUnhandledCudaError, "deterministic mode: " + error);
      }
      ordered = true;
    }
  } else {
    backend = make_host_backend(spec);
    scratch = static_cast<unsigned char*>(call.workspace.host_scratch(scratch_bytes));
    if (scratch == nullptr && scratch_bytes > 0) {
      return fail(call.report, ncclSystemError,
                  "deterministic mode: cannot allocate " + std::to_string(scratch_bytes) + " bytes of scratch");
    }
  }

  Exchange exchange(call.nccl, ctx.comm, ctx.stream);
  const auto* send = static_cast<const unsigned char*>(call.send);
  auto* recv = static_cast<unsigned char*>(call.recv);
  std::size_t chunks = 0;
  const std::size_t step = call.collective == Collective::kReduceScatter ? unit : unit * n;
  // Whatever the call enqueued, a later call on another stream waits for it (also after a failure).
  struct MarkEnd {
    Workspace* workspace;
    cudaStream_t stream;
    ~MarkEnd() {
      if (workspace != nullptr) (void)workspace->mark_end_of_call(stream, nullptr);
    }
  } mark_end{ordered ? &call.workspace : nullptr, ctx.stream};
  for (std::size_t first = 0; first < call.count; first += step) {
    Chunk chunk;
    chunk.nblocks = ctx.nranks;
    chunk.first = first;
    if (call.collective == Collective::kReduceScatter) {
      chunk.strided = true;
      chunk.per_block = std::min(unit, call.count - first);
      chunk.stride = call.count;
      chunk.total = chunk.per_block * n;
    } else {
      chunk.total = std::min(step, call.count - first);
    }
    const ChunkContext chunk_context{problem, chunk, send, recv, scratch, *backend, exchange};
    const ncclResult_t result = descriptor.run_chunk(chunk_context);
    ++chunks;
    if (result != ncclSuccess) {
      std::string message = exchange.error().empty() ? backend->last_error() : exchange.error();
      if (result == ncclInProgress) {
        message += " (a non-blocking communicator: pass P2pFunctions::comm_get_async_error to wait for the enqueue)";
      }
      if (call.report != nullptr) call.report->chunks = chunks;
      return fail(call.report, result,
                  "deterministic " + std::string(collective_name(call.collective)) + " (" +
                      algorithm_name(descriptor.id) + "): " + message);
    }
  }
  if (call.report != nullptr) {
    call.report->chunks = chunks;
    call.report->bytes_sent = exchange.bytes_sent();
  }
  return ncclSuccess;
}

// The host job must never see an exception from us.
ncclResult_t run_guarded(const Call& call) {
  try {
    return run(call);
  } catch (const std::bad_alloc&) {
    return fail(call.report, ncclSystemError, "deterministic mode: out of memory");
  } catch (const std::exception& e) {
    return fail(call.report, ncclInternalError, std::string("deterministic mode: ") + e.what());
  }
}

}  // namespace

ncclResult_t Exchange::run() {
  if (transfers_.empty()) return ncclSuccess;
  ncclResult_t first_failure = ncclSuccess;
  if (const ncclResult_t r = nccl_.group_start(); r != ncclSuccess) {
    transfers_.clear();
    error_ = "ncclGroupStart returned " + std::to_string(static_cast<int>(r));
    return r;
  }
  std::size_t sent = 0;
  for (const Transfer& t : transfers_) {
    const ncclResult_t r = t.sending ? nccl_.send(t.data, t.bytes, ncclInt8, t.peer, comm_, stream_)
                                     : nccl_.recv(t.data, t.bytes, ncclInt8, t.peer, comm_, stream_);
    if (r != ncclSuccess && first_failure == ncclSuccess) {
      first_failure = r;
      error_ = std::string(t.sending ? "ncclSend of " : "ncclRecv of ") + std::to_string(t.bytes) + " bytes " +
               (t.sending ? "to" : "from") + " rank " + std::to_string(t.peer) + " returned " +
               std::to_string(static_cast<int>(r));
    }
    if (t.sending) sent += t.bytes;
  }
  // A group that was opened is always closed, even after a failed call inside it.
  ncclResult_t end = nccl_.group_end();
  if (end == ncclInProgress && first_failure == ncclSuccess && nccl_.comm_get_async_error != nullptr) {
    // RATIONALE: the next step (a reduce kernel on the same stream, or a CPU loop over received data) must come after
    // the transfers, and NCCL accepts no new call on the communicator meanwhile.
    end = wait_while_in_progress(nccl_.comm_get_async_error, comm_);
  }
  if (end != ncclSuccess && first_failure == ncclSuccess) {
    first_failure = end;
    error_ = "ncclGroupEnd returned " + std::to_string(static_cast<int>(end));
  }
  transfers_.clear();
  if (first_failure == ncclSuccess) bytes_sent_ += sent;
  return first_failure;
}

Workspace::~Workspace() {
  std::free(host_);
  if (device_ != nullptr) device_free(device_);
  if (end_event_ != nullptr) device_event_destroy(end_event_);
}

ncclResult_t Workspace::order_after_last_call(cudaStream_t stream, std::string* error) {
  if (!end_recorded_ || end_stream_ == stream) return ncclSuccess;
  return device_stream_wait(stream, end_event_, error) ? ncclSuccess : ncclUnhandledCudaError;
}

ncclResult_t Workspace::mark_end_of_call(cudaStream_t stream, std::string* error) {
  if (end_event_ == nullptr && !device_event_create(&end_event_, error)) return ncclUnhandledCudaError;
  // RATIONALE: a failed record leaves no mark: a later call on another stream then has nothing to wait for, which is
  // what it would have without this ordering (the error shows at the job's next CUDA call anyway).
  end_recorded_ = device_event_record(end_event_, stream, error);
  end_stream_ = stream;
  return end_recorded_ ? ncclSuccess : ncclUnhandledCudaError;
}

void* Workspace::host_scratch(std::size_t bytes) {
  if (bytes <= host_bytes_) return host_;
  const std::size_t rounded = (bytes + 63) / 64 * 64;
  void* grown = std::aligned_alloc(64, rounded);
  if (grown == nullptr) return nullptr;
  std::free(host_);
  host_ = grown;
  host_bytes_ = rounded;
  return host_;
}

ncclResult_t Workspace::prepare_device(std::size_t bytes, std::string* error) {
  if (bytes <= device_bytes_) return ncclSuccess;
  void* fresh = nullptr;
  if (!device_allocate(bytes, &fresh, error)) return ncclUnhandledCudaError;
  if (device_ != nullptr) device_free(device_);
  device_ = fresh;
  device_bytes_ = bytes;
  return ncclSuccess;
}

ncclResult_t wait_while_in_progress(ncclResult_t (*comm_get_async_error)(ncclComm_t, ncclResult_t*),
                                    ncclComm_t comm) noexcept {
  for (unsigned polls = 0;; ++polls) {
    ncclResult_t state = ncclInProgress;
    if (const ncclResult_t queried = comm_get_async_error(comm, &state); queried != ncclSuccess) return queried;
    if (state != ncclInProgress) return state;
    // NCCL's enqueue takes microseconds: yield first, then sleep briefly so that a long wait (peers still joining)
    // leaves the CPU to NCCL's own threads.
    if (polls < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

std::optional<Reduction> builtin_reduction(ncclRedOp_t op) noexcept {
  Reduction reduction;
  switch (op) {
    case ncclSum:
      reduction.kind = ReductionKind::kSum;
      return reduction;
    case ncclProd:
      reduction.kind = ReductionKind::kProd;
      return reduction;
    case ncclMax:
      reduction.kind = ReductionKind::kMax;
      return reduction;
    case ncclMin:
      reduction.kind = ReductionKind::kMin;
      return reduction;
    case ncclAvg:
      reduction.kind = ReductionKind::kAvg;
      return reduction;
    default:
      return std::nullopt;
  }
}

Reduction premul_sum_reduction(const void* scalar, ncclDataType_t datatype, ncclScalarResidence_t residence) noexcept {
  Reduction reduction;
  reduction.kind = ReductionKind::kPreMulSum;
  reduction.residence = residence;
  reduction.scalar_pointer = scalar;
  if (residence == ncclScalarHostImmediate && scalar != nullptr) {
    std::memcpy(&reduction.scalar_bits, scalar,
                std::min<std::size_t>(arith::dtype_size(datatype), sizeof(std::uint64_t)));
  }
  return reduction;
}

Classification classify(ncclDataType_t datatype, const Reduction& reduction) {
  const std::string type = "datatype " + std::to_string(static_cast<int>(datatype));
  if (arith::dtype_size(datatype) == 0)
    return {Handling::kUnsupported, type + " is not an NCCL datatype detnccl knows"};
  if (!valid_kind(reduction.kind)) return {Handling::kUnsupported, "the reduction operator is not one detnccl knows"};
  if (!arith::dtype_is_floating(datatype)) {
    return {Handling::kPassThrough, "integer reductions give the same bits in any order (" + type + ")"};
  }
  return {Handling::kSubstitute, {}};
}

std::size_t planned_bytes_sent(Collective collective, Algorithm algorithm, std::size_t count, ncclDataType_t datatype,
                               int nranks, int rank, int root, Accumulate accumulate) {
  const AssociationTree tree(nranks);
  Problem problem;
  problem.collective = collective;
  problem.rank = rank;
  problem.nranks = nranks;
  problem.root = root;
  problem.tree = &tree;
  problem.type_size = arith::dtype_size(datatype);
  const bool float_acc = uses_float_accumulator(datatype, ReductionKind::kSum, accumulate);
  problem.acc_size = float_acc ? sizeof(float) : problem.type_size;
  problem.acc_is_type = !float_acc;
  if (problem.type_size == 0 || algorithm == Algorithm::kAuto) return 0;
  double message = static_cast<double>(count) * static_cast<double>(problem.type_size);
  if (collective == Collective::kReduceScatter) message *= nranks;
  return static_cast<std::size_t>(algorithm_descriptor(algorithm).bytes_sent(problem, message) + 0.5);
}

ncclResult_t all_reduce(const P2pFunctions& nccl, const CallContext& context, const void* sendbuff, void* recvbuff,
                        std::size_t count, ncclDataType_t datatype, const Reduction& reduction, Workspace& workspace,
                        const Options& options, Report* report) {
  return run_guarded(Call{Collective::kAllReduce, nccl, context, sendbuff, recvbuff, count, datatype, reduction, 0,
                          workspace, options, report});
}

ncclResult_t reduce_scatter(const P2pFunctions& nccl, const CallContext& context, const void* sendbuff, void* recvbuff,
                            std::size_t recvcount, ncclDataType_t datatype, const Reduction& reduction,
                            Workspace& workspace, const Options& options, Report* report) {
  return run_guarded(Call{Collective::kReduceScatter, nccl, context, sendbuff, recvbuff, recvcount, datatype, reduction,
                          0, workspace, options, report});
}

ncclResult_t reduce(const P2pFunctions& nccl, const CallContext& context, const void* sendbuff, void* recvbuff,
                    std::size_t count, ncclDataType_t datatype, const Reduction& reduction, int root,
                    Workspace& workspace, const Options& options, Report* report) {
  return run_guarded(Call{Collective::kReduce, nccl, context, sendbuff, recvbuff, count, datatype, reduction, root,
                          workspace, options, report});
}

}  // namespace detnccl::collectives
