/* hostnccl: device buffers, staged through host memory (CUDA builds only).
 *
 * hostnccl moves data with the CPU, so a buffer in GPU memory is copied into a host shadow when the call is issued
 * (in the call's stream order: the copy waits for the work enqueued before the call) and the shadow of an output is
 * copied back, again on the call's stream, when the operation completes. The op in between only ever sees host
 * memory. This lets several ranks share one GPU through hostnccl (real NCCL refuses two ranks on one device), which is
 * how detnccl's GPU paths are tested with more than one rank.
 *
 * Pinned or registered host memory is staged the same way: NCCL reads and writes it on the stream too, so a kernel
 * still writing a send buffer must finish before hostnccl reads it. An input is read where NCCL would enqueue its
 * kernel (Op::launch): at the call, or at the outermost ncclGroupEnd of a group.
 *
 * The CUDA driver is looked up, never loaded: with no libcuda.so.1 in the process every buffer is host memory and
 * nothing here costs more than a null check. In a build without CUDA (HOSTNCCL_DEVICE_BUFFERS undefined) the lookup
 * is compiled out and device pointers are not recognised (as before).
 */
#ifndef DETNCCL_HOSTNCCL_DEVICE_STAGING_H
#define DETNCCL_HOSTNCCL_DEVICE_STAGING_H

#include <cstddef>
#include <memory>

#include "abi/nccl_abi.h"
#include "hostnccl/ops.h"

namespace hostnccl {

/* Looks up the CUDA driver if this process has loaded it (called when a communicator is created; cheap once found). */
void refresh_device_driver();

/* True when `data` is memory the CUDA driver knows: device or managed memory, or pinned / registered host memory.
 * NCCL reads and writes all of it on the call's stream, so hostnccl stages it in the stream's order too. */
bool is_cuda_buffer(const void* data);

/* Copies `bytes` bytes from `source` (host or device memory) to the host memory `destination`, after the work
 * enqueued on `stream`. Returns ncclUnhandledCudaError (with the last-error text set) when a CUDA call fails. */
ncclResult_t copy_to_host(void* destination, const void* source, std::size_t bytes, cudaStream_t stream);

/* A collective whose device buffers are staged: `send_bytes` / `recv_bytes` are the extents this rank reads / writes
 * (0 when it does not use the buffer). Without device buffers this is make_coll_op(comm, args) itself. */
ncclResult_t make_staged_coll_op(Comm* comm, const CollArgs& args, std::size_t send_bytes, std::size_t recv_bytes,
                                 cudaStream_t stream, std::unique_ptr<Op>* op);

/* Send / receive with a possibly device buffer (see make_send_op, make_recv_op). */
ncclResult_t make_staged_send_op(Comm* comm, const void* data, std::size_t bytes, int peer, cudaStream_t stream,
                                 std::unique_ptr<Op>* op);
ncclResult_t make_staged_recv_op(Comm* comm, void* data, std::size_t bytes, int peer, cudaStream_t stream,
                                 std::unique_ptr<Op>* op);

}  // namespace hostnccl

#endif  // DETNCCL_HOSTNCCL_DEVICE_STAGING_H
