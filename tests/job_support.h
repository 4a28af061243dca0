// The start-up shared by the test jobs that hostnccl-run starts (trace_job, soak_job, test_faults_job, api_tour_job):
// this rank's place in the job, the shim's step marker, and the communicator over the whole job.
#ifndef DETNCCL_TESTS_JOB_SUPPORT_H
#define DETNCCL_TESTS_JOB_SUPPORT_H

#include <dlfcn.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "abi/nccl_abi.h"
#include "collectives/dtype_arith.h"
#include "launcher/bootstrap.h"

namespace detnccl::test {

// An integer environment variable; `fallback` when it is unset or empty.
inline int environment_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::atoi(value) : fallback;
}

// This process's place in the job, from RANK and WORLD_SIZE as hostnccl-run sets them (0 and 1 when unset).
struct JobRank {
  int rank = 0;
  int nranks = 1;
};
inline JobRank job_rank_from_environment() { return {environment_int("RANK", 0), environment_int("WORLD_SIZE", 1)}; }

// The shim's detnccl_set_step when the shim is preloaded, else null: looked up with dlsym, so that the job also runs
// without the shim.
using SetStepFunction = void (*)(std::uint64_t);
inline SetStepFunction find_set_step() {
  return reinterpret_cast<SetStepFunction>(dlsym(RTLD_DEFAULT, "detnccl_set_step"));
}

// Gives every rank the job's ncclUniqueId (hostnccl-run's bootstrap, launcher/bootstrap.h); false, with a
// message on stderr, when it cannot.
inline bool share_job_unique_id(int rank, ncclUniqueId* id) {
  std::string error;
  if (share_unique_id(rank, id, &error)) return true;
  std::fprintf(stderr, "cannot share the unique id: %s\n", error.c_str());
  return false;
}

// A blocking communicator over the whole job (share_job_unique_id, then ncclCommInitRank); null, with a message on
// stderr, when it cannot be made.
inline ncclComm_t init_job_communicator(const JobRank& job) {
  ncclUniqueId id;
  if (!share_job_unique_id(job.rank, &id)) return nullptr;
  ncclComm_t comm = nullptr;
  const ncclResult_t result = ncclCommInitRank(&comm, job.nranks, id, job.rank);
  if (result == ncclSuccess) return comm;
  std::fprintf(stderr, "rank %d: ncclCommInitRank failed: %s (%s)\n", job.rank, ncclGetErrorString(result),
               ncclGetLastError(nullptr));
  return nullptr;
}

// Values of rank r at step s spanning 40 decimal orders of magnitude, both signs (as examples/allreduce_variation):
// their fp32 sum depends on the order of addition.
inline std::vector<float> wide_magnitude_values(int rank, int step, std::size_t count) {
  std::mt19937_64 generator(0x5eed0000u + static_cast<unsigned>(rank) * 7919u + static_cast<unsigned>(step));
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-20, 20);
  std::vector<float> values(count);
  for (float& v : values) {
    v = (generator() & 1 ? -1.0f : 1.0f) * mantissa(generator) *
        std::pow(10.0f, static_cast<float>(exponent(generator)));
  }
  return values;
}

// wide_magnitude_values rounded to bfloat16 (round to nearest even, collectives/dtype_arith.h): the bits of a bf16
// job's input. bf16 keeps fp32's exponent range, so the values span the same 40 orders of magnitude.
inline std::vector<std::uint16_t> wide_magnitude_bf16(int rank, int step, std::size_t count) {
  const std::vector<float> values = wide_magnitude_values(rank, step, count);
  std::vector<std::uint16_t> bits(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) bits[i] = detnccl::arith::float_to_bf16(values[i]);
  return bits;
}

}  // namespace detnccl::test

#endif  // DETNCCL_TESTS_JOB_SUPPORT_H
