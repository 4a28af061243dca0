// detnccl shim: the tracer — turns the NCCL calls of this process into its ordered log of records.
//
// The wrappers call these hooks only while shim_active() (tracing on); with tracing off they never run. Every hook
// is noexcept and turns its own failures into one warning and less tracing: the job never sees them.
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

// After a communicator-creating call returned: records `comm` (nullptr when this rank got none, e.g. a split with
// NCCL_SPLIT_NOCOLOR: the parent's derivation count still advances). Creates this process's log on first use.
// NCCL answers the queries the record needs (size, rank, device) only once it has created the communicator: a
// non-blocking one whose creation returned ncclInProgress, or one created inside a group (at its outermost
// ncclGroupEnd), is recorded once it is ready — at that ncclGroupEnd, or at the first call made on it, when
// ncclCommGetAsyncError no longer says ncclInProgress — and always before any record of a call on it.
// A split's child made inside a group or on a non-blocking parent has no handle yet (`comm` is nullptr and
// origin.late_handle is set): NCCL stores it at the outermost ncclGroupEnd, or before the parent's async error leaves
// ncclInProgress; the child is recorded once the creating thread has seen either (or calls on the child).
void on_communicator_created(ncclComm_t comm, const CommunicatorOrigin& origin) noexcept;

// After ncclCommGetAsyncError answered `state` for `comm`, called from `caller` (a return address): when it is
// settled, the children of this thread's splits of `comm` that NCCL stores late are there now (or never will be) and
// are recorded. Nothing when NCCL itself made the call (inside_real_nccl: the tracer asks NCCL nothing from inside
// an NCCL call).
void on_async_error_polled(ncclComm_t comm, ncclResult_t state, const void* caller) noexcept;

// Before ncclCommDestroy / ncclCommAbort: forget `comm` (its handle may be reused afterwards).
void on_communicator_destroyed(ncclComm_t comm) noexcept;

// Group brackets: records of calls inside the outermost group are completed (outputs fingerprinted) and written at
// its ncclGroupEnd, when NCCL has run them.
void on_group_start() noexcept;
void on_group_end(ncclResult_t group_result) noexcept;

// Remembers the scalar of a PreMulSum operator so that call records can carry it.
void on_premulsum_created(ncclRedOp_t op, const void* scalar, ncclDataType_t datatype, ncclScalarResidence_t residence,
                          ncclComm_t comm) noexcept;

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

// Asks the kernel to write this process's log to disk now (detnccl_flush).
void flush_log() noexcept;

}  // namespace detnccl::interpose

#endif  // DETNCCL_INTERPOSE_TRACER_H
