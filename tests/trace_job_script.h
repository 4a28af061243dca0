// The script of tests/trace_job.cc: which NCCL calls it makes at each step, with which inputs, and what each call's
// output must be. The expected outputs are computed here from the definition of each collective (sums, maxima,
// concatenations of small integers, exact in every type), independently of any NCCL implementation, so that the
// job can check hostnccl and the tests can check the fingerprints the shim recorded.
#ifndef DETNCCL_TESTS_TRACE_JOB_SCRIPT_H
#define DETNCCL_TESTS_TRACE_JOB_SCRIPT_H

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "abi/nccl_abi.h"
#include "records/log_format.h"

namespace detnccl::test {

// Elements per rank-sized block (a prime, so that blocks never align with anything by luck).
inline constexpr std::size_t kScriptCount = 1031;

// The value rank r contributes at position i of call c of step s: a small integer, exact in float and int32.
inline float script_value(int rank, std::uint64_t step, int call, std::size_t i) {
  return static_cast<float>(
      (static_cast<std::uint64_t>(rank + 1) * 7 + step * 3 + static_cast<std::uint64_t>(call) * 5 + i) % 251);
}

struct ScriptCall {
  records::OpId op = records::OpId::kUnknown;
  ncclDataType_t datatype = ncclFloat32;
  ncclRedOp_t redop = ncclSum;
  bool has_redop = false;
  int peer = -1;                     // root or peer
  std::size_t count = kScriptCount;  // the count argument
  bool in_place = false;
  bool grouped = false;           // inside the step's one ncclGroupStart/End
  std::vector<std::byte> input;   // empty: this rank has no input (a non-root's Broadcast input)
  std::vector<std::byte> output;  // empty: this rank has no output
  bool has_input = false;
  bool has_output = false;
  std::size_t blocks = 0;  // per-peer blocks recorded (AlltoAll, Gather, Scatter, AllGather)
  bool blocks_on_input = false;
};

template <class T>
std::vector<std::byte> bytes_of(const std::vector<T>& values) {
  std::vector<std::byte> bytes(values.size() * sizeof(T));
  if (!bytes.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// Values of rank r for call c over n elements (positions offset .. offset + n - 1), as float or int32.
inline std::vector<float> float_values(int r, std::uint64_t s, int c, std::size_t offset, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = script_value(r, s, c, offset + i);
  return v;
}
inline std::vector<std::int32_t> int_values(int r, std::uint64_t s, int c, std::size_t offset, std::size_t n) {
  std::vector<std::int32_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::int32_t>(script_value(r, s, c, offset + i));
  return v;
}

// The calls of one step, for rank `rank` of `nranks`, in the order the job makes them.
inline std::vector<ScriptCall> script_step(int rank, int nranks, std::uint64_t step) {
  const std::size_t C = kScriptCount;
  std::vector<ScriptCall> calls;
  auto add = [&](records::OpId op) -> ScriptCall& {
    calls.emplace_back();
    calls.back().op = op;
    return calls.back();
  };
  auto sum_over_ranks = [&](int c, std::size_t offset, std::size_t n) {
    std::vector<float> total(n, 0.0f);
    for (int r = 0; r < nranks; ++r) {
      const auto v = float_values(r, step, c, offset, n);
      for (std::size_t i = 0; i < n; ++i) total[i] += v[i];
    }
    return total;
  };
  {  // 0: AllReduce sum, out of place
    ScriptCall& call = add(records::OpId::kAllReduce);
    call.has_redop = true;
    call.input = bytes_of(float_values(rank, step, 0, 0, C));
    call.output = bytes_of(sum_over_ranks(0, 0, C));
  }
  {  // 1: AllReduce sum, in place
    ScriptCall& call = add(records::OpId::kAllReduce);
    call.has_redop = true;
    call.in_place = true;
    call.input = bytes_of(float_values(rank, step, 1, 0, C));
    call.output = bytes_of(sum_over_ranks(1, 0, C));
  }
  {  // 2: grouped in-place int32 AllReduce (max)
    ScriptCall& call = add(records::OpId::kAllReduce);
    call.datatype = ncclInt32;
    call.redop = ncclMax;
    call.has_redop = true;
    call.in_place = true;
    call.grouped = true;
    std::vector<std::int32_t> maximum = int_values(0, step, 2, 0, C);
    for (int r = 1; r < nranks; ++r) {
      const auto v = int_values(r, step, 2, 0, C);
      for (std::size_t i = 0; i < C; ++i) maximum[i] = std::max(maximum[i], v[i]);
    }
    call.input = bytes_of(int_values(rank, step, 2, 0, C));
    call.output = bytes_of(maximum);
  }
  const int next = (rank + 1) % nranks;
  const int previous = (rank + nranks - 1) % nranks;
  {  // 3: grouped Send to the next rank
    ScriptCall& call = add(records::OpId::kSend);
    call.peer = next;
    call.grouped = true;
    call.input = bytes_of(float_values(rank, step, 3, 0, C));
  }
  {  // 4: grouped Recv from the previous rank
    ScriptCall& call = add(records::OpId::kRecv);
    call.peer = previous;
    call.grouped = true;
    call.output = bytes_of(float_values(previous, step, 3, 0, C));
  }
  {  // 5: Broadcast from root 0
    ScriptCall& call = add(records::OpId::kBroadcast);
    call.peer = 0;
    if (rank == 0) call.input = bytes_of(float_values(0, step, 5, 0, C));
    call.output = bytes_of(float_values(0, step, 5, 0, C));
  }
  {  // 6: AllGather
    ScriptCall& call = add(records::OpId::kAllGather);
    call.input = bytes_of(float_values(rank, step, 6, 0, C));
    std::vector<float> all;
    for (int r = 0; r < nranks; ++r) {
      const auto v = float_values(r, step, 6, 0, C);
      all.insert(all.end(), v.begin(), v.end());
    }
    call.output = bytes_of(all);
    call.blocks = static_cast<std::size_t>(nranks);
  }
  {  // 7: ReduceScatter sum
    ScriptCall& call = add(records::OpId::kReduceScatter);
    call.has_redop = true;
    call.input = bytes_of(float_values(rank, step, 7, 0, C * static_cast<std::size_t>(nranks)));
    call.output = bytes_of(sum_over_ranks(7, static_cast<std::size_t>(rank) * C, C));
  }
  {  // 8: AlltoAll: block p of rank r's input goes to rank p
    ScriptCall& call = add(records::OpId::kAlltoAll);
    call.input = bytes_of(float_values(rank, step, 8, 0, C * static_cast<std::size_t>(nranks)));
    std::vector<float> received;
    for (int p = 0; p < nranks; ++p) {
      const auto v = float_values(p, step, 8, static_cast<std::size_t>(rank) * C, C);
      received.insert(received.end(), v.begin(), v.end());
    }
    call.output = bytes_of(received);
    call.blocks = static_cast<std::size_t>(nranks);
    call.blocks_on_input = true;
  }
  {  // 9: Reduce (max) to the last rank
    ScriptCall& call = add(records::OpId::kReduce);
    call.redop = ncclMax;
    call.has_redop = true;
    call.peer = nranks - 1;
    call.input = bytes_of(float_values(rank, step, 9, 0, C));
    if (rank == nranks - 1) {
      std::vector<float> maximum = float_values(0, step, 9, 0, C);
      for (int r = 1; r < nranks; ++r) {
        const auto v = float_values(r, step, 9, 0, C);
        for (std::size_t i = 0; i < C; ++i) maximum[i] = std::max(maximum[i], v[i]);
      }
      call.output = bytes_of(maximum);
    }
  }
  {  // 10: Gather to root 0
    ScriptCall& call = add(records::OpId::kGather);
    call.peer = 0;
    call.input = bytes_of(float_values(rank, step, 10, 0, C));
    if (rank == 0) {
      std::vector<float> all;
      for (int r = 0; r < nranks; ++r) {
        const auto v = float_values(r, step, 10, 0, C);
        all.insert(all.end(), v.begin(), v.end());
      }
      call.output = bytes_of(all);
      call.blocks = static_cast<std::size_t>(nranks);
    }
  }
  {  // 11: Scatter from root 0
    ScriptCall& call = add(records::OpId::kScatter);
    call.peer = 0;
    if (rank == 0) {
      call.input = bytes_of(float_values(0, step, 11, 0, C * static_cast<std::size_t>(nranks)));
      call.blocks = static_cast<std::size_t>(nranks);
      call.blocks_on_input = true;
    }
    call.output = bytes_of(float_values(0, step, 11, static_cast<std::size_t>(rank) * C, C));
  }
  {  // 12: Bcast (one buffer) from the last rank
    ScriptCall& call = add(records::OpId::kBcast);
    const int root = nranks - 1;
    call.peer = root;
    call.in_place = true;
    if (rank == root) call.input = bytes_of(float_values(root, step, 12, 0, C));
    call.output = bytes_of(float_values(root, step, 12, 0, C));
  }
  for (ScriptCall& call : calls) {
    call.has_input = !call.input.empty();
    call.has_output = !call.output.empty();
  }
  return calls;
}

}  // namespace detnccl::test

#endif  // DETNCCL_TESTS_TRACE_JOB_SCRIPT_H
