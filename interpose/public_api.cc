// detnccl shim: the public C API (detnccl.h).
#include "interpose/detnccl.h"

#include "interpose/shim_state.h"
#include "interpose/tracer.h"

DETNCCL_EXPORT void detnccl_set_step(uint64_t step) { detnccl::interpose::set_step(step); }

DETNCCL_EXPORT void detnccl_set_optimizer_step(uint64_t step) { detnccl::interpose::set_optimizer_step(step); }

DETNCCL_EXPORT void detnccl_flush(void) { detnccl::interpose::flush_log(); }
