// detnccl shim: reading a pointer-sized value the job may have freed since (a split's *newcomm that NCCL fills in
// late), without faulting when it is gone.
#ifndef DETNCCL_INTERPOSE_SAFE_READ_H
#define DETNCCL_INTERPOSE_SAFE_READ_H

#include <sys/uio.h>
#include <unistd.h>

#include "abi/nccl_abi.h"

namespace detnccl::interpose {

// The handle at `address` when that memory is still readable; nullptr when it is not. process_vm_readv on this
// process reports EFAULT instead of faulting (it is a system call: for rare paths only).
inline ncclComm_t read_if_mapped(ncclComm_t* address) noexcept {
  ncclComm_t value = nullptr;
  iovec local{&value, sizeof value}, remote{address, sizeof value};
  return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == static_cast<ssize_t>(sizeof value) ? value : nullptr;
}

}  // namespace detnccl::interpose

#endif  // DETNCCL_INTERPOSE_SAFE_READ_H
