// detnccl shim: the shim's device code on each communicator's device (see device_code.h).
#include "interpose/device_code.h"

#include <atomic>
#include <string>

#include "collectives/backend.h"
#include "cuda/context_scope.h"
#include "cuda/driver_version.h"
#include "hash/device_fingerprints.h"
#include "interpose/deterministic.h"
#include "interpose/shim_log.h"
#include "interpose/tracer_process.h"

namespace detnccl::interpose {
namespace {

std::atomic<bool> g_driver_checked{false};
std::atomic<bool> g_driver_usable{true};
std::atomic<bool> g_warned_preload{false};

// Whether the shim's device code can run here; says so once when it cannot (see device_code.h).
bool driver_usable(const config::Config& config) {
  if (cuda::kDriverVersionNeeded == 0) return false;  // a build without device code
  if (g_driver_checked.load(std::memory_order_acquire)) return g_driver_usable.load(std::memory_order_relaxed);
  const int version = cuda::loaded_driver_version();
  if (version < 0) return false;  // no driver loaded yet: asked again at the next communicator
  if (!cuda::driver_too_old(version)) {
    g_driver_checked.store(true, std::memory_order_release);
    return true;
  }
  g_driver_usable.store(false, std::memory_order_relaxed);
  if (g_driver_checked.exchange(true, std::memory_order_acq_rel)) return false;  // another thread said it
  const std::string why = cuda::driver_too_old_text(version);
  on_driver_too_old(why);  // deterministic mode: =1 stops the job here
  if (config.trace >= config::TraceLevel::kHash && g_process != nullptr &&
      !g_process->digests.warned_device_unavailable.exchange(true)) {
    log_warning("fingerprints of device buffers are off: " + why +
                "; calls on device buffers are recorded without them (host buffers keep theirs)");
  }
  return false;
}

}  // namespace

void prepare_device_code(int device) noexcept {
  Process* process = g_process;
  if (process == nullptr) return;
  try {
    const config::Config& config = process->config;
    const bool hashing = config.trace >= config::TraceLevel::kHash;
    if (!hashing && !deterministic_enabled()) return;
    if (!driver_usable(config) || device < 0) return;
    // RATIONALE: a process whose driver has no context entry points (or a stand-in without them) has nothing the
    // shim could load kernels into.
    if (!cuda::ContextDriver::loaded().complete()) return;
    std::string error;
    if (hashing && hash::device_fingerprints_available() && !hash::prepare_device_fingerprints(device)) {
      error = "loading the fingerprint kernels on device " + std::to_string(device) + " failed";
    }
    if (deterministic_enabled()) {
      std::string reduction_error;
      if (!collectives::preload_device_kernels(device, &reduction_error) && error.empty()) error = reduction_error;
    }
    if (!error.empty()) {
      log_warning_once(g_warned_preload, error +
                                             "; they are loaded at their first launch instead, which may wait for "
                                             "the device's queued work (further such failures are not reported)");
    }
  } catch (...) {
    // Out of host memory: the kernels are loaded at their first launch.
  }
}

}  // namespace detnccl::interpose
