// detnccl shim: the communicator registry — what the shim knows about each communicator this process created
// (ordinal, run-wide id, size, rank, PreMulSum scalars, deterministic mode's part), including the ones NCCL has not
// finished creating (non-blocking, made inside a group) and split children whose handle NCCL stores late.
//
// The hand-written wrappers (wrappers_special.cc) tell it, once per event, about creations, destructions,
// ncclCommGetAsyncError polls and PreMulSum operators (the hooks below). It tracks communicators whenever the shim is
// active, for the tracer (which records them when tracing is on) and for deterministic mode alike: NCCL is asked a
// communicator's size, rank and device once, its id tells deterministic mode which local ranks belong to one
// communicator, and deterministic mode's scratch and PreMulSum reductions hang on its entry (DeterministicPart).
//
// The structures after the hooks are internal to the shim: guarded by Process::mutex (tracer_process.h), except
// the atomics, which the per-call path reads without it.
#ifndef DETNCCL_INTERPOSE_COMMUNICATOR_REGISTRY_H
#define DETNCCL_INTERPOSE_COMMUNICATOR_REGISTRY_H

#include <pthread.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "abi/nccl_abi.h"
#include "records/log_format.h"

namespace detnccl::interpose {

// How a communicator came to be, as far as its creating call tells.
struct CommunicatorOrigin {
  records::CommOrigin origin = records::CommOrigin::kUnknown;
  const ncclUniqueId* unique_id = nullptr;  // InitRank*, InitRankScalable (the first id)
  ncclComm_t parent = nullptr;              // Split, Shrink
  std::int64_t color = records::kNotSplit;  // split color, or a value every survivor of a shrink shares
  std::int32_t key = records::kNotSplit;
  std::uint64_t shared_id = 0;  // InitAll: an id already computed for all the communicators of the call
  bool in_progress = false;     // the creating call returned ncclInProgress (a non-blocking communicator)
  // Split, Shrink that returned before NCCL created the child (inside a group, or ncclInProgress on a non-blocking
  // parent): the caller's *newcomm, still null, where NCCL stores the child's handle once it exists.
  ncclComm_t* late_handle = nullptr;
};

// After a communicator-creating call returned (shim_active()): registers `comm` (nullptr when this rank got none, e.g.
// a split with NCCL_SPLIT_NOCOLOR: the parent's derivation count still advances, as it does on the parent's other
// ranks) and, when tracing, records it, creating this process's log on first use. NCCL answers the queries the record
// needs (size, rank, device) only once it has created the communicator: a non-blocking one whose creation returned
// ncclInProgress, or one created inside a group (at its outermost ncclGroupEnd), is recorded once it is ready — at that
// ncclGroupEnd, or at the first call made on it, when ncclCommGetAsyncError no longer says ncclInProgress — and always
// before any record of a call on it. A split's child made inside a group or on a non-blocking parent has no handle yet
// (`comm` is nullptr and origin.late_handle is set): NCCL stores it at the outermost ncclGroupEnd, or before the
// parent's async error leaves ncclInProgress; the child is recorded once the creating thread has seen either (or calls
// on the child).
void on_communicator_created(ncclComm_t comm, const CommunicatorOrigin& origin) noexcept;

// After ncclCommGetAsyncError answered `state` for `comm`, called from `caller` (a return address): when it is
// settled, the children of this thread's splits of `comm` that NCCL stores late are there now (or never will be) and
// are recorded. Nothing when NCCL itself made the call (inside_real_nccl: the tracer asks NCCL nothing from inside
// an NCCL call).
void on_async_error_polled(ncclComm_t comm, ncclResult_t state, const void* caller) noexcept;

// Before ncclCommDestroy / ncclCommAbort: forgets `comm` (its handle may be reused afterwards) and returns what holds
// deterministic mode's scratch for it (its DeterministicPart). Keep that until the real call has returned: the scratch
// is freed only once NCCL has stopped, and once no call of another thread still uses it.
[[nodiscard]] std::shared_ptr<void> on_communicator_destroyed(ncclComm_t comm) noexcept;

// After ncclRedOpCreatePreMulSum succeeded: remembers the operator's scalar, so that call records carry it, and what
// it computes, for deterministic mode.
void on_premulsum_created(ncclRedOp_t op, const void* scalar, ncclDataType_t datatype, ncclScalarResidence_t residence,
                          ncclComm_t comm) noexcept;

// After ncclRedOpDestroy succeeded: deterministic mode forgets the operator (a later call with it goes to NCCL).
void on_premulsum_destroyed(ncclRedOp_t op, ncclComm_t comm) noexcept;

// ---------------------------------------------------------------------------------------------------------------
// Internal to the shim.

struct Process;
struct DeterministicPart;  // deterministic.cc: a communicator's scratch and PreMulSum reductions

// What the shim knows about one communicator. Kept until the process ends (every_communicator), since a thread's
// CommunicatorCache may still point at it after ncclCommDestroy: a few dozen bytes per communicator.
struct Communicator {
  std::uint64_t ordinal = 0;  // its record's (when `traced`)
  // Run-wide: equal on every rank of one communicator (from its ncclUniqueId, its InitAll call, or its parent's id,
  // the parent's derivation count and the split's color), so also deterministic mode's test for two local ranks of
  // one communicator.
  std::uint64_t id = 0;
  std::uint32_t nranks = 0;
  std::uint32_t rank = 0;
  bool rank_known = false;  // NCCL answered both ncclCommCount and ncclCommUserRank
  int device = -1;          // ncclCommCuDevice's answer, -1 if none: a default stream's device in its calls
  // The tracer recorded it, so its calls are traced. False while tracing is off, and for a communicator the tracer
  // did not see created on the creating thread (find_communicator_for_reduction).
  bool traced = false;
  std::atomic<std::uint64_t> calls{0};        // per-communicator sequence numbers
  std::atomic<std::uint64_t> derivations{0};  // splits and shrinks made from it so far, NOCOLOR ones included
  // Deterministic mode's part, made at its first reduction or PreMulSum operator; taken at destruction
  // (on_communicator_destroyed). Guarded by Process::mutex.
  std::shared_ptr<DeterministicPart> deterministic;
};

struct PreMulSumScalar {
  std::uint64_t bits = 0;         // the scalar's bytes, zero-extended (host-immediate scalars)
  const void* pointer = nullptr;  // device-residence scalars are read at each call (when in host memory)
  std::uint64_t width = 0;
};

// A communicator NCCL has not finished creating: a non-blocking one whose creation returned ncclInProgress, or one
// created inside a group (NCCL creates it at the outermost ncclGroupEnd). NCCL answers ncclCommCount / UserRank /
// CuDevice only once it is ready (before that, NCCL 2.28 warns, sets its last error and returns ncclInvalidArgument),
// so its record waits until then (see resolve_communicator).
// A split's (or shrink's) child is not even known by its handle then: NCCL 2.28 stores the handle in the caller's
// *newcomm only when its init job ends (ncclCommInitRankFunc, src/init.cc), at the outermost ncclGroupEnd or, for a
// non-blocking parent, on NCCL's thread before the parent's async error leaves ncclInProgress. Until the shim reads
// it there (see adopt_late_handle), `comm` is null and `late_handle` says where to look.
struct PendingCommunicator {
  ncclComm_t comm = nullptr;
  ncclComm_t* late_handle = nullptr;  // the caller's *newcomm while `comm` is not known yet
  ncclComm_t parent = nullptr;        // a split's or shrink's parent (its async error says when the child is there)
  std::unique_ptr<Communicator> communicator;  // id and derivation count already; size and rank once ready
  records::CommunicatorRecord record;          // everything but the ordinal, size, rank and device
  std::uint64_t open_group = 0;  // the creating thread's group while it is open (NCCL creates the communicator at
                                 // its outermost ncclGroupEnd); 0 once closed, or when created outside a group
  pthread_t creator{};           // only this thread (or a call on the communicator) asks NCCL whether it is ready
  bool resolving = false;        // a thread is asking NCCL about it (outside the lock)
  bool traced = true;            // false: another thread than the creator read its late handle (not recorded)
};

// Every communicator of this process, by handle. Guarded by Process::mutex but for the atomics.
struct CommunicatorRegistry {
  std::vector<std::unique_ptr<Communicator>> every_communicator;  // destroyed ones included (see Communicator)
  std::unordered_map<ncclComm_t, Communicator*> communicators;    // the live ones, by handle
  std::map<std::pair<ncclComm_t, std::int32_t>, PreMulSumScalar> premulsum;
  std::vector<PendingCommunicator> pending_communicators;  // not ready yet, in creation order
  // The id of the first communicator this process created (ready or not), which names the run when no environment
  // variable does: every rank computes it alike, whichever of its communicators NCCL finishes first.
  bool first_id_known = false;
  bool first_id_is_shared = false;
  std::uint64_t first_id = 0;

  // Changes with every change of `communicators` (under the mutex); CommunicatorCache reads it without the mutex.
  std::atomic<std::uint64_t> communicators_generation{0};
  std::atomic<std::uint64_t> next_ordinal{0};
  std::atomic<std::size_t> pending_size{0};  // pending_communicators.size(), read without the mutex
  // The same while tracing is on, else 0: what a traced call checks before it looks for a communicator to record
  // (deterministic mode finds its own: find_communicator_for_reduction).
  std::atomic<std::size_t> pending_count{0};
  std::atomic<bool> warned_call_on_pending{false};
  std::atomic<bool> warned_call_on_unseen{false};
};

// The communicators one thread used last, by handle.
// RATIONALE: every traced call needs its communicator, and looking it up in CommunicatorRegistry::communicators
// means taking Process::mutex on every call, from every thread. The cache is valid while communicators_generation
// still has the value it had when the entries were looked up. The map and the generation change together under the
// mutex, so a thread that reads an unchanged generation has seen no change of the map that happened before its call:
// a communicator destroyed (and its handle perhaps reused by a new one) before the call reaches every cache as a new
// generation. A call racing the destruction of its own communicator is the job's error in NCCL too; even then an
// entry cannot dangle, since Communicator objects are kept until the process ends.
struct CommunicatorCache {
  static constexpr std::size_t kEntries = 4;
  std::uint64_t generation = 0;
  std::array<ncclComm_t, kEntries> comms{};
  std::array<Communicator*, kEntries> communicators{};
  std::size_t next = 0;  // the entry the next miss replaces
};

// The slow path of find_communicator_for_call: looks `comm` up under the mutex and caches it (when traced).
Communicator* find_communicator_and_cache(CommunicatorRegistry& registry, Process& process, CommunicatorCache& cache,
                                          ncclComm_t comm);

// The communicator a traced call names, from this thread's cache when it can (see CommunicatorCache), or nullptr
// for one the tracer did not record (not seen created, or not yet recorded: see find_pending_for_call).
// RATIONALE: inline, so that the per-call path finds a cached communicator without a call.
inline Communicator* find_communicator_for_call(CommunicatorRegistry& registry, Process& process,
                                                CommunicatorCache& cache, ncclComm_t comm) {
  if (cache.generation == registry.communicators_generation.load(std::memory_order_acquire)) {
    for (std::size_t i = 0; i < CommunicatorCache::kEntries; ++i) {
      if (cache.comms[i] == comm && cache.communicators[i] != nullptr) return cache.communicators[i];
    }
  }
  return find_communicator_and_cache(registry, process, cache, comm);
}

// A call on a communicator that is not recorded: one still pending is recorded now if NCCL has finished creating it
// (the job must wait for that before its first call), and so is the child of a split whose handle NCCL stored late
// (the job may not have polled for it: a blocking child of a non-blocking parent). Returns the communicator, or
// nullptr when the call cannot be traced (warned once when the communicator is still being created).
Communicator* find_pending_for_call(Process& process, CommunicatorCache& cache, ncclComm_t comm);

// Deterministic mode's slow path, at the first reduction (or PreMulSum operator) on `comm` that the registry has not
// registered: a pending communicator is registered now if NCCL has finished creating it; a split's child whose
// handle NCCL stored late is found from any thread (read from the job's variable without trusting it; recorded for
// the tracer only when this thread made the split); a handle the shim did not see created (a fork()ed child's
// inheritance) is registered, untraced, if NCCL answers its size and rank. Returns nullptr when NCCL has not
// finished creating it (or does not know it). Takes Process::mutex; throws std::bad_alloc.
Communicator* find_communicator_for_reduction(Process& process, ncclComm_t comm);

// The entry of `comm`, registered or still pending, or nullptr. Caller holds Process::mutex.
Communicator* registry_entry(CommunicatorRegistry& registry, ncclComm_t comm);

// The scalar of the PreMulSum operator `redop` of `comm` (read now when it lives in host memory), or false when the
// shim did not see it created.
bool premulsum_scalar(Process& process, ncclComm_t comm, std::int32_t redop, std::uint64_t* bits);

// At the outermost ncclGroupEnd of this thread: records the communicators made inside the group that NCCL has
// finished (or forgets those it failed to create), before the records of the group's calls.
void close_group_of_pending(Process& process, std::uint64_t group_id, ncclResult_t group_result) noexcept;

// In a fork()ed child (Process::mutex held): forgets the parent's communicators, kept unfreed (see tracer_process.cc).
void registry_start_over_in_child(CommunicatorRegistry& registry);

}  // namespace detnccl::interpose

#endif  // DETNCCL_INTERPOSE_COMMUNICATOR_REGISTRY_H
