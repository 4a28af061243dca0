// detnccl shim: the tracer's communicator registry — what the shim knows about each communicator this process
// created (ordinal, run-wide id, size, rank, PreMulSum scalars), including the ones NCCL has not finished creating
// (non-blocking, made inside a group) and split children whose handle NCCL stores late. The hooks of tracer.h for
// creation, destruction, ncclCommGetAsyncError and PreMulSum are defined in communicator_registry.cc.
//
// Internal to the tracer: guarded by Process::mutex (tracer_process.h), except the atomics, which the per-call path
// reads without it.
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

struct Process;

// What the tracer knows about one communicator. Kept until the process ends (every_communicator), since a thread's
// CommunicatorCache may still point at it after ncclCommDestroy: a few dozen bytes per communicator.
struct Communicator {
  std::uint64_t ordinal = 0;
  std::uint64_t id = 0;
  std::uint32_t nranks = 0;
  std::uint32_t rank = 0;
  std::atomic<std::uint64_t> calls{0};        // per-communicator sequence numbers
  std::atomic<std::uint64_t> derivations{0};  // splits and shrinks made from it so far
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
  std::atomic<std::size_t> pending_count{0};  // pending_communicators.size(), read without the mutex
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

// The slow path of find_communicator_for_call: looks `comm` up under the mutex and caches it.
Communicator* find_communicator_and_cache(CommunicatorRegistry& registry, Process& process, CommunicatorCache& cache,
                                          ncclComm_t comm);

// The communicator a traced call names, from this thread's cache when it can (see CommunicatorCache), or nullptr
// for one we did not see created (or not yet recorded: see find_pending_for_call).
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
