// Tests of abi/traced_ops.h and abi/nccl_datatypes.h and of what is generated from them: the shim's describe_*
// functions (interpose/call_shape.cc, compiled into this test), the log's op names and numbers, the CLI's buffer
// sizes (cli/analysis/call_layout.cc) and the in-place rule. Expectations come from NCCL's documented conventions,
// written here independently of the table, and from the C++ storage types of collectives/dtype_arith.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>

#include "abi/nccl_datatypes.h"
#include "abi/traced_ops.h"
#include "cli/analysis/call_layout.h"
#include "collectives/dtype_arith.h"
#include "config/config.h"
#include "interpose/call_shape.h"
#include "records/log_format.h"

namespace {

using detnccl::abi::TracedOpRow;
using detnccl::interpose::BufferShape;
using detnccl::interpose::CallShape;
using detnccl::interpose::kPerRank;
using detnccl::interpose::Presence;
using detnccl::records::OpId;

// Arguments for one sample call.
struct Sample {
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;
  ncclDataType_t datatype = ncclFloat32;
  ncclRedOp_t redop = ncclMax;
  int root = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
};

template <typename T>
T sample_value(const Sample& s) {
  if constexpr (std::is_same_v<T, const void*>) return s.send;
  if constexpr (std::is_same_v<T, void*>) return s.recv;
  if constexpr (std::is_same_v<T, size_t>) return s.count;
  if constexpr (std::is_same_v<T, ncclDataType_t>) return s.datatype;
  if constexpr (std::is_same_v<T, ncclRedOp_t>) return s.redop;
  if constexpr (std::is_same_v<T, int>) return s.root;
  if constexpr (std::is_same_v<T, ncclComm_t>) return s.comm;
  if constexpr (std::is_same_v<T, cudaStream_t>) return s.stream;
}

// Calls a describe_ function with the sample's values for its parameters, whatever their order.
template <typename... P>
CallShape call_with(CallShape (*describe)(P...) noexcept, const Sample& s) {
  return describe(sample_value<P>(s)...);
}

// A describe_ function and the name of its NCCL function, for every coll and p2p row of the API table.
struct Described {
  std::string_view nccl_name;
  CallShape shape;
};
std::vector<Described> describe_every_call(const Sample& s) {
  std::vector<Described> all;
#define DESCRIBE_SAMPLE(ret, name, params, args, kind, need) \
  DETNCCL_IF_TRACED_KIND_##kind(all.push_back({#name, call_with(&detnccl::interpose::describe_##name, s)});)
  DETNCCL_NCCL_API(DESCRIBE_SAMPLE)
#undef DESCRIBE_SAMPLE
  return all;
}

// What NCCL's documentation says of each traced call, written here independently of the table (the one place of
// this test a new operation's expectations go). Sizes are in elements, as a rank of nranks sees them; 0: the rank
// does not use that buffer.
struct Sizes {
  std::uint64_t input;
  std::uint64_t output;
};
enum class Role { kNone, kRoot, kPeer };  // what the call's int argument is
struct Documented {
  std::string_view name;
  bool reduces;
  Role role;
  bool one_buffer;                       // the call's one buffer is input and output (ncclBcast)
  bool per_peer_input, per_peer_output;  // block i of the buffer goes to or comes from rank i
  Sizes (*sizes)(std::uint64_t count, std::uint64_t nranks, bool is_root);
};
// clang-format off
constexpr Documented kDocumented[] = {
    {"AllReduce", true, Role::kNone, false, false, false, [](auto c, auto, bool) { return Sizes{c, c}; }},
    {"Reduce", true, Role::kRoot, false, false, false, [](auto c, auto, bool r) { return Sizes{c, r ? c : 0}; }},
    {"Broadcast", false, Role::kRoot, false, false, false, [](auto c, auto, bool r) { return Sizes{r ? c : 0, c}; }},
    {"Bcast", false, Role::kRoot, true, false, false, [](auto c, auto, bool r) { return Sizes{r ? c : 0, c}; }},
    {"AllGather", false, Role::kNone, false, false, true, [](auto c, auto n, bool) { return Sizes{c, c * n}; }},
    {"ReduceScatter", true, Role::kNone, false, false, false, [](auto c, auto n, bool) { return Sizes{c * n, c}; }},
    {"AlltoAll", false, Role::kNone, false, true, true, [](auto c, auto n, bool) { return Sizes{c * n, c * n}; }},
    {"Gather", false, Role::kRoot, false, false, true, [](auto c, auto n, bool r) { return Sizes{c, r ? c * n : 0}; }},
    {"Scatter", false, Role::kRoot, false, true, false, [](auto c, auto n, bool r) { return Sizes{r ? c * n : 0, c}; }},
    {"Send", false, Role::kPeer, false, false, false, [](auto c, auto, bool) { return Sizes{c, 0}; }},
    {"Recv", false, Role::kPeer, false, false, false, [](auto c, auto, bool) { return Sizes{0, c}; }},
};
// clang-format on
const Documented& documented(std::string_view nccl_name) {
  static constexpr Documented kNothing = {"?", false, Role::kNone, false, false, false, nullptr};
  for (const Documented& entry : kDocumented) {
    if ("nccl" + std::string(entry.name) == nccl_name) return entry;
  }
  ADD_FAILURE() << nccl_name << " is not described in kDocumented (tests/test_traced_ops.cc): add what NCCL's "
                << "documentation says of it";
  return kNothing;
}

// Elements of one side of a shape as the tracer computes them (interpose/tracer.cc, begin_call).
std::uint64_t shim_elements(const CallShape& shape, bool has, const BufferShape& side, std::uint64_t nranks,
                            std::uint32_t rank) {
  const bool is_root = !shape.root_is_peer || static_cast<std::int64_t>(rank) == shape.peer;
  if (!has || (side.presence == Presence::kRootOnly && !is_root)) return 0;
  return shape.count * (side.blocks_of_count == kPerRank ? nranks : side.blocks_of_count);
}

detnccl::records::CallFields fields_of(const CallShape& shape) {
  detnccl::records::CallFields fields;
  fields.op = shape.op;
  fields.count = shape.count;
  fields.datatype = static_cast<std::uint16_t>(shape.datatype);
  fields.redop = shape.redop;
  fields.peer = shape.peer;
  return fields;
}

TEST(TracedOps, EveryTracedCallOfTheApiTableHasItsRowAndShape) {
  char send_buffer[1], recv_buffer[1];
  Sample s;
  s.send = send_buffer;
  s.recv = recv_buffer;
  s.count = 1031;
  s.root = 2;
  s.comm = reinterpret_cast<ncclComm_t>(std::uintptr_t{0x1000});
  s.stream = reinterpret_cast<cudaStream_t>(std::uintptr_t{0x2000});
  const std::vector<Described> all = describe_every_call(s);
  ASSERT_EQ(all.size(), std::size(detnccl::abi::kTracedOps));
  std::set<std::uint16_t> ids;
  for (const Described& d : all) {
    SCOPED_TRACE(std::string(d.nccl_name));
    const TracedOpRow* row = detnccl::abi::traced_op_row_of_nccl_name(d.nccl_name);
    ASSERT_NE(row, nullptr);
    ids.insert(row->id);
    const CallShape& shape = d.shape;
    EXPECT_EQ(static_cast<int>(shape.op), row->id);
    EXPECT_EQ(shape.row, row);
    EXPECT_EQ(detnccl::records::op_name(shape.op), d.nccl_name.substr(4));
    EXPECT_EQ(detnccl::records::op_id_from_nccl_name(d.nccl_name), shape.op);
    EXPECT_EQ(shape.comm, s.comm);
    EXPECT_EQ(shape.stream, s.stream);
    EXPECT_EQ(shape.count, s.count);
    EXPECT_EQ(shape.datatype, s.datatype);
    const Documented& want = documented(d.nccl_name);
    EXPECT_EQ(shape.redop, want.reduces ? static_cast<int>(s.redop) : -1);
    EXPECT_EQ(row->reduces, want.reduces);
    EXPECT_EQ(shape.peer, want.role != Role::kNone ? s.root : -1);
    EXPECT_EQ(shape.root_is_peer, want.role == Role::kRoot);
    EXPECT_EQ(detnccl::analysis::is_rooted(shape.op), want.role == Role::kRoot);
    EXPECT_EQ(detnccl::analysis::is_point_to_point(shape.op), want.role == Role::kPeer);
    // The buffers: Bcast's one buffer is both sides; Send has no output, Recv no input.
    EXPECT_EQ(shape.has_input, d.nccl_name != "ncclRecv");
    EXPECT_EQ(shape.has_output, d.nccl_name != "ncclSend");
    EXPECT_EQ(shape.input.data, !shape.has_input ? nullptr : want.one_buffer ? s.recv : s.send);
    EXPECT_EQ(shape.output.data, shape.has_output ? s.recv : nullptr);
    EXPECT_EQ(shape.input.per_peer_blocks, want.per_peer_input);
    EXPECT_EQ(shape.output.per_peer_blocks, want.per_peer_output);
  }
  EXPECT_EQ(ids.size(), all.size());
}

TEST(TracedOps, ShimAndCliAgreeWithNcclOnBufferSizesForEveryRank) {
  char buffers[2];
  for (const std::uint32_t nranks : {1u, 2u, 3u, 8u}) {
    for (std::uint32_t rank = 0; rank < nranks; ++rank) {
      for (const int root : {0, static_cast<int>(nranks) - 1}) {
        Sample s;
        s.send = &buffers[0];
        s.recv = &buffers[1];
        s.count = 37;
        s.root = root;
        for (const Described& d : describe_every_call(s)) {
          SCOPED_TRACE(std::string(d.nccl_name) + " nranks " + std::to_string(nranks) + " rank " +
                       std::to_string(rank) + " root/peer " + std::to_string(root));
          const CallShape& shape = d.shape;
          const bool is_root = static_cast<std::uint32_t>(root) == rank;
          const Documented& doc = documented(d.nccl_name);
          if (doc.sizes == nullptr) continue;  // not documented: the failure says so
          const Sizes want = doc.sizes(s.count, nranks, is_root);
          EXPECT_EQ(shim_elements(shape, shape.has_input, shape.input, nranks, rank), want.input);
          EXPECT_EQ(shim_elements(shape, shape.has_output, shape.output, nranks, rank), want.output);
          const detnccl::records::CallFields fields = fields_of(shape);
          EXPECT_EQ(detnccl::analysis::input_elements(fields, nranks, rank), want.input);
          EXPECT_EQ(detnccl::analysis::output_elements(fields, nranks, rank), want.output);
        }
      }
    }
  }
}

TEST(TracedOps, UnknownOperationsHaveNoRowNameOrBuffers) {
  std::uint64_t unused = 1;  // the first number no row has
  while (detnccl::abi::traced_op_row(unused) != nullptr) ++unused;
  for (const std::uint64_t id : {std::uint64_t{0}, unused, std::uint64_t{65535}}) {
    EXPECT_EQ(detnccl::abi::traced_op_row(id), nullptr) << id;
    detnccl::records::CallFields fields;
    fields.op = static_cast<OpId>(id);
    fields.count = 5;
    EXPECT_EQ(detnccl::records::op_name(fields.op), "Unknown");
    EXPECT_EQ(detnccl::analysis::input_elements(fields, 4, 0), 0u);
    EXPECT_EQ(detnccl::analysis::output_elements(fields, 4, 0), 0u);
    EXPECT_FALSE(detnccl::analysis::is_rooted(fields.op));
    EXPECT_FALSE(detnccl::analysis::is_point_to_point(fields.op));
  }
  EXPECT_EQ(detnccl::abi::traced_op_row_of_nccl_name("ncclGroupStart"), nullptr);
  EXPECT_EQ(detnccl::abi::traced_op_row_of_nccl_name("AllReduce"), nullptr);
}

// DETNCCL_OPS accepts every operation of the table, and its help lists each one (the help text is written by hand).
TEST(TracedOps, DetncclOpsAcceptsAndListsEveryOperation) {
  const std::string_view accepted = detnccl::config::env_var_info(detnccl::config::EnvVar::kOps).accepted_text;
  std::set<std::string_view> words;  // the help's words, without commas
  for (std::size_t at = 0; at < accepted.size();) {
    const std::size_t end = std::min(accepted.find_first_of(", ", at), accepted.size());
    if (end > at) words.insert(accepted.substr(at, end - at));
    at = end + 1;
  }
  for (const TracedOpRow& row : detnccl::abi::kTracedOps) {
    SCOPED_TRACE(std::string(row.name));
    EXPECT_TRUE(detnccl::config::traced_op_from_name(row.name).has_value());
    EXPECT_EQ(words.count(row.name), 1u) << "the DETNCCL_OPS help (config/env_vars.h) does not list it: " << accepted;
  }
  EXPECT_EQ(detnccl::config::kTracedOpCount, std::size(detnccl::abi::kTracedOps));
}

// docs/log-format.md's table of operation numbers has every row ("| 1 | AllReduce |").
TEST(TracedOps, LogFormatMdListsEveryOperationNumber) {
  std::ifstream file(DETNCCL_SOURCE_DIR "/docs/log-format.md");
  ASSERT_TRUE(file) << "docs/log-format.md is missing";
  const std::string docs((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  for (const TracedOpRow& row : detnccl::abi::kTracedOps) {
    const std::string line = "| " + std::to_string(row.id) + " | " + std::string(row.name) + " |";
    EXPECT_NE(docs.find(line), std::string::npos) << "docs/log-format.md has no op table row " << line;
  }
}

// The shim's in-place rule as interpose/tracer.cc's begin_call wrote it before the table existed, kept here as the
// reference abi::is_in_place must reproduce exactly.
bool in_place_before_the_table(const CallShape& shape, std::uint64_t rank, std::uint64_t element) {
  const auto* in = static_cast<const std::byte*>(shape.input.data);
  const auto* out = static_cast<const std::byte*>(shape.output.data);
  const std::uint64_t rank_offset = rank * shape.count * element;
  bool in_place = shape.has_input && shape.has_output && in != nullptr && in == out;
  if (shape.op == OpId::kAllGather) in_place = in != nullptr && out != nullptr && in == out + rank_offset;
  if (shape.op == OpId::kReduceScatter) in_place = in != nullptr && out != nullptr && out == in + rank_offset;
  if (shape.op == OpId::kBcast) in_place = true;
  return in_place;
}

TEST(TracedOps, InPlaceRuleIsNcclsConventionPerOperation) {
  constexpr std::size_t kCount = 6;
  static std::byte arena[4 * 8 * kCount * 8];
  int in_place_seen = 0, not_in_place_seen = 0;
  for (const ncclDataType_t datatype : {ncclInt8, ncclFloat16, ncclFloat32, ncclFloat64}) {
    const std::uint64_t element = detnccl::abi::datatype_size(datatype);
    for (std::uint64_t rank = 0; rank < 4; ++rank) {
      const std::uint64_t offset = rank * kCount * element;
      std::byte* base = arena + 8 * kCount * element;
      // (send, recv) pairs: the same buffer, either one inside the other at this rank's block, unrelated buffers,
      // and null ones.
      const std::pair<const void*, void*> pairs[] = {
          {base, base},    {base + offset, base}, {base, base + offset}, {base, arena},
          {nullptr, base}, {base, nullptr},       {nullptr, nullptr},    {base + element, base},
      };
      for (const auto& [send, recv] : pairs) {
        Sample s;
        s.send = send;
        s.recv = recv;
        s.count = kCount;
        s.datatype = datatype;
        s.root = 1;
        for (const Described& d : describe_every_call(s)) {
          SCOPED_TRACE(std::string(d.nccl_name) + " rank " + std::to_string(rank) + " element " +
                       std::to_string(element));
          const bool want = in_place_before_the_table(d.shape, rank, element);
          const bool got = detnccl::abi::is_in_place(*d.shape.row, d.shape.input.data, d.shape.output.data,
                                                     d.shape.count, element, rank);
          EXPECT_EQ(got, want) << "send " << send << " recv " << recv;
          (got ? in_place_seen : not_in_place_seen)++;
        }
      }
    }
  }
  EXPECT_GT(in_place_seen, 0);
  EXPECT_GT(not_in_place_seen, 0);
  // NCCL's conventions spelled out, for one rank whose offset differs from 0.
  std::byte* buffer = arena + 64;
  const auto row = [](std::string_view name) { return *detnccl::abi::traced_op_row_of_nccl_name(name); };
  EXPECT_TRUE(detnccl::abi::is_in_place(row("ncclAllReduce"), buffer, buffer, 10, 4, 3));
  EXPECT_FALSE(detnccl::abi::is_in_place(row("ncclAllReduce"), buffer, buffer + 4, 10, 4, 3));
  EXPECT_TRUE(detnccl::abi::is_in_place(row("ncclAllGather"), buffer + 3 * 10 * 4, buffer, 10, 4, 3));
  EXPECT_FALSE(detnccl::abi::is_in_place(row("ncclAllGather"), buffer, buffer, 10, 4, 3));
  EXPECT_TRUE(detnccl::abi::is_in_place(row("ncclReduceScatter"), buffer, buffer + 3 * 10 * 4, 10, 4, 3));
  EXPECT_FALSE(detnccl::abi::is_in_place(row("ncclReduceScatter"), buffer + 3 * 10 * 4, buffer, 10, 4, 3));
  EXPECT_TRUE(detnccl::abi::is_in_place(row("ncclBcast"), buffer, buffer, 10, 4, 3));
  EXPECT_FALSE(detnccl::abi::is_in_place(row("ncclSend"), buffer, buffer, 10, 4, 3));
  EXPECT_FALSE(detnccl::abi::is_in_place(row("ncclRecv"), buffer, buffer, 10, 4, 3));
}

// Every datatype number: its size is its C++ storage type's (collectives/dtype_arith.h's visit_dtype), floating
// exactly when that type is not an integer, its name the log's; the CLI sizes datatypes the same way.
TEST(NcclDatatypes, TableAgreesWithStorageTypesAndEveryReader) {
  std::set<std::string_view> names;
  for (int number = -3; number < 300; ++number) {
    SCOPED_TRACE("datatype " + std::to_string(number));
    std::size_t storage_size = 0;
    bool storage_floating = false;
    if (number >= 0 && number < ncclNumTypes) {
      ASSERT_TRUE(detnccl::arith::visit_dtype(static_cast<ncclDataType_t>(number), [&](auto value) {
        storage_size = sizeof(value);
        storage_floating = !std::is_integral_v<decltype(value)>;
      }));
      EXPECT_EQ(detnccl::abi::datatype_is_floating(static_cast<ncclDataType_t>(number)), storage_floating);
      EXPECT_EQ(detnccl::arith::dtype_size(static_cast<ncclDataType_t>(number)), storage_size);
      names.insert(detnccl::abi::datatype_name(number));
    }
    EXPECT_EQ(detnccl::abi::datatype_size(number), storage_size);
    EXPECT_EQ(detnccl::abi::datatype_kind(number) == detnccl::abi::DatatypeKind::kInvalid, storage_size == 0);
    EXPECT_EQ(detnccl::abi::datatype_name(number) == "?", storage_size == 0);
    if (number >= 0 && number <= 0xffff) {
      const auto field = static_cast<std::uint16_t>(number);
      EXPECT_EQ(detnccl::analysis::datatype_bytes(field), storage_size);
      EXPECT_EQ(detnccl::records::datatype_name(field), detnccl::abi::datatype_name(number));
    }
  }
  EXPECT_EQ(names.size(), static_cast<std::size_t>(ncclNumTypes));  // every name distinct
}

TEST(NcclDatatypes, RedopNamesCoverBuiltInUserAndNone) {
  std::set<std::string_view> names;
  for (int op = 0; op < ncclNumOps; ++op) names.insert(detnccl::abi::redop_name(op));
  EXPECT_EQ(names.size(), static_cast<std::size_t>(ncclNumOps));
  EXPECT_EQ(names.count("user") + names.count("none"), 0u);
  EXPECT_EQ(detnccl::abi::redop_name(ncclSum), "sum");
  EXPECT_EQ(detnccl::abi::redop_name(ncclAvg), "avg");
  EXPECT_EQ(detnccl::abi::redop_name(ncclNumOps), "user");
  EXPECT_EQ(detnccl::abi::redop_name(-1), "none");
  for (const int op : {-1, 0, 3, 4, 5, 1000}) {
    EXPECT_EQ(detnccl::records::redop_name(op), detnccl::abi::redop_name(op));
  }
}

}  // namespace
