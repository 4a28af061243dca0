// DataParallelGroup over device buffers: the way a GPU job calls NCCL. Each collective copies the host vector into
// a device buffer, runs NCCL on it on the group's stream, copies the result back and waits for the stream.
//
// RATIONALE: the model's math stays on the CPU (writing CUDA kernels for a two-layer perceptron would teach
// nothing about NCCL); what matters for detnccl is that NCCL sees device pointers and a real stream, as in any GPU
// training job. Built only when the CUDA toolkit and a real NCCL are found (target train_cuda); it needs a GPU.
#include <cuda_runtime.h>

#include "examples/train/data_parallel_group.h"

namespace train {
namespace {

std::string cuda_failure(const char* what, cudaError_t result) {
  return std::string(what) + " failed: " + cudaGetErrorString(result);
}

class DeviceDataParallelGroup final : public DataParallelGroup {
 public:
  DeviceDataParallelGroup(ncclComm_t comm, cudaStream_t stream) : comm_(comm), stream_(stream) {}
  ~DeviceDataParallelGroup() override {
    ncclCommDestroy(comm_);
    if (device_buffer_ != nullptr) cudaFree(device_buffer_);
    cudaStreamDestroy(stream_);
  }
  DeviceDataParallelGroup(const DeviceDataParallelGroup&) = delete;
  DeviceDataParallelGroup& operator=(const DeviceDataParallelGroup&) = delete;

  bool all_reduce_sum(std::span<float> values, std::string* error) override {
    return run(
        values, error,
        [&](float* device) {
          return ncclAllReduce(device, device, values.size(), ncclFloat32, ncclSum, comm_, stream_);
        },
        "ncclAllReduce");
  }

  bool broadcast(std::span<float> values, int root, std::string* error) override {
    return run(
        values, error,
        [&](float* device) { return ncclBroadcast(device, device, values.size(), ncclFloat32, root, comm_, stream_); },
        "ncclBroadcast");
  }

  const char* buffer_kind() const override { return "device buffers on a CUDA stream"; }

 private:
  // Host -> device, the NCCL call on the stream, device -> host, then waits for the stream.
  template <typename Call>
  bool run(std::span<float> values, std::string* error, Call call, const char* what) {
    const std::size_t bytes = values.size_bytes();
    if (bytes > capacity_bytes_) {
      if (device_buffer_ != nullptr) cudaFree(device_buffer_);
      device_buffer_ = nullptr;
      capacity_bytes_ = 0;
      const cudaError_t allocated = cudaMalloc(reinterpret_cast<void**>(&device_buffer_), bytes);
      if (allocated != cudaSuccess) {
        *error = cuda_failure("cudaMalloc", allocated);
        return false;
      }
      capacity_bytes_ = bytes;
    }
    cudaError_t copied = cudaMemcpyAsync(device_buffer_, values.data(), bytes, cudaMemcpyHostToDevice, stream_);
    if (copied != cudaSuccess) {
      *error = cuda_failure("cudaMemcpyAsync (to the device)", copied);
      return false;
    }
    const ncclResult_t result = call(device_buffer_);
    if (result != ncclSuccess) {
      *error = nccl_failure(what, result);
      return false;
    }
    copied = cudaMemcpyAsync(values.data(), device_buffer_, bytes, cudaMemcpyDeviceToHost, stream_);
    if (copied != cudaSuccess) {
      *error = cuda_failure("cudaMemcpyAsync (to the host)", copied);
      return false;
    }
    const cudaError_t synchronized = cudaStreamSynchronize(stream_);
    if (synchronized != cudaSuccess) {
      *error = cuda_failure("cudaStreamSynchronize", synchronized);
      return false;
    }
    return true;
  }

  ncclComm_t comm_;
  cudaStream_t stream_;
  float* device_buffer_ = nullptr;
  std::size_t capacity_bytes_ = 0;
};

}  // namespace

std::unique_ptr<DataParallelGroup> join_data_parallel_group(const ncclUniqueId& id, int world_size, int rank,
                                                            int local_rank, std::string* error) {
  int devices = 0;
  cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess || devices == 0) {
    *error = status != cudaSuccess ? cuda_failure("cudaGetDeviceCount", status) : "no CUDA device";
    return nullptr;
  }
  // One GPU per local rank, as torchrun assigns them; ranks beyond the device count share (NCCL may refuse that).
  status = cudaSetDevice(local_rank % devices);
  if (status != cudaSuccess) {
    *error = cuda_failure("cudaSetDevice", status);
    return nullptr;
  }
  cudaStream_t stream = nullptr;
  status = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (status != cudaSuccess) {
    *error = cuda_failure("cudaStreamCreateWithFlags", status);
    return nullptr;
  }
  ncclComm_t comm = nullptr;
  const ncclResult_t result = ncclCommInitRank(&comm, world_size, id, rank);
  if (result != ncclSuccess) {
    *error = nccl_failure("ncclCommInitRank", result);
    cudaStreamDestroy(stream);
    return nullptr;
  }
  return std::make_unique<DeviceDataParallelGroup>(comm, stream);
}

}  // namespace train
