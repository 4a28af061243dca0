// detnccl shim: waiting for a non-blocking communicator's enqueue (see non_blocking.h).
#include "interpose/non_blocking.h"

#include <chrono>
#include <thread>

#include "interpose/real_nccl.h"

namespace detnccl::interpose {

ncclResult_t wait_until_enqueued(ncclComm_t comm) noexcept {
  if (comm == nullptr) return ncclSuccess;
  for (unsigned polls = 0;; ++polls) {
    ncclResult_t state = ncclSuccess;
    if (const ncclResult_t queried = DETNCCL_REAL(ncclCommGetAsyncError)(comm, &state); queried != ncclSuccess) {
      return queried;
    }
    if (state != ncclInProgress) return state;
    // RATIONALE: NCCL's enqueue takes microseconds; yield first, then sleep briefly so that a long wait (peers still
    // joining) leaves the CPU to NCCL's own threads.
    if (polls < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

}  // namespace detnccl::interpose
