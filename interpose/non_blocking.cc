// detnccl shim: waiting for a non-blocking communicator's enqueue (see non_blocking.h).
#include "interpose/non_blocking.h"

#include "collectives/deterministic.h"
#include "interpose/real_nccl.h"

namespace detnccl::interpose {

ncclResult_t wait_until_enqueued(ncclComm_t comm) noexcept {
  if (comm == nullptr) return ncclSuccess;
  return collectives::wait_while_in_progress(DETNCCL_REAL(ncclCommGetAsyncError), comm);
}

}  // namespace detnccl::interpose
