// How the traced test jobs (tests/trace_job.cc, tests/soak_job.cc) make one call of trace_job_script.h: the
// buffers each call needs, filled from the script, and the NCCL call itself.
#ifndef DETNCCL_TESTS_TRACE_JOB_CALLS_H
#define DETNCCL_TESTS_TRACE_JOB_CALLS_H

#include <cstddef>
#include <vector>

#include "tests/trace_job_script.h"

namespace detnccl::test {

// Buffers of one call: the input (or the in-place buffer) and the output, sized as the call needs.
struct Buffers {
  std::vector<std::byte> input;
  std::vector<std::byte> output;
};

// Makes `call` on `comm` (rank `rank` of `nranks`) with buffers set up in `b`; returns NCCL's result.
inline ncclResult_t issue_script_call(const ScriptCall& call, Buffers& b, int rank, int nranks, ncclComm_t comm) {
  const std::size_t element = 4;  // the script uses float32 and int32 only
  const std::size_t block = call.count * element;
  const std::size_t n = static_cast<std::size_t>(nranks);
  switch (call.op) {
    case records::OpId::kAllReduce:
      if (call.in_place) {
        b.output = call.input;
        return ncclAllReduce(b.output.data(), b.output.data(), call.count, call.datatype, call.redop, comm, nullptr);
      }
      b.input = call.input;
      b.output.assign(block, std::byte{0});
      return ncclAllReduce(b.input.data(), b.output.data(), call.count, call.datatype, call.redop, comm, nullptr);
    case records::OpId::kSend:
      b.input = call.input;
      return ncclSend(b.input.data(), call.count, call.datatype, call.peer, comm, nullptr);
    case records::OpId::kRecv:
      b.output.assign(block, std::byte{0});
      return ncclRecv(b.output.data(), call.count, call.datatype, call.peer, comm, nullptr);
    case records::OpId::kBroadcast:
      b.input = rank == call.peer ? call.input : std::vector<std::byte>(block);
      b.output.assign(block, std::byte{0});
      return ncclBroadcast(b.input.data(), b.output.data(), call.count, call.datatype, call.peer, comm, nullptr);
    case records::OpId::kAllGather:
      b.input = call.input;
      b.output.assign(block * n, std::byte{0});
      return ncclAllGather(b.input.data(), b.output.data(), call.count, call.datatype, comm, nullptr);
    case records::OpId::kReduceScatter:
      b.input = call.input;
      b.output.assign(block, std::byte{0});
      return ncclReduceScatter(b.input.data(), b.output.data(), call.count, call.datatype, call.redop, comm, nullptr);
    case records::OpId::kAlltoAll:
      b.input = call.input;
      b.output.assign(block * n, std::byte{0});
      return ncclAlltoAll(b.input.data(), b.output.data(), call.count, call.datatype, comm, nullptr);
    case records::OpId::kReduce:
      b.input = call.input;
      b.output.assign(block, std::byte{0});
      return ncclReduce(b.input.data(), b.output.data(), call.count, call.datatype, call.redop, call.peer, comm,
                        nullptr);
    case records::OpId::kGather:
      b.input = call.input;
      b.output.assign(rank == call.peer ? block * n : 0, std::byte{0});
      return ncclGather(b.input.data(), b.output.empty() ? nullptr : b.output.data(), call.count, call.datatype,
                        call.peer, comm, nullptr);
    case records::OpId::kScatter:
      b.input = call.input;
      b.output.assign(block, std::byte{0});
      return ncclScatter(b.input.empty() ? nullptr : b.input.data(), b.output.data(), call.count, call.datatype,
                         call.peer, comm, nullptr);
    case records::OpId::kBcast:
      b.output = rank == call.peer ? call.input : std::vector<std::byte>(block);
      return ncclBcast(b.output.data(), call.count, call.datatype, call.peer, comm, nullptr);
    default:
      return ncclInvalidUsage;
  }
}

}  // namespace detnccl::test

#endif  // DETNCCL_TESTS_TRACE_JOB_CALLS_H
