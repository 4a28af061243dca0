// one_shot: every rank sends its whole contribution to each rank that needs it, in one group, and each receiver
// adds all n contributions itself with the association tree. One round of messages instead of sum(p_j - 1) rounds:
// for small messages, where latency dominates. ReduceScatter moves (n - 1) / n of the message per rank, like a
// ring; AllReduce moves (n - 1) times the message, so the automatic choice keeps it to small messages.
//
// Contributions are loaded (pre-multiplied, widened) by their owner before they are sent: with kPreMulSum every rank
// may hold a different scalar, and only the owner knows its own.
#include "collectives/algorithm.h"

namespace detnccl::collectives {
namespace {

std::size_t scratch_bytes_per_unit(const Problem& problem) {
  const auto n = static_cast<std::size_t>(problem.nranks);
  // A unit is one element of the longest block; AllReduce and Reduce chunks hold n blocks per contribution.
  if (problem.collective == Collective::kReduceScatter) return 2 * n * problem.acc_size;  // outgoing + received
  return n * n * problem.acc_size;
}

double bytes_sent(const Problem& problem, double message_bytes) {
  const double n = problem.nranks;
  const double partial = message_bytes * static_cast<double>(problem.acc_size) / static_cast<double>(problem.type_size);
  switch (problem.collective) {
    case Collective::kAllReduce:
      return (n - 1) * partial;
    case Collective::kReduceScatter:
      return (n - 1) / n * partial;
    case Collective::kReduce:
      return problem.rank == problem.root ? 0.0 : partial;
  }
  return 0.0;
}

ncclResult_t run_chunk(const ChunkContext& c) {
  const Problem& p = c.problem;
  const Chunk& chunk = c.chunk;
  const std::size_t A = p.acc_size, T = p.type_size;

  if (p.collective == Collective::kReduceScatter) {
    const std::size_t length = chunk.per_block;
    unsigned char* outgoing = c.scratch;
    unsigned char* slots = c.scratch + static_cast<std::size_t>(p.nranks) * length * A;
    for (int b = 0; b < p.nranks; ++b) {
      unsigned char* into = (b == p.rank ? slots : outgoing) + static_cast<std::size_t>(b) * length * A;
      if (const ncclResult_t r = c.backend.load(into, c.send + chunk.send_offset(b) * T, length); r != ncclSuccess) {
        return r;
      }
    }
    for (int q = 0; q < p.nranks; ++q) {
      if (q == p.rank) continue;
      c.exchange.send(outgoing + static_cast<std::size_t>(q) * length * A, length * A, q);
      c.exchange.recv(slots + static_cast<std::size_t>(q) * length * A, length * A, q);
    }
    if (const ncclResult_t r = c.exchange.run(); r != ncclSuccess) return r;
    if (const ncclResult_t r = reduce_with_tree(*p.tree, c.backend, slots, length, A, length); r != ncclSuccess) {
      return r;
    }
    return c.backend.finish(c.recv + chunk.first * T, slots, length);
  }

  // AllReduce and Reduce: contribution x of the chunk goes to slot x.
  const std::size_t length = chunk.total;
  const bool receives = p.collective == Collective::kAllReduce || p.rank == p.root;
  unsigned char* slots = c.scratch;
  unsigned char* mine = receives ? slots + static_cast<std::size_t>(p.rank) * length * A : c.scratch;
  if (const ncclResult_t r = c.backend.load(mine, c.send + chunk.first * T, length); r != ncclSuccess) return r;
  for (int q = 0; q < p.nranks; ++q) {
    if (q == p.rank) continue;
    if (p.collective == Collective::kAllReduce || q == p.root) c.exchange.send(mine, length * A, q);
    if (receives) c.exchange.recv(slots + static_cast<std::size_t>(q) * length * A, length * A, q);
  }
  if (const ncclResult_t r = c.exchange.run(); r != ncclSuccess) return r;
  if (!receives) return ncclSuccess;
  if (const ncclResult_t r = reduce_with_tree(*p.tree, c.backend, slots, length, A, length); r != ncclSuccess) {
    return r;
  }
  return c.backend.finish(c.recv + chunk.first * T, slots, length);
}

}  // namespace

const AlgorithmDescriptor kOneShotAlgorithm{Algorithm::kOneShot, scratch_bytes_per_unit, bytes_sent, run_chunk};

}  // namespace detnccl::collectives
