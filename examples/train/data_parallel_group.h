// The ranks of the training job and the two collectives data-parallel training needs, over the NCCL API.
//
// Two implementations, chosen at link time: data_parallel_group_host.cc passes host buffers straight to NCCL (for
// hostnccl, or any NCCL that takes host memory) and data_parallel_group_cuda.cc stages them through device
// buffers on a CUDA stream (for a real NCCL on GPUs). The model's math stays on the CPU in both.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "abi/nccl_abi.h"

namespace train {

class DataParallelGroup {
 public:
  virtual ~DataParallelGroup() = default;

  // Replaces `values` on every rank by their elementwise fp32 sum over the ranks (one ncclAllReduce, in place).
  // Returns false with a message in *error when NCCL fails.
  virtual bool all_reduce_sum(std::span<float> values, std::string* error) = 0;

  // Replaces `values` on every rank by rank `root`'s (one ncclBroadcast, in place). Returns false with a message in
  // *error when NCCL fails.
  virtual bool broadcast(std::span<float> values, int root, std::string* error) = 0;

  // Which buffers the collectives see, for the log: "host buffers" or "device buffers on a CUDA stream".
  virtual const char* buffer_kind() const = 0;
};

// Joins the job's communicator (ncclCommInitRank) as `rank` of `world_size`, with the id every rank shares. The
// CUDA implementation first selects device `local_rank`. Returns null with a message in *error on failure.
std::unique_ptr<DataParallelGroup> join_data_parallel_group(const ncclUniqueId& id, int world_size, int rank,
                                                            int local_rank, std::string* error);

// "what failed: NCCL's error string (NCCL's last error)", for messages.
std::string nccl_failure(const char* what, ncclResult_t result);

}  // namespace train
