// detnccl shim: the communicator registry (see communicator_registry.h).
#include "interpose/communicator_registry.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <span>

#include "collectives/dtype_arith.h"
#include "interpose/buffer_location.h"
#include "interpose/deterministic.h"
#include "interpose/device_code.h"
#include "interpose/real_nccl.h"
#include "interpose/safe_read.h"
#include "interpose/shim_log.h"
#include "interpose/tracer.h"
#include "interpose/tracer_process.h"
#include "records/communicator_id.h"

namespace detnccl::interpose {
namespace {

Communicator* find_communicator(Process& process, ncclComm_t comm) {
  const std::lock_guard<std::mutex> lock(process.mutex);
  const auto found = process.registry.communicators.find(comm);
  return found == process.registry.communicators.end() ? nullptr : found->second;
}

// Caller holds process.mutex and has just changed process.registry.communicators.
void communicators_changed(Process& process) {
  process.registry.communicators_generation.fetch_add(1, std::memory_order_release);
}

// Caller holds process.mutex and has just changed process.registry.pending_communicators.
void pending_changed(Process& process) {
  const std::size_t size = process.registry.pending_communicators.size();
  process.registry.pending_size.store(size, std::memory_order_relaxed);
  process.registry.pending_count.store(process.config.tracing() ? size : 0, std::memory_order_relaxed);
}

}  // namespace

Communicator* find_communicator_and_cache(CommunicatorRegistry& registry, Process& process, CommunicatorCache& cache,
                                          ncclComm_t comm) {
  const std::lock_guard<std::mutex> lock(process.mutex);
  const std::uint64_t generation = registry.communicators_generation.load(std::memory_order_relaxed);
  if (cache.generation != generation) {
    cache = CommunicatorCache{};
    cache.generation = generation;
  }
  const auto found = registry.communicators.find(comm);
  if (found == registry.communicators.end() || !found->second->traced) return nullptr;
  const std::size_t entry = cache.next;
  cache.next = (entry + 1) % CommunicatorCache::kEntries;
  cache.comms[entry] = comm;
  cache.communicators[entry] = found->second;
  return found->second;
}

namespace {

// Registers a communicator NCCL has created and, when tracing, records it: numbers it, makes its calls traceable,
// creates the log at the first one and appends its record. Caller holds process.mutex.
void register_communicator(Process& process, ncclComm_t comm, std::unique_ptr<Communicator> created,
                           records::CommunicatorRecord record, bool traced) {
  Communicator& communicator = *created;
  process.registry.every_communicator.push_back(std::move(created));
  process.registry.communicators[comm] = &communicator;
  communicators_changed(process);
  if (!traced || !process.config.tracing()) return;
  communicator.traced = true;
  communicator.ordinal = process.registry.next_ordinal.fetch_add(1);
  record.ordinal = communicator.ordinal;
  record.nranks = communicator.nranks;
  record.rank = communicator.rank;
  if (!process.log.writer_attempted) create_writer(process, communicator);
  if (process.log.writer) process.log.writer->append(record);
}

// The pending communicator `comm`, or end(). Caller holds process.mutex.
std::vector<PendingCommunicator>::iterator find_pending(Process& process, ncclComm_t comm) {
  if (comm == nullptr)
    return process.registry.pending_communicators.end();  // not the children whose handle is still unknown
  return std::find_if(process.registry.pending_communicators.begin(), process.registry.pending_communicators.end(),
                      [comm](const PendingCommunicator& pending) { return pending.comm == comm; });
}

// Caller holds process.mutex.
void erase_pending(Process& process, std::vector<PendingCommunicator>::iterator at) {
  process.registry.pending_communicators.erase(at);
  pending_changed(process);
}

// Registers (and records) the pending communicator `comm` if NCCL has finished creating it: asks ncclCommGetAsyncError
// (which neither warns nor changes ncclGetLastError), and only when it says ncclSuccess asks for the size, rank and
// device. A communicator whose creation failed is forgotten (NCCL told the job; there is nothing to record). Asked only
// from the thread that created it, or when `calling_on_it` (the job is making a call on it, so asking is the job's own
// use: no other thread may be destroying it). Returns whether `comm` is recorded now.
bool resolve_communicator(Process& process, ncclComm_t comm, bool calling_on_it) {
  {
    const std::lock_guard<std::mutex> lock(process.mutex);
    const auto pending = find_pending(process, comm);
    if (pending == process.registry.pending_communicators.end() || pending->open_group != 0 || pending->resolving)
      return false;
    if (!calling_on_it && pthread_equal(pending->creator, pthread_self()) == 0) return false;
    pending->resolving = true;
  }
  // RATIONALE: NCCL is asked outside the lock, as every real call is (ncclCommGetAsyncError may join NCCL's thread).
  ncclResult_t state = ncclInProgress;
  const bool asked = DETNCCL_REAL(ncclCommGetAsyncError)(comm, &state) == ncclSuccess;
  const bool ready = asked && state == ncclSuccess;
  int count = 0, rank = 0, device = -1;
  bool sized = false;  // both size and rank answered (deterministic mode uses them)
  if (ready) {
    sized = DETNCCL_REAL(ncclCommCount)(comm, &count) == ncclSuccess;
    if (!sized) count = 0;
    if (DETNCCL_REAL(ncclCommUserRank)(comm, &rank) != ncclSuccess) {
      rank = 0;
      sized = false;
    }
    if (DETNCCL_REAL(ncclCommCuDevice)(comm, &device) != ncclSuccess) device = -1;
  }
  {
    const std::lock_guard<std::mutex> lock(process.mutex);
    const auto pending = find_pending(process, comm);
    if (pending == process.registry.pending_communicators.end()) return false;  // destroyed meanwhile
    if (!ready) {
      if (asked && state == ncclInProgress) {
        pending->resolving = false;
      } else {
        erase_pending(process, pending);
      }
      return false;
    }
    std::unique_ptr<Communicator> created = std::move(pending->communicator);
    records::CommunicatorRecord record = pending->record;
    const bool traced = pending->traced;
    erase_pending(process, pending);
    created->nranks = static_cast<std::uint32_t>(count);
    created->rank = static_cast<std::uint32_t>(rank);
    created->rank_known = sized;
    created->device = device;
    record.device = device;
    register_communicator(process, comm, std::move(created), record, traced);
  }
  // Before the job's first call on it: the driver check and the kernels of its device (device_code.h).
  prepare_device_code(device);
  return true;
}

// A child whose handle NCCL stores late: takes the handle from the caller's *newcomm if NCCL has stored it, and then
// waits as any pending communicator does (a later resolve_communicator records it). Returns false when there is no
// handle. RATIONALE: the caller's variable must stay valid until the split is over (NCCL stores into it then), so it is
// read only at the ncclGroupEnd that ran the split, when the creating thread learns from ncclCommGetAsyncError that the
// parent is settled, or when that thread has just used a handle the shim does not know (taken from the variable) —
// never at some later moment, when the variable may be gone. Caller holds process.mutex.
void take_handle(PendingCommunicator& pending, ncclComm_t handle) {
  pending.comm = handle;
  pending.late_handle = nullptr;
}

bool adopt_late_handle(PendingCommunicator& pending) {
  const ncclComm_t handle = __atomic_load_n(pending.late_handle, __ATOMIC_ACQUIRE);  // NCCL's thread may store it
  if (handle == nullptr) return false;
  take_handle(pending, handle);
  return true;
}

// Takes the handles NCCL has stored for this thread's splits that concern `comm`. When `comm_settled`
// (ncclCommGetAsyncError just told this thread that `comm` is no longer ncclInProgress), the children of splits made
// on `comm` are there now, or will never be (the split failed). A `comm` the shim does not know may be such a child
// itself, its handle just read by the job (it polls the child, or calls on it, perhaps before NCCL has settled the
// parent): it is looked for among the handles stored so far.
void adopt_late_children(Process& process, ncclComm_t comm, bool comm_settled) {
  {
    const std::lock_guard<std::mutex> lock(process.mutex);
    const bool known = find_pending(process, comm) != process.registry.pending_communicators.end() ||
                       process.registry.communicators.find(comm) != process.registry.communicators.end();
    for (auto at = process.registry.pending_communicators.begin();
         at != process.registry.pending_communicators.end();) {
      if (at->late_handle == nullptr || at->open_group != 0 || pthread_equal(at->creator, pthread_self()) == 0) {
        ++at;
      } else if (at->parent == comm && comm_settled) {
        if (adopt_late_handle(*at)) {
          ++at;
        } else {
          at =
              process.registry.pending_communicators.erase(at);  // the split is over without a child: nothing to record
        }
      } else {
        // RATIONALE: not a moment at which the job's variable must still exist: read without trusting it.
        if (!known && read_if_mapped(at->late_handle) == comm) take_handle(*at, comm);
        ++at;
      }
    }
    pending_changed(process);
  }
}

// Records the communicators this thread created that NCCL has finished creating since, oldest first (so that their
// records come before those of communicators created after them, whenever NCCL lets us know in time).
void resolve_pending_of_this_thread(Process& process) {
  if (process.registry.pending_size.load(std::memory_order_relaxed) == 0) return;
  std::vector<ncclComm_t> mine;
  {
    const std::lock_guard<std::mutex> lock(process.mutex);
    for (const PendingCommunicator& pending : process.registry.pending_communicators) {
      if (pending.comm != nullptr && pending.open_group == 0 && pthread_equal(pending.creator, pthread_self()) != 0) {
        mine.push_back(pending.comm);
      }
    }
  }
  for (ncclComm_t comm : mine) resolve_communicator(process, comm, false);
}

}  // namespace

// A call on a communicator that is not recorded: one still pending is recorded now if NCCL has finished creating it
// (the job must wait for that before its first call), and so is the child of a split whose handle NCCL stored late
// (the job may not have polled for it: a blocking child of a non-blocking parent). Returns the communicator, or
// nullptr when the call cannot be traced (warned once when the communicator is still being created).
Communicator* find_pending_for_call(Process& process, CommunicatorCache& cache, ncclComm_t comm) {
  if (resolve_communicator(process, comm, true))
    return find_communicator_for_call(process.registry, process, cache, comm);
  adopt_late_children(process, comm, false);
  if (resolve_communicator(process, comm, true))
    return find_communicator_for_call(process.registry, process, cache, comm);
  bool still_pending = false, late_children = false;
  {
    const std::lock_guard<std::mutex> lock(process.mutex);
    still_pending = find_pending(process, comm) != process.registry.pending_communicators.end();
    late_children =
        std::any_of(process.registry.pending_communicators.begin(), process.registry.pending_communicators.end(),
                    [](const PendingCommunicator& pending) { return pending.late_handle != nullptr; });
  }
  if (still_pending) {
    log_warning_once(process.registry.warned_call_on_pending,
                     "a call on a communicator NCCL has not finished creating (a non-blocking init still in progress, "
                     "or a call inside the group that creates it) is not traced; further such calls are not reported");
  } else if (late_children) {
    log_warning_once(process.registry.warned_call_on_unseen,
                     "a call on a communicator the shim has not seen is not traced: perhaps the child of a split whose "
                     "handle NCCL stores late (inside a group, or on a non-blocking parent), used by another thread "
                     "than the one that split, or before the splitting thread polled the parent with "
                     "ncclCommGetAsyncError; further such calls are not reported");
  }
  return nullptr;
}

namespace {

// What a fork()ed child keeps of its parent's communicators, untouched and never freed (see tracer_process.cc).
// RATIONALE: kept reachable here so that leak checkers (ASan's at a child's exit) see them as the deliberate
// leftovers they are (volatile: the compiler must not drop a store that nothing reads).
std::unordered_map<ncclComm_t, Communicator*>* volatile g_parent_communicators = nullptr;

}  // namespace

void registry_start_over_in_child(CommunicatorRegistry& registry) {
  registry.first_id_known = false;
  try {
    g_parent_communicators = new std::unordered_map<ncclComm_t, Communicator*>(std::move(registry.communicators));
  } catch (...) {
  }
  registry.communicators.clear();
  registry.pending_communicators.clear();
  registry.pending_size.store(0, std::memory_order_relaxed);
  registry.pending_count.store(0, std::memory_order_relaxed);
  registry.premulsum.clear();
  registry.communicators_generation.fetch_add(1, std::memory_order_release);
  registry.next_ordinal.store(0, std::memory_order_relaxed);
}

// At the outermost ncclGroupEnd of this thread: NCCL has created the communicators made inside the group (or failed
// to, and said so), and stored the handles of the splits' children; those that are ready are recorded now, before the
// records of the group's calls. A non-blocking group (ncclInProgress) leaves them pending until NCCL says they are
// ready (a split's child: until this thread polls the parent's async error, see on_async_error_polled).
void close_group_of_pending(Process& process, std::uint64_t group_id, ncclResult_t group_result) noexcept {
  try {
    {
      const std::lock_guard<std::mutex> lock(process.mutex);
      for (auto at = process.registry.pending_communicators.begin();
           at != process.registry.pending_communicators.end();) {
        if (at->open_group != group_id) {
          ++at;
        } else if (at->late_handle != nullptr && !adopt_late_handle(*at) && group_result != ncclInProgress) {
          at = process.registry.pending_communicators.erase(
              at);  // a blocking group that stored no child: nothing to record
        } else if (group_result == ncclSuccess || group_result == ncclInProgress) {
          at->open_group = 0;
          ++at;
        } else {
          at = process.registry.pending_communicators.erase(at);  // the group failed: NCCL created nothing to record
        }
      }
      pending_changed(process);
    }
    resolve_pending_of_this_thread(process);
  } catch (const std::exception& error) {
    stop_tracing_with_warning("cannot record a communicator", error.what());
  }
}

bool premulsum_scalar(Process& process, ncclComm_t comm, std::int32_t redop, std::uint64_t* bits) {
  const std::lock_guard<std::mutex> lock(process.mutex);
  const auto found = process.registry.premulsum.find({comm, redop});
  if (found == process.registry.premulsum.end()) return false;
  *bits = found->second.bits;
  if (found->second.pointer != nullptr && locate_buffer(found->second.pointer) == BufferLocation::kHost) {
    std::memcpy(bits, found->second.pointer, found->second.width);
  }
  return true;
}

namespace {

// A destruction: the handle, its pending state and late children, and its PreMulSum scalars are forgotten; returns
// deterministic mode's part.
std::shared_ptr<DeterministicPart> forget_communicator(ncclComm_t comm) noexcept {
  Process* process = g_process;
  if (process == nullptr) return nullptr;
  const std::lock_guard<std::mutex> lock(process->mutex);
  std::shared_ptr<DeterministicPart> deterministic;
  if (Communicator* entry = registry_entry(process->registry, comm)) deterministic = std::move(entry->deterministic);
  process->registry.communicators.erase(comm);
  if (const auto pending = find_pending(*process, comm); pending != process->registry.pending_communicators.end()) {
    erase_pending(*process, pending);
  }
  // Children of `comm` whose handle was never read: the job's variable cannot be trusted any more.
  std::erase_if(process->registry.pending_communicators, [comm](const PendingCommunicator& pending) {
    return comm != nullptr && pending.late_handle != nullptr && pending.parent == comm;
  });
  pending_changed(*process);
  communicators_changed(*process);
  process->registry.premulsum.erase(process->registry.premulsum.lower_bound({comm, INT32_MIN}),
                                    process->registry.premulsum.upper_bound({comm, INT32_MAX}));
  return deterministic;
}

// The tracer's part of a PreMulSum operator: its scalar, for the records of calls that use it.
void remember_scalar(ncclRedOp_t op, const void* scalar, ncclDataType_t datatype, ncclScalarResidence_t residence,
                     ncclComm_t comm) noexcept {
  Process* process = g_process;
  if (process == nullptr || scalar == nullptr || !process->config.tracing()) return;
  try {
    PreMulSumScalar value;
    value.width = arith::dtype_size(datatype);
    if (residence == ncclScalarHostImmediate && value.width > 0) {
      std::memcpy(&value.bits, scalar, value.width);
    } else {
      value.pointer = scalar;
    }
    const std::lock_guard<std::mutex> lock(process->mutex);
    process->registry.premulsum[{comm, static_cast<std::int32_t>(op)}] = value;
  } catch (...) {
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------

void on_communicator_created(ncclComm_t comm, const CommunicatorOrigin& origin) noexcept {
  Process* process = g_process;
  if (process == nullptr) return;
  try {
    // Communicators this thread created earlier come first, if NCCL has finished them.
    resolve_pending_of_this_thread(*process);
    Communicator* parent = nullptr;
    bool parent_recorded = false;
    std::uint64_t derivation = 0;
    if (origin.parent != nullptr) {
      parent = find_communicator(*process, origin.parent);
      if (parent == nullptr && process->registry.pending_size.load(std::memory_order_relaxed) > 0) {
        // The job just called the split on its parent: asking NCCL about the parent is the job's own use.
        resolve_communicator(*process, origin.parent, true);
        parent = find_communicator(*process, origin.parent);
      }
      parent_recorded = parent != nullptr && parent->traced;
      const std::lock_guard<std::mutex> lock(process->mutex);
      if (parent == nullptr) {
        // Still being created (its record, and so its ordinal, come later): its id and derivations are known.
        const auto pending = find_pending(*process, origin.parent);
        if (pending != process->registry.pending_communicators.end()) parent = pending->communicator.get();
      }
      if (parent != nullptr) derivation = parent->derivations.fetch_add(1);
    }
    if (comm == nullptr && origin.late_handle == nullptr) return;

    auto created = std::make_unique<Communicator>();
    bool id_is_shared = true;
    if (origin.unique_id != nullptr) {
      created->id = records::communicator_id_from_unique_id(
          std::as_bytes(std::span(origin.unique_id->internal, sizeof origin.unique_id->internal)));
    } else if (parent != nullptr) {
      created->id = records::communicator_id_from_parent(parent->id, derivation, origin.color);
    } else if (origin.shared_id != 0) {
      created->id = origin.shared_id;
      id_is_shared = false;  // InitAll: one process, no other rank to agree with
    } else {
      created->id = records::communicator_id_from_parent(now_ns(), static_cast<std::uint64_t>(getpid()), 0);
      id_is_shared = false;
    }

    PendingCommunicator pending;
    pending.comm = comm;
    pending.late_handle = comm == nullptr ? origin.late_handle : nullptr;
    pending.parent = origin.parent;
    pending.record.id = created->id;
    pending.record.origin = origin.origin;
    if (parent != nullptr) {
      if (parent_recorded) pending.record.parent_ordinal = parent->ordinal;
      pending.record.parent_id = parent->id;
      pending.record.split_color = static_cast<std::int32_t>(origin.color);
      pending.record.split_key = origin.key;
    }
    pending.communicator = std::move(created);
    pending.creator = pthread_self();
    // NCCL creates a communicator made inside a group at the outermost ncclGroupEnd (on_group_end).
    pending.open_group = open_group_of_this_thread();
    {
      const std::lock_guard<std::mutex> lock(process->mutex);
      if (!process->registry.first_id_known) {
        process->registry.first_id_known = true;
        process->registry.first_id = pending.record.id;
        process->registry.first_id_is_shared = id_is_shared;
      }
      process->registry.pending_communicators.push_back(std::move(pending));
      pending_changed(*process);
    }
    // A blocking creation outside a group has finished: recorded now. One that returned ncclInProgress is recorded
    // once NCCL says it is ready (at the first call on it, or at this thread's next creation or group end); a child
    // whose handle NCCL stores late, once the handle is there (close_group_of_pending, on_async_error_polled).
    if (!origin.in_progress && comm != nullptr) resolve_communicator(*process, comm, false);
  } catch (const std::exception& error) {
    stop_tracing_with_warning("cannot record a communicator", error.what());
  }
}

std::shared_ptr<void> on_communicator_destroyed(ncclComm_t comm) noexcept { return forget_communicator(comm); }

void on_async_error_polled(ncclComm_t comm, ncclResult_t state, const void* caller) noexcept {
  Process* process = g_process;
  if (process == nullptr || state == ncclInProgress || comm == nullptr ||
      process->registry.pending_size.load(std::memory_order_relaxed) == 0 || inside_real_nccl(caller)) {
    return;
  }
  try {
    adopt_late_children(*process, comm, true);
    resolve_pending_of_this_thread(*process);
  } catch (const std::exception& error) {
    stop_tracing_with_warning("cannot record a communicator", error.what());
  }
}

void on_premulsum_created(ncclRedOp_t op, const void* scalar, ncclDataType_t datatype, ncclScalarResidence_t residence,
                          ncclComm_t comm) noexcept {
  remember_scalar(op, scalar, datatype, residence, comm);
  note_premulsum(comm, op, scalar, datatype, residence);
}

void on_premulsum_destroyed(ncclRedOp_t op, ncclComm_t comm) noexcept { forget_premulsum(comm, op); }

Communicator* registry_entry(CommunicatorRegistry& registry, ncclComm_t comm) {
  if (const auto found = registry.communicators.find(comm); found != registry.communicators.end()) return found->second;
  if (comm == nullptr) return nullptr;
  for (PendingCommunicator& pending : registry.pending_communicators) {
    if (pending.comm == comm) return pending.communicator.get();
  }
  return nullptr;
}

namespace {

// A split's child whose handle NCCL stored late, named by a reduction on any thread: takes its handle when the job's
// variable holds `comm`. Returns whether `comm` is pending now. Caller holds process.mutex.
bool adopt_late_handle_of(Process& process, ncclComm_t comm) {
  if (find_pending(process, comm) != process.registry.pending_communicators.end()) return true;
  for (PendingCommunicator& pending : process.registry.pending_communicators) {
    // RATIONALE: the job's variable may be gone by now: read without trusting it. NCCL stores it only once the
    // creating thread's group is over.
    if (pending.late_handle == nullptr || pending.open_group != 0 || read_if_mapped(pending.late_handle) != comm) {
      continue;
    }
    // The tracer learns late handles only on the creating thread; another's find leaves the child untraced, so that
    // no log holds its calls from some later one on.
    if (pthread_equal(pending.creator, pthread_self()) == 0) pending.traced = false;
    take_handle(pending, comm);
    return true;
  }
  return false;
}

// A handle the shim did not see created, which NCCL knows: registered untraced, with an id of its own.
Communicator* register_unseen(Process& process, ncclComm_t comm) {
  int rank = -1, nranks = 0;
  if (DETNCCL_REAL(ncclCommUserRank)(comm, &rank) != ncclSuccess ||
      DETNCCL_REAL(ncclCommCount)(comm, &nranks) != ncclSuccess) {
    return nullptr;
  }
  auto unseen = std::make_unique<Communicator>();
  unseen->id = records::communicator_id_from_parent(now_ns(), static_cast<std::uint64_t>(getpid()),
                                                    reinterpret_cast<std::uintptr_t>(comm));
  unseen->rank = static_cast<std::uint32_t>(rank);
  unseen->nranks = static_cast<std::uint32_t>(nranks);
  unseen->rank_known = true;
  const std::lock_guard<std::mutex> lock(process.mutex);
  if (const auto found = process.registry.communicators.find(comm); found != process.registry.communicators.end()) {
    return found->second;  // another thread's reduction registered it meanwhile
  }
  Communicator* registered = unseen.get();
  process.registry.every_communicator.push_back(std::move(unseen));
  process.registry.communicators[comm] = registered;
  communicators_changed(process);
  return registered;
}

}  // namespace

Communicator* find_communicator_for_reduction(Process& process, ncclComm_t comm) {
  if (comm == nullptr) return nullptr;
  if (Communicator* registered = find_communicator(process, comm)) return registered;
  bool pending = false;
  {
    const std::lock_guard<std::mutex> lock(process.mutex);
    pending = adopt_late_handle_of(process, comm);
  }
  if (!pending) return register_unseen(process, comm);
  // RATIONALE: the job is making a call on it, so asking NCCL about it is the job's own use.
  return resolve_communicator(process, comm, true) ? find_communicator(process, comm) : nullptr;
}

}  // namespace detnccl::interpose
