// detnccl shim: the shim's own device code on each communicator's device — whether the process's CUDA driver can run
// it, and its kernels loaded before their first launch.
#ifndef DETNCCL_INTERPOSE_DEVICE_CODE_H
#define DETNCCL_INTERPOSE_DEVICE_CODE_H

namespace detnccl::interpose {

// After a communicator of `device` (ncclCommCuDevice's answer, -1 if none) is registered, outside every lock of the
// shim. Once a CUDA driver is loaded, checks once that it can run the shim's device code (cuda/driver_version.h):
// when it cannot, deterministic mode stops the job here (=1, exit status 78) or warns once (=warn), and tracing says
// once that device buffers are recorded without fingerprints. Otherwise loads, once per device, every kernel the shim
// may launch there — the hash kernels when tracing takes fingerprints, the reduction kernels in deterministic mode —
// so that no first launch loads them lazily while NCCL kernels wait in the device's queue (cuda/kernel_preload.h).
void prepare_device_code(int device) noexcept;

}  // namespace detnccl::interpose

#endif  // DETNCCL_INTERPOSE_DEVICE_CODE_H
