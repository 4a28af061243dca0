// detnccl shim: the one flag every wrapper tests before doing anything of its own.
#ifndef DETNCCL_INTERPOSE_SHIM_STATE_H
#define DETNCCL_INTERPOSE_SHIM_STATE_H

#include <atomic>

#define DETNCCL_EXPORT extern "C" __attribute__((visibility("default")))
#define DETNCCL_UNLIKELY(x) __builtin_expect(!!(x), 0)

namespace detnccl::interpose {

// True while tracing or deterministic mode is on for this process. Off (the default, and whenever no DETNCCL_*
// feature is enabled), every wrapper costs this one predictable branch before forwarding to the real NCCL.
inline std::atomic<bool> g_shim_active{false};

inline bool shim_active() noexcept { return DETNCCL_UNLIKELY(g_shim_active.load(std::memory_order_relaxed)); }

}  // namespace detnccl::interpose

#endif  // DETNCCL_INTERPOSE_SHIM_STATE_H
