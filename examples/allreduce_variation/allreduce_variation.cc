// allreduce_variation: why detnccl exists, in one small job.
//
// Every rank contributes values of widely varying magnitude and the job all-reduces them (fp32 sum) many times with
// exactly the same inputs. Floating-point addition is not associative, so the bits of the result depend on the order
// in which the contributions are added. Over hostnccl's default arrival order (as over NCCL's algorithm, protocol
// and channel choices on a GPU cluster) that order changes from call to call; in rank order it never does.
//
// Run under hostnccl-run: `hostnccl-run -n 4 allreduce_variation [--calls N] [--count N]`. Rank 0 prints how many
// distinct results (by fingerprint) the identical calls produced; `--expect-identical` makes more than one an error.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "abi/nccl_abi.h"
#include "hash/fingerprint.h"
#include "launcher/bootstrap.h"

namespace {

int environment_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::atoi(value) : fallback;
}

// Values spanning 40 decimal orders of magnitude, with both signs, fixed per (rank, index).
std::vector<float> wide_magnitude_values(int rank, size_t count) {
  std::mt19937_64 generator(0x5eed0000u + static_cast<unsigned>(rank));
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-20, 20);
  std::vector<float> values(count);
  for (float& v : values) v = (generator() & 1 ? -1.0f : 1.0f) * mantissa(generator) * std::pow(10.0f, exponent(generator));
  return values;
}

bool check(ncclResult_t result, const char* what) {
  if (result == ncclSuccess) return true;
  std::fprintf(stderr, "%s failed: %s (%s)\n", what, ncclGetErrorString(result), ncclGetLastError(nullptr));
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  int calls = 20;
  size_t count = 1 << 14;
  bool expect_identical = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--calls" && i + 1 < argc) {
      calls = std::atoi(argv[++i]);
    } else if (arg == "--count" && i + 1 < argc) {
      count = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--expect-identical") {
      expect_identical = true;
    } else {
      std::fprintf(stderr, "usage: %s [--calls N] [--count N] [--expect-identical]  (run under hostnccl-run)\n",
                   argv[0]);
      return arg == "--help" || arg == "-h" ? 0 : 2;
    }
  }
  const int rank = environment_int("RANK", 0);
  const int world = environment_int("WORLD_SIZE", 1);

  ncclUniqueId id;
  std::string error;
  if (!detnccl::share_unique_id(rank, &id, &error)) {
    std::fprintf(stderr, "cannot share the NCCL unique id: %s\n", error.c_str());
    return 1;
  }
  ncclComm_t comm = nullptr;
  if (!check(ncclCommInitRank(&comm, world, id, rank), "ncclCommInitRank")) return 1;

  const std::vector<float> input = wide_magnitude_values(rank, count);
  std::vector<float> output(count);
  std::set<uint64_t> distinct;
  for (int call = 0; call < calls; ++call) {
    if (!check(ncclAllReduce(input.data(), output.data(), count, ncclFloat32, ncclSum, comm, nullptr),
               "ncclAllReduce")) {
      return 1;
    }
    distinct.insert(detnccl::hash::fingerprint(output.data(), output.size() * sizeof(float)));
  }
  check(ncclCommDestroy(comm), "ncclCommDestroy");

  if (rank == 0) {
    const char* order = std::getenv("HOSTNCCL_REDUCE_ORDER");
    std::printf("%d identical fp32 AllReduce calls over %d ranks (%s order): %zu distinct result%s\n", calls, world,
                order != nullptr ? order : "arrival", distinct.size(), distinct.size() == 1 ? "" : "s");
  }
  return expect_identical && distinct.size() != 1 ? 1 : 0;
}
