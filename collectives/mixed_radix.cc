// mixed_radix: reduce-scatter by mixed-radix halving, then (AllReduce) allgather by mixed-radix doubling, or
// (Reduce) a gather of the reduced blocks at the root.
//
// Step j of the reduce-scatter works in groups of p_j ranks that differ only in digit j (association_tree.h). Each
// member's current region of blocks is split into p_j equal runs of blocks; member q keeps run q, sends run q' to
// member q', receives the other members' copies of run q and adds the p_j copies in digit order. For n = 2^k this is
// recursive halving; for a prime n it is one direct reduce-scatter. Either way each rank sends
// sum_j (p_j - 1) / (p_1 ... p_j) = (n - 1) / n of the message: exactly what a ring sends, for every n. Because
// the digit of step 1 is the most significant, the runs are contiguous and rank b ends with block b.
#include "collectives/algorithm.h"

namespace detnccl::collectives {
namespace {

// Scratch, in blocks, for the copies received in the largest step: max_j (p_j - 1) * s_j.
std::size_t slot_blocks(const Problem& problem) {
  std::size_t most = 0;
  for (int j = 0; j < problem.tree->steps(); ++j) {
    const auto blocks =
        static_cast<std::size_t>(problem.tree->radix(j) - 1) * static_cast<std::size_t>(problem.tree->place_value(j));
    if (blocks > most) most = blocks;
  }
  return most;
}

// RATIONALE: an AllReduce without fp32 accumulation reduces in the output buffer itself (it has room for every
// block), so it needs scratch only for the received copies.
bool accumulates_in_output(const Problem& problem) {
  return problem.collective == Collective::kAllReduce && problem.acc_is_type;
}

std::size_t scratch_bytes_per_unit(const Problem& problem) {
  std::size_t blocks = slot_blocks(problem);
  if (!accumulates_in_output(problem)) blocks += static_cast<std::size_t>(problem.nranks);
  return blocks * problem.acc_size;
}

double bytes_sent(const Problem& problem, double message_bytes) {
  const double n = problem.nranks, scatter = (n - 1) / n * message_bytes;
  const double partial = scatter * static_cast<double>(problem.acc_size) / static_cast<double>(problem.type_size);
  switch (problem.collective) {
    case Collective::kAllReduce:
      return partial + scatter;
    case Collective::kReduceScatter:
      return partial;
    case Collective::kReduce:
      return partial + (problem.rank == problem.root ? 0.0 : message_bytes / n);
  }
  return 0.0;
}

ncclResult_t run_chunk(const ChunkContext& c) {
  const Problem& p = c.problem;
  const Chunk& chunk = c.chunk;
  const AssociationTree& tree = *p.tree;
  const std::size_t A = p.acc_size, T = p.type_size;
  const auto acc_at = [&](unsigned char* base, int block) { return base + chunk.packed_offset(block) * A; };

  unsigned char* acc = nullptr;
  unsigned char* slots = nullptr;
  if (accumulates_in_output(p)) {
    acc = c.recv + chunk.first * T;
    slots = c.scratch;
  } else {
    acc = c.scratch;
    slots = c.scratch + static_cast<std::size_t>(p.nranks) * chunk.max_block_length() * A;
  }

  // Each rank's own contribution (pre-multiplied, widened) in packed block order.
  if (chunk.strided) {
    for (int b = 0; b < p.nranks; ++b) {
      if (const ncclResult_t r =
              c.backend.load(acc_at(acc, b), c.send + chunk.send_offset(b) * T, chunk.block_length(b));
          r != ncclSuccess) {
        return r;
      }
    }
  } else if (const ncclResult_t r = c.backend.load(acc, c.send + chunk.first * T, chunk.total); r != ncclSuccess) {
    return r;
  }

  // Reduce-scatter: after step j this rank holds, for the blocks whose digits 1..j equal its own, the sum over the
  // ranks that differ from it in those digits.
  int low = 0;  // first block of this rank's current region
  for (int j = 0; j < tree.steps(); ++j) {
    const int radix = tree.radix(j), place = tree.place_value(j), digit = tree.digit(p.rank, j);
    const int mine = low + digit * place;
    const std::size_t my_length = chunk.range_length(mine, mine + place);
    for (int q = 0; q < radix; ++q) {
      if (q == digit) continue;
      const int peer = p.rank + (q - digit) * place, run = low + q * place;
      c.exchange.send(acc_at(acc, run), chunk.range_length(run, run + place) * A, peer);
      const auto slot = static_cast<std::size_t>(q < digit ? q : q - 1);
      c.exchange.recv(slots + slot * my_length * A, my_length * A, peer);
    }
    if (const ncclResult_t r = c.exchange.run(); r != ncclSuccess) return r;
    unsigned char* own = acc_at(acc, mine);
    if (const ncclResult_t r = c.backend.fold(own, slots, my_length, radix, digit, own, my_length); r != ncclSuccess) {
      return r;
    }
    low = mine;
  }
  // Now low == rank: this rank holds the final partial result of block `rank`.
  const std::size_t own_length = chunk.block_length(p.rank);

  if (p.collective == Collective::kReduceScatter) {
    return c.backend.finish(c.recv + chunk.first * T, acc_at(acc, p.rank), own_length);
  }
  if (p.collective == Collective::kReduce) {
    if (p.rank == p.root) {
      unsigned char* out = c.recv + chunk.first * T;
      if (const ncclResult_t r =
              c.backend.finish(out + chunk.packed_offset(p.rank) * T, acc_at(acc, p.rank), own_length);
          r != ncclSuccess) {
        return r;
      }
      for (int q = 0; q < p.nranks; ++q) {
        if (q != p.root) c.exchange.recv(out + chunk.packed_offset(q) * T, chunk.block_length(q) * T, q);
      }
    } else {
      // The received copies are no longer needed, so the slots stage the finished block.
      if (const ncclResult_t r = c.backend.finish(slots, acc_at(acc, p.rank), own_length); r != ncclSuccess) return r;
      c.exchange.send(slots, own_length * T, p.root);
    }
    return c.exchange.run();
  }

  // AllReduce: allgather in the output, undoing the steps in reverse order.
  unsigned char* out = c.recv + chunk.first * T;
  if (const ncclResult_t r = c.backend.finish(out + chunk.packed_offset(p.rank) * T, acc_at(acc, p.rank), own_length);
      r != ncclSuccess) {
    return r;
  }
  for (int j = tree.steps() - 1; j >= 0; --j) {
    const int radix = tree.radix(j), place = tree.place_value(j), digit = tree.digit(p.rank, j);
    const int group_low = low - digit * place;
    for (int q = 0; q < radix; ++q) {
      if (q == digit) continue;
      const int peer = p.rank + (q - digit) * place, run = group_low + q * place;
      c.exchange.send(out + chunk.packed_offset(low) * T, chunk.range_length(low, low + place) * T, peer);
      c.exchange.recv(out + chunk.packed_offset(run) * T, chunk.range_length(run, run + place) * T, peer);
    }
    if (const ncclResult_t r = c.exchange.run(); r != ncclSuccess) return r;
    low = group_low;
  }
  return ncclSuccess;
}

}  // namespace

const AlgorithmDescriptor kMixedRadixAlgorithm{Algorithm::kMixedRadix, scratch_bytes_per_unit, bytes_sent, run_chunk};

}  // namespace detnccl::collectives
