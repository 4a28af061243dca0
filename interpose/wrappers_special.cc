// detnccl shim: the hand-written wrappers — communicator creation and destruction, group brackets, custom reduction
// operators and ncclCommGetAsyncError: the calls where the shim learns about communicators (a split's child included,
// whose handle NCCL may store only once the split is over), groups and PreMulSum scalars. Each event is told once to
// the communicator registry (communicator_registry.h), which serves the tracer and deterministic mode.
#include <cstdint>
#include <ctime>

#include <unistd.h>

#include "abi/nccl_abi.h"
#include "interpose/communicator_registry.h"
#include "interpose/deterministic.h"
#include "interpose/real_nccl.h"
#include "interpose/shim_state.h"
#include "interpose/tracer.h"
#include "records/communicator_id.h"

namespace {

using detnccl::interpose::CommunicatorOrigin;
using detnccl::interpose::on_communicator_created;
using detnccl::interpose::shim_active;
using detnccl::records::CommOrigin;

// Creation calls that can have made a communicator (a non-blocking one reports ncclInProgress).
bool created(ncclResult_t result) { return result == ncclSuccess || result == ncclInProgress; }

// The child a split or shrink stored in *newcomm so far. One that returned before NCCL created the child (inside a
// group, or ncclInProgress on a non-blocking parent) left it null: NCCL 2.28 stores the handle only when the child's
// init ends, on NCCL's thread for a non-blocking parent (so it is read atomically), and *late_handle says where.
ncclComm_t child_so_far(ncclComm_t* newcomm, bool gets_child, ncclComm_t** late_handle) {
  const ncclComm_t child = newcomm != nullptr ? __atomic_load_n(newcomm, __ATOMIC_ACQUIRE) : nullptr;
  *late_handle = child == nullptr && gets_child ? newcomm : nullptr;
  return child;
}

void record_initialized(ncclComm_t* comm, ncclResult_t result, CommOrigin origin, const ncclUniqueId* id) {
  if (shim_active() && created(result) && comm != nullptr) {
    CommunicatorOrigin how;
    how.origin = origin;
    how.unique_id = id;
    how.in_progress = result == ncclInProgress;
    on_communicator_created(*comm, how);
  }
}

}  // namespace

DETNCCL_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  detnccl::interpose::ensure_configured();
  return DETNCCL_REAL(ncclGetUniqueId)(uniqueId);
}

DETNCCL_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                                   ncclConfig_t* config) {
  detnccl::interpose::ensure_configured();
  const ncclResult_t result = DETNCCL_REAL(ncclCommInitRankConfig)(comm, nranks, commId, rank, config);
  record_initialized(comm, result, CommOrigin::kInitRank, &commId);
  return result;
}

DETNCCL_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  detnccl::interpose::ensure_configured();
  const ncclResult_t result = DETNCCL_REAL(ncclCommInitRank)(comm, nranks, commId, rank);
  record_initialized(comm, result, CommOrigin::kInitRank, &commId);
  return result;
}

DETNCCL_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
  detnccl::interpose::ensure_configured();
  const ncclResult_t result = DETNCCL_REAL(ncclCommInitAll)(comm, ndev, devlist);
  if (shim_active() && created(result) && comm != nullptr) {
    // All the communicators of this call live in this process: any id they share will do.
    timespec now{};
    clock_gettime(CLOCK_REALTIME, &now);
    CommunicatorOrigin how;
    how.origin = CommOrigin::kInitAll;
    how.shared_id = detnccl::records::communicator_id_from_parent(
        static_cast<std::uint64_t>(now.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(now.tv_nsec),
        static_cast<std::uint64_t>(getpid()), ndev);
    how.in_progress = result == ncclInProgress;
    for (int i = 0; i < ndev; ++i) on_communicator_created(comm[i], how);
  }
  return result;
}

DETNCCL_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                                     ncclUniqueId* commIds, ncclConfig_t* config) {
  detnccl::interpose::ensure_configured();
  const ncclResult_t result = DETNCCL_REAL(ncclCommInitRankScalable)(newcomm, nranks, myrank, nId, commIds, config);
  record_initialized(newcomm, result, CommOrigin::kInitRankScalable, nId > 0 ? commIds : nullptr);
  return result;
}

DETNCCL_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                          ncclConfig_t* config) {
  detnccl::interpose::ensure_configured();
  const ncclResult_t result = DETNCCL_REAL(ncclCommSplit)(comm, color, key, newcomm, config);
  if (shim_active() && created(result)) {
    CommunicatorOrigin how;
    how.origin = CommOrigin::kSplit;
    how.parent = comm;
    how.color = color;
    how.key = key;
    how.in_progress = result == ncclInProgress;
    const ncclComm_t child = child_so_far(newcomm, color != NCCL_SPLIT_NOCOLOR, &how.late_handle);
    // A rank that passed NCCL_SPLIT_NOCOLOR gets no communicator, but the parent's derivation count still advances.
    on_communicator_created(child, how);
  }
  return result;
}

DETNCCL_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                           ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  detnccl::interpose::ensure_configured();
  const ncclResult_t result =
      DETNCCL_REAL(ncclCommShrink)(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags);
  if (shim_active() && created(result)) {
    // Every survivor passes the same exclusion list: its hash (order-independent) stands in for a split color.
    std::uint64_t excluded = 0;
    for (int i = 0; excludeRanksList != nullptr && i < excludeRanksCount; ++i) {
      excluded += (static_cast<std::uint64_t>(excludeRanksList[i]) + 1) * 0x9E3779B97F4A7C15ull;
    }
    CommunicatorOrigin how;
    how.origin = CommOrigin::kShrink;
    how.parent = comm;
    how.color = static_cast<std::int64_t>(excluded & 0x7fffffff);
    how.in_progress = result == ncclInProgress;
    const ncclComm_t child = child_so_far(newcomm, true, &how.late_handle);
    on_communicator_created(child, how);
  }
  return result;
}

DETNCCL_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) { return DETNCCL_REAL(ncclCommFinalize)(comm); }

// The deterministic state's scratch (device memory too) is released only after the real call returned: an abort
// from a watchdog thread must reach NCCL before a cudaFree could wait for NCCL's stuck kernels.
DETNCCL_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  std::shared_ptr<void> deterministic_state;
  if (shim_active()) deterministic_state = detnccl::interpose::on_communicator_destroyed(comm);
  return DETNCCL_REAL(ncclCommDestroy)(comm);
}

DETNCCL_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  std::shared_ptr<void> deterministic_state;
  if (shim_active()) deterministic_state = detnccl::interpose::on_communicator_destroyed(comm);
  return DETNCCL_REAL(ncclCommAbort)(comm);
}

DETNCCL_EXPORT ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  return DETNCCL_REAL(ncclCommRevoke)(comm, revokeFlags);
}

// Polling is how a job learns that NCCL has finished a non-blocking split: the tracer then reads the child's handle.
// NCCL itself calls this function through the dynamic linker (every readiness check of 2.28 does): the tracer acts
// only on the job's own polls (see on_async_error_polled), never inside an NCCL call.
DETNCCL_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  const ncclResult_t result = DETNCCL_REAL(ncclCommGetAsyncError)(comm, asyncError);
  if (shim_active() && result == ncclSuccess && asyncError != nullptr) {
    detnccl::interpose::on_async_error_polled(comm, *asyncError, __builtin_return_address(0));
  }
  return result;
}

DETNCCL_EXPORT ncclResult_t ncclGroupStart() {
  // RATIONALE: a job may open its first group before its first communicator exists (to create communicators inside
  // it): the shim must count that group too, or it would take the calls inside for calls outside any group.
  detnccl::interpose::ensure_configured();
  if (shim_active()) detnccl::interpose::on_group_start();
  return DETNCCL_REAL(ncclGroupStart)();
}

DETNCCL_EXPORT ncclResult_t ncclGroupEnd() {
  ncclResult_t result = DETNCCL_REAL(ncclGroupEnd)();
  if (shim_active()) {
    // Deterministic reductions made inside the group run now, after NCCL ran the rest of it (they open groups of
    // their own, so they cannot run inside the user's); their failure is the group's. (On a non-blocking
    // communicator they first wait until NCCL has enqueued the group: ncclInProgress stays the group's result.)
    if (detnccl::interpose::group_depth() == 1) {
      const ncclResult_t deferred = detnccl::interpose::run_deferred_deterministic(result == ncclInProgress);
      if (deferred != ncclSuccess && (result == ncclSuccess || result == ncclInProgress)) result = deferred;
    }
    detnccl::interpose::on_group_end(result);
  }
  return result;
}

// NCCL ends the group here as ncclGroupEnd does (its depth drops whatever the result), but only estimates it: none
// of its operations run. The shim closes its group too, so that later calls are not taken as inside one: deferred
// deterministic reductions are dropped unrun, and the tracer writes the group's records (calls NCCL was given; their
// outputs are whatever the buffers held). With an NCCL that lacks the entry point nothing ended, and nothing changes.
DETNCCL_EXPORT ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  const ncclResult_t result = DETNCCL_REAL(ncclGroupSimulateEnd)(simInfo);
  if (shim_active() && detnccl::interpose::real_nccl_has_group_simulate_end()) {
    if (detnccl::interpose::group_depth() == 1) detnccl::interpose::discard_deferred_deterministic();
    detnccl::interpose::on_group_end(result);
  }
  return result;
}

DETNCCL_EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                                     ncclScalarResidence_t residence, ncclComm_t comm) {
  const ncclResult_t result = DETNCCL_REAL(ncclRedOpCreatePreMulSum)(op, scalar, datatype, residence, comm);
  if (shim_active() && result == ncclSuccess && op != nullptr) {
    detnccl::interpose::on_premulsum_created(*op, scalar, datatype, residence, comm);
  }
  return result;
}

DETNCCL_EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  const ncclResult_t result = DETNCCL_REAL(ncclRedOpDestroy)(op, comm);
  if (shim_active() && result == ncclSuccess) detnccl::interpose::on_premulsum_destroyed(op, comm);
  return result;
}
