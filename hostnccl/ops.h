/* hostnccl: every operation as a non-blocking state machine.
 *
 * An Op never waits: advance() moves it as far as it can go right now and returns. The progress loop
 * (progress.h) calls advance() on all of a thread's pending ops in turn, which is why grouped operations among many
 * peers and communicators cannot deadlock: no op ever holds the thread while another op of the same thread is the
 * one a peer needs.
 *
 * Ordering: collectives (and splits) of one communicator run one at a time in issue order; sends to a peer, and
 * receives from a peer, run in issue order per (peer, direction). Ops take their place in line when created.
 */
#ifndef DETNCCL_HOSTNCCL_OPS_H
#define DETNCCL_HOSTNCCL_OPS_H

#include <cstddef>
#include <cstdint>
#include <memory>

#include "abi/traced_ops.h"
#include "hostnccl/comm.h"
#include "hostnccl/reduce.h"

namespace hostnccl {

class Op {
 public:
  explicit Op(Comm* comm) : comm_(comm) {}
  virtual ~Op() = default;
  Op(const Op&) = delete;
  Op& operator=(const Op&) = delete;

  /* Advances without waiting; sets *progressed when anything changed. A returned error fails the whole group. */
  virtual ncclResult_t advance(bool* progressed) = 0;
  /* Called once, in the calling thread, where NCCL would enqueue the operation on its stream: at the call, or at the
   * outermost ncclGroupEnd of a group, before any advance (staged device inputs are read here). An error drops the
   * group before any of its ops started. */
  virtual ncclResult_t launch() { return ncclSuccess; }
  /* The NCCL call this op implements, for messages. */
  virtual const char* name() const = 0;
  /* Called once when the op's group fails before the op finished (e.g. to unlink a half-created segment). */
  virtual void on_failure() {}
  /* True for init and split. */
  virtual bool creates_communicator() const { return false; }

  /* The communicator whose ranks the op is waiting for (the split's child once the parent's part is done). */
  virtual const Comm* waited_comm() const { return comm_; }
  /* The one rank of waited_comm() the op waits for, or -1 when it may wait for any of them (collectives). */
  virtual int waited_rank() const { return -1; }

  bool done() const { return done_; }
  Comm* comm() const { return comm_; }

 protected:
  Comm* comm_;
  bool done_ = false;
};

/* The NCCL collective an op implements: one enumerator per row of abi/traced_ops.h (the stable ids). kBcast, kSend
 * and kRecv are never a CollOp's kind (ncclBcast runs as a Broadcast; Send and Recv are their own ops). */
enum class CollKind : std::uint16_t {
#define HOSTNCCL_COLL_KIND(id, name, ...) k##name = id,
  DETNCCL_TRACED_OPS(HOSTNCCL_COLL_KIND)
#undef HOSTNCCL_COLL_KIND
};

/* The row of abi/traced_ops.h for `kind`: its buffers' sizes, where they exist, whether it reduces. */
inline const detnccl::abi::TracedOpRow& row_of(CollKind kind) {
  return *detnccl::abi::traced_op_row(static_cast<std::uint16_t>(kind));
}

/* A collective call after argument checks. `count` is the per-rank count the NCCL call takes (count, sendcount or
 * recvcount). */
struct CollArgs {
  CollKind kind = CollKind::kAllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;
  ncclDataType_t type = ncclFloat32;
  ReduceSpec spec;
  int root = 0;
  // HOSTNCCL_CORRUPT chose this call of this rank: its output element `corrupt_element` is changed after the
  // reduction (reduce.h's corrupt_element).
  bool corrupt = false;
  std::size_t corrupt_element = 0;
  double corrupt_factor = 1;
};

/* Joins (rank 0: creates) the communicator's segment and waits until every rank has attached. */
std::unique_ptr<Op> make_init_op(Comm* comm);

/* A collective (arguments already checked). */
std::unique_ptr<Op> make_coll_op(Comm* comm, const CollArgs& args);

/* ncclCommSplit: exchanges (color, key) over the parent, then creates and initialises the child communicator and
 * stores it (or null for NCCL_SPLIT_NOCOLOR) in *newcomm when done, as NCCL's init job does: at the outermost
 * ncclGroupEnd inside a group, on the background thread for a non-blocking parent. The child is blocking as the
 * parent is, unless `child_blocking` is 0 or 1 (the split's own ncclConfig_t.blocking; -1: not given). */
std::unique_ptr<Op> make_split_op(Comm* parent, int color, int key, Comm** newcomm, int child_blocking);

/* Point-to-point: `bytes` bytes to / from `peer`. */
std::unique_ptr<Op> make_send_op(Comm* comm, const void* data, std::size_t bytes, int peer);
std::unique_ptr<Op> make_recv_op(Comm* comm, void* data, std::size_t bytes, int peer);

}  // namespace hostnccl

#endif  // DETNCCL_HOSTNCCL_OPS_H
