// soak_job: the long mixed workload of the soak test (test_soak.cc), run under hostnccl-run with the shim
// preloaded. Every step makes the calls of trace_job_script.h (every collective, a group with an in-place AllReduce
// and a Send/Recv ring, in-place calls) and checks each output; every --split-every steps it also splits the world
// communicator in two (even and odd ranks), makes an AllReduce and an AllGather on the half, checks them and
// destroys it. It samples its own memory and prints, at the end, one line per rank:
//   soak rank R: steps S splits P rss_anon_kib A0,A1,... rss_kib V0,V1,...
// (one sample after each tenth of the steps), so the test can see whether memory stays flat.
//   soak_job --steps N [--split-every K]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "tests/job_support.h"
#include "tests/trace_job_calls.h"
#include "tests/trace_job_script.h"

namespace {

using detnccl::records::OpId;
using detnccl::test::ScriptCall;

bool ok(ncclResult_t result, const char* what, int rank, int step) {
  if (result == ncclSuccess) return true;
  std::fprintf(stderr, "rank %d step %d: %s failed: %s\n", rank, step, what, ncclGetErrorString(result));
  return false;
}

using detnccl::test::Buffers;

// One field of /proc/self/status in KiB ("RssAnon:", "VmRSS:").
long status_kib(const char* field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field, 0) == 0) return std::atol(line.c_str() + std::strlen(field));
  }
  return -1;
}

// The half-world communicator's calls: an AllReduce (sum) and an AllGather of small integers, checked.
bool split_round(ncclComm_t world, int rank, int nranks, int step) {
  ncclComm_t half = nullptr;
  if (!ok(ncclCommSplit(world, rank % 2, rank, &half, nullptr), "ncclCommSplit", rank, step)) return false;
  int half_size = 0, half_rank = 0;
  ncclCommCount(half, &half_size);
  ncclCommUserRank(half, &half_rank);
  constexpr std::size_t kCount = 257;
  std::vector<float> in(kCount), sum(kCount), gathered(kCount * static_cast<std::size_t>(half_size));
  for (std::size_t i = 0; i < kCount; ++i) in[i] = static_cast<float>((rank + step + i) % 31);
  bool good =
      ok(ncclAllReduce(in.data(), sum.data(), kCount, ncclFloat32, ncclSum, half, nullptr), "split AllReduce", rank,
         step) &&
      ok(ncclAllGather(in.data(), gathered.data(), kCount, ncclFloat32, half, nullptr), "split AllGather", rank, step);
  for (std::size_t i = 0; good && i < kCount; ++i) {
    float expected = 0;
    for (int r = rank % 2; r < nranks; r += 2) expected += static_cast<float>((r + step + i) % 31);
    int member = 0;
    for (int r = rank % 2; r < nranks; r += 2, ++member) {
      if (gathered[static_cast<std::size_t>(member) * kCount + i] != static_cast<float>((r + step + i) % 31)) {
        good = false;
      }
    }
    if (sum[i] != expected) good = false;
  }
  if (!good) std::fprintf(stderr, "rank %d step %d: wrong output on the split communicator\n", rank, step);
  return ok(ncclCommDestroy(half), "ncclCommDestroy", rank, step) && good;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 100;
  int split_every = 10;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--steps" && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (arg == "--split-every" && i + 1 < argc) {
      split_every = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s --steps N [--split-every K]\n", argv[0]);
      return 2;
    }
  }
  const detnccl::test::JobRank job = detnccl::test::job_rank_from_environment();
  const int rank = job.rank;
  const int nranks = job.nranks;
  const auto set_step = detnccl::test::find_set_step();
  ncclComm_t comm = detnccl::test::init_job_communicator(job);
  if (comm == nullptr) return 1;

  std::string anon_samples, rss_samples;
  int splits = 0;
  for (int step = 0; step < steps; ++step) {
    if (set_step != nullptr) set_step(static_cast<std::uint64_t>(step));
    const std::vector<ScriptCall> calls = detnccl::test::script_step(rank, nranks, static_cast<std::uint64_t>(step));
    std::vector<Buffers> buffers(calls.size());
    bool in_group = false;
    for (std::size_t c = 0; c < calls.size(); ++c) {
      if (calls[c].grouped && !in_group) {
        if (!ok(ncclGroupStart(), "ncclGroupStart", rank, step)) return 1;
        in_group = true;
      }
      if (!ok(detnccl::test::issue_script_call(calls[c], buffers[c], rank, nranks, comm), "a call", rank, step))
        return 1;
      if (in_group && (c + 1 == calls.size() || !calls[c + 1].grouped)) {
        if (!ok(ncclGroupEnd(), "ncclGroupEnd", rank, step)) return 1;
        in_group = false;
      }
    }
    for (std::size_t c = 0; c < calls.size(); ++c) {
      if (calls[c].has_output && buffers[c].output != calls[c].output) {
        std::fprintf(stderr, "rank %d step %d call %zu: wrong output\n", rank, step, c);
        return 1;
      }
    }
    if (split_every > 0 && step % split_every == split_every - 1) {
      if (!split_round(comm, rank, nranks, step)) return 1;
      ++splits;
    }
    if ((step + 1) % std::max(1, steps / 10) == 0) {
      anon_samples += (anon_samples.empty() ? "" : ",") + std::to_string(status_kib("RssAnon:"));
      rss_samples += (rss_samples.empty() ? "" : ",") + std::to_string(status_kib("VmRSS:"));
    }
  }
  if (!ok(ncclCommDestroy(comm), "ncclCommDestroy", rank, steps)) return 1;
  std::printf("soak rank %d: steps %d splits %d rss_anon_kib %s rss_kib %s\n", rank, steps, splits,
              anon_samples.c_str(), rss_samples.c_str());
  return 0;
}
