// Fingerprints and segment digests of device buffers (definition version kFingerprintVersion), enqueued on a CUDA
// stream: bitwise equal to hash::fingerprint() / hash::segment_digests() on the host.
//
// Nothing here allocates, synchronises with the host or reads results back, so every call may be captured in a
// CUDA graph: the caller supplies scratch device memory (size from the *_scratch_bytes functions, 8-byte aligned)
// and the destination of the results (device memory, or mapped/managed host memory that the device can write).
// Scratch and results must stay valid until the enqueued work completes; one scratch area serves one enqueued
// call at a time.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace detnccl::hash::cuda {

// Scratch bytes enqueue_fingerprint needs for a buffer of `bytes` bytes (0 for buffers of at most one leaf).
std::size_t fingerprint_scratch_bytes(std::size_t bytes);

// Scratch bytes enqueue_segment_digests needs for this buffer and segment size (segment_bytes as there).
std::size_t segment_digests_scratch_bytes(std::size_t bytes, std::size_t segment_bytes);

// Number of segment digests enqueue_segment_digests writes: ceil(bytes / segment_bytes).
std::size_t segment_count(std::size_t bytes, std::size_t segment_bytes);

// Loads the hash kernels into `device`'s primary context unless done before (cuda/kernel_preload.h says why: a lazy
// load at the first launch may wait for the device's queued work). The thread's current context is left as it was.
// Returns the first failing CUDA status, or cudaSuccess; a failure is retried at the next call.
cudaError_t preload_kernels(int device);

// Enqueues on `stream` the fingerprint of `bytes` bytes at device address `data` (any alignment; 8-byte aligned
// buffers take the fastest loads), written to *out. Returns cudaErrorInvalidValue for a null `out`, a null
// `data` with bytes > 0, or scratch that is too small or not 8-byte aligned; otherwise the launch status.
cudaError_t enqueue_fingerprint(const void* data, std::size_t bytes, std::uint64_t* out, void* scratch,
                                std::size_t scratch_bytes, cudaStream_t stream);

// Enqueues on `stream` the fingerprint of every `segment_bytes` slice of the buffer (the last may be shorter),
// written to out[0 .. segment_count(bytes, segment_bytes)). segment_bytes must be a positive multiple of
// hash::kLeafBytes (else cudaErrorInvalidValue, like the other argument errors of enqueue_fingerprint).
cudaError_t enqueue_segment_digests(const void* data, std::size_t bytes, std::size_t segment_bytes, std::uint64_t* out,
                                    void* scratch, std::size_t scratch_bytes, cudaStream_t stream);

}  // namespace detnccl::hash::cuda
