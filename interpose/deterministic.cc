// detnccl shim: deterministic mode (see deterministic.h).
#include "interpose/deterministic.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "collectives/deterministic.h"
#include "interpose/buffer_location.h"
#include "interpose/communicator_registry.h"
#include "interpose/non_blocking.h"
#include "interpose/real_nccl.h"
#include "interpose/shim_log.h"
#include "interpose/tracer_process.h"

namespace detnccl::interpose {

// Deterministic mode's part of one communicator, hung on its registry entry (Communicator::deterministic).
// A call holds it by shared_ptr, so a destroy or abort from another thread (a watchdog) cannot free the scratch under
// it; the workspace needs no lock (a communicator is used by one thread at a time), the reductions are guarded by
// Process::mutex.
struct DeterministicPart {
  collectives::Workspace workspace;
  std::map<std::int32_t, collectives::Reduction> premulsum;  // by ncclRedOp_t
};

namespace {

namespace coll = detnccl::collectives;

// Same exit status as an invalid configuration: the job asked for something detnccl cannot honour.
constexpr int kExitCannotHonour = 78;

struct State {
  bool enabled = false;
  bool stop_on_unsupported = true;
  coll::Options options;
  std::atomic<bool> warned_unsupported{false};
  std::atomic<int> nccl_version{-1};  // the real NCCL's ncclGetVersion, read at the first reduction
  // With =warn, once the CUDA driver proved too old for the device backend (on_driver_too_old): reductions of device
  // buffers go to NCCL.
  std::atomic<bool> device_code_unusable{false};
};

State* g_state = nullptr;  // set once by configure_deterministic; never freed (like the tracer's Process)

// A reduction made inside a user group, run at the outermost ncclGroupEnd.
struct DeferredReduction {
  CallShape shape;
  coll::Reduction reduction;
  std::uint64_t clique = 0;
  bool on_device = false;
};
thread_local std::vector<DeferredReduction> t_deferred;
// With DETNCCL_DETERMINISTIC=warn: cliques whose reductions go to NCCL for the rest of this thread's group, because
// the group holds reductions on two ranks of one communicator (see defer()).
thread_local std::vector<std::uint64_t> t_cliques_to_nccl;

// What a reduction needs of its communicator, read from its registry entry.
struct Target {
  std::shared_ptr<DeterministicPart> part;
  int rank = -1;  // -1: NCCL has not finished creating the communicator (or does not know it)
  int nranks = 0;
  // Which communicator it is a rank of: two handles of this process with one clique are ranks of the same
  // communicator (ncclCommInitAll, several ncclCommInitRank* with one id, their splits). The registry's id.
  std::uint64_t clique = 0;
  int device = -1;                           // the communicator's (ncclCommCuDevice), -1 if unknown
  std::optional<coll::Reduction> premulsum;  // the operator's, when it is one this communicator created
};

// Fills `target` from a registered communicator whose size and rank NCCL answered; its part is made at the first
// use. Caller holds process.mutex.
bool read_target(Communicator* communicator, std::int32_t redop, Target* target) {
  if (communicator == nullptr || !communicator->rank_known) return false;
  if (!communicator->deterministic) communicator->deterministic = std::make_shared<DeterministicPart>();
  target->part = communicator->deterministic;
  target->rank = static_cast<int>(communicator->rank);
  target->nranks = static_cast<int>(communicator->nranks);
  target->clique = communicator->id;
  target->device = communicator->device;
  if (redop >= static_cast<std::int32_t>(ncclNumOps)) {
    const auto found = target->part->premulsum.find(redop);
    if (found != target->part->premulsum.end()) target->premulsum = found->second;
  }
  return true;
}

// The communicator a reduction names, from the communicator registry (one lock, as any reduction took before);
// the registry's slow path once for a communicator it has not registered yet (see
// find_communicator_for_reduction). RATIONALE: NCCL is asked outside every lock of ours.
Target target_of(ncclComm_t comm, std::int32_t redop) {
  Target target;
  Process* process = g_process;
  if (process == nullptr) return target;
  {
    const std::lock_guard<std::mutex> lock(process->mutex);
    const auto found = process->registry.communicators.find(comm);
    if (found != process->registry.communicators.end() && read_target(found->second, redop, &target)) return target;
  }
  Communicator* communicator = find_communicator_for_reduction(*process, comm);
  if (communicator != nullptr) {
    const std::lock_guard<std::mutex> lock(process->mutex);
    read_target(communicator, redop, &target);
  }
  return target;
}

// Whether the real NCCL is one whose argument checks detnccl knows (NCCL_VERSION_CODE of the ABI it was built
// against, or older): a datatype or operator detnccl does not know is then one NCCL refuses too. A newer NCCL may
// have added datatypes or operators that it would run, non-deterministically.
bool nccl_argument_checks_known() {
  int version = g_state->nccl_version.load(std::memory_order_relaxed);
  if (version < 0) {
    if (DETNCCL_REAL(ncclGetVersion) == nullptr || DETNCCL_REAL(ncclGetVersion)(&version) != ncclSuccess) version = 0;
    g_state->nccl_version.store(version, std::memory_order_relaxed);
  }
  return version > 0 && version <= NCCL_VERSION_CODE;
}

// A call that NCCL's own argument check refuses (invalid root, datatype or operator — NCCL 2.28's ArgsCheck): it
// goes to NCCL, which returns its own code and ncclGetLastError text. Nothing is reduced, so no determinism is lost.
// Only the checks of a known NCCL version are copied; anything else stays with deterministic mode.
bool nccl_refuses(const CallShape& shape, int nranks, bool reduction_known) {
  if (!nccl_argument_checks_known()) return false;
  if (shape.op == records::OpId::kReduce && (shape.peer < 0 || shape.peer >= nranks)) return true;
  const int datatype = static_cast<int>(shape.datatype);
  if (datatype < 0 || datatype >= static_cast<int>(ncclNumTypes)) return true;
  // Built-in operators are below ncclNumOps; user operators exist only from ncclRedOpCreatePreMulSum on this
  // communicator until ncclRedOpDestroy, which the shim follows (note_premulsum, forget_premulsum).
  return !reduction_known;
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

// The reduction as the user made it, handed to the real NCCL (DETNCCL_DETERMINISTIC=warn fallbacks).
ncclResult_t issue_to_nccl(const CallShape& shape) {
  void* output = const_cast<void*>(shape.output.data);
  const auto op = static_cast<ncclRedOp_t>(shape.redop);
  switch (shape.op) {
    case records::OpId::kAllReduce:
      return DETNCCL_REAL(ncclAllReduce)(shape.input.data, output, shape.count, shape.datatype, op, shape.comm,
                                         shape.stream);
    case records::OpId::kReduceScatter:
      return DETNCCL_REAL(ncclReduceScatter)(shape.input.data, output, shape.count, shape.datatype, op, shape.comm,
                                             shape.stream);
    case records::OpId::kReduce:
      return DETNCCL_REAL(ncclReduce)(shape.input.data, output, shape.count, shape.datatype, op, shape.peer, shape.comm,
                                      shape.stream);
    default:
      return ncclInternalError;
  }
}

// Whether the call's buffers are device memory (or memory NCCL's kernels access on the stream), or unknown when the
// driver fails to say; *driver_status then holds its error.
BufferLocation buffers_of(const CallShape& shape, int* driver_status) {
  BufferLocation where = BufferLocation::kHost;
  const void* output = shape.output.data == shape.input.data ? nullptr : shape.output.data;  // in place: asked once
  for (const void* data : {shape.input.data, output}) {
    if (data == nullptr) continue;
    const BufferLocation location = locate_buffer(data, driver_status);
    if (location == BufferLocation::kUnknown) return location;
    if (location == BufferLocation::kDevice) where = location;
  }
  return where;
}

ncclResult_t execute(const CallShape& shape, const coll::Reduction& reduction, const Target& comm, bool on_device) {
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
  context.device = comm.device;
  context.buffers_on_device = on_device;
  coll::Report report;
  ncclResult_t result = ncclInvalidUsage;
  switch (shape.op) {
    case records::OpId::kAllReduce:
      result = coll::all_reduce(nccl, context, shape.input.data, const_cast<void*>(shape.output.data), shape.count,
                                shape.datatype, reduction, comm.part->workspace, g_state->options, &report);
      break;
    case records::OpId::kReduceScatter:
      result = coll::reduce_scatter(nccl, context, shape.input.data, const_cast<void*>(shape.output.data), shape.count,
                                    shape.datatype, reduction, comm.part->workspace, g_state->options, &report);
      break;
    case records::OpId::kReduce:
      result = coll::reduce(nccl, context, shape.input.data, const_cast<void*>(shape.output.data), shape.count,
                            shape.datatype, reduction, shape.peer, comm.part->workspace, g_state->options, &report);
      break;
    default:
      break;
  }
  if (result != ncclSuccess && !report.error.empty()) log_warning(report.error);  // it names the collective
  return result;
}

// fork(): the registry forgets the parent's communicators (their parts left allocated: freeing device scratch in a
// child of a CUDA process is not allowed); this thread's deferred reductions are the parent's.
void forget_parent_in_child() {
  t_deferred.clear();
  t_cliques_to_nccl.clear();
}

}  // namespace

void configure_deterministic(const config::Config& config) noexcept {
  try {
    auto* state = new State;
    state->enabled = config.deterministic_mode();
    state->stop_on_unsupported = config.deterministic == config::DeterministicMode::kOn;
    state->options.algorithm = config.algo;  // the same enums (collectives/algorithm_names.h)
    state->options.accumulate = config.accumulate;
    g_state = state;
    static std::once_flag fork_handlers;
    std::call_once(fork_handlers, [] { pthread_atfork(nullptr, nullptr, forget_parent_in_child); });
  } catch (...) {
    if (config.deterministic_mode()) stop_job("out of memory while setting up deterministic mode");
  }
}

bool deterministic_enabled() noexcept { return g_state != nullptr && g_state->enabled; }

std::optional<ncclResult_t> run_deterministic(const CallShape& shape, bool in_group,
                                              std::uint16_t* algorithm) noexcept {
  if (!deterministic_enabled() || !is_reduction(shape.op)) return std::nullopt;
  try {
    const Target comm = target_of(shape.comm, shape.redop);
    if (comm.rank < 0) {
      // A communicator NCCL has not finished creating (non-blocking, or created in this same group): NCCL refuses
      // any call on it (ncclCommEnsureReady), and so does deterministic mode, whatever the backend would do. Any
      // other unusable communicator goes to NCCL, which reports it.
      // (NCCL reports such a communicator as ncclInProgress; hostnccl, for one created inside the open group, as
      // ncclSuccess while refusing the size and rank queries.)
      ncclResult_t state = ncclSuccess;
      if (shape.comm != nullptr && DETNCCL_REAL(ncclCommGetAsyncError)(shape.comm, &state) == ncclSuccess &&
          (state == ncclInProgress || state == ncclSuccess)) {
        log_warning(std::string(records::op_name(shape.op)) +
                    " on a communicator NCCL has not finished creating: refused (ncclInvalidArgument), as NCCL does");
        return ncclInvalidArgument;
      }
      return std::nullopt;
    }

    std::optional<coll::Reduction> reduction = coll::builtin_reduction(static_cast<ncclRedOp_t>(shape.redop));
    if (!reduction) reduction = comm.premulsum;
    if (nccl_refuses(shape, comm.nranks, reduction.has_value())) return std::nullopt;
    coll::Classification how;
    if (reduction) {
      how = coll::classify(shape.datatype, *reduction);
    } else {
      how.reason = "reduction operator " + std::to_string(shape.redop) + " was not created by ncclRedOpCreatePreMulSum";
    }
    if (how.handling == coll::Handling::kPassThrough) return std::nullopt;
    int driver_status = 0;
    const BufferLocation location = buffers_of(shape, &driver_status);
    if (location == BufferLocation::kUnknown && how.handling != coll::Handling::kUnsupported) {
      // RATIONALE: the CPU must not read device memory, nor a kernel pageable host memory; guessing could crash.
      how.handling = coll::Handling::kUnsupported;
      how.reason =
          "the CUDA driver cannot say whether the buffers are device or host memory (cuPointerGetAttribute "
          "returned " +
          std::to_string(driver_status) + ")";
    }
    if (how.handling == coll::Handling::kUnsupported) {
      if (g_state->stop_on_unsupported) stop_job(how.reason);
      log_warning_once(g_state->warned_unsupported,
                       "DETNCCL_DETERMINISTIC=warn: running a reduction as NCCL does, NOT deterministic (" +
                           how.reason + "); further such calls are not reported");
      return std::nullopt;
    }
    const bool on_device = location == BufferLocation::kDevice;
    // RATIONALE: the device backend would fail every call (=warn only: with =1 the job stopped at its start, in
    // on_driver_too_old); the warning was given there, once.
    if (on_device && g_state->device_code_unusable.load(std::memory_order_acquire)) return std::nullopt;
    if (in_group && comm.clique != 0) {
      // Deferred reductions run one communicator after another at ncclGroupEnd, each a blocking exchange: with two
      // ranks of one communicator in this thread's group, the first would wait forever for the second.
      const std::uint64_t clique = comm.clique;
      const auto same_clique = [&](const DeferredReduction& other) {
        return other.clique == clique && other.shape.comm != shape.comm;
      };
      const bool to_nccl =
          std::find(t_cliques_to_nccl.begin(), t_cliques_to_nccl.end(), clique) != t_cliques_to_nccl.end();
      if (to_nccl || std::any_of(t_deferred.begin(), t_deferred.end(), same_clique)) {
        if (g_state->stop_on_unsupported) {
          stop_job(
              "one thread made reductions on two ranks of one communicator inside one group (ncclCommInitAll, "
              "or several ncclCommInitRank with one id in this process); deterministic mode cannot run them "
              "from one thread. Drive each rank from its own thread or process");
        }
        log_warning_once(g_state->warned_unsupported,
                         "DETNCCL_DETERMINISTIC=warn: a group holds reductions on two ranks of one communicator "
                         "(one thread drives several ranks): they run as NCCL does, NOT deterministic; further such "
                         "calls are not reported");
        if (!to_nccl) {
          t_cliques_to_nccl.push_back(clique);
          // Reductions of this clique deferred earlier in the group go to NCCL now, still inside the group.
          ncclResult_t first_failure = ncclSuccess;
          std::vector<DeferredReduction> kept;
          for (DeferredReduction& deferred : t_deferred) {
            if (deferred.clique != clique) {
              kept.push_back(std::move(deferred));
              continue;
            }
            const ncclResult_t issued = issue_to_nccl(deferred.shape);
            if (first_failure == ncclSuccess) first_failure = issued;
          }
          t_deferred.swap(kept);
          if (first_failure != ncclSuccess) return first_failure;
        }
        return std::nullopt;
      }
    }
    const coll::Algorithm chosen =
        coll::resolve_algorithm(collective_of(shape.op), shape.count, shape.datatype, comm.nranks, g_state->options);
    *algorithm = static_cast<std::uint16_t>(chosen);
    if (in_group) {
      t_deferred.push_back({shape, *reduction, comm.clique, on_device});
      return ncclSuccess;
    }
    return execute(shape, *reduction, comm, on_device);
  } catch (const std::exception& error) {
    if (g_state->stop_on_unsupported) stop_job(std::string("internal failure: ") + error.what());
    log_warning(std::string("deterministic mode failed for one call (") + error.what() + "); NCCL runs it");
    return std::nullopt;
  }
}

ncclResult_t run_deferred_deterministic(bool group_in_progress) noexcept {
  t_cliques_to_nccl.clear();
  if (t_deferred.empty()) return ncclSuccess;
  std::vector<DeferredReduction> deferred;
  deferred.swap(t_deferred);
  ncclResult_t first_failure = ncclSuccess;
  for (const DeferredReduction& call : deferred) {
    Target comm;
    try {
      comm = target_of(call.shape.comm, call.shape.redop);
    } catch (...) {
      return ncclSystemError;
    }
    // Run at the call, it had a communicator ready; one destroyed since is the job's error.
    if (!comm.part) {
      if (first_failure == ncclSuccess) first_failure = ncclInvalidArgument;
      continue;
    }
    // NCCL takes no new call on a non-blocking communicator before it has enqueued the group the user just ended.
    if (group_in_progress) wait_until_enqueued(call.shape.comm);
    const ncclResult_t result = execute(call.shape, call.reduction, comm, call.on_device);
    if (first_failure == ncclSuccess) first_failure = result;
  }
  return first_failure;
}

void note_premulsum(ncclComm_t comm, ncclRedOp_t op, const void* scalar, ncclDataType_t datatype,
                    ncclScalarResidence_t residence) noexcept {
  Process* process = g_process;
  if (!deterministic_enabled() || process == nullptr) return;
  try {
    const coll::Reduction reduction = coll::premul_sum_reduction(scalar, datatype, residence);
    for (bool asked = false;; asked = true) {
      {
        const std::lock_guard<std::mutex> lock(process->mutex);
        if (Communicator* entry = registry_entry(process->registry, comm)) {
          if (!entry->deterministic) entry->deterministic = std::make_shared<DeterministicPart>();
          entry->deterministic->premulsum[static_cast<std::int32_t>(op)] = reduction;
          return;
        }
      }
      // NCCL made the operator, so it knows the communicator: a late child's handle, or one the shim did not see.
      if (asked || find_communicator_for_reduction(*process, comm) == nullptr) break;
    }
  } catch (...) {
    // An operator detnccl did not note would later count as one NCCL refuses and go to NCCL: not deterministic.
    if (g_state->stop_on_unsupported) stop_job("out of memory while noting a PreMulSum operator");
    log_warning_once(g_state->warned_unsupported,
                     "DETNCCL_DETERMINISTIC=warn: out of memory while noting a PreMulSum operator; reductions with it "
                     "run as NCCL does, NOT deterministic; further such calls are not reported");
  }
}

void on_driver_too_old(const std::string& why) noexcept {
  if (!deterministic_enabled()) return;
  if (g_state->stop_on_unsupported) {
    std::fprintf(stderr,
                 "[detnccl] DETNCCL_DETERMINISTIC=1 cannot run its reductions of device buffers: %s. The job stops "
                 "here, at its first communicator (exit status %d). Install a newer NVIDIA driver, or set "
                 "DETNCCL_DETERMINISTIC=warn to run reductions of device buffers as NCCL does (not deterministic).\n",
                 why.c_str(), kExitCannotHonour);
    std::fflush(nullptr);
    std::_Exit(kExitCannotHonour);
  }
  g_state->device_code_unusable.store(true, std::memory_order_release);
  log_warning("DETNCCL_DETERMINISTIC=warn: reductions of device buffers run as NCCL does, NOT deterministic: " + why +
              " (host buffers are still reduced deterministically)");
}

void discard_deferred_deterministic() noexcept {
  t_deferred.clear();
  t_cliques_to_nccl.clear();
}

void forget_premulsum(ncclComm_t comm, ncclRedOp_t op) noexcept {
  Process* process = g_process;
  if (!deterministic_enabled() || process == nullptr) return;
  const std::lock_guard<std::mutex> lock(process->mutex);
  Communicator* entry = registry_entry(process->registry, comm);
  if (entry != nullptr && entry->deterministic) entry->deterministic->premulsum.erase(static_cast<std::int32_t>(op));
}

}  // namespace detnccl::interpose
