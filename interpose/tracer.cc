// detnccl shim: the tracer (see tracer.h).
#include "interpose/tracer.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "config/config.h"
#include "hash/device_fingerprints.h"
#include "hash/fingerprint.h"
#include "hash/tree_shape.h"
#include "interpose/buffer_location.h"
#include "interpose/deterministic.h"
#include "interpose/non_blocking.h"
#include "interpose/real_nccl.h"
#include "interpose/safe_read.h"
#include "interpose/shim_log.h"
#include "interpose/shim_state.h"
#include "interpose/traced_op.h"
#include "records/communicator_id.h"
#include "records/record_writer.h"

namespace detnccl::interpose {
namespace {

using hash::device_fingerprints_available;
using hash::device_fingerprints_unavailable_reason;
using hash::DeviceDigests;
using hash::DeviceDigestTicket;
using hash::enqueue_device_digests;

// EX_CONFIG from sysexits.h: the job stops because of its configuration.
constexpr int kExitInvalidConfiguration = 78;
constexpr std::uint32_t kDetncclVersion = 100;  // 0.1.0 as major * 10000 + minor * 100 + patch
constexpr const char* kDetncclVersionText = "0.1.0";

// What the tracer knows about one communicator. Kept until the process ends (Process::every_communicator), since a
// thread's CommunicatorCache may still point at it after ncclCommDestroy: a few dozen bytes per communicator.
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

// Fingerprints of a buffer about to be recorded: whole, per-peer blocks, segments (the same on CPU and GPU).
using Digests = DeviceDigests;

// Where one side's digests come from: computed on the CPU (host memory), or by kernels on the call's stream
// (device memory: a ticket the collector polls).
struct DigestSource {
  bool known = false;  // digests holds the result
  Digests digests;
  std::unique_ptr<DeviceDigestTicket> ticket;
};

// A call between its real NCCL call and its record: waiting for the outermost ncclGroupEnd, or for device
// fingerprints.
struct PendingCall {
  records::CallFields fields;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  DigestSource input, output;
  const void* output_data = nullptr;
  std::uint64_t output_bytes = 0;
  std::uint64_t output_blocks = 0;  // per-peer blocks to fingerprint (0: none)
  bool hash_output = false;
};

// Everything the tracer knows about this process. Allocated once and never freed, so that no static destructor
// can pull it away from a thread still calling NCCL while the process exits.
struct Process {
  config::Config config;
  std::vector<std::string> environment_copy;  // for the log header (NCCL_* variables)

  std::mutex mutex;                                               // guards everything below up to the atomics
  std::vector<std::unique_ptr<Communicator>> every_communicator;  // destroyed ones included (see Communicator)
  std::unordered_map<ncclComm_t, Communicator*> communicators;    // the live ones, by handle
  std::map<std::pair<ncclComm_t, std::int32_t>, PreMulSumScalar> premulsum;
  std::vector<PendingCommunicator> pending_communicators;  // not ready yet, in creation order
  std::unique_ptr<records::RecordWriter> writer;
  bool writer_attempted = false;
  std::uint32_t global_rank = 0;
  // The id of the first communicator this process created (ready or not), which names the run when no environment
  // variable does: every rank computes it alike, whichever of its communicators NCCL finishes first.
  bool first_id_known = false;
  bool first_id_is_shared = false;
  std::uint64_t first_id = 0;
  // A fork()ed child: it starts over (see start_over_in_child) and reads the environment again at its first log.
  bool forked_child = false;

  std::atomic<records::RecordWriter*> active_writer{nullptr};
  // Changes with every change of `communicators` (under mutex); CommunicatorCache reads it without the mutex.
  std::atomic<std::uint64_t> communicators_generation{0};
  std::atomic<std::uint64_t> next_ordinal{0};
  std::atomic<std::uint64_t> next_call{0};
  std::atomic<std::uint64_t> next_group{1};
  std::atomic<std::size_t> pending_count{0};  // pending_communicators.size(), read without the mutex
  std::atomic<bool> warned_device_unavailable{false};
  std::atomic<bool> warned_location_unknown{false};
  std::atomic<bool> warned_call_on_pending{false};
  std::atomic<bool> warned_call_on_unseen{false};
  std::atomic<bool> warned_device_failure{false};
  std::atomic<bool> warned_hash_failure{false};

  // Records waiting for device fingerprints, in the order their calls completed; the collector thread writes them
  // once the kernels are done. A record that needs no wait goes straight to the log while this queue is empty.
  std::mutex queue_mutex;
  std::condition_variable queue_changed;
  std::deque<PendingCall> queue;  // guarded by queue_mutex
  std::thread collector;          // started at the first queued record
  bool stopping = false;          // guarded by queue_mutex
};

Process* g_process = nullptr;
std::once_flag g_configured;
// The step lives outside Process: a job may mark its first step before its first NCCL call.
std::atomic<std::uint64_t> g_step{0};
std::atomic<bool> g_step_marked{false};

struct GroupState {
  int depth = 0;
  std::uint64_t group_id = 0;
  std::vector<PendingCall> pending;
};

// The communicators one thread used last, by handle.
// RATIONALE: every traced call needs its communicator, and looking it up in Process::communicators means taking
// Process::mutex on every call, from every thread. The cache is valid while Process::communicators_generation still
// has the value it had when the entries were looked up. The map and the generation change together under the mutex,
// so a thread that reads an unchanged generation has seen no change of the map that happened before its call: a
// communicator destroyed (and its handle perhaps reused by a new one) before the call reaches every cache as a new
// generation. A call racing the destruction of its own communicator is the job's error in NCCL too; even then an
// entry cannot dangle, since Communicator objects are kept until the process ends.
struct CommunicatorCache {
  static constexpr std::size_t kEntries = 4;
  std::uint64_t generation = 0;
  std::array<ncclComm_t, kEntries> comms{};
  std::array<Communicator*, kEntries> communicators{};
  std::size_t next = 0;  // the entry the next miss replaces
};

// What one thread keeps between its NCCL calls.
// RATIONALE: one thread_local object, because in a shared library each access to one costs a call (and a check
// that its destructor is registered): a traced call looks it up once and passes it on.
struct ThreadState {
  GroupState group;
  CommunicatorCache communicators;
};
thread_local ThreadState t_thread;

// This thread's ThreadState.
// RATIONALE: not inlined, so that a traced call keeps the address in a register: GCC recomputes the address of an
// inlined thread_local (a call into the dynamic linker, in a shared library) at every use.
[[gnu::noinline]] ThreadState& thread_state() noexcept { return t_thread; }

std::string hex64(std::uint64_t value) { return hash::format_digest(value); }

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

std::vector<std::string_view> views_of(const std::vector<std::string>& strings) {
  return {strings.begin(), strings.end()};
}

// Turns tracing off after a failure of the tracer's own (`what`, then `detail`, e.g. an exception's text), with one
// warning. A log already open ends with a truncation marker naming the failure (never the normal end marker), so
// that readers and `detnccl diff`/`check` know that records are missing.
// RATIONALE: shim_active() stays on, so that group brackets stay balanced; with no active writer every traced
// call returns at its first check. The message is built without allocating: this runs when memory ran out.
void stop_tracing_with_warning(std::string_view what, std::string_view detail = {}) noexcept {
  std::array<char, 400> why{};
  std::snprintf(why.data(), why.size(), "%.*s%s%.*s", static_cast<int>(what.size()), what.data(),
                detail.empty() ? "" : ": ", static_cast<int>(detail.size()), detail.data());
  records::RecordWriter* writer =
      g_process != nullptr ? g_process->active_writer.exchange(nullptr, std::memory_order_acq_rel) : nullptr;
  std::array<char, 512> message{};
  std::snprintf(message.data(), message.size(), "tracing is off for the rest of this process: %s (%sthe job goes on)",
                why.data(), writer != nullptr ? "the log is marked truncated; " : "");
  log_warning(message.data());
  if (writer != nullptr) writer->stop_early(why.data());
}

void drain_queue_at_exit(Process& process);

void close_log_at_exit() {
  Process* process = g_process;
  if (process == nullptr) return;
  // A fork()ed child that traced nothing of its own has nothing to close and nothing to say: the parent's log and
  // warnings are the parent's (and its threads, which may have held the tracer's locks, do not exist here).
  if (process->forked_child && !process->writer_attempted) return;
  if (process->config.trace >= config::TraceLevel::kHash && !process->config.steps.is_everything() &&
      !g_step_marked.load()) {
    log_warning(
        "DETNCCL_STEPS is set but the job never marked a step (detnccl_set_step, or the Python helper "
        "detnccl_step.py): every call was counted as step 0, so the step window selected nothing else");
  }
  drain_queue_at_exit(*process);
  const std::lock_guard<std::mutex> lock(process->mutex);
  if (process->writer) process->writer->close();
}

void communicators_changed(Process& process);

// fork(): the tracer's locks are taken before it and released on both sides after it, so that the child finds them
// free and what they guard consistent, whatever the parent's other threads were doing.
void lock_before_fork() {
  if (g_process == nullptr) return;
  g_process->mutex.lock();
  g_process->queue_mutex.lock();
}

void unlock_in_parent() {
  if (g_process == nullptr) return;
  g_process->queue_mutex.unlock();
  g_process->mutex.unlock();
}

// In a fork()ed child (it has only the thread that forked): the parent's log, communicators and collector thread are
// the parent's. The child forgets them without writing to the log, and starts over as a process of its own: tracing
// (and deterministic mode, which shim_active() keeps on) go on, and the child's first communicator opens a log of its
// own (named by the child's rank; if that file exists, the usual one warning says so and the child runs untraced).
// What a fork()ed child keeps of its parent's tracer, untouched and never freed: the writer (its mutex may have been
// held by a parent thread at fork time), the communicators, the queued and grouped records (their destructors are
// the parent's business). RATIONALE: kept reachable here so that leak checkers (ASan's at a child's exit) see them
// as the deliberate leftovers they are (volatile: the compiler must not drop stores that nothing reads).
struct ParentLeftovers {
  records::RecordWriter* volatile writer = nullptr;
  std::unordered_map<ncclComm_t, Communicator*>* volatile communicators = nullptr;
  std::deque<PendingCall>* volatile queue = nullptr;
  std::vector<PendingCall>* volatile group_pending = nullptr;
};
ParentLeftovers g_parent_leftovers;

void start_over_in_child() {
  Process* process = g_process;
  if (process == nullptr) return;
  records::RecordWriter* const writer = process->writer.release();
  g_parent_leftovers.writer = writer;
  if (writer != nullptr) writer->detach_after_fork();
  process->active_writer.store(nullptr, std::memory_order_release);
  process->writer_attempted = false;
  process->forked_child = true;
  process->first_id_known = false;
  process->global_rank = 0;
  try {
    g_parent_leftovers.communicators =
        new std::unordered_map<ncclComm_t, Communicator*>(std::move(process->communicators));
  } catch (...) {
  }
  process->communicators.clear();
  process->pending_communicators.clear();
  process->pending_count.store(0, std::memory_order_relaxed);
  process->premulsum.clear();
  communicators_changed(*process);
  process->next_ordinal.store(0, std::memory_order_relaxed);
  process->next_call.store(0, std::memory_order_relaxed);
  // RATIONALE: the parent's collector thread does not exist here (joining it would wait forever): its handle is
  // abandoned in place (placement new, no destructor runs). Its queued records are the parent's (leftovers).
  if (process->collector.joinable()) new (&process->collector) std::thread();
  if (!process->queue.empty()) {
    try {
      g_parent_leftovers.queue = new std::deque<PendingCall>(std::move(process->queue));
      process->queue.clear();
    } catch (...) {
      new (&process->queue) std::deque<PendingCall>();  // out of memory: abandoned without a trace
    }
  }
  process->stopping = false;
  GroupState& group = t_thread.group;
  if (!group.pending.empty()) {
    try {
      g_parent_leftovers.group_pending = new std::vector<PendingCall>(std::move(group.pending));
      group.pending.clear();
    } catch (...) {
      new (&group.pending) std::vector<PendingCall>();  // out of memory: abandoned without a trace
    }
  }
  process->queue_mutex.unlock();
  process->mutex.unlock();
}

void configure_once() {
  auto* process = new Process;  // never freed (see Process)
  const config::ParsedConfig parsed = config::config_from_environment();
  if (!parsed.ok()) {
    std::fprintf(stderr, "[detnccl] invalid configuration; the job stops here (exit status %d):\n%s\n",
                 kExitInvalidConfiguration, parsed.error_text().c_str());
    std::fflush(nullptr);
    std::_Exit(kExitInvalidConfiguration);
  }
  process->config = parsed.config();
  for (std::string_view entry : config::process_environment()) process->environment_copy.emplace_back(entry);
  configure_log(process->config);
  // Messages carry the rank from the start when the launcher names it (the log's own rank replaces it later),
  // so that deterministic-mode warnings of an untraced job say which rank they come from.
  if (const auto rank = config::global_rank_from_environment(views_of(process->environment_copy))) {
    set_log_rank(rank->rank);
  }
  if (process->config.print_config) {
    std::fprintf(stderr, "[detnccl] effective configuration (pid %d):\n%s", static_cast<int>(getpid()),
                 config::format_config(process->config).c_str());
  }
  configure_deterministic(process->config);
  g_process = process;
  std::atexit(close_log_at_exit);
  pthread_atfork(lock_before_fork, unlock_in_parent, start_over_in_child);
  g_shim_active.store(process->config.tracing() || process->config.deterministic_mode(), std::memory_order_release);
}

// The run directory's name: from the environment, else from the id of the first communicator this process created
// (equal on all ranks; a timestamp is not, since ranks start at different moments and the tracer adds no
// communication of its own).
std::string run_name(Process& process) {
  const auto environment = views_of(process.environment_copy);
  if (auto name = config::run_name_from_environment(process.config, environment)) return *name;
  if (process.first_id_known && process.first_id_is_shared) return "run-" + hex64(process.first_id);
  return config::run_name_from_time(static_cast<std::int64_t>(now_ns() / 1000000000ull));
}

// Creates the log at the first communicator recorded (ready: its size and rank are known). Caller holds
// process.mutex.
void create_writer(Process& process, const Communicator& first) {
  process.writer_attempted = true;
  if (process.forked_child) {
    // A fork()ed child may have been given its own rank in the environment (RANK=...) after the parent read it.
    process.environment_copy.clear();
    for (std::string_view entry : config::process_environment()) process.environment_copy.emplace_back(entry);
  }
  const auto environment = views_of(process.environment_copy);
  records::LogHeader header;
  header.start_time_ns = now_ns();
  header.pid = static_cast<std::uint32_t>(getpid());
  const auto world = config::world_size_from_environment(environment);
  if (auto rank = config::global_rank_from_environment(environment)) {
    header.rank = rank->rank;
    header.rank_source = records::RankSource::kEnvironment;
  } else if (!world || *world == first.nranks) {
    header.rank = first.rank;
    header.rank_source = records::RankSource::kCommunicator;
  } else {
    header.rank = header.pid;
    header.rank_source = records::RankSource::kProcessId;
  }
  header.world_size = world ? *world : first.nranks;
  // Without a launcher's world size the start-up check could not tell whether DETNCCL_RANKS selects a rank of this
  // job; the first communicator's size is only a guess at it, so this is a warning.
  if (!world && process.config.trace >= config::TraceLevel::kHash) {
    if (auto problem = config::rank_window_problem(process.config, header.world_size)) {
      log_warning("no launcher variable gives the world size; if it is the first communicator's: " + *problem);
    }
  }
  int nccl_version = 0;
  if (DETNCCL_REAL(ncclGetVersion)(&nccl_version) == ncclSuccess) header.nccl_version = nccl_version;
  header.fingerprint_version = hash::kFingerprintVersion;
  header.detnccl_version = kDetncclVersion;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  header.host = host;
  header.detnccl_version_text = kDetncclVersionText;
  header.run = run_name(process);
  header.config_text = config::format_config(process.config);
  header.nccl_environment = config::nccl_variables(environment);

  process.global_rank = header.rank;
  set_log_rank(header.rank);
  records::WriterOptions options;
  // The writer's message already says that tracing stopped and that the log is marked truncated.
  options.on_stop = [](std::string_view message) { log_warning(message); };
  records::CreatedWriter created = records::RecordWriter::create(
      {process.config.dir, header.run, records::rank_log_file_name(header.rank)}, header, std::move(options));
  if (!created.writer) {
    stop_tracing_with_warning(created.error);
    return;
  }
  log_info("tracing to " + created.writer->path());
  process.writer = std::move(created.writer);
  process.active_writer.store(process.writer.get(), std::memory_order_release);
}

Communicator* find_communicator(Process& process, ncclComm_t comm) {
  const std::lock_guard<std::mutex> lock(process.mutex);
  const auto found = process.communicators.find(comm);
  return found == process.communicators.end() ? nullptr : found->second;
}

// Caller holds process.mutex and has just changed process.communicators.
void communicators_changed(Process& process) {
  process.communicators_generation.fetch_add(1, std::memory_order_release);
}

// The communicator a traced call names, from this thread's cache when it can (see CommunicatorCache), or nullptr
// for one we did not see created.
Communicator* find_communicator_for_call(Process& process, CommunicatorCache& cache, ncclComm_t comm) {
  if (cache.generation == process.communicators_generation.load(std::memory_order_acquire)) {
    for (std::size_t i = 0; i < CommunicatorCache::kEntries; ++i) {
      if (cache.comms[i] == comm && cache.communicators[i] != nullptr) return cache.communicators[i];
    }
  }
  const std::lock_guard<std::mutex> lock(process.mutex);
  const std::uint64_t generation = process.communicators_generation.load(std::memory_order_relaxed);
  if (cache.generation != generation) {
    cache = CommunicatorCache{};
    cache.generation = generation;
  }
  const auto found = process.communicators.find(comm);
  if (found == process.communicators.end()) return nullptr;
  const std::size_t entry = cache.next;
  cache.next = (entry + 1) % CommunicatorCache::kEntries;
  cache.comms[entry] = comm;
  cache.communicators[entry] = found->second;
  return found->second;
}

bool fingerprint_into(const void* data, std::uint64_t bytes, std::uint64_t blocks, bool segments,
                      std::uint64_t segment_bytes, Digests& out) noexcept {
  try {
    out.whole = hash::fingerprint(data, bytes);
    if (blocks > 0) {
      const std::uint64_t block_bytes = bytes / blocks;
      out.blocks.resize(blocks);
      for (std::uint64_t b = 0; b < blocks; ++b) {
        out.blocks[b] = hash::fingerprint(static_cast<const std::byte*>(data) + b * block_bytes, block_bytes);
      }
    }
    if (segments) out.segments = hash::segment_digests(data, bytes, segment_bytes);
    return true;
  } catch (const std::exception& error) {
    log_warning_once(g_process->warned_hash_failure, std::string("cannot fingerprint a buffer (") + error.what() +
                                                         "); such calls are recorded without");
    return false;
  }
}

// Starts the digests of one side of a call: on the CPU now for host memory, by kernels on the call's stream for
// device memory (the result comes later through the ticket), or not at all (one warning) when neither is possible.
void start_digests(const void* data, std::uint64_t bytes, std::uint64_t blocks, cudaStream_t stream,
                   DigestSource& out) noexcept {
  const config::Config& config = g_process->config;
  const bool segments = config.trace >= config::TraceLevel::kSegments;
  if (data == nullptr && bytes > 0) return;
  int driver_status = 0;
  const BufferLocation location = bytes == 0 ? BufferLocation::kHost : locate_buffer(data, &driver_status);
  if (location == BufferLocation::kHost) {
    out.known = fingerprint_into(data, bytes, blocks, segments, config.segment_bytes, out.digests);
    return;
  }
  if (location == BufferLocation::kUnknown) {
    // RATIONALE: neither reading it here (device memory: a crash) nor in a kernel (pageable host memory: a fault
    // that ends the job's CUDA context) is safe.
    log_warning_once(g_process->warned_location_unknown,
                     "the CUDA driver cannot say whether a buffer is device or host memory (cuPointerGetAttribute "
                     "returned " +
                         std::to_string(driver_status) + "): such buffers are recorded without fingerprints");
    return;
  }
  if (!device_fingerprints_available()) {
    log_warning_once(g_process->warned_device_unavailable,
                     std::string("device buffers are recorded without fingerprints: ") +
                         std::string(device_fingerprints_unavailable_reason()));
    return;
  }
  out.ticket = enqueue_device_digests({data, bytes, blocks, segments ? config.segment_bytes : 0}, stream);
}

// Collects finished device digests into the call's fields. False while a ticket is still pending.
bool settle(PendingCall& call) noexcept {
  for (DigestSource* side : {&call.input, &call.output}) {
    if (!side->ticket) continue;
    switch (side->ticket->poll()) {
      case DeviceDigestTicket::kPending:
        return false;
      case DeviceDigestTicket::kReady:
        side->digests = side->ticket->result();
        side->known = true;
        break;
      case DeviceDigestTicket::kCaptured:
        call.fields.flags |= records::kCallCaptured;
        break;
      case DeviceDigestTicket::kFailed:
        log_warning_once(g_process->warned_device_failure, "a device fingerprint failed (" +
                                                               std::string(side->ticket->failure()) +
                                                               "); such calls are recorded without fingerprints");
        break;
    }
    side->ticket.reset();
  }
  if (call.input.known) {
    call.fields.input_fingerprint = call.input.digests.whole;
    call.fields.flags |= records::kCallInputFingerprint;
  }
  if (call.output.known) {
    call.fields.output_fingerprint = call.output.digests.whole;
    call.fields.flags |= records::kCallOutputFingerprint;
  }
  return true;
}

void write_record(const PendingCall& call) noexcept {
  records::RecordWriter* writer = g_process->active_writer.load(std::memory_order_acquire);
  if (writer == nullptr) return;
  records::CallRecord record;
  static_cast<records::CallFields&>(record) = call.fields;
  record.input_blocks = call.input.digests.blocks;
  record.output_blocks = call.output.digests.blocks;
  record.input_segments = call.input.digests.segments;
  record.output_segments = call.output.digests.segments;
  writer->append(record);
}

// The collector: writes queued records in order, each once its device fingerprints are in. Polls (no host
// synchronisation with the job's streams), backing off while the head record's kernels are still running.
void collect_queued_records() {
  Process& process = *g_process;
  auto pause = std::chrono::microseconds(50);
  std::unique_lock<std::mutex> lock(process.queue_mutex);
  for (;;) {
    process.queue_changed.wait(lock, [&] { return process.stopping || !process.queue.empty(); });
    if (process.queue.empty()) return;  // stopping, and everything is written
    PendingCall& head = process.queue.front();
    lock.unlock();
    const bool ready = settle(head);
    if (ready) write_record(head);
    lock.lock();
    if (ready) {
      process.queue.pop_front();
      pause = std::chrono::microseconds(50);
    } else {
      process.queue_changed.wait_for(lock, pause);
      pause = std::min(pause * 2, std::chrono::microseconds(2000));
    }
  }
}

// Hands a completed call to the log: directly when nothing is queued and it needs no wait, else through the queue
// (so that one thread's records keep their order).
void submit(PendingCall&& call) noexcept {
  Process& process = *g_process;
  try {
    const bool waits = call.input.ticket || call.output.ticket;
    std::unique_lock<std::mutex> lock(process.queue_mutex);
    if (!waits && process.queue.empty()) {
      lock.unlock();
      settle(call);
      write_record(call);
      return;
    }
    process.queue.push_back(std::move(call));
    if (!process.collector.joinable()) process.collector = std::thread(collect_queued_records);
    process.queue_changed.notify_one();
  } catch (const std::exception& error) {
    stop_tracing_with_warning("cannot queue a record", error.what());
  }
}

// Outputs are fingerprinted once the call (or its group) has run. A non-blocking communicator's call may return
// ncclInProgress before NCCL has enqueued its work: its outputs are fingerprinted once it has (the kernels then come
// after the operation on the stream), and the record keeps the state the call settled in.
void complete(PendingCall&& call) noexcept {
  if (call.hash_output && call.fields.result == ncclInProgress) call.fields.result = wait_until_enqueued(call.comm);
  if (call.hash_output && call.fields.result == ncclSuccess) {
    start_digests(call.output_data, call.output_bytes, call.output_blocks, call.stream, call.output);
  }
  submit(std::move(call));
}

// At exit: lets the collector write what is queued (device work still running gets up to 10 s), then stops it.
void drain_queue_at_exit(Process& process) {
  {
    const std::lock_guard<std::mutex> lock(process.queue_mutex);
    process.stopping = true;
    process.queue_changed.notify_all();
  }
  if (!process.collector.joinable()) return;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    {
      const std::lock_guard<std::mutex> lock(process.queue_mutex);
      if (process.queue.empty()) break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      // The log then ends with a truncation marker naming this (close() writes no end marker after it).
      stop_tracing_with_warning(
          "device fingerprints of the last calls did not complete within 10 s of exit; "
          "their records are lost");
      process.collector.detach();
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  process.collector.join();
}

// Records a communicator NCCL has created: numbers it, makes its calls traceable, creates the log at the first one
// and appends its record. Caller holds process.mutex.
void record_communicator(Process& process, ncclComm_t comm, std::unique_ptr<Communicator> created,
                         records::CommunicatorRecord record) {
  created->ordinal = process.next_ordinal.fetch_add(1);
  record.ordinal = created->ordinal;
  record.nranks = created->nranks;
  record.rank = created->rank;
  Communicator& communicator = *created;
  process.every_communicator.push_back(std::move(created));
  process.communicators[comm] = &communicator;
  communicators_changed(process);
  if (!process.writer_attempted) create_writer(process, communicator);
  if (process.writer) process.writer->append(record);
}

// The pending communicator `comm`, or end(). Caller holds process.mutex.
std::vector<PendingCommunicator>::iterator find_pending(Process& process, ncclComm_t comm) {
  if (comm == nullptr) return process.pending_communicators.end();  // not the children whose handle is still unknown
  return std::find_if(process.pending_communicators.begin(), process.pending_communicators.end(),
                      [comm](const PendingCommunicator& pending) { return pending.comm == comm; });
}

// Caller holds process.mutex.
void erase_pending(Process& process, std::vector<PendingCommunicator>::iterator at) {
  process.pending_communicators.erase(at);
  process.pending_count.store(process.pending_communicators.size(), std::memory_order_relaxed);
}

// Records the pending communicator `comm` if NCCL has finished creating it: asks ncclCommGetAsyncError (which
// neither warns nor changes ncclGetLastError), and only when it says ncclSuccess asks for the size, rank and device.
// A communicator whose creation failed is forgotten (NCCL told the job; there is nothing to record). Asked only from
// the thread that created it, or when `calling_on_it` (the job is making a call on it, so asking is the job's own
// use: no other thread may be destroying it). Returns whether `comm` is recorded now.
bool resolve_communicator(Process& process, ncclComm_t comm, bool calling_on_it) {
  {
    const std::lock_guard<std::mutex> lock(process.mutex);
    const auto pending = find_pending(process, comm);
    if (pending == process.pending_communicators.end() || pending->open_group != 0 || pending->resolving) return false;
    if (!calling_on_it && pthread_equal(pending->creator, pthread_self()) == 0) return false;
    pending->resolving = true;
  }
  // RATIONALE: NCCL is asked outside the lock, as every real call is (ncclCommGetAsyncError may join NCCL's thread).
  ncclResult_t state = ncclInProgress;
  const bool asked = DETNCCL_REAL(ncclCommGetAsyncError)(comm, &state) == ncclSuccess;
  const bool ready = asked && state == ncclSuccess;
  int count = 0, rank = 0, device = -1;
  if (ready) {
    if (DETNCCL_REAL(ncclCommCount)(comm, &count) != ncclSuccess) count = 0;
    if (DETNCCL_REAL(ncclCommUserRank)(comm, &rank) != ncclSuccess) rank = 0;
    if (DETNCCL_REAL(ncclCommCuDevice)(comm, &device) != ncclSuccess) device = -1;
  }
  const std::lock_guard<std::mutex> lock(process.mutex);
  const auto pending = find_pending(process, comm);
  if (pending == process.pending_communicators.end()) return false;  // destroyed meanwhile
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
  erase_pending(process, pending);
  created->nranks = static_cast<std::uint32_t>(count);
  created->rank = static_cast<std::uint32_t>(rank);
  record.device = device;
  record_communicator(process, comm, std::move(created), record);
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
    const bool known = find_pending(process, comm) != process.pending_communicators.end() ||
                       process.communicators.find(comm) != process.communicators.end();
    for (auto at = process.pending_communicators.begin(); at != process.pending_communicators.end();) {
      if (at->late_handle == nullptr || at->open_group != 0 || pthread_equal(at->creator, pthread_self()) == 0) {
        ++at;
      } else if (at->parent == comm && comm_settled) {
        if (adopt_late_handle(*at)) {
          ++at;
        } else {
          at = process.pending_communicators.erase(at);  // the split is over without a child: nothing to record
        }
      } else {
        // RATIONALE: not a moment at which the job's variable must still exist: read without trusting it.
        if (!known && read_if_mapped(at->late_handle) == comm) take_handle(*at, comm);
        ++at;
      }
    }
    process.pending_count.store(process.pending_communicators.size(), std::memory_order_relaxed);
  }
}

// Records the communicators this thread created that NCCL has finished creating since, oldest first (so that their
// records come before those of communicators created after them, whenever NCCL lets us know in time).
void resolve_pending_of_this_thread(Process& process) {
  if (process.pending_count.load(std::memory_order_relaxed) == 0) return;
  std::vector<ncclComm_t> mine;
  {
    const std::lock_guard<std::mutex> lock(process.mutex);
    for (const PendingCommunicator& pending : process.pending_communicators) {
      if (pending.comm != nullptr && pending.open_group == 0 && pthread_equal(pending.creator, pthread_self()) != 0) {
        mine.push_back(pending.comm);
      }
    }
  }
  for (ncclComm_t comm : mine) resolve_communicator(process, comm, false);
}

// A call on a communicator that is not recorded: one still pending is recorded now if NCCL has finished creating it
// (the job must wait for that before its first call), and so is the child of a split whose handle NCCL stored late
// (the job may not have polled for it: a blocking child of a non-blocking parent). Returns the communicator, or
// nullptr when the call cannot be traced (warned once when the communicator is still being created).
Communicator* find_pending_for_call(Process& process, CommunicatorCache& cache, ncclComm_t comm) {
  if (resolve_communicator(process, comm, true)) return find_communicator_for_call(process, cache, comm);
  adopt_late_children(process, comm, false);
  if (resolve_communicator(process, comm, true)) return find_communicator_for_call(process, cache, comm);
  bool still_pending = false, late_children = false;
  {
    const std::lock_guard<std::mutex> lock(process.mutex);
    still_pending = find_pending(process, comm) != process.pending_communicators.end();
    late_children = std::any_of(process.pending_communicators.begin(), process.pending_communicators.end(),
                                [](const PendingCommunicator& pending) { return pending.late_handle != nullptr; });
  }
  if (still_pending) {
    log_warning_once(process.warned_call_on_pending,
                     "a call on a communicator NCCL has not finished creating (a non-blocking init still in progress, "
                     "or a call inside the group that creates it) is not traced; further such calls are not reported");
  } else if (late_children) {
    log_warning_once(process.warned_call_on_unseen,
                     "a call on a communicator the shim has not seen is not traced: perhaps the child of a split whose "
                     "handle NCCL stores late (inside a group, or on a non-blocking parent), used by another thread "
                     "than the one that split, or before the splitting thread polled the parent with "
                     "ncclCommGetAsyncError; further such calls are not reported");
  }
  return nullptr;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------

void ensure_configured() noexcept { std::call_once(g_configured, configure_once); }

void on_communicator_created(ncclComm_t comm, const CommunicatorOrigin& origin) noexcept {
  Process* process = g_process;
  if (process == nullptr || !process->config.tracing()) return;
  try {
    // Communicators this thread created earlier come first, if NCCL has finished them.
    resolve_pending_of_this_thread(*process);
    Communicator* parent = nullptr;
    bool parent_recorded = false;
    std::uint64_t derivation = 0;
    if (origin.parent != nullptr) {
      parent = find_communicator(*process, origin.parent);
      if (parent == nullptr && process->pending_count.load(std::memory_order_relaxed) > 0) {
        // The job just called the split on its parent: asking NCCL about the parent is the job's own use.
        resolve_communicator(*process, origin.parent, true);
        parent = find_communicator(*process, origin.parent);
      }
      parent_recorded = parent != nullptr;
      const std::lock_guard<std::mutex> lock(process->mutex);
      if (parent == nullptr) {
        // Still being created (its record, and so its ordinal, come later): its id and derivations are known.
        const auto pending = find_pending(*process, origin.parent);
        if (pending != process->pending_communicators.end()) parent = pending->communicator.get();
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
    const GroupState& group = t_thread.group;
    pending.open_group = group.depth > 0 ? group.group_id : 0;
    {
      const std::lock_guard<std::mutex> lock(process->mutex);
      if (!process->first_id_known) {
        process->first_id_known = true;
        process->first_id = pending.record.id;
        process->first_id_is_shared = id_is_shared;
      }
      process->pending_communicators.push_back(std::move(pending));
      process->pending_count.store(process->pending_communicators.size(), std::memory_order_relaxed);
    }
    // A blocking creation outside a group has finished: recorded now. One that returned ncclInProgress is recorded
    // once NCCL says it is ready (at the first call on it, or at this thread's next creation or group end); a child
    // whose handle NCCL stores late, once the handle is there (close_group_of_pending, on_async_error_polled).
    if (!origin.in_progress && comm != nullptr) resolve_communicator(*process, comm, false);
  } catch (const std::exception& error) {
    stop_tracing_with_warning("cannot record a communicator", error.what());
  }
}

void on_communicator_destroyed(ncclComm_t comm) noexcept {
  Process* process = g_process;
  if (process == nullptr) return;
  const std::lock_guard<std::mutex> lock(process->mutex);
  process->communicators.erase(comm);
  if (const auto pending = find_pending(*process, comm); pending != process->pending_communicators.end()) {
    erase_pending(*process, pending);
  }
  // Children of `comm` whose handle was never read: the job's variable cannot be trusted any more.
  std::erase_if(process->pending_communicators, [comm](const PendingCommunicator& pending) {
    return comm != nullptr && pending.late_handle != nullptr && pending.parent == comm;
  });
  process->pending_count.store(process->pending_communicators.size(), std::memory_order_relaxed);
  communicators_changed(*process);
  process->premulsum.erase(process->premulsum.lower_bound({comm, INT32_MIN}),
                           process->premulsum.upper_bound({comm, INT32_MAX}));
}

void on_group_start() noexcept {
  GroupState& group = t_thread.group;
  if (group.depth++ == 0) group.group_id = g_process != nullptr ? g_process->next_group.fetch_add(1) : 0;
}

namespace {

// At the outermost ncclGroupEnd of this thread: NCCL has created the communicators made inside the group (or failed
// to, and said so), and stored the handles of the splits' children; those that are ready are recorded now, before the
// records of the group's calls. A non-blocking group (ncclInProgress) leaves them pending until NCCL says they are
// ready (a split's child: until this thread polls the parent's async error, see on_async_error_polled).
void close_group_of_pending(Process& process, std::uint64_t group_id, ncclResult_t group_result) noexcept {
  try {
    {
      const std::lock_guard<std::mutex> lock(process.mutex);
      for (auto at = process.pending_communicators.begin(); at != process.pending_communicators.end();) {
        if (at->open_group != group_id) {
          ++at;
        } else if (at->late_handle != nullptr && !adopt_late_handle(*at) && group_result != ncclInProgress) {
          at = process.pending_communicators.erase(at);  // a blocking group that stored no child: nothing to record
        } else if (group_result == ncclSuccess || group_result == ncclInProgress) {
          at->open_group = 0;
          ++at;
        } else {
          at = process.pending_communicators.erase(at);  // the group failed: NCCL created nothing to record
        }
      }
      process.pending_count.store(process.pending_communicators.size(), std::memory_order_relaxed);
    }
    resolve_pending_of_this_thread(process);
  } catch (const std::exception& error) {
    stop_tracing_with_warning("cannot record a communicator", error.what());
  }
}

}  // namespace

void on_group_end(ncclResult_t group_result) noexcept {
  GroupState& group = t_thread.group;
  if (group.depth == 0) return;  // unbalanced ncclGroupEnd: NCCL reports it; nothing of ours is pending
  if (--group.depth > 0) return;
  if (g_process != nullptr && g_process->pending_count.load(std::memory_order_relaxed) > 0) {
    close_group_of_pending(*g_process, group.group_id, group_result);
  }
  std::vector<PendingCall> pending;
  pending.swap(group.pending);
  group.group_id = 0;
  for (PendingCall& call : pending) {
    if (call.fields.result == ncclSuccess) call.fields.result = group_result;
    complete(std::move(call));
  }
  // RATIONALE: the emptied vector goes back to the thread, so that its next groups reuse the memory instead of
  // allocating it again (it keeps room for the largest group the thread has made).
  pending.clear();
  if (group.pending.empty()) group.pending.swap(pending);
}

void on_async_error_polled(ncclComm_t comm, ncclResult_t state, const void* caller) noexcept {
  Process* process = g_process;
  if (process == nullptr || state == ncclInProgress || comm == nullptr ||
      process->pending_count.load(std::memory_order_relaxed) == 0 || inside_real_nccl(caller)) {
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
  Process* process = g_process;
  if (process == nullptr || scalar == nullptr) return;
  try {
    PreMulSumScalar value;
    value.width = arith::dtype_size(datatype);
    if (residence == ncclScalarHostImmediate && value.width > 0) {
      std::memcpy(&value.bits, scalar, value.width);
    } else {
      value.pointer = scalar;
    }
    const std::lock_guard<std::mutex> lock(process->mutex);
    process->premulsum[{comm, static_cast<std::int32_t>(op)}] = value;
  } catch (...) {
  }
}

namespace {

// A traced call before it runs: numbered, its inputs fingerprinted (before NCCL can change them). nullopt when the
// call is not traced.
std::optional<PendingCall> begin_call(const CallShape& shape, ThreadState& thread) noexcept {
  std::optional<PendingCall> traced;
  Process* process = g_process;
  if (process == nullptr) return traced;
  try {
    const records::RecordWriter* writer = process->active_writer.load(std::memory_order_acquire);
    Communicator* communicator =
        writer != nullptr ? find_communicator_for_call(*process, thread.communicators, shape.comm) : nullptr;
    // A communicator NCCL had not finished creating is recorded at its first call (which may create the log).
    if (communicator == nullptr && process->pending_count.load(std::memory_order_relaxed) > 0) {
      communicator = find_pending_for_call(*process, thread.communicators, shape.comm);
      writer = process->active_writer.load(std::memory_order_acquire);
    }
    if (communicator == nullptr || writer == nullptr) {
      return traced;  // tracing is off, or not a communicator we saw created: NCCL will reject or run it; no record
    }
    PendingCall& call = traced.emplace();
    records::CallFields& fields = call.fields;
    fields.seq = process->next_call.fetch_add(1);
    fields.comm_ordinal = communicator->ordinal;
    fields.comm_seq = communicator->calls.fetch_add(1);
    fields.count = shape.count;
    fields.step = g_step.load(std::memory_order_relaxed);
    fields.group_id = thread.group.depth > 0 ? thread.group.group_id : 0;
    fields.op = shape.op;
    fields.datatype = static_cast<std::uint16_t>(shape.datatype);
    fields.redop = shape.redop;
    fields.peer = shape.peer;

    if (shape.redop >= ncclNumOps) {
      const std::lock_guard<std::mutex> lock(process->mutex);
      const auto found = process->premulsum.find({shape.comm, shape.redop});
      if (found != process->premulsum.end()) {
        std::uint64_t bits = found->second.bits;
        if (found->second.pointer != nullptr && locate_buffer(found->second.pointer) == BufferLocation::kHost) {
          std::memcpy(&bits, found->second.pointer, found->second.width);
        }
        fields.premulsum_scalar = bits;
        fields.flags |= records::kCallPreMulSumScalar;
      }
    }

    const std::uint64_t nranks = communicator->nranks;
    const std::uint64_t element = arith::dtype_size(shape.datatype);  // 0 for an invalid datatype
    const auto bytes_of = [&](const BufferShape& side) -> std::uint64_t {
      const std::uint64_t blocks = side.blocks_of_count == kPerRank ? nranks : side.blocks_of_count;
      if (element == 0 || (shape.count != 0 && blocks > ~std::uint64_t{0} / element / shape.count)) return 0;
      return shape.count * element * blocks;
    };
    const bool is_root = !shape.root_is_peer || static_cast<std::int64_t>(communicator->rank) == shape.peer;
    const bool input_here = shape.has_input && (shape.input.presence == Presence::kAll || is_root);
    const bool output_here = shape.has_output && (shape.output.presence == Presence::kAll || is_root);
    const std::uint64_t input_bytes = input_here ? bytes_of(shape.input) : 0;
    const std::uint64_t output_bytes = output_here ? bytes_of(shape.output) : 0;

    // In place, as NCCL defines it per operation.
    const auto* in = static_cast<const std::byte*>(shape.input.data);
    const auto* out = static_cast<const std::byte*>(shape.output.data);
    const std::uint64_t rank_offset = communicator->rank * shape.count * element;
    bool in_place = shape.has_input && shape.has_output && in != nullptr && in == out;
    if (shape.op == records::OpId::kAllGather) in_place = in != nullptr && out != nullptr && in == out + rank_offset;
    if (shape.op == records::OpId::kReduceScatter) {
      in_place = in != nullptr && out != nullptr && out == in + rank_offset;
    }
    if (shape.op == records::OpId::kBcast) in_place = true;
    if (in_place) fields.flags |= records::kCallInPlace;

    const std::optional<config::TracedOp> traced_op = traced_op_of(shape.op);
    const bool selected = traced_op && process->config.fingerprints(fields.step, process->global_rank, *traced_op,
                                                                    std::max(input_bytes, output_bytes));
    call.comm = shape.comm;
    call.stream = shape.stream;
    if (selected && input_here) {
      start_digests(shape.input.data, input_bytes, shape.input.per_peer_blocks ? nranks : 0, shape.stream, call.input);
    }
    if (selected && output_here) {
      call.hash_output = true;
      call.output_data = shape.output.data;
      call.output_bytes = output_bytes;
      call.output_blocks = shape.output.per_peer_blocks ? nranks : 0;
    }
  } catch (const std::exception& error) {
    traced.reset();
    stop_tracing_with_warning("cannot trace a call", error.what());
  }
  return traced;
}

// A traced call after it ran: its outputs are fingerprinted and its record written now, or at the outermost
// ncclGroupEnd.
void finish_call(PendingCall&& call, ncclResult_t result, GroupState& group) noexcept {
  call.fields.result = result;
  if (group.depth > 0) {
    try {
      group.pending.push_back(std::move(call));
    } catch (...) {
      stop_tracing_with_warning("out of memory while tracing a group");
    }
    return;
  }
  complete(std::move(call));
}

}  // namespace

ncclResult_t intercept(const CallShape& shape, RealCall real_call) noexcept {
  ThreadState& thread = thread_state();
  std::optional<PendingCall> traced = begin_call(shape, thread);
  std::uint16_t algorithm = 0;
  ncclResult_t result;
  if (const std::optional<ncclResult_t> substituted = run_deterministic(shape, thread.group.depth > 0, &algorithm)) {
    result = *substituted;
    if (traced) {
      traced->fields.flags |= records::kCallDeterministic;
      traced->fields.algorithm = algorithm;
    }
  } else {
    result = real_call();
  }
  if (traced) finish_call(std::move(*traced), result, thread.group);
  return result;
}

int group_depth() noexcept { return t_thread.group.depth; }

void set_step(std::uint64_t step) noexcept {
  g_step.store(step, std::memory_order_relaxed);
  g_step_marked.store(true, std::memory_order_relaxed);
}

void flush_log() noexcept {
  if (g_process == nullptr) return;
  if (records::RecordWriter* writer = g_process->active_writer.load(std::memory_order_acquire)) writer->flush();
}

}  // namespace detnccl::interpose
