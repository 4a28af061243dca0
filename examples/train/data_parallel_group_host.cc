// DataParallelGroup over host buffers: NCCL gets the training vectors themselves and no stream (hostnccl's model:
// a call is complete when it returns).
#include "examples/train/data_parallel_group.h"

namespace train {
namespace {

class HostDataParallelGroup final : public DataParallelGroup {
 public:
  explicit HostDataParallelGroup(ncclComm_t comm) : comm_(comm) {}
  ~HostDataParallelGroup() override { ncclCommDestroy(comm_); }
  HostDataParallelGroup(const HostDataParallelGroup&) = delete;
  HostDataParallelGroup& operator=(const HostDataParallelGroup&) = delete;

  bool all_reduce_sum(std::span<float> values, std::string* error) override {
    const ncclResult_t result =
        ncclAllReduce(values.data(), values.data(), values.size(), ncclFloat32, ncclSum, comm_, nullptr);
    if (result != ncclSuccess) *error = nccl_failure("ncclAllReduce", result);
    return result == ncclSuccess;
  }

  bool broadcast(std::span<float> values, int root, std::string* error) override {
    const ncclResult_t result =
        ncclBroadcast(values.data(), values.data(), values.size(), ncclFloat32, root, comm_, nullptr);
    if (result != ncclSuccess) *error = nccl_failure("ncclBroadcast", result);
    return result == ncclSuccess;
  }

  const char* buffer_kind() const override { return "host buffers"; }

 private:
  ncclComm_t comm_;
};

}  // namespace

std::unique_ptr<DataParallelGroup> join_data_parallel_group(const ncclUniqueId& id, int world_size, int rank,
                                                            int /*local_rank*/, std::string* error) {
  ncclComm_t comm = nullptr;
  const ncclResult_t result = ncclCommInitRank(&comm, world_size, id, rank);
  if (result != ncclSuccess) {
    *error = nccl_failure("ncclCommInitRank", result);
    return nullptr;
  }
  return std::make_unique<HostDataParallelGroup>(comm);
}

}  // namespace train
