// detnccl shim: the buffer semantics of each traced NCCL call (see call_shape.h). The conventions are NCCL's
// documented ones: AllGather gathers sendcount elements per rank, ReduceScatter leaves recvcount per rank, AlltoAll,
// Gather and Scatter move `count` elements per peer, Bcast works in place on one buffer.
#include "interpose/call_shape.h"

namespace detnccl::interpose {
namespace {

CallShape base(records::OpId op, ncclComm_t comm, size_t count, ncclDataType_t datatype) noexcept {
  CallShape shape;
  shape.op = op;
  shape.comm = comm;
  shape.count = count;
  shape.datatype = datatype;
  return shape;
}

}  // namespace

CallShape describe_ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                 ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) noexcept {
  CallShape shape = base(records::OpId::kAllReduce, comm, count, datatype);
  shape.redop = op;
  shape.input.data = sendbuff;
  shape.output.data = recvbuff;
  shape.stream = stream;
  return shape;
}

CallShape describe_ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                              ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) noexcept {
  CallShape shape = base(records::OpId::kReduce, comm, count, datatype);
  shape.redop = op;
  shape.peer = root;
  shape.root_is_peer = true;
  shape.input.data = sendbuff;
  shape.output = {recvbuff, 1, Presence::kRootOnly, false};
  shape.stream = stream;
  return shape;
}

CallShape describe_ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                             cudaStream_t stream) noexcept {
  CallShape shape = base(records::OpId::kBcast, comm, count, datatype);
  shape.peer = root;
  shape.root_is_peer = true;
  shape.input = {buff, 1, Presence::kRootOnly, false};
  shape.output.data = buff;
  shape.stream = stream;
  return shape;
}

CallShape describe_ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                                 ncclComm_t comm, cudaStream_t stream) noexcept {
  CallShape shape = base(records::OpId::kBroadcast, comm, count, datatype);
  shape.peer = root;
  shape.root_is_peer = true;
  shape.input = {sendbuff, 1, Presence::kRootOnly, false};
  shape.output.data = recvbuff;
  shape.stream = stream;
  return shape;
}

CallShape describe_ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                                     ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) noexcept {
  CallShape shape = base(records::OpId::kReduceScatter, comm, recvcount, datatype);
  shape.redop = op;
  shape.input = {sendbuff, kPerRank, Presence::kAll, false};
  shape.output.data = recvbuff;
  shape.stream = stream;
  return shape;
}

CallShape describe_ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                                 ncclComm_t comm, cudaStream_t stream) noexcept {
  CallShape shape = base(records::OpId::kAllGather, comm, sendcount, datatype);
  shape.input.data = sendbuff;
  // Output block r is rank r's input: per-block fingerprints let `detnccl check` match them.
  shape.output = {recvbuff, kPerRank, Presence::kAll, true};
  shape.stream = stream;
  return shape;
}

CallShape describe_ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                ncclComm_t comm, cudaStream_t stream) noexcept {
  CallShape shape = base(records::OpId::kAlltoAll, comm, count, datatype);
  shape.input = {sendbuff, kPerRank, Presence::kAll, true};
  shape.output = {recvbuff, kPerRank, Presence::kAll, true};
  shape.stream = stream;
  return shape;
}

CallShape describe_ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                              ncclComm_t comm, cudaStream_t stream) noexcept {
  CallShape shape = base(records::OpId::kGather, comm, count, datatype);
  shape.peer = root;
  shape.root_is_peer = true;
  shape.input.data = sendbuff;
  shape.output = {recvbuff, kPerRank, Presence::kRootOnly, true};
  shape.stream = stream;
  return shape;
}

CallShape describe_ncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                               ncclComm_t comm, cudaStream_t stream) noexcept {
  CallShape shape = base(records::OpId::kScatter, comm, count, datatype);
  shape.peer = root;
  shape.root_is_peer = true;
  shape.input = {sendbuff, kPerRank, Presence::kRootOnly, true};
  shape.output.data = recvbuff;
  shape.stream = stream;
  return shape;
}

CallShape describe_ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                            cudaStream_t stream) noexcept {
  CallShape shape = base(records::OpId::kSend, comm, count, datatype);
  shape.peer = peer;
  shape.input.data = sendbuff;
  shape.has_output = false;
  shape.stream = stream;
  return shape;
}

CallShape describe_ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                            cudaStream_t stream) noexcept {
  CallShape shape = base(records::OpId::kRecv, comm, count, datatype);
  shape.peer = peer;
  shape.output.data = recvbuff;
  shape.has_input = false;
  shape.stream = stream;
  return shape;
}

}  // namespace detnccl::interpose
