// simulate_end_stub: a stand-in for NCCL's ncclGroupSimulateEnd, which hostnccl does not implement, preloaded after
// the shim by ShimTrace.GroupSimulateEndClosesTheShimsGroupToo. Like NCCL's, it ends the group; it does so by
// calling hostnccl's ncclGroupEnd (the test's simulated group is empty, so there is nothing to run or not run) and
// estimates 0 us.
#include <dlfcn.h>

#include "abi/nccl_abi.h"

extern "C" __attribute__((visibility("default"))) ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  using GroupEnd = ncclResult_t (*)();
  static const auto group_end = reinterpret_cast<GroupEnd>(dlsym(RTLD_DEFAULT, "pncclGroupEnd"));
  if (simInfo != nullptr) simInfo->estimatedTime = 0;
  return group_end != nullptr ? group_end() : ncclInternalError;
}
