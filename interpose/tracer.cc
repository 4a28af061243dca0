// detnccl shim: call tracing (see tracer.h) — the traced call path (intercept, begin_call), this thread's group
// brackets and the step. The rest of the tracer: tracer_process.h (lifetime, fork), trace_log.h (the log),
// communicator_registry.h (communicators), digest_pipeline.h (fingerprints and the record queue).
#include "interpose/tracer.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "abi/nccl_datatypes.h"
#include "abi/traced_ops.h"
#include "interpose/deterministic.h"
#include "interpose/shim_log.h"
#include "interpose/traced_op.h"
#include "interpose/tracer_process.h"

namespace detnccl::interpose {
namespace {

// The step lives outside Process: a job may mark its first step before its first NCCL call.
std::atomic<std::uint64_t> g_step{0};
std::atomic<bool> g_step_marked{false};
// The step the PyTorch hook reports (detnccl_set_optimizer_step): below a job's own marks.
std::atomic<std::uint64_t> g_optimizer_step{0};
std::atomic<bool> g_optimizer_marked{false};
std::atomic<bool> g_optimizer_past_zero{false};  // it reported a step above 0 (for the exit's step-window warning)

struct GroupState {
  int depth = 0;
  std::uint64_t group_id = 0;
  std::vector<PendingCall> pending;
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

// The step of a call, and where it came from, by precedence: the job's own marks (detnccl_set_step), then
// DETNCCL_STEP_BOUNDARY, then the PyTorch hook's optimizer steps, then the call pattern (steps/step_inference.h).
// The boundary and the pattern see every traced call in the order the calls begin.
void stamp_step(Process& process, const Communicator& communicator, records::CallFields& fields) {
  // RATIONALE: the mark is read first (acquire, set_step publishes it with release): a call that sees it marked sees
  // the step that came with it. A plain load on x86.
  if (g_step_marked.load(std::memory_order_acquire)) {
    fields.step_source = records::StepSource::kMarked;
    fields.step = g_step.load(std::memory_order_relaxed);
  } else {
    const config::Config& config = process.config;
    const bool numbering = config.step_inference != config::StepInferenceMode::kOff;
    const bool by_optimizer = config.step_inference == config::StepInferenceMode::kAuto &&
                              !config.step_boundary.enabled() && g_optimizer_marked.load(std::memory_order_acquire);
    if (by_optimizer) {
      fields.step_source = records::StepSource::kOptimizer;
      fields.step = g_optimizer_step.load(std::memory_order_relaxed);
    } else if (numbering) {
      std::lock_guard lock(process.step_mutex);
      steps::StepInference& inference = process.step_inference;
      const steps::InferencePhase before = inference.phase();
      fields.step_source = records::StepSource::kInferred;
      fields.step = inference.next(fields, communicator.rank, communicator.nranks);
      if (before == steps::InferencePhase::kLearning && inference.phase() == steps::InferencePhase::kTracking) {
        log_info("steps: the job marks none; its iterations are " + std::to_string(inference.template_length()) +
                 " calls long after " + std::to_string(inference.setup_calls()) +
                 " set-up calls (DETNCCL_STEP_BOUNDARY names the iteration's call explicitly)");
      } else if (before == steps::InferencePhase::kLearning && inference.phase() == steps::InferencePhase::kGaveUp) {
        log_warning("steps: the job marks none and its first " + std::to_string(inference.calls()) +
                    " calls repeat no pattern: later calls stay at step " + std::to_string(fields.step) +
                    "; set DETNCCL_STEP_BOUNDARY to the call that starts an iteration, or mark steps "
                    "(detnccl_set_step)");
      }
    } else {
      fields.step_source = records::StepSource::kNone;
      fields.step = 0;
    }
  }
}

// A traced call before it runs: numbered, its inputs fingerprinted (before NCCL can change them). nullopt when the
// call is not traced.
std::optional<PendingCall> begin_call(const CallShape& shape, ThreadState& thread) noexcept {
  std::optional<PendingCall> traced;
  Process* process = g_process;
  if (process == nullptr) return traced;
  try {
    const records::RecordWriter* writer = process->log.active_writer.load(std::memory_order_acquire);
    Communicator* communicator =
        writer != nullptr ? find_communicator_for_call(process->registry, *process, thread.communicators, shape.comm)
                          : nullptr;
    // A communicator NCCL had not finished creating is recorded at its first call (which may create the log).
    if (communicator == nullptr && process->registry.pending_count.load(std::memory_order_relaxed) > 0) {
      communicator = find_pending_for_call(*process, thread.communicators, shape.comm);
      writer = process->log.active_writer.load(std::memory_order_acquire);
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
    fields.group_id = thread.group.depth > 0 ? thread.group.group_id : 0;
    fields.op = shape.op;
    fields.datatype = static_cast<std::uint16_t>(shape.datatype);
    fields.redop = shape.redop;
    fields.peer = shape.peer;
    stamp_step(*process, *communicator, fields);

    std::uint64_t scalar = 0;
    if (shape.redop >= ncclNumOps && premulsum_scalar(*process, shape.comm, shape.redop, &scalar)) {
      fields.premulsum_scalar = scalar;
      fields.flags |= records::kCallPreMulSumScalar;
    }

    const std::uint64_t nranks = communicator->nranks;
    const std::uint64_t element = abi::datatype_size(shape.datatype);  // 0 for an invalid datatype
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

    // In place, as NCCL defines it per operation (abi/traced_ops.h).
    if (shape.row != nullptr &&
        abi::is_in_place(*shape.row, shape.input.data, shape.output.data, shape.count, element, communicator->rank)) {
      fields.flags |= records::kCallInPlace;
    }

    const std::optional<config::TracedOp> traced_op = traced_op_of(shape.op);
    const bool selected = traced_op && process->config.fingerprints(fields.step, process->log.global_rank, *traced_op,
                                                                    std::max(input_bytes, output_bytes));
    call.comm = shape.comm;
    call.stream = shape.stream;
    call.device = communicator->device;
    if (selected && input_here) {
      start_digests(shape.input.data, input_bytes, shape.input.per_peer_blocks ? nranks : 0, shape.stream, call.device,
                    call.input);
      // DETNCCL_CAPTURE: the input is copied when it is fingerprinted, before NCCL can change it.
      start_capture(shape.input.data, input_bytes, shape.stream, call.device, call.input, call.input_copy);
    }
    if (selected && output_here) {
      call.hash_output = true;
      call.capture_output = true;
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

// What a fork()ed child keeps of the forking thread's open group: its records, untouched and never freed (see
// tracer_process.cc). Volatile: the compiler must not drop the store.
std::vector<PendingCall>* volatile g_parent_group_pending = nullptr;

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
  g_step_marked.store(true, std::memory_order_release);
}

void set_optimizer_step(std::uint64_t step) noexcept {
  g_optimizer_step.store(step, std::memory_order_relaxed);
  g_optimizer_marked.store(true, std::memory_order_release);
  if (step != 0) g_optimizer_past_zero.store(true, std::memory_order_relaxed);
}

std::string step_window_warning(Process& process) {
  const config::Config& config = process.config;
  // RATIONALE: a job that marks its steps chose them (all of them 0, perhaps): nothing to say.
  if (config.trace < config::TraceLevel::kSteps || config.steps.is_everything() || g_step_marked.load()) return {};
  const bool by_optimizer =
      config.step_inference == config::StepInferenceMode::kAuto && !config.step_boundary.enabled();
  if (by_optimizer && g_optimizer_past_zero.load()) return {};
  {
    std::lock_guard lock(process.step_mutex);
    if (process.step_inference.step() != 0) return {};
  }
  std::string why;
  if (config.step_inference == config::StepInferenceMode::kOff) {
    why = "the job marked none (detnccl_set_step, the Python helper) and DETNCCL_STEP_INFERENCE=off";
  } else if (config.step_boundary.enabled()) {
    why = "DETNCCL_STEP_BOUNDARY=" + steps::format_step_boundary(config.step_boundary) + " matched at most one call";
  } else {
    why = "the job marked none and its calls repeated no pattern (set DETNCCL_STEP_BOUNDARY, or mark steps)";
  }
  return "DETNCCL_STEPS is set but every call was at step 0: " + why + "; the step window selected nothing else";
}

void steps_start_over_in_child(Process& process) noexcept {
  // RATIONALE: consistent to free, because fork() happened with step_mutex held (tracer_process.cc's lock_before_fork).
  try {
    process.step_inference = steps::StepInference(process.config.step_boundary);
  } catch (...) {
  }
}

std::uint64_t open_group_of_this_thread() noexcept {
  const GroupState& group = t_thread.group;
  return group.depth > 0 ? group.group_id : 0;
}

void group_start_over_in_child() noexcept {
  GroupState& group = t_thread.group;
  if (!group.pending.empty()) {
    try {
      g_parent_group_pending = new std::vector<PendingCall>(std::move(group.pending));
      group.pending.clear();
    } catch (...) {
      new (&group.pending) std::vector<PendingCall>();  // out of memory: abandoned without a trace
    }
  }
}

void on_group_start() noexcept {
  GroupState& group = t_thread.group;
  if (group.depth++ == 0) group.group_id = g_process != nullptr ? g_process->next_group.fetch_add(1) : 0;
}

void on_group_end(ncclResult_t group_result) noexcept {
  GroupState& group = t_thread.group;
  if (group.depth == 0) return;  // unbalanced ncclGroupEnd: NCCL reports it; nothing of ours is pending
  if (--group.depth > 0) return;
  if (g_process != nullptr && g_process->registry.pending_size.load(std::memory_order_relaxed) > 0) {
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

}  // namespace detnccl::interpose
