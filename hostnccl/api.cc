// hostnccl: the NCCL entry points. Each implemented call checks its arguments the way NCCL does (returning NCCL's
// codes, never crashing), then becomes an Op for the progress engine. Every other entry point of the table is
// generated at the end of this file as a stub returning ncclInvalidUsage. Every entry is defined as the strong
// symbol pnccl<X>, with nccl<X> a weak alias of it, as NCCL itself exports them.

// The public declarations get default visibility; everything else in the library is hidden (-fvisibility=hidden).
#pragma GCC visibility push(default)
#include "abi/nccl_abi.h"
#pragma GCC visibility pop

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "collectives/dtype_arith.h"
#include "hostnccl/comm.h"
#include "hostnccl/config.h"
#include "hostnccl/device_staging.h"
#include "hostnccl/ops.h"
#include "hostnccl/progress.h"
#include "hostnccl/unique_id.h"

namespace hostnccl {
namespace {

using detnccl::arith::dtype_size;

ncclResult_t fail(ncclResult_t result, const std::string& text) {
  set_last_error("hostnccl: " + text);
  record_group_error(result);
  return result;
}

ncclResult_t check_comm(const Comm* comm, const char* call) {
  if (comm == nullptr) return fail(ncclInvalidArgument, std::string(call) + ": comm is NULL");
  if (!comm_is_valid(comm))
    return fail(ncclInvalidArgument, std::string(call) + ": comm is not a hostnccl communicator");
  if (const ncclResult_t error = comm->async_error.load(); error == ncclInProgress) {
    // As NCCL's ncclCommEnsureReady (every enqueue checks it): ncclInvalidArgument.
    return fail(ncclInvalidArgument, std::string(call) +
                                         ": Attempt to use communicator before the previous operation returned "
                                         "ncclSuccess (poll ncclCommGetAsyncError until it does)");
  } else if (error != ncclSuccess) {
    return fail(error, std::string(call) + ": the communicator failed earlier (" + ncclGetErrorString(error) + ")");
  }
  if (comm->finalized) return fail(ncclInvalidUsage, std::string(call) + ": the communicator is finalized");
  return ncclSuccess;
}

ncclResult_t check_type(ncclDataType_t type, const char* call) {
  if (dtype_size(type) == 0) {
    return fail(ncclInvalidArgument,
                std::string(call) + ": invalid datatype " + std::to_string(static_cast<int>(type)));
  }
  return ncclSuccess;
}

ncclResult_t check_rank(int rank, const Comm* comm, const char* what, const char* call) {
  if (rank < 0 || rank >= comm->nranks) {
    return fail(ncclInvalidArgument, std::string(call) + ": invalid " + what + " " + std::to_string(rank) +
                                         " (nranks " + std::to_string(comm->nranks) + ")");
  }
  return ncclSuccess;
}

// The byte size of `count` elements times `blocks`, or an error when it does not fit in size_t.
ncclResult_t check_count(std::size_t count, ncclDataType_t type, std::size_t blocks, const char* call) {
  std::size_t bytes = 0;
  if (__builtin_mul_overflow(count, dtype_size(type), &bytes) || __builtin_mul_overflow(bytes, blocks, &bytes)) {
    return fail(ncclInvalidArgument, std::string(call) + ": count " + std::to_string(count) + " overflows");
  }
  return ncclSuccess;
}

ncclResult_t check_buffer(const void* buffer, std::size_t count, const char* which, const char* call) {
  if (buffer == nullptr && count > 0) return fail(ncclInvalidArgument, std::string(call) + ": " + which + " is NULL");
  return ncclSuccess;
}

// Resolves `op` for `type`: a built-in op, or one of the communicator's PreMulSum ops (whose device-style scalar is
// read now, at the call).
ncclResult_t resolve_op(Comm* comm, ncclRedOp_t op, ncclDataType_t type, ReduceSpec* spec, const char* call,
                        cudaStream_t stream) {
  if (op >= 0 && op < ncclNumOps) {
    *spec = builtin_reduce_spec(op, type);
    return ncclSuccess;
  }
  std::lock_guard<std::mutex> lock(comm->custom_ops_mutex);
  const auto index = static_cast<std::size_t>(static_cast<long long>(op) - ncclNumOps);
  if (op < 0 || index >= comm->custom_ops.size() || !comm->custom_ops[index].in_use) {
    return fail(ncclInvalidArgument,
                std::string(call) + ": invalid reduction op " + std::to_string(static_cast<int>(op)));
  }
  const Comm::CustomOp& custom = comm->custom_ops[index];
  if (custom.type != type) {
    return fail(ncclInvalidArgument, std::string(call) + ": op " + std::to_string(static_cast<int>(op)) +
                                         " was created for datatype " + std::to_string(static_cast<int>(custom.type)) +
                                         ", not " + std::to_string(static_cast<int>(type)));
  }
  spec->kind = ReduceSpec::Kind::kPreMulSum;
  spec->scalar_bits = custom.scalar_bits;
  if (custom.residence == ncclScalarDevice) {
    // The scalar may live in GPU memory (as NCCL expects of ncclScalarDevice): read in the call's stream order.
    if (const ncclResult_t r = copy_to_host(&spec->scalar_bits, custom.scalar, dtype_size(type), stream);
        r != ncclSuccess) {
      record_group_error(r);
      return r;
    }
  }
  return ncclSuccess;
}

// The process's traced calls (collectives, sends, receives) in the order they are made, from 0: the number the
// shim's log gives each call (CallFields::seq) when the shim traces every communicator of the process. Counted
// before any check, as the shim numbers a call before NCCL sees it.
std::atomic<std::uint64_t> g_traced_calls{0};

// HOSTNCCL_CORRUPT: marks `args` when the setting names this call of this rank, and says on stderr what it changes
// (or why it changes nothing).
void choose_corruption(CollArgs* args, const Comm* comm, std::uint64_t call_number, std::size_t output_elements,
                       const char* call) {
  const Corruption& fault = comm->config.corruption;
  if (!fault.enabled || fault.rank != comm->rank || fault.call != call_number) return;
  const std::string what = "hostnccl: HOSTNCCL_CORRUPT: call " + std::to_string(call_number) + " (" + call +
                           ") of rank " + std::to_string(comm->rank) + ": ";
  if (!row_of(args->kind).reduces || fault.element >= output_elements) {
    std::fprintf(stderr, "%snothing changed (%s)\n", what.c_str(),
                 !row_of(args->kind).reduces
                     ? "not a reduction"
                     : ("its output has " + std::to_string(output_elements) + " elements").c_str());
    return;
  }
  args->corrupt = true;
  args->corrupt_element = fault.element;
  args->corrupt_factor = fault.factor;
  std::fprintf(stderr, "%soutput element %llu %s %g\n", what.c_str(), static_cast<unsigned long long>(fault.element),
               detnccl::arith::dtype_is_floating(args->type) ? "multiplied by" : "plus", fault.factor);
}

// Common checks and submission of a collective. Which buffers this rank uses, and how many blocks of `count`
// elements each holds, come from the op's row of abi/traced_ops.h.
ncclResult_t collective(CollArgs args, ncclRedOp_t op, Comm* comm, cudaStream_t stream) {
  using detnccl::abi::Blocks;
  using detnccl::abi::OnRanks;
  const detnccl::abi::TracedOpRow& row = row_of(args.kind);
  const char* call = row.nccl_name.data();  // a string literal ("ncclAllReduce"), so NUL-terminated
  const std::uint64_t call_number = g_traced_calls.fetch_add(1, std::memory_order_relaxed);
  if (const ncclResult_t r = check_comm(comm, call); r != ncclSuccess) return r;
  if (row.peer == detnccl::abi::PeerRole::kRoot) {
    if (const ncclResult_t r = check_rank(args.root, comm, "root", call); r != ncclSuccess) return r;
  }
  if (const ncclResult_t r = check_type(args.type, call); r != ncclSuccess) return r;
  const std::size_t nranks = static_cast<std::size_t>(comm->nranks);
  if (const ncclResult_t r = check_count(args.count, args.type, nranks, call); r != ncclSuccess) return r;
  const bool is_root = comm->rank == args.root;
  const bool send_needed = row.input_on == OnRanks::kAll || is_root;
  const bool recv_needed = row.output_on == OnRanks::kAll || is_root;
  const std::size_t send_blocks = row.input == Blocks::kPerRank ? nranks : 1;
  const std::size_t recv_blocks = row.output == Blocks::kPerRank ? nranks : 1;
  if (send_needed) {
    if (const ncclResult_t r = check_buffer(args.send, args.count * send_blocks, "sendbuff", call); r != ncclSuccess) {
      return r;
    }
  }
  if (recv_needed) {
    if (const ncclResult_t r = check_buffer(args.recv, args.count * recv_blocks, "recvbuff", call); r != ncclSuccess) {
      return r;
    }
  }
  if (row.reduces) {
    if (const ncclResult_t r = resolve_op(comm, op, args.type, &args.spec, call, stream); r != ncclSuccess) return r;
  }
  choose_corruption(&args, comm, call_number, recv_needed ? args.count * recv_blocks : 0, call);
  const std::size_t element = dtype_size(args.type);
  std::unique_ptr<Op> coll;
  if (const ncclResult_t r = make_staged_coll_op(comm, args, send_needed ? args.count * send_blocks * element : 0,
                                                 recv_needed ? args.count * recv_blocks * element : 0, stream, &coll);
      r != ncclSuccess) {
    record_group_error(r);
    return r;
  }
  return submit(std::move(coll));
}

ncclResult_t check_config(const ncclConfig_t* config, const char* call) {
  if (config == nullptr) return ncclSuccess;
  if (config->magic != DETNCCL_NCCL_CONFIG_MAGIC || config->size < offsetof(ncclConfig_t, cgaClusterSize)) {
    return fail(ncclInvalidArgument, std::string(call) + ": config was not initialised with NCCL_CONFIG_INITIALIZER");
  }
  return ncclSuccess;
}

// A new communicator (not yet attached to its segment).
std::unique_ptr<Comm> new_comm(const IdFields& id, int nranks, int rank, int cuda_device, const Config& config) {
  refresh_device_driver();  // a job that initialised CUDA before its communicators may pass device buffers
  auto comm = std::make_unique<Comm>();
  comm->rank = rank;
  comm->nranks = nranks;
  comm->cuda_device = cuda_device;
  comm->id = id;
  comm->segment_name = segment_name(id);
  comm->config = config;
  const auto n = static_cast<std::size_t>(nranks);
  comm->sends_issued.assign(n, 0);
  comm->sends_done.assign(n, 0);
  comm->recvs_issued.assign(n, 0);
  comm->recvs_done.assign(n, 0);
  return comm;
}

int local_rank_device() {
  const char* text = std::getenv("LOCAL_RANK");
  if (text == nullptr) return 0;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  return (*end == '\0' && value >= 0 && value <= INT_MAX) ? static_cast<int>(value) : 0;
}

// What the queries (ncclCommCount, ncclCommUserRank, ncclCommCuDevice) answer besides their value, as NCCL 2.28's
// ncclCommEnsureReady decides (src/init.cc): while the communicator's async error says ncclInProgress (a non-blocking
// init or group still running) it warns and returns ncclInvalidArgument; any other async error (a failed init, or a
// failure after the communicator was ready: a peer that died, a timeout) is returned as it is, without a message, so
// a failed communicator answers no query. An init inside a group has not run before the outermost ncclGroupEnd: NCCL
// would hand out fields it has not filled in yet; hostnccl refuses that query too, so that a caller asking too early
// is caught. Like NCCL's, these failures never fail the caller's group.
ncclResult_t check_ready_for_query(const Comm* comm, const char* call) {
  const ncclResult_t state = comm->async_error.load();
  if (state == ncclInProgress) {
    set_last_error(std::string("hostnccl: ") + call +
                   ": Attempt to use communicator before the previous operation returned ncclSuccess");
    return ncclInvalidArgument;
  }
  if (state != ncclSuccess) return state;
  if (comm->ready) return ncclSuccess;  // read only once the async error is settled (the init's thread wrote it)
  set_last_error(std::string("hostnccl: ") + call +
                 ": Attempt to use communicator before it was created (an init inside a group is created at the "
                 "outermost ncclGroupEnd)");
  return ncclInvalidArgument;
}

ncclResult_t not_implemented(const char* name) {
  return fail(ncclInvalidUsage, std::string(name) + " is not implemented");
}

template <typename... Args>
void ignore_arguments(const Args&...) {}

}  // namespace
}  // namespace hostnccl

using namespace hostnccl;

extern "C" {

ncclResult_t pncclGetVersion(int* version) {
  if (version == nullptr) return fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t pncclGetUniqueId(ncclUniqueId* uniqueId) {
  if (uniqueId == nullptr) return fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  std::string error;
  if (const ncclResult_t r = make_unique_id(uniqueId, &error); r != ncclSuccess) {
    set_last_error(error);
    record_group_error(r);
    return r;
  }
  return ncclSuccess;
}

ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                     ncclConfig_t* config) {
  const char* call = "ncclCommInitRankConfig";
  if (comm == nullptr) return fail(ncclInvalidArgument, std::string(call) + ": comm is NULL");
  *comm = nullptr;
  if (nranks < 1) return fail(ncclInvalidArgument, std::string(call) + ": invalid nranks " + std::to_string(nranks));
  if (rank < 0 || rank >= nranks) {
    return fail(ncclInvalidArgument, std::string(call) + ": invalid rank " + std::to_string(rank) + " (nranks " +
                                         std::to_string(nranks) + ")");
  }
  if (const ncclResult_t r = check_config(config, call); r != ncclSuccess) return r;
  IdFields id;
  if (!parse_unique_id(commId, &id)) {
    return fail(ncclInvalidArgument, std::string(call) + ": commId was not made by this library's ncclGetUniqueId");
  }
  Config settings;
  std::string error;
  if (const ncclResult_t r = read_config(&settings, &error); r != ncclSuccess) {
    set_last_error(error);
    record_group_error(r);
    return r;
  }
  // NCCL_CONFIG_UNDEF_INT (not set) means NCCL's default, blocking.
  settings.blocking = config == nullptr || config->blocking != 0;
  std::unique_ptr<Comm> created = new_comm(id, nranks, rank, local_rank_device(), settings);
  Comm* raw = created.get();
  const bool grouped = in_group();
  // Inside a group the caller owns it now; it becomes usable at ncclGroupEnd. A non-blocking one returns
  // ncclInProgress and becomes usable in the background; the caller owns it too (and destroys it if it fails).
  *comm = created.release();
  const ncclResult_t result = submit(make_init_op(raw));
  if (result != ncclSuccess && result != ncclInProgress && !grouped) {
    delete raw;
    *comm = nullptr;
  }
  return result;
}

ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return pncclCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

ncclResult_t pncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
  const char* call = "ncclCommInitAll";
  if (comm == nullptr) return fail(ncclInvalidArgument, std::string(call) + ": comm is NULL");
  if (ndev < 1) return fail(ncclInvalidArgument, std::string(call) + ": invalid ndev " + std::to_string(ndev));
  if (devlist != nullptr) {
    std::set<int> seen;
    for (int i = 0; i < ndev; ++i) {
      if (devlist[i] < 0) return fail(ncclInvalidArgument, std::string(call) + ": invalid device in devlist");
      if (!seen.insert(devlist[i]).second) return fail(ncclInvalidUsage, std::string(call) + ": duplicate device");
    }
  }
  ncclUniqueId unique_id;
  std::string error;
  if (const ncclResult_t r = make_unique_id(&unique_id, &error); r != ncclSuccess) {
    set_last_error(error);
    return r;
  }
  IdFields id;
  parse_unique_id(unique_id, &id);
  Config settings;
  if (const ncclResult_t r = read_config(&settings, &error); r != ncclSuccess) {
    set_last_error(error);
    return r;
  }
  std::vector<std::unique_ptr<Comm>> comms;
  std::vector<std::unique_ptr<Op>> inits;
  for (int r = 0; r < ndev; ++r) {
    comms.push_back(new_comm(id, ndev, r, devlist != nullptr ? devlist[r] : r, settings));
    inits.push_back(make_init_op(comms.back().get()));
  }
  // Driven here, not in the caller's group: one thread attaches every rank, so no rank may wait before all have.
  const ncclResult_t result = drive(inits);
  if (result != ncclSuccess) return result;
  for (int r = 0; r < ndev; ++r) comm[r] = comms[static_cast<std::size_t>(r)].release();
  return ncclSuccess;
}

ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  const char* call = "ncclCommSplit";
  if (newcomm == nullptr) return fail(ncclInvalidArgument, std::string(call) + ": newcomm is NULL");
  *newcomm = nullptr;
  if (const ncclResult_t r = check_comm(comm, call); r != ncclSuccess) return r;
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR) {
    return fail(ncclInvalidArgument, std::string(call) + ": invalid color " + std::to_string(color));
  }
  if (const ncclResult_t r = check_config(config, call); r != ncclSuccess) return r;
  // NCCL applies a split's own config to the child; without one (or with blocking unset) the child is as its parent.
  const int child_blocking =
      config == nullptr || config->blocking == NCCL_CONFIG_UNDEF_INT ? -1 : (config->blocking != 0 ? 1 : 0);
  return submit(make_split_op(comm, color, key, newcomm, child_blocking));
}

ncclResult_t pncclCommFinalize(ncclComm_t comm) {
  if (const ncclResult_t r = check_comm(comm, "ncclCommFinalize"); r != ncclSuccess) return r;
  // Operations complete before their call (or group) returns, so nothing is outstanding: finalizing only closes
  // the communicator to new work.
  comm->finalized = true;
  return ncclSuccess;
}

ncclResult_t pncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  if (!comm_is_valid(comm)) return fail(ncclInvalidArgument, "ncclCommDestroy: comm is not a hostnccl communicator");
  join_in_flight(comm);  // a non-blocking communicator's last group may still be running
  if (!comm->ready) Segment::unlink(comm->segment_name);  // an init that never completed may have left the name
  comm->magic = 0;
  delete comm;
  return ncclSuccess;
}

ncclResult_t pncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  if (!comm_is_valid(comm)) return fail(ncclInvalidArgument, "ncclCommAbort: comm is not a hostnccl communicator");
  // Peers still waiting on this rank fail promptly instead of running into the timeout, and so does a call of
  // another thread of this process blocked on it (the usual watchdog abort): it returns ncclRemoteError.
  if (comm->segment != nullptr) comm->segment->header().abort_flag.store(1, std::memory_order_release);
  while (comm->drivers.load(std::memory_order_acquire) > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return pncclCommDestroy(comm);  // a group still running on a background thread sees the flag and stops
}

const char* pncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

const char* pncclGetLastError(ncclComm_t comm) {
  (void)comm;  // as in NCCL, the text is the calling thread's, whatever the communicator
  return last_error();
}

ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (comm == nullptr || !comm_is_valid(comm)) return fail(ncclInvalidArgument, "ncclCommGetAsyncError: invalid comm");
  if (asyncError == nullptr) return fail(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
  *asyncError = comm->async_error.load();
  if (*asyncError != ncclSuccess && *asyncError != ncclInProgress && !comm->async_error_text.empty() &&
      comm->async_error_text != last_error()) {
    set_last_error(comm->async_error_text);  // a background group's failure, for this thread's ncclGetLastError
  }
  return ncclSuccess;
}

ncclResult_t pncclCommCount(const ncclComm_t comm, int* count) {
  if (comm == nullptr || !comm_is_valid(comm)) return fail(ncclInvalidArgument, "ncclCommCount: invalid comm");
  if (count == nullptr) return fail(ncclInvalidArgument, "ncclCommCount: count is NULL");
  if (const ncclResult_t r = check_ready_for_query(comm, "ncclCommCount"); r != ncclSuccess) return r;
  *count = comm->nranks;
  return ncclSuccess;
}

ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (comm == nullptr || !comm_is_valid(comm)) return fail(ncclInvalidArgument, "ncclCommCuDevice: invalid comm");
  if (device == nullptr) return fail(ncclInvalidArgument, "ncclCommCuDevice: device is NULL");
  if (const ncclResult_t r = check_ready_for_query(comm, "ncclCommCuDevice"); r != ncclSuccess) return r;
  *device = comm->cuda_device;
  return ncclSuccess;
}

ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (comm == nullptr || !comm_is_valid(comm)) return fail(ncclInvalidArgument, "ncclCommUserRank: invalid comm");
  if (rank == nullptr) return fail(ncclInvalidArgument, "ncclCommUserRank: rank is NULL");
  if (const ncclResult_t r = check_ready_for_query(comm, "ncclCommUserRank"); r != ncclSuccess) return r;
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                       ncclScalarResidence_t residence, ncclComm_t comm) {
  const char* call = "ncclRedOpCreatePreMulSum";
  if (const ncclResult_t r = check_comm(comm, call); r != ncclSuccess) return r;
  if (op == nullptr) return fail(ncclInvalidArgument, std::string(call) + ": op is NULL");
  if (scalar == nullptr) return fail(ncclInvalidArgument, std::string(call) + ": scalar is NULL");
  if (const ncclResult_t r = check_type(datatype, call); r != ncclSuccess) return r;
  if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate) {
    return fail(ncclInvalidArgument, std::string(call) + ": invalid residence");
  }
  Comm::CustomOp custom;
  custom.in_use = true;
  custom.type = datatype;
  custom.residence = residence;
  custom.scalar = scalar;
  if (residence == ncclScalarHostImmediate) std::memcpy(&custom.scalar_bits, scalar, dtype_size(datatype));
  std::lock_guard<std::mutex> lock(comm->custom_ops_mutex);
  std::size_t index = 0;
  while (index < comm->custom_ops.size() && comm->custom_ops[index].in_use) ++index;
  if (index >= static_cast<std::size_t>(ncclMaxRedOp - ncclNumOps)) {
    return fail(ncclInvalidUsage, std::string(call) + ": too many reduction ops");
  }
  if (index == comm->custom_ops.size()) comm->custom_ops.emplace_back();
  comm->custom_ops[index] = custom;
  *op = static_cast<ncclRedOp_t>(static_cast<int>(ncclNumOps) + static_cast<int>(index));
  return ncclSuccess;
}

ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  const char* call = "ncclRedOpDestroy";
  if (comm == nullptr || !comm_is_valid(comm)) return fail(ncclInvalidArgument, std::string(call) + ": invalid comm");
  if (op >= 0 && op < ncclNumOps) {
    return fail(ncclInvalidArgument, std::string(call) + ": a built-in op cannot be destroyed");
  }
  std::lock_guard<std::mutex> lock(comm->custom_ops_mutex);
  const auto index = static_cast<std::size_t>(static_cast<long long>(op) - ncclNumOps);
  if (op < 0 || index >= comm->custom_ops.size() || !comm->custom_ops[index].in_use) {
    return fail(ncclInvalidArgument, std::string(call) + ": op " + std::to_string(static_cast<int>(op)) +
                                         " was not created on this communicator");
  }
  comm->custom_ops[index].in_use = false;
  return ncclSuccess;
}

ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                            ncclComm_t comm, cudaStream_t stream) {
  return collective({CollKind::kAllReduce, sendbuff, recvbuff, count, datatype, {}, 0}, op, comm, stream);
}

ncclResult_t pncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                         int root, ncclComm_t comm, cudaStream_t stream) {
  return collective({CollKind::kReduce, sendbuff, recvbuff, count, datatype, {}, root}, op, comm, stream);
}

ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                            ncclComm_t comm, cudaStream_t stream) {
  return collective({CollKind::kBroadcast, sendbuff, recvbuff, count, datatype, {}, root}, ncclSum, comm, stream);
}

ncclResult_t pncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                        cudaStream_t stream) {
  return pncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                            ncclComm_t comm, cudaStream_t stream) {
  return collective({CollKind::kAllGather, sendbuff, recvbuff, sendcount, datatype, {}, 0}, ncclSum, comm, stream);
}

ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                                ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return collective({CollKind::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, {}, 0}, op, comm, stream);
}

ncclResult_t pncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
                           cudaStream_t stream) {
  return collective({CollKind::kAlltoAll, sendbuff, recvbuff, count, datatype, {}, 0}, ncclSum, comm, stream);
}

ncclResult_t pncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                         ncclComm_t comm, cudaStream_t stream) {
  return collective({CollKind::kGather, sendbuff, recvbuff, count, datatype, {}, root}, ncclSum, comm, stream);
}

ncclResult_t pncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                          ncclComm_t comm, cudaStream_t stream) {
  return collective({CollKind::kScatter, sendbuff, recvbuff, count, datatype, {}, root}, ncclSum, comm, stream);
}

static ncclResult_t point_to_point(bool sending, void* buffer, size_t count, ncclDataType_t datatype, int peer,
                                   ncclComm_t comm, cudaStream_t stream) {
  const char* call = sending ? "ncclSend" : "ncclRecv";
  const std::uint64_t call_number = g_traced_calls.fetch_add(1, std::memory_order_relaxed);
  if (const ncclResult_t r = check_comm(comm, call); r != ncclSuccess) return r;
  if (const Corruption& fault = comm->config.corruption;
      fault.enabled && fault.rank == comm->rank && fault.call == call_number) {
    std::fprintf(stderr, "hostnccl: HOSTNCCL_CORRUPT: call %llu (%s) of rank %d: nothing changed (not a reduction)\n",
                 static_cast<unsigned long long>(call_number), call, comm->rank);
  }
  if (const ncclResult_t r = check_type(datatype, call); r != ncclSuccess) return r;
  if (const ncclResult_t r = check_rank(peer, comm, "peer", call); r != ncclSuccess) return r;
  if (const ncclResult_t r = check_count(count, datatype, 1, call); r != ncclSuccess) return r;
  if (const ncclResult_t r = check_buffer(buffer, count, sending ? "sendbuff" : "recvbuff", call); r != ncclSuccess) {
    return r;
  }
  if (count == 0) return ncclSuccess;  // nothing moves, and NCCL does not pair empty messages either
  const std::size_t bytes = count * dtype_size(datatype);
  std::unique_ptr<Op> op;
  const ncclResult_t staged = sending ? make_staged_send_op(comm, buffer, bytes, peer, stream, &op)
                                      : make_staged_recv_op(comm, buffer, bytes, peer, stream, &op);
  if (staged != ncclSuccess) {
    record_group_error(staged);
    return staged;
  }
  return submit(std::move(op));
}

ncclResult_t pncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                       cudaStream_t stream) {
  return point_to_point(true, const_cast<void*>(sendbuff), count, datatype, peer, comm, stream);
}

ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                       cudaStream_t stream) {
  return point_to_point(false, recvbuff, count, datatype, peer, comm, stream);
}

ncclResult_t pncclGroupStart() { return group_start(); }

ncclResult_t pncclGroupEnd() { return group_end(); }

}  // extern "C"

// ---------------------------------------------------------------------------------------------------------------
// Generated from the API table: a stub for every entry point not implemented above, and the weak nccl<X> alias of
// every pnccl<X>. HOSTNCCL_IMPLEMENTED_<name> marks the hand-written ones (the probe idiom: the macro expands to
// "~, 1," so that HOSTNCCL_SECOND picks 1 for them and 0 for every other name).
#define HOSTNCCL_PROBE ~, 1,
#define HOSTNCCL_SECOND_I(first, second, ...) second
#define HOSTNCCL_SECOND(...) HOSTNCCL_SECOND_I(__VA_ARGS__)
#define HOSTNCCL_IS_IMPLEMENTED(name) HOSTNCCL_SECOND(HOSTNCCL_IMPLEMENTED_##name, 0, 0)
#define HOSTNCCL_CAT_I(a, b) a##b
#define HOSTNCCL_CAT(a, b) HOSTNCCL_CAT_I(a, b)

#define HOSTNCCL_IMPLEMENTED_ncclGetVersion HOSTNCCL_PROBE
#define HOSTNCCL_IMPLEMENTED_ncclGetUniqueId HOSTNCCL_PROBE
#define HOSTNCCL_IMPLEMENTED_ncclCommInitRankConfig HOSTNCCL_PROBE
#define HOSTNCCL_IMPLEMENTED_ncclCommInitRank HOSTNCCL_PROBE
#define HOSTNCCL_IMPLEMENTED_ncclCommInitAll HOSTNCCL_PROBE
#define HOSTNCCL_IMPLEMENTED_ncclCommSplit HOSTNCCL_PROBE
#define HOSTNCCL_IMPLEMENTED_ncclCommFinalize HOSTNCCL_PROBE
#define HOSTNCCL_IMPLEMENTED_ncclCommDestroy HOSTNCCL_PROBE
#define HOSTNCCL_IMPLEMENTED_ncclCommAbort HOSTNCCL_PROBE
#define HOSTNCCL_IMPLEMENTED_ncclGetErrorString HOSTNCCL_PROBE
#define HOSTNCCL_IMPLEMENTED_ncclGetLastError HOSTNCCL_PROBE
#define HOSTNCCL_IMPLEMENTED_ncclCommGetAsyncError HOSTNCCL_PROBE
#define HOSTNCCL_IMPLEMENTED_ncclCommCount HOSTNCCL_PROBE
#define HOSTNCCL_IMPLEMENTED_ncclCommCuDevice HOSTNCCL_PROBE
#define HOSTNCCL_IMPLEMENTED_ncclCommUserRank HOSTNCCL_PROBE
#define HOSTNCCL_IMPLEMENTED_ncclRedOpCreatePreMulSum HOSTNCCL_PROBE
#define HOSTNCCL_IMPLEMENTED_ncclRedOpDestroy HOSTNCCL_PROBE
#define HOSTNCCL_IMPLEMENTED_ncclReduce HOSTNCCL_PROBE
#define HOSTNCCL_IMPLEMENTED_ncclBcast HOSTNCCL_PROBE
#define HOSTNCCL_IMPLEMENTED_ncclBroadcast HOSTNCCL_PROBE
#define HOSTNCCL_IMPLEMENTED_ncclAllReduce HOSTNCCL_PROBE
#define HOSTNCCL_IMPLEMENTED_ncclReduceScatter HOSTNCCL_PROBE
#define HOSTNCCL_IMPLEMENTED_ncclAllGather HOSTNCCL_PROBE
#define HOSTNCCL_IMPLEMENTED_ncclAlltoAll HOSTNCCL_PROBE
#define HOSTNCCL_IMPLEMENTED_ncclGather HOSTNCCL_PROBE
#define HOSTNCCL_IMPLEMENTED_ncclScatter HOSTNCCL_PROBE
#define HOSTNCCL_IMPLEMENTED_ncclSend HOSTNCCL_PROBE
#define HOSTNCCL_IMPLEMENTED_ncclRecv HOSTNCCL_PROBE
#define HOSTNCCL_IMPLEMENTED_ncclGroupStart HOSTNCCL_PROBE
#define HOSTNCCL_IMPLEMENTED_ncclGroupEnd HOSTNCCL_PROBE

#define HOSTNCCL_DEFINE_NOTHING(ret, name, params, args)
#define HOSTNCCL_DEFINE_STUB(ret, name, params, args) \
  extern "C" ret p##name params {                     \
    ignore_arguments args;                            \
    return not_implemented(#name);                    \
  }
#define HOSTNCCL_STUB_IF_MISSING_1 HOSTNCCL_DEFINE_NOTHING
#define HOSTNCCL_STUB_IF_MISSING_0 HOSTNCCL_DEFINE_STUB
#define HOSTNCCL_STUB(ret, name, params, args, kind, need) \
  HOSTNCCL_CAT(HOSTNCCL_STUB_IF_MISSING_, HOSTNCCL_IS_IMPLEMENTED(name))(ret, name, params, args)
DETNCCL_NCCL_API(HOSTNCCL_STUB)

#define HOSTNCCL_WEAK_ALIAS(ret, name, params, args, kind, need) \
  extern "C" ret name params __attribute__((weak, alias("p" #name)));
DETNCCL_NCCL_API(HOSTNCCL_WEAK_ALIAS)
