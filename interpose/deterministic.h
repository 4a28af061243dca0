// detnccl shim: deterministic mode (DETNCCL_DETERMINISTIC) — the floating-point AllReduce, ReduceScatter and
// Reduce calls the shim computes itself with collectives/deterministic.h instead of handing them to NCCL.
#ifndef DETNCCL_INTERPOSE_DETERMINISTIC_H
#define DETNCCL_INTERPOSE_DETERMINISTIC_H

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

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

// At the first communicator created once a CUDA driver is loaded, if that driver cannot run the shim's device code
// (`why` names the version found and the one needed, cuda/driver_version.h): with DETNCCL_DETERMINISTIC=1 the job
// stops there (exit status 78) with that message; with =warn one warning, and reductions of device buffers run as
// NCCL does. Nothing when deterministic mode is off.
void on_driver_too_old(const std::string& why) noexcept;

// PreMulSum operators, told by the communicator registry (communicator_registry.h) at each event the wrappers report
// to it. Each communicator's part of deterministic mode (its scratch, these operators) hangs on its registry entry,
// and goes with it at ncclCommDestroy / ncclCommAbort (on_communicator_destroyed); the registry's id of a
// communicator tells which ranks this process holds of one communicator, which deterministic mode cannot drive from
// one thread inside one group (it stops the job, or with =warn hands them to NCCL).

// A PreMulSum operator was created: remembers what it computes (a host-immediate scalar is copied now).
void note_premulsum(ncclComm_t comm, ncclRedOp_t op, const void* scalar, ncclDataType_t datatype,
                    ncclScalarResidence_t residence) noexcept;

// ncclRedOpDestroy succeeded: the operator is forgotten, so a later call with it goes to NCCL, which refuses it.
void forget_premulsum(ncclComm_t comm, ncclRedOp_t op) noexcept;

}  // namespace detnccl::interpose

#endif  // DETNCCL_INTERPOSE_DETERMINISTIC_H
