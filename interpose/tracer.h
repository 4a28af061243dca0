// detnccl shim: the tracer — turns the NCCL calls of this process into its ordered log of records.
//
// The wrappers call these hooks only while shim_active() (tracing or deterministic mode on); with tracing off they
// record nothing. Every hook is noexcept and turns its own failures into one warning and less tracing: the job never
// sees them. What the shim learns about communicators (creation, destruction, PreMulSum operators) goes to
// communicator_registry.h instead, which serves the tracer and deterministic mode alike.
#ifndef DETNCCL_INTERPOSE_TRACER_H
#define DETNCCL_INTERPOSE_TRACER_H

#include <cstdint>
#include <type_traits>

#include "abi/nccl_abi.h"
#include "interpose/call_shape.h"
#include "records/log_format.h"

namespace detnccl::interpose {

// Reads and checks the DETNCCL_* configuration, once per process, at its first communicator call. An invalid
// setting stops the job here (exit status 78) with a message naming the variable and the accepted values. Turns
// shim_active() on when tracing is enabled.
void ensure_configured() noexcept;

// Group brackets: records of calls inside the outermost group are completed (outputs fingerprinted) and written at
// its ncclGroupEnd, when NCCL has run them.
void on_group_start() noexcept;
void on_group_end(ncclResult_t group_result) noexcept;

// The real NCCL call of one wrapper, borrowed for the length of intercept(): a function pointer and the address of
// the wrapper's lambda.
// RATIONALE: the tracing around the call then lives in tracer.cc, where its state is a local variable (no allocation
// per call), while each wrapper's lambda is still compiled into that wrapper.
class RealCall {
 public:
  template <class Function>
  explicit RealCall(Function&& function) noexcept
      : function_(&function),
        invoke_([](void* f) noexcept { return (*static_cast<std::remove_reference_t<Function>*>(f))(); }) {}

  ncclResult_t operator()() const noexcept { return invoke_(function_); }

 private:
  void* function_;
  ncclResult_t (*invoke_)(void* function) noexcept;
};

// One collective or point-to-point call while the shim is active: traced (when tracing is on), and run by
// deterministic mode (a floating-point reduction when DETNCCL_DETERMINISTIC is set) or by `real_call` (the real NCCL
// function with the application's arguments). Returns the result of whichever ran. Tracing numbers the call and
// fingerprints its inputs before it runs (before NCCL can change them), then fingerprints its outputs and writes the
// record, or leaves both to the outermost ncclGroupEnd.
ncclResult_t intercept(const CallShape& shape, RealCall real_call) noexcept;

// Depth of this thread's ncclGroupStart nesting (0 outside any group).
int group_depth() noexcept;

// The training step stamped on every following record (detnccl_set_step).
void set_step(std::uint64_t step) noexcept;

// The step as the job's optimizer counts it (detnccl_set_optimizer_step): stamped with step_source "optimizer" unless
// the job marked a step itself or DETNCCL_STEP_BOUNDARY is set; it ends the numbering from the call pattern.
void set_optimizer_step(std::uint64_t step) noexcept;

// Asks the kernel to write this process's log to disk now (detnccl_flush).
void flush_log() noexcept;

}  // namespace detnccl::interpose

#endif  // DETNCCL_INTERPOSE_TRACER_H
