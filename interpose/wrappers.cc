// detnccl shim: the exported wrappers of every NCCL entry point, generated from abi/nccl_api_table.h.
// Communicator creation and destruction, the group calls and ncclCommGetAsyncError are hand-written in
// wrappers_special.cc.
#include "abi/nccl_abi.h"
#include "interpose/real_nccl.h"
#include "interpose/shim_state.h"
#include "interpose/tracer.h"

// Collectives and point-to-point calls: the calls detnccl traces (the tracing hooks attach here).
// With the shim inactive this is one predictable branch and a tail call; otherwise the call is traced and, for a
// floating-point reduction in deterministic mode, computed by detnccl; its buffer semantics come from
// describe_<name> (call_shape.h).
#define DETNCCL_WRAP_TRACED(ret, name, params, args)                                         \
  DETNCCL_EXPORT ret name params {                                                           \
    if (!::detnccl::interpose::shim_active()) return DETNCCL_REAL(name) args;                \
    return ::detnccl::interpose::intercept(                                                  \
        ::detnccl::interpose::describe_##name args,                                          \
        ::detnccl::interpose::RealCall([&]() noexcept { return DETNCCL_REAL(name) args; })); \
  }
// Queries and memory registration: forwarded as they are.
#define DETNCCL_WRAP_FORWARD(ret, name, params, args) \
  DETNCCL_EXPORT ret name params { return DETNCCL_REAL(name) args; }
#define DETNCCL_WRAP_SPECIAL(ret, name, params, args) /* in wrappers_special.cc */

#define DETNCCL_WRAP_coll DETNCCL_WRAP_TRACED
#define DETNCCL_WRAP_p2p DETNCCL_WRAP_TRACED
#define DETNCCL_WRAP_version DETNCCL_WRAP_FORWARD
#define DETNCCL_WRAP_query DETNCCL_WRAP_FORWARD
#define DETNCCL_WRAP_mem DETNCCL_WRAP_FORWARD
#define DETNCCL_WRAP_redop DETNCCL_WRAP_SPECIAL
#define DETNCCL_WRAP_misc DETNCCL_WRAP_FORWARD
#define DETNCCL_WRAP_init DETNCCL_WRAP_SPECIAL
#define DETNCCL_WRAP_destroy DETNCCL_WRAP_SPECIAL
#define DETNCCL_WRAP_group DETNCCL_WRAP_SPECIAL

// One query is hand-written too: ncclCommGetAsyncError, where the tracer learns that a non-blocking split is over.
// DETNCCL_HAND_WRITTEN_<name> marks it (the probe idiom: the macro expands to "~, 1," so that DETNCCL_SECOND picks 1
// for it and 0 for every other name).
#define DETNCCL_HAND_WRITTEN_ncclCommGetAsyncError ~, 1,
#define DETNCCL_SECOND_I(first, second, ...) second
#define DETNCCL_SECOND(...) DETNCCL_SECOND_I(__VA_ARGS__)
#define DETNCCL_IS_HAND_WRITTEN(name) DETNCCL_SECOND(DETNCCL_HAND_WRITTEN_##name, 0, 0)
#define DETNCCL_CAT_I(a, b) a##b
#define DETNCCL_CAT(a, b) DETNCCL_CAT_I(a, b)
#define DETNCCL_WRAP_OF_1(kind) DETNCCL_WRAP_SPECIAL
#define DETNCCL_WRAP_OF_0(kind) DETNCCL_WRAP_##kind

#define DETNCCL_WRAP(ret, name, params, args, kind, need) \
  DETNCCL_CAT(DETNCCL_WRAP_OF_, DETNCCL_IS_HAND_WRITTEN(name))(kind)(ret, name, params, args)
DETNCCL_NCCL_API(DETNCCL_WRAP)
