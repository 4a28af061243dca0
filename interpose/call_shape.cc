// detnccl shim: the buffer semantics of each traced NCCL call (see call_shape.h), generated: every describe_<name>
// hands its arguments to shape_of<op>, which tells them apart by type and takes the rest from the op's row of
// abi/traced_ops.h. The conventions are NCCL's documented ones: AllGather gathers sendcount elements per rank,
// ReduceScatter leaves recvcount per rank, AlltoAll, Gather and Scatter move `count` elements per peer, Bcast works
// in place on one buffer.
#include "interpose/call_shape.h"

#include <type_traits>

namespace detnccl::interpose {
namespace {

// The arguments of a traced NCCL call, by role. Every traced function's parameters have distinct types per role:
// const void* is the send buffer, void* the receive buffer (or, without a send buffer, the one buffer of an
// in-place call such as ncclBcast), size_t the count, int the root or peer.
struct Arguments {
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  std::uint64_t count = 0;
  ncclDataType_t datatype = ncclFloat32;
  std::int32_t redop = -1;
  std::int32_t peer = -1;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;

  template <typename T>
  void take(T value) noexcept {
    if constexpr (std::is_same_v<T, const void*>) {
      sendbuff = value;
    } else if constexpr (std::is_same_v<T, void*>) {
      recvbuff = value;
    } else if constexpr (std::is_same_v<T, size_t>) {
      count = value;
    } else if constexpr (std::is_same_v<T, ncclDataType_t>) {
      datatype = value;
    } else if constexpr (std::is_same_v<T, ncclRedOp_t>) {
      redop = value;
    } else if constexpr (std::is_same_v<T, int>) {
      peer = value;
    } else if constexpr (std::is_same_v<T, ncclComm_t>) {
      comm = value;
    } else if constexpr (std::is_same_v<T, cudaStream_t>) {
      stream = value;
    } else {
      static_assert(sizeof(T) == 0, "a traced NCCL call has a parameter of a type shape_of cannot place");
    }
  }
};

template <typename T, typename... Args>
constexpr int count_of = (0 + ... + (std::is_same_v<T, Args> ? 1 : 0));

BufferShape side_of(const void* data, abi::Blocks blocks, abi::OnRanks on, bool per_peer) noexcept {
  BufferShape side;
  if (blocks == abi::Blocks::kNone) return side;
  side.data = data;
  side.blocks_of_count = blocks == abi::Blocks::kPerRank ? kPerRank : 1;
  side.presence = on == abi::OnRanks::kRoot ? Presence::kRootOnly : Presence::kAll;
  side.per_peer_blocks = per_peer;
  return side;
}

// The shape of a call of `kOp` with arguments `args` (the NCCL function's, in order). The static_asserts check the
// op's row against the function's parameters, so a row that contradicts its function does not compile.
template <records::OpId kOp, typename... Args>
CallShape shape_of(Args... args) noexcept {
  // The op's row of the table itself (CallShape::row points into it), found at compile time.
  static constexpr const abi::TracedOpRow& row = *abi::traced_op_row(static_cast<std::uint16_t>(kOp));
  static_assert(count_of<size_t, Args...> == 1 && count_of<ncclDataType_t, Args...> == 1 &&
                    count_of<ncclComm_t, Args...> == 1 && count_of<cudaStream_t, Args...> == 1,
                "a traced call takes one count, datatype, communicator and stream");
  static_assert(count_of<const void*, Args...> <= 1 && count_of<void*, Args...> <= 1, "at most one buffer per side");
  static_assert(count_of<ncclRedOp_t, Args...> == (row.reduces ? 1 : 0), "`reduces` disagrees with the parameters");
  static_assert(count_of<int, Args...> == (row.peer != abi::PeerRole::kNone ? 1 : 0),
                "`peer` disagrees with the parameters (an int root or peer)");
  static_assert(row.has_output() == (count_of<void*, Args...> == 1) &&
                    (row.has_input() ? count_of<const void*, Args...> + count_of<void*, Args...> > 0
                                     : count_of<const void*, Args...> == 0),
                "the row's input and output disagree with the call's buffer parameters");
  Arguments a;
  (a.take(args), ...);
  CallShape shape;
  shape.op = kOp;
  shape.row = &row;
  shape.comm = a.comm;
  shape.stream = a.stream;
  shape.count = a.count;
  shape.datatype = a.datatype;
  shape.redop = a.redop;
  shape.peer = a.peer;
  shape.root_is_peer = row.peer == abi::PeerRole::kRoot;
  const void* input = count_of<const void*, Args...> == 1 ? a.sendbuff : a.recvbuff;
  shape.input = side_of(input, row.input, row.input_on, row.input_per_peer());
  shape.output = side_of(a.recvbuff, row.output, row.output_on, row.output_per_peer());
  shape.has_input = row.has_input();
  shape.has_output = row.has_output();
  return shape;
}

}  // namespace

#define DETNCCL_DEFINE_DESCRIBE(ret, name, params, args, kind, need) \
  DETNCCL_IF_TRACED_KIND_##kind(                                     \
      CallShape describe_##name params noexcept { return shape_of<records::op_id_from_nccl_name(#name)> args; })
DETNCCL_NCCL_API(DETNCCL_DEFINE_DESCRIBE)
#undef DETNCCL_DEFINE_DESCRIBE

}  // namespace detnccl::interpose
