#include "examples/train/data_parallel_group.h"

namespace train {

std::string nccl_failure(const char* what, ncclResult_t result) {
  const char* last = ncclGetLastError(nullptr);
  return std::string(what) + " failed: " + ncclGetErrorString(result) +
         (last != nullptr && *last != '\0' ? std::string(" (") + last + ")" : std::string());
}

}  // namespace train
