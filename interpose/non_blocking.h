// detnccl shim: non-blocking communicators (ncclConfig_t.blocking = 0). Their calls may return ncclInProgress
// before NCCL has enqueued the work on the stream; the job then polls ncclCommGetAsyncError. Whatever the shim adds
// after such a call (output fingerprints, a deterministic reduction's kernels) must wait for that enqueue, or it would
// run before the operation it belongs after.
#pragma once

#include "abi/nccl_abi.h"

namespace detnccl::interpose {

// Polls the real ncclCommGetAsyncError while `comm` says ncclInProgress; returns the state it settled in (ncclSuccess,
// or the communicator's error). Returns at once for a blocking communicator, or when the query itself fails.
ncclResult_t wait_until_enqueued(ncclComm_t comm) noexcept;

}  // namespace detnccl::interpose
