// DETNCCL_HOST_DEVICE marks functions that the CPU code and the CUDA kernels share (the portable XXH3, the datatype
// table): __host__ __device__ under nvcc, nothing elsewhere. Header-only; needs no CUDA toolkit.
#ifndef DETNCCL_CUDA_HOST_DEVICE_H
#define DETNCCL_CUDA_HOST_DEVICE_H

#if defined(__CUDACC__)
#define DETNCCL_HOST_DEVICE __host__ __device__
#else
#define DETNCCL_HOST_DEVICE
#endif

#endif  // DETNCCL_CUDA_HOST_DEVICE_H
