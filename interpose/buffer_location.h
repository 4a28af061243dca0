// detnccl shim: where a buffer lives, so that the CPU never reads device memory.
//
// A process in which the CUDA driver (libcuda.so.1) is not loaded has no device memory: every buffer is host memory
// (hostnccl runs). Otherwise the driver is asked (cuPointerGetAttribute); memory it does not know is plain host
// memory, and memory it knows — device, managed, and pinned or registered host memory, all of which NCCL's kernels
// access asynchronously on the stream — is kDevice: only stream-ordered work may read it. The driver is looked up,
// never loaded: the shim must not pull CUDA into a process.
#ifndef DETNCCL_INTERPOSE_BUFFER_LOCATION_H
#define DETNCCL_INTERPOSE_BUFFER_LOCATION_H

namespace detnccl::interpose {

enum class BufferLocation {
  kHost,     // plain host memory: the CPU may read it now
  kDevice,   // memory CUDA knows (device, managed, pinned or registered host): read it in stream order
  kUnknown,  // the driver failed to say
};

// Where `data` lives. Thread-safe, cheap when CUDA is absent (one relaxed load). For kUnknown, *driver_status (when
// given) receives the driver's error code.
BufferLocation locate_buffer(const void* data, int* driver_status = nullptr) noexcept;

}  // namespace detnccl::interpose

#endif  // DETNCCL_INTERPOSE_BUFFER_LOCATION_H
