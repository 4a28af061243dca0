// api_tour_job: the communicator-level NCCL API through the shim — splits (with NCCL_SPLIT_NOCOLOR), PreMulSum with
// a host-immediate and a pointer scalar, the queries, an entry point hostnccl does not implement, finalize, destroy
// and abort. Run under hostnccl-run with 4 ranks; the shim test checks the records it leaves.
// Every call's result is checked here; the job prints one line per rank and exits non-zero on any surprise.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/job_support.h"

namespace {

int failures = 0;

void expect(bool condition, const char* what, int rank) {
  if (!condition) {
    std::fprintf(stderr, "rank %d: %s\n", rank, what);
    ++failures;
  }
}

}  // namespace

int main() {
  const detnccl::test::JobRank job = detnccl::test::job_rank_from_environment();
  const int rank = job.rank;
  const int nranks = job.nranks;
  ncclUniqueId id;
  if (!detnccl::test::share_job_unique_id(rank, &id)) return 1;
  ncclComm_t world = nullptr;
  expect(ncclCommInitRank(&world, nranks, id, rank) == ncclSuccess, "init", rank);
  int count = 0, me = -1, device = -1;
  ncclResult_t async = ncclInternalError;
  expect(ncclCommCount(world, &count) == ncclSuccess && count == nranks, "count", rank);
  expect(ncclCommUserRank(world, &me) == ncclSuccess && me == rank, "user rank", rank);
  expect(ncclCommCuDevice(world, &device) == ncclSuccess, "device", rank);
  expect(ncclCommGetAsyncError(world, &async) == ncclSuccess && async == ncclSuccess, "async error", rank);

  // Split 1: even and odd ranks, keys reversed. Split 2: the last rank opts out. Split 3: everyone, one color.
  ncclComm_t halves = nullptr, without_last = nullptr, all = nullptr;
  expect(ncclCommSplit(world, rank % 2, -rank, &halves, nullptr) == ncclSuccess && halves != nullptr, "split 1", rank);
  const int color2 = rank == nranks - 1 ? NCCL_SPLIT_NOCOLOR : 7;
  expect(ncclCommSplit(world, color2, rank, &without_last, nullptr) == ncclSuccess, "split 2", rank);
  expect((without_last == nullptr) == (rank == nranks - 1), "split 2 gives no communicator to the last rank", rank);
  expect(ncclCommSplit(world, 0, rank, &all, nullptr) == ncclSuccess && all != nullptr, "split 3", rank);

  std::vector<float> in(257), out(257);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(rank + 1);
  expect(ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat32, ncclSum, halves, nullptr) == ncclSuccess,
         "allreduce on a split", rank);

  // PreMulSum: host-immediate 0.5, and a scalar read through a pointer at each call.
  float half = 0.5f, two = 2.0f;
  ncclRedOp_t premul_host, premul_pointer;
  expect(ncclRedOpCreatePreMulSum(&premul_host, &half, ncclFloat32, ncclScalarHostImmediate, world) == ncclSuccess,
         "premulsum host", rank);
  expect(ncclRedOpCreatePreMulSum(&premul_pointer, &two, ncclFloat32, ncclScalarDevice, world) == ncclSuccess,
         "premulsum pointer", rank);
  expect(ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat32, premul_host, world, nullptr) == ncclSuccess,
         "premulsum host allreduce", rank);
  const float expected_half = 0.5f * static_cast<float>(nranks * (nranks + 1) / 2);
  expect(out[0] == expected_half, "premulsum host result", rank);
  expect(ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat32, premul_pointer, world, nullptr) == ncclSuccess,
         "premulsum pointer allreduce", rank);
  expect(ncclRedOpDestroy(premul_host, world) == ncclSuccess, "redop destroy", rank);
  expect(ncclRedOpDestroy(premul_pointer, world) == ncclSuccess, "redop destroy", rank);

  // An entry point hostnccl does not implement: its own code and message come back through the shim.
  void* memory = nullptr;
  expect(ncclMemAlloc(&memory, 64) == ncclInvalidUsage, "ncclMemAlloc is unimplemented on hostnccl", rank);
  const char* last = ncclGetLastError(nullptr);
  expect(last != nullptr && std::strstr(last, "ncclMemAlloc") != nullptr, "last error names ncclMemAlloc", rank);
  expect(std::strcmp(ncclGetErrorString(ncclInvalidUsage), "invalid usage (run with NCCL_DEBUG=WARN for details)") == 0,
         "error string", rank);

  expect(ncclCommFinalize(halves) == ncclSuccess && ncclCommDestroy(halves) == ncclSuccess, "finalize+destroy", rank);
  if (without_last != nullptr) expect(ncclCommDestroy(without_last) == ncclSuccess, "destroy", rank);
  expect(ncclCommDestroy(all) == ncclSuccess, "destroy all", rank);
  expect(ncclCommAbort(world) == ncclSuccess, "abort", rank);
  std::printf("api_tour_job rank %d: %s\n", rank, failures == 0 ? "every call as expected" : "FAILURES");
  return failures == 0 ? 0 : 1;
}
