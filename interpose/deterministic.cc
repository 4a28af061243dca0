// detnccl shim: deterministic mode (see deterministic.h).
#include "interpose/deterministic.h"

#include <unistd.h>

#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "collectives/deterministic.h"
#include "interpose/buffer_location.h"
#include "interpose/non_blocking.h"
#include "interpose/real_nccl.h"
#include "interpose/shim_log.h"

namespace detnccl::interpose {
namespace {

namespace coll = detnccl::collectives;

// Same exit status as an invalid configuration: the job asked for something detnccl cannot honour.
constexpr int kExitCannotHonour = 78;

struct CommunicatorState {
  int rank = -1;
  int nranks = 0;
  coll::Workspace workspace;
  std::map<std::int32_t, coll::Reduction> premulsum;  // by ncclRedOp_t
};

struct State {
  bool enabled = false;
  bool stop_on_unsupported = true;
  coll::Options options;
  std::mutex mutex;  // guards communicators (the map, not the workspaces: a communicator is used by one thread)
  std::map<ncclComm_t, std::unique_ptr<CommunicatorState>> communicators;
  std::atomic<bool> warned_unsupported{false};
};

State* g_state = nullptr;  // set once by configure_deterministic; never freed (like the tracer's Process)

// A reduction made inside a user group, run at the outermost ncclGroupEnd.
struct DeferredReduction {
  CallShape shape;
  coll::Reduction reduction;
};
thread_local std::vector<DeferredReduction> t_deferred;

CommunicatorState* communicator_state(ncclComm_t comm) {
  const std::lock_guard<std::mutex> lock(g_state->mutex);
  std::unique_ptr<CommunicatorState>& state = g_state->communicators[comm];
  if (!state) state = std::make_unique<CommunicatorState>();
  if (state->rank < 0) {
    int rank = -1, nranks = 0;
    if (DETNCCL_REAL(ncclCommUserRank)(comm, &rank) == ncclSuccess &&
        DETNCCL_REAL(ncclCommCount)(comm, &nranks) == ncclSuccess) {
      state->rank = rank;
      state->nranks = nranks;
    }
  }
  return state.get();
}

coll::Collective collective_of(records::OpId op) {
  switch (op) {
    case records::OpId::kReduceScatter:
      return coll::Collective::kReduceScatter;
    case records::OpId::kReduce:
      return coll::Collective::kReduce;
    default:
      return coll::Collective::kAllReduce;
  }
}

bool is_reduction(records::OpId op) {
  return op == records::OpId::kAllReduce || op == records::OpId::kReduceScatter || op == records::OpId::kReduce;
}

[[noreturn]] void stop_job(const std::string& message) {
  std::fprintf(stderr,
               "[detnccl] DETNCCL_DETERMINISTIC=1 cannot honour this call; the job stops here (exit status %d): "
               "%s. Set DETNCCL_DETERMINISTIC=warn to run such calls as NCCL does (not deterministic), or "
               "change the call.\n",
               kExitCannotHonour, message.c_str());
  std::fflush(nullptr);
  std::_Exit(kExitCannotHonour);
}

ncclResult_t execute(const CallShape& shape, const coll::Reduction& reduction, CommunicatorState& comm) {
  coll::P2pFunctions nccl;
  nccl.send = DETNCCL_REAL(ncclSend);
  nccl.recv = DETNCCL_REAL(ncclRecv);
  nccl.group_start = DETNCCL_REAL(ncclGroupStart);
  nccl.group_end = DETNCCL_REAL(ncclGroupEnd);
  nccl.comm_get_async_error = DETNCCL_REAL(ncclCommGetAsyncError);
  coll::CallContext context;
  context.comm = shape.comm;
  context.rank = comm.rank;
  context.nranks = comm.nranks;
  context.stream = shape.stream;
  const void* probe = shape.input.data != nullptr ? shape.input.data : shape.output.data;
  context.buffers_on_device = probe != nullptr && locate_buffer(probe) == BufferLocation::kDevice;
  coll::Report report;
  ncclResult_t result = ncclInvalidUsage;
  switch (shape.op) {
    case records::OpId::kAllReduce:
      result = coll::all_reduce(nccl, context, shape.input.data, const_cast<void*>(shape.output.data), shape.count,
                                shape.datatype, reduction, comm.workspace, g_state->options, &report);
      break;
    case records::OpId::kReduceScatter:
      result = coll::reduce_scatter(nccl, context, shape.input.data, const_cast<void*>(shape.output.data), shape.count,
                                    shape.datatype, reduction, comm.workspace, g_state->options, &report);
      break;
    case records::OpId::kReduce:
      result = coll::reduce(nccl, context, shape.input.data, const_cast<void*>(shape.output.data), shape.count,
                            shape.datatype, reduction, shape.peer, comm.workspace, g_state->options, &report);
      break;
    default:
      break;
  }
  if (result != ncclSuccess && !report.error.empty()) log_warning("deterministic " + report.error);
  return result;
}

}  // namespace

void configure_deterministic(const config::Config& config) noexcept {
  try {
    auto* state = new State;
    state->enabled = config.deterministic_mode();
    state->stop_on_unsupported = config.deterministic == config::DeterministicMode::kOn;
    switch (config.algo) {
      case config::DeterministicAlgo::kAuto:
        state->options.algorithm = coll::Algorithm::kAuto;
        break;
      case config::DeterministicAlgo::kMixedRadix:
        state->options.algorithm = coll::Algorithm::kMixedRadix;
        break;
      case config::DeterministicAlgo::kOneShot:
        state->options.algorithm = coll::Algorithm::kOneShot;
        break;
    }
    state->options.accumulate =
        config.accumulate == config::Accumulate::kFloat32 ? coll::Accumulate::kFloat32 : coll::Accumulate::kNative;
    g_state = state;
  } catch (...) {
    if (config.deterministic_mode()) stop_job("out of memory while setting up deterministic mode");
  }
}

bool deterministic_enabled() noexcept { return g_state != nullptr && g_state->enabled; }

std::optional<ncclResult_t> run_deterministic(const CallShape& shape, bool in_group,
                                              std::uint16_t* algorithm) noexcept {
  if (!deterministic_enabled() || !is_reduction(shape.op)) return std::nullopt;
  try {
    CommunicatorState* comm = communicator_state(shape.comm);
    if (comm->rank < 0) return std::nullopt;  // not a usable communicator: NCCL reports the error

    std::optional<coll::Reduction> reduction = coll::builtin_reduction(static_cast<ncclRedOp_t>(shape.redop));
    if (!reduction) {
      const std::lock_guard<std::mutex> lock(g_state->mutex);
      const auto found = comm->premulsum.find(shape.redop);
      if (found != comm->premulsum.end()) reduction = found->second;
    }
    coll::Classification how;
    if (reduction) {
      how = coll::classify(shape.datatype, *reduction);
    } else {
      how.reason = "reduction operator " + std::to_string(shape.redop) + " was not created by ncclRedOpCreatePreMulSum";
    }
    if (how.handling == coll::Handling::kPassThrough) return std::nullopt;
    if (how.handling == coll::Handling::kUnsupported) {
      if (g_state->stop_on_unsupported) stop_job(how.reason);
      log_warning_once(g_state->warned_unsupported,
                       "DETNCCL_DETERMINISTIC=warn: running a reduction as NCCL does, NOT deterministic (" +
                           how.reason + "); further such calls are not reported");
      return std::nullopt;
    }
    const coll::Algorithm chosen =
        coll::resolve_algorithm(collective_of(shape.op), shape.count, shape.datatype, comm->nranks, g_state->options);
    *algorithm = static_cast<std::uint16_t>(chosen);
    if (in_group) {
      t_deferred.push_back({shape, *reduction});
      return ncclSuccess;
    }
    return execute(shape, *reduction, *comm);
  } catch (const std::exception& error) {
    if (g_state->stop_on_unsupported) stop_job(std::string("internal failure: ") + error.what());
    log_warning(std::string("deterministic mode failed for one call (") + error.what() + "); NCCL runs it");
    return std::nullopt;
  }
}

ncclResult_t run_deferred_deterministic(bool group_in_progress) noexcept {
  if (t_deferred.empty()) return ncclSuccess;
  std::vector<DeferredReduction> deferred;
  deferred.swap(t_deferred);
  ncclResult_t first_failure = ncclSuccess;
  for (const DeferredReduction& call : deferred) {
    CommunicatorState* comm = nullptr;
    try {
      comm = communicator_state(call.shape.comm);
    } catch (...) {
      return ncclSystemError;
    }
    // NCCL takes no new call on a non-blocking communicator before it has enqueued the group the user just ended.
    if (group_in_progress) wait_until_enqueued(call.shape.comm);
    const ncclResult_t result = execute(call.shape, call.reduction, *comm);
    if (first_failure == ncclSuccess) first_failure = result;
  }
  return first_failure;
}

void note_premulsum(ncclComm_t comm, ncclRedOp_t op, const void* scalar, ncclDataType_t datatype,
                    ncclScalarResidence_t residence) noexcept {
  if (!deterministic_enabled()) return;
  try {
    CommunicatorState* state = communicator_state(comm);
    const coll::Reduction reduction = coll::premul_sum_reduction(scalar, datatype, residence);
    const std::lock_guard<std::mutex> lock(g_state->mutex);
    state->premulsum[static_cast<std::int32_t>(op)] = reduction;
  } catch (...) {
  }
}

void forget_communicator_deterministic(ncclComm_t comm) noexcept {
  if (g_state == nullptr) return;
  std::unique_ptr<CommunicatorState> state;
  {
    const std::lock_guard<std::mutex> lock(g_state->mutex);
    const auto found = g_state->communicators.find(comm);
    if (found == g_state->communicators.end()) return;
    state = std::move(found->second);
    g_state->communicators.erase(found);
  }
  // The workspace (host or device scratch) is freed here, outside the lock.
}

}  // namespace detnccl::interpose
