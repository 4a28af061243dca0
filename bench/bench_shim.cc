// bench_shim: what the shim adds to every NCCL call, in ns, against a direct call of the same backend function
// measured in the same run.
//
//   (a) shim loaded, everything off (no DETNCCL_DIR): the wrapper's one branch and the indirect call.
//   (b) tracing at `meta` level: a call record per call, no fingerprints.
//   (c) tracing at `hash` level, for scale (fingerprints of 4 KiB in, 4 KiB out).
// Each mode runs in a child process started with LD_PRELOAD=libdetnccl.so and the mode's DETNCCL_* variables. In
// the child, `ncclAllReduce` binds to the shim while `pncclAllReduce` is hostnccl's own strong symbol: the direct
// call. Both are timed in alternating blocks on a one-rank communicator, and the median block of each is kept.
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "abi/nccl_abi.h"

namespace {

using Clock = std::chrono::steady_clock;
using AllReduce = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// ns per call of `function`, one block of `calls` calls.
double time_block(AllReduce function, const float* in, float* out, size_t count, ncclComm_t comm, int calls) {
  const auto start = Clock::now();
  for (int i = 0; i < calls; ++i) function(in, out, count, ncclFloat32, ncclSum, comm, nullptr);
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count() / calls;
}

int child(const char* mode) {
  ncclUniqueId id;
  ncclComm_t comm = nullptr;
  if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess) {
    std::fprintf(stderr, "cannot create a communicator\n");
    return 1;
  }
  const size_t count = 1024;  // 4 KiB
  std::vector<float> in(count, 1.0f), out(count);
  const int calls = 2000, blocks = 41;
  std::vector<double> direct, shim;
  time_block(&pncclAllReduce, in.data(), out.data(), count, comm, calls);  // warm-up
  time_block(&ncclAllReduce, in.data(), out.data(), count, comm, calls);
  for (int b = 0; b < blocks; ++b) {
    direct.push_back(time_block(&pncclAllReduce, in.data(), out.data(), count, comm, calls));
    shim.push_back(time_block(&ncclAllReduce, in.data(), out.data(), count, comm, calls));
  }
  ncclCommDestroy(comm);
  const double d = median(direct), s = median(shim);
  std::printf("%-22s %12.1f %12.1f %12.1f %10.3f\n", mode, d, s, s - d, s / d);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--child") == 0) return child(argv[2]);
  if (argc != 1) {
    std::fprintf(stderr, "usage: %s   (runs its measurements in child processes under LD_PRELOAD)\n", argv[0]);
    return argc == 2 && std::strcmp(argv[1], "--help") == 0 ? 0 : 2;
  }
  char dir_template[] = "/tmp/detnccl-bench-shim-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (dir == nullptr) return 1;
  struct Mode {
    const char* name;
    std::vector<std::string> environment;
  };
  const std::string d = dir;
  const std::vector<Mode> modes = {
      {"(a) shim, all off", {}},
      {"(b) tracing: meta", {"DETNCCL_DIR=" + d, "DETNCCL_RUN=meta", "DETNCCL_TRACE=meta"}},
      {"(c) tracing: hash", {"DETNCCL_DIR=" + d, "DETNCCL_RUN=hash", "DETNCCL_TRACE=hash"}},
  };
  std::printf("per-call cost of the shim, 1-rank hostnccl AllReduce of 4 KiB fp32 (median of 41 blocks of 2000)\n");
  std::printf("%-22s %12s %12s %12s %10s\n", "mode", "direct ns", "shim ns", "added ns", "ratio");
  int status = 0;
  for (const Mode& mode : modes) {
    std::fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
      setenv("LD_PRELOAD", DETNCCL_SHIM_PATH, 1);
      for (const std::string& entry : mode.environment) putenv(const_cast<char*>(entry.c_str()));
      execl("/proc/self/exe", argv[0], "--child", mode.name, static_cast<char*>(nullptr));
      _exit(127);
    }
    int child_status = 0;
    waitpid(pid, &child_status, 0);
    if (!WIFEXITED(child_status) || WEXITSTATUS(child_status) != 0) status = 1;
  }
  std::filesystem::remove_all(dir);
  std::printf("targets on a CI-class 2-core machine: (a) under 20 ns added, (b) under 1000 ns added\n");
  return status;
}
