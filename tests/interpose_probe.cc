// A tiny NCCL program for the shim tests: prints what NCCL answers to a few calls, one line each, so that a run with
// the shim preloaded can be compared with a run without it. Linked against whichever NCCL the test chooses.
#include <cstdio>
#include <cstring>

#include "abi/nccl_abi.h"

int main() {
  int version = -1;
  const ncclResult_t version_result = ncclGetVersion(&version);
  std::printf("ncclGetVersion -> %d, version %d\n", static_cast<int>(version_result), version);

  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  const ncclResult_t id_result = ncclGetUniqueId(&id);
  std::printf("ncclGetUniqueId -> %d\n", static_cast<int>(id_result));

  ncclComm_t comm = nullptr;
  const ncclResult_t init_result = ncclCommInitRank(&comm, 1, id, 0);
  std::printf("ncclCommInitRank -> %d (%s)\n", static_cast<int>(init_result), ncclGetErrorString(init_result));
  const char* last = ncclGetLastError(comm);
  std::printf("ncclGetLastError -> %s\n", last != nullptr ? last : "(null)");
  if (init_result == ncclSuccess) {
    std::printf("ncclCommDestroy -> %d\n", static_cast<int>(ncclCommDestroy(comm)));
  }
  // Argument errors come back unchanged too.
  std::printf("ncclAllReduce(null comm) -> %d\n",
              static_cast<int>(ncclAllReduce(nullptr, nullptr, 1, ncclFloat32, ncclSum, nullptr, nullptr)));
  return 0;
}
