// detnccl shim: where a buffer lives, so that the CPU never reads device memory.
//
// A process in which the CUDA driver (libcuda.so.1) is not loaded has no device memory: every buffer is host memory
// (hostnccl runs). Otherwise the driver is asked (cuPointerGetAttribute); memory it does not know is plain host
// memory. The driver is looked up, never loaded: the shim must not pull CUDA into a process.
#ifndef DETNCCL_INTERPOSE_BUFFER_LOCATION_H
#define DETNCCL_INTERPOSE_BUFFER_LOCATION_H

namespace detnccl::interpose {

enum class BufferLocation { kHost, kDevice, kUnknown };

// Where `data` lives. Thread-safe, cheap when CUDA is absent (one relaxed load).
BufferLocation locate_buffer(const void* data) noexcept;

}  // namespace detnccl::interpose

#endif  // DETNCCL_INTERPOSE_BUFFER_LOCATION_H
