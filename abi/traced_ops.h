// detnccl: the one table of what each traced NCCL call does — its stable number in logs and the shape of its
// buffers. The shim's describe_* functions (interpose/call_shape.cc), the log's OpId and op names
// (records/log_format.h), the CLI's buffer sizes (cli/analysis/call_layout.cc) and hostnccl's collective kinds are
// generated from it.
//
// Row: X(id, name, input, input_on, output, output_on, peer, per_peer, reduces, in_place)
//   id        the stable number of the operation in call records (records::OpId). Part of the log format: it never
//             changes, and a new operation gets a new number (never a reused one)
//   name      the NCCL function name without "nccl" (the function is nccl##name; logs and DETNCCL_OPS use name)
//   input     size of the input (send) buffer in blocks of the call's count elements: kOne, kPerRank (one block per
//             rank of the communicator) or kNone (the call has no input)
//   input_on  on which ranks the input takes part: kAll or kRoot (only the root's is read)
//   output, output_on   the same for the output (receive) buffer
//   peer      kRoot (a rooted collective: the int argument is the root), kPeer (point-to-point: the peer), kNone
//   per_peer  which side gets one fingerprint per peer block besides the whole-buffer one (folded into one digest
//             below DETNCCL_TRACE=segments: records/block_digests.h), so that data can be
//             matched across ranks (block i goes to or comes from rank i): kNeither, kInput, kOutput or kBoth
//   reduces   true when the call takes an ncclRedOp_t and combines the ranks' data with it
//   in_place  when the send and receive buffers count as NCCL's in-place convention (is_in_place below):
//               kSameBuffer        sendbuff == recvbuff
//               kAlways            the call has one buffer (ncclBcast)
//               kInputInOutput     sendbuff == recvbuff + rank * count elements (AllGather)
//               kOutputInInput     recvbuff == sendbuff + rank * count elements (ReduceScatter)
//               kNever             the call has one side only (Send, Recv)
//
// Compile-time checks below make every coll and p2p row of abi/nccl_api_table.h have exactly one row here and every
// row here name one of them; interpose/call_shape.cc checks each row against its NCCL function's parameters.
#ifndef DETNCCL_ABI_TRACED_OPS_H
#define DETNCCL_ABI_TRACED_OPS_H

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string_view>

#include "abi/nccl_api_table.h"

// clang-format off
#define DETNCCL_TRACED_OPS(X)                                                                                      \
  /* id  name           input     input_on  output    output_on  peer   per_peer   reduces  in_place */          \
  X(1,   AllReduce,     kOne,     kAll,     kOne,     kAll,      kNone, kNeither,  true,    kSameBuffer)         \
  X(2,   Reduce,        kOne,     kAll,     kOne,     kRoot,     kRoot, kNeither,  true,    kSameBuffer)         \
  X(3,   Broadcast,     kOne,     kRoot,    kOne,     kAll,      kRoot, kNeither,  false,   kSameBuffer)         \
  X(4,   Bcast,         kOne,     kRoot,    kOne,     kAll,      kRoot, kNeither,  false,   kAlways)             \
  X(5,   AllGather,     kOne,     kAll,     kPerRank, kAll,      kNone, kOutput,   false,   kInputInOutput)      \
  X(6,   ReduceScatter, kPerRank, kAll,     kOne,     kAll,      kNone, kNeither,  true,    kOutputInInput)      \
  X(7,   AlltoAll,      kPerRank, kAll,     kPerRank, kAll,      kNone, kBoth,     false,   kSameBuffer)         \
  X(8,   Gather,        kOne,     kAll,     kPerRank, kRoot,     kRoot, kOutput,   false,   kSameBuffer)         \
  X(9,   Scatter,       kPerRank, kRoot,    kOne,     kAll,      kRoot, kInput,    false,   kSameBuffer)         \
  X(10,  Send,          kOne,     kAll,     kNone,    kAll,      kPeer, kNeither,  false,   kNever)              \
  X(11,  Recv,          kNone,    kAll,     kOne,     kAll,      kPeer, kNeither,  false,   kNever)
// clang-format on

// DETNCCL_IF_TRACED_KIND_<kind>(...) expands to its arguments for the API table's kinds coll and p2p (the calls this
// table describes) and to nothing for every other kind, so a generator over abi/nccl_api_table.h can pick those rows.
#define DETNCCL_IF_TRACED_KIND_coll(...) __VA_ARGS__
#define DETNCCL_IF_TRACED_KIND_p2p(...) __VA_ARGS__
#define DETNCCL_IF_TRACED_KIND_version(...)
#define DETNCCL_IF_TRACED_KIND_init(...)
#define DETNCCL_IF_TRACED_KIND_destroy(...)
#define DETNCCL_IF_TRACED_KIND_query(...)
#define DETNCCL_IF_TRACED_KIND_mem(...)
#define DETNCCL_IF_TRACED_KIND_redop(...)
#define DETNCCL_IF_TRACED_KIND_group(...)
#define DETNCCL_IF_TRACED_KIND_misc(...)

namespace detnccl::abi {

// Size of one side of a call, in blocks of `count` elements.
enum class Blocks : std::uint8_t { kNone, kOne, kPerRank };
// On which ranks a side takes part.
enum class OnRanks : std::uint8_t { kAll, kRoot };
// What the call's int argument is.
enum class PeerRole : std::uint8_t { kNone, kRoot, kPeer };
// Which side gets per-peer block fingerprints.
enum class PerPeer : std::uint8_t { kNeither, kInput, kOutput, kBoth };
// NCCL's in-place convention for the call (see the table's comment).
enum class InPlaceRule : std::uint8_t { kNever, kAlways, kSameBuffer, kInputInOutput, kOutputInInput };

// One row of DETNCCL_TRACED_OPS.
struct TracedOpRow {
  std::uint16_t id = 0;
  std::string_view name;       // "AllReduce"
  std::string_view nccl_name;  // "ncclAllReduce"
  Blocks input = Blocks::kNone;
  OnRanks input_on = OnRanks::kAll;
  Blocks output = Blocks::kNone;
  OnRanks output_on = OnRanks::kAll;
  PeerRole peer = PeerRole::kNone;
  PerPeer per_peer = PerPeer::kNeither;
  bool reduces = false;
  InPlaceRule in_place = InPlaceRule::kNever;

  constexpr bool has_input() const noexcept { return input != Blocks::kNone; }
  constexpr bool has_output() const noexcept { return output != Blocks::kNone; }
  constexpr bool input_per_peer() const noexcept { return per_peer == PerPeer::kInput || per_peer == PerPeer::kBoth; }
  constexpr bool output_per_peer() const noexcept { return per_peer == PerPeer::kOutput || per_peer == PerPeer::kBoth; }
};

// The rows, in table order.
inline constexpr TracedOpRow kTracedOps[] = {
#define DETNCCL_TRACED_OP_ROW(id, name, input, input_on, output, output_on, peer, per_peer, reduces, in_place) \
  {id,                                                                                                         \
   #name,                                                                                                      \
   "nccl" #name,                                                                                               \
   Blocks::input,                                                                                              \
   OnRanks::input_on,                                                                                          \
   Blocks::output,                                                                                             \
   OnRanks::output_on,                                                                                         \
   PeerRole::peer,                                                                                             \
   PerPeer::per_peer,                                                                                          \
   reduces,                                                                                                    \
   InPlaceRule::in_place},
    DETNCCL_TRACED_OPS(DETNCCL_TRACED_OP_ROW)
#undef DETNCCL_TRACED_OP_ROW
};

// RATIONALE: the look-ups below work with indices, and the compile-time checks compare indices, never row
// addresses: GCC does not evaluate a comparison of an array element's address with nullptr as a constant
// expression under -fsanitize=undefined (the ASan + UBSan build), although it is one.
inline constexpr std::size_t kNoTracedOp = ~std::size_t{0};

// The index in kTracedOps of stable number `id`, or kNoTracedOp when no operation has it (0, or a number from a
// newer or corrupt log).
constexpr std::size_t traced_op_index(std::uint64_t id) noexcept {
  for (std::size_t i = 0; i < std::size(kTracedOps); ++i) {
    if (kTracedOps[i].id == id) return i;
  }
  return kNoTracedOp;
}

// The index in kTracedOps of an NCCL function name ("ncclAllReduce"), or kNoTracedOp when it is not a traced call.
constexpr std::size_t traced_op_index_of_nccl_name(std::string_view nccl_name) noexcept {
  for (std::size_t i = 0; i < std::size(kTracedOps); ++i) {
    if (kTracedOps[i].nccl_name == nccl_name) return i;
  }
  return kNoTracedOp;
}

// The row of stable number `id`, or nullptr when no operation has it.
constexpr const TracedOpRow* traced_op_row(std::uint64_t id) noexcept {
  const std::size_t index = traced_op_index(id);
  return index == kNoTracedOp ? nullptr : &kTracedOps[index];
}

// The row of an NCCL function name ("ncclAllReduce"), or nullptr when it is not a traced call.
constexpr const TracedOpRow* traced_op_row_of_nccl_name(std::string_view nccl_name) noexcept {
  const std::size_t index = traced_op_index_of_nccl_name(nccl_name);
  return index == kNoTracedOp ? nullptr : &kTracedOps[index];
}

// Whether a call with these buffers is in place as NCCL defines it for the operation (TracedOpRow::in_place).
// element_bytes is the datatype's size (0 for an invalid datatype: the offset rules then compare the pointers
// themselves), rank the caller's rank in the communicator. Null buffers are never in place, except for kAlways.
inline bool is_in_place(const TracedOpRow& row, const void* sendbuff, const void* recvbuff, std::uint64_t count,
                        std::uint64_t element_bytes, std::uint64_t rank) noexcept {
  // RATIONALE: integer addresses, because the offset buffer is a different object from the other one's start as far
  // as the language knows (pointer arithmetic across them would be undefined); the shim compared them the same way.
  const auto send = reinterpret_cast<std::uintptr_t>(sendbuff);
  const auto recv = reinterpret_cast<std::uintptr_t>(recvbuff);
  const std::uint64_t rank_offset = rank * count * element_bytes;
  switch (row.in_place) {
    case InPlaceRule::kAlways:
      return true;
    case InPlaceRule::kSameBuffer:
      return send != 0 && send == recv;
    case InPlaceRule::kInputInOutput:
      return send != 0 && recv != 0 && send == recv + rank_offset;
    case InPlaceRule::kOutputInInput:
      return send != 0 && recv != 0 && recv == send + rank_offset;
    case InPlaceRule::kNever:
      break;
  }
  return false;
}

// Every coll and p2p row of the API table has a row here ...
#define DETNCCL_CHECK_TRACED_OP_ROW(ret, name, params, args, kind, need)                                            \
  DETNCCL_IF_TRACED_KIND_##kind(static_assert(traced_op_index_of_nccl_name(#name) != kNoTracedOp,                   \
                                              #name " is a coll/p2p call of abi/nccl_api_table.h without a row in " \
                                                    "DETNCCL_TRACED_OPS (abi/traced_ops.h): add one with a new id");)
DETNCCL_NCCL_API(DETNCCL_CHECK_TRACED_OP_ROW)
#undef DETNCCL_CHECK_TRACED_OP_ROW

namespace detail {
// ... and no row here is anything else (it would have a number and a describe_ function for a call never wrapped);
// ids and names are unique.
constexpr bool is_traced_api_call(std::string_view nccl_name) noexcept {
#define DETNCCL_IS_TRACED_API_CALL(ret, name, params, args, kind, need) \
  DETNCCL_IF_TRACED_KIND_##kind(if (nccl_name == #name) return true;)
  DETNCCL_NCCL_API(DETNCCL_IS_TRACED_API_CALL)
#undef DETNCCL_IS_TRACED_API_CALL
  return false;
}
constexpr bool rows_are_api_calls_with_unique_ids() noexcept {
  for (std::size_t i = 0; i < std::size(kTracedOps); ++i) {
    const TracedOpRow& row = kTracedOps[i];
    if (row.id == 0 || !is_traced_api_call(row.nccl_name)) return false;
    for (std::size_t j = 0; j < std::size(kTracedOps); ++j) {
      if (j != i && (kTracedOps[j].id == row.id || kTracedOps[j].name == row.name)) return false;
    }
  }
  return true;
}
}  // namespace detail
static_assert(detail::rows_are_api_calls_with_unique_ids(),
              "every DETNCCL_TRACED_OPS row names a coll/p2p call of abi/nccl_api_table.h, with its own nonzero id");

}  // namespace detnccl::abi

#endif  // DETNCCL_ABI_TRACED_OPS_H
