// detnccl shim: the table of the real NCCL's entry points, resolved in one place.
//
// Every wrapper calls the real function through `real_nccl().name`. Each pointer starts at a resolving stub, so
// NCCL may be loaded after the shim (Python imports torch long after LD_PRELOAD ran): the first call of any entry
// point resolves the whole table once. A symbol the loaded NCCL lacks (an OPTIONAL one on an older NCCL) is bound to
// a stand-in that warns once and returns ncclInvalidUsage.
#ifndef DETNCCL_INTERPOSE_REAL_NCCL_H
#define DETNCCL_INTERPOSE_REAL_NCCL_H

#include <atomic>

#include "abi/nccl_abi.h"

namespace detnccl::interpose {

// One atomic function pointer per NCCL entry point. Loads are relaxed: the pointed-to code never changes, and a
// thread that still sees the stub simply resolves again (idempotent).
struct RealNccl {
#define DETNCCL_REAL_POINTER(ret, name, params, args, kind, need) std::atomic<ret(*) params> name;
  DETNCCL_NCCL_API(DETNCCL_REAL_POINTER)
#undef DETNCCL_REAL_POINTER
};

// The process-wide table (constant-initialised to the resolving stubs, so usable from static constructors).
RealNccl& real_nccl() noexcept;

// Resolves every entry point now. Prefers the strong `pncclX` symbol, then `dlsym(RTLD_NEXT, "ncclX")`, then the
// same names in an already loaded libnccl.so.2 that was opened with RTLD_LOCAL. Safe to call from any thread, any
// number of times. Returns true when the core (REQUIRED) entry points were all found.
bool resolve_real_nccl() noexcept;

// Whether the loaded NCCL exports ncclGroupSimulateEnd (an OPTIONAL entry point: older NCCLs and hostnccl lack it,
// and the shim's stand-in then returns ncclInvalidUsage without ending any group).
bool real_nccl_has_group_simulate_end() noexcept;

// Whether `code` (a return address) lies in the library that holds the real NCCL's functions: NCCL calls some of its
// own entry points through the dynamic linker (2.28 calls ncclCommGetAsyncError from every readiness check), so the
// shim's wrapper of such a function also runs inside NCCL, where it must do nothing of its own. False when NCCL is
// not resolved yet. Cheap after the first call (two compares per executable segment).
bool inside_real_nccl(const void* code) noexcept;

}  // namespace detnccl::interpose

// Calls the real NCCL's `name`, resolving it first if needed.
#define DETNCCL_REAL(name) (::detnccl::interpose::real_nccl().name.load(std::memory_order_relaxed))

#endif  // DETNCCL_INTERPOSE_REAL_NCCL_H
