// detnccl shim: what each traced NCCL call reads and writes — the buffer semantics of every collective and
// point-to-point call, in one place.
//
// A CallShape says, for one call as the application made it, which buffer is the input and which the output, how
// many elements each holds (in blocks of `count` elements: one block, or one per rank), on which ranks each exists
// (rooted collectives), and which per-peer blocks are worth fingerprinting separately. describe_<ncclName>() takes
// exactly the arguments of the NCCL function, so the wrappers generated from the API table can call it.
#ifndef DETNCCL_INTERPOSE_CALL_SHAPE_H
#define DETNCCL_INTERPOSE_CALL_SHAPE_H

#include <cstddef>
#include <cstdint>

#include "abi/nccl_abi.h"
#include "collectives/dtype_arith.h"
#include "records/log_format.h"

namespace detnccl::interpose {

// On which ranks of the communicator a buffer takes part.
enum class Presence : std::uint8_t { kAll, kRootOnly };

// One side (input or output) of a call.
struct BufferShape {
  const void* data = nullptr;
  std::uint64_t blocks_of_count = 1;  // size in units of `count` elements; kPerRank means nranks blocks
  Presence presence = Presence::kAll;
  bool per_peer_blocks = false;  // also fingerprint each of the nranks blocks (data matched across ranks)
};
inline constexpr std::uint64_t kPerRank = ~std::uint64_t{0};

// What a call does, from its arguments alone (the communicator supplies rank and size later).
struct CallShape {
  records::OpId op = records::OpId::kUnknown;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;  // device fingerprints are enqueued here, in order with NCCL's own work
  std::uint64_t count = 0;
  ncclDataType_t datatype = ncclFloat32;
  std::int32_t redop = -1;    // -1: the operation has no reduction
  std::int32_t peer = -1;     // root or peer; -1: none
  bool root_is_peer = false;  // rooted collective (peer holds the root)
  BufferShape input;
  BufferShape output;
  bool has_input = true;
  bool has_output = true;
};

// One describe function per traced entry point, same parameters as the NCCL function.
CallShape describe_ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                 ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) noexcept;
CallShape describe_ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                              ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) noexcept;
CallShape describe_ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                             cudaStream_t stream) noexcept;
CallShape describe_ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                                 ncclComm_t comm, cudaStream_t stream) noexcept;
CallShape describe_ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                                     ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) noexcept;
CallShape describe_ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                                 ncclComm_t comm, cudaStream_t stream) noexcept;
CallShape describe_ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                ncclComm_t comm, cudaStream_t stream) noexcept;
CallShape describe_ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                              ncclComm_t comm, cudaStream_t stream) noexcept;
CallShape describe_ncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                               ncclComm_t comm, cudaStream_t stream) noexcept;
CallShape describe_ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                            cudaStream_t stream) noexcept;
CallShape describe_ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                            cudaStream_t stream) noexcept;

}  // namespace detnccl::interpose

#endif  // DETNCCL_INTERPOSE_CALL_SHAPE_H
