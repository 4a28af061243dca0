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
#include "abi/traced_ops.h"
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
  const abi::TracedOpRow* row = nullptr;  // the op's row of abi/traced_ops.h (in-place rule, ...)
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

// One describe function per traced entry point (the coll and p2p rows of abi/nccl_api_table.h), with the NCCL
// function's parameters: describe_ncclAllReduce(sendbuff, recvbuff, count, datatype, op, comm, stream). Generated in
// call_shape.cc from the function's parameter list and its row of abi/traced_ops.h.
#define DETNCCL_DECLARE_DESCRIBE(ret, name, params, args, kind, need) \
  DETNCCL_IF_TRACED_KIND_##kind(CallShape describe_##name params noexcept;)
DETNCCL_NCCL_API(DETNCCL_DECLARE_DESCRIBE)
#undef DETNCCL_DECLARE_DESCRIBE

}  // namespace detnccl::interpose

#endif  // DETNCCL_INTERPOSE_CALL_SHAPE_H
