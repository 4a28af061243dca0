// detnccl shim: deterministic mode (DETNCCL_DETERMINISTIC) — the floating-point AllReduce, ReduceScatter and
// Reduce calls the shim computes itself with collectives/deterministic.h instead of handing them to NCCL.
#ifndef DETNCCL_INTERPOSE_DETERMINISTIC_H
#define DETNCCL_INTERPOSE_DETERMINISTIC_H

#include <cstdint>
#include <memory>
#include <optional>

#include "abi/nccl_abi.h"
#include "config/config.h"
#include "interpose/call_shape.h"

namespace detnccl::interpose {

// Turns deterministic mode on or off for this process (called once, with the configuration).
void configure_deterministic(const config::Config& config) noexcept;

// Whether deterministic mode is on.
bool deterministic_enabled() noexcept;

// For a reduction in deterministic mode: runs it with the fixed-order algorithm — now, or, inside a user group, at the
// outermost ncclGroupEnd (deferred: it then returns ncclSuccess and ncclGroupEnd reports its result) — and returns
// its result, with the algorithm used in *algorithm. Returns nullopt for a call NCCL should run unchanged: not a
// floating-point reduction, deterministic mode off, or (with DETNCCL_DETERMINISTIC=warn) one that cannot be made
// deterministic. With DETNCCL_DETERMINISTIC=1 such a call stops the job with a message saying what and why.
std::optional<ncclResult_t> run_deterministic(const CallShape& shape, bool in_group, std::uint16_t* algorithm) noexcept;

// At the outermost ncclGroupEnd, after the real one returned: runs this thread's deferred reductions in call order,
// each (when the real ncclGroupEnd returned ncclInProgress) once its communicator has enqueued the group. Returns the
// first failure, or ncclSuccess.
ncclResult_t run_deferred_deterministic(bool group_in_progress) noexcept;

// At the outermost ncclGroupSimulateEnd: NCCL ended the group without running it, so this thread's deferred
// reductions are dropped unrun too.
void discard_deferred_deterministic() noexcept;

// What deterministic mode learns about communicators and operators, told by the communicator registry
// (communicator_registry.h) at each event the wrappers report to it.

// A PreMulSum operator was created: remembers what it computes (a host-immediate scalar is copied now).
void note_premulsum(ncclComm_t comm, ncclRedOp_t op, const void* scalar, ncclDataType_t datatype,
                    ncclScalarResidence_t residence) noexcept;

// A communicator was created. `clique` identifies the communicator it is a rank of, the same value for every rank
// this process holds of it (a hash of the ncclUniqueId, or one value per ncclCommInitAll call); for a split or
// shrink pass the parent and, in `clique`, the split's color (or a value all survivors of a shrink share). Used to
// recognise one thread making reductions on two ranks of one communicator inside a group, which deterministic mode
// cannot run (it stops the job, or with =warn hands them to NCCL). A split's child whose handle NCCL stores late
// (inside a group, or on a non-blocking parent: `comm` is still null) passes `late_handle`, the job's *newcomm: its
// clique is computed now and given to the handle found there when a reduction first names it.
void note_communicator_clique(ncclComm_t comm, std::uint64_t clique, ncclComm_t parent = nullptr,
                              ncclComm_t* late_handle = nullptr) noexcept;

// ncclRedOpDestroy succeeded: the operator is forgotten, so a later call with it goes to NCCL, which refuses it.
void forget_premulsum(ncclComm_t comm, ncclRedOp_t op) noexcept;

// The communicator is being destroyed or aborted: forgets it now (a new communicator may get the same handle) and
// returns what holds its scratch memory. Keep that until the real ncclCommDestroy/ncclCommAbort has returned: the
// scratch is freed only once NCCL has stopped, and once no call of another thread still uses it.
std::shared_ptr<void> forget_communicator_deterministic(ncclComm_t comm) noexcept;

}  // namespace detnccl::interpose

#endif  // DETNCCL_INTERPOSE_DETERMINISTIC_H
