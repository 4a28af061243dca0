/* detnccl numerics: replay's computing core (issue #18). Given every member's captured input of one reduction, it
 * recomputes the output in the orders that matter and measures each against an exact reference:
 *   rank           x_0 + x_1 + ... + x_{n-1}, left to right, in the datatype: hostnccl's HOSTNCCL_REDUCE_ORDER=rank
 *                  (its own reduce_in_order, so the same bits)
 *   deterministic  detnccl's association tree (docs/deterministic.md) with collectives/' element arithmetic and the
 *                  given accumulation: what DETNCCL_DETERMINISTIC=1 gives
 *   arrival        k random permutations of the ranks (seeded), each added left to right as hostnccl's arrival order
 *                  does: what a "native", order-varying reduction may give
 *   reference      computed in long double from the inputs (sum, avg as the sum / n, PreMulSum, prod, min, max) and
 *                  rounded to the datatype (narrow types through fp32); integer types: the rank order (exact, with
 *                  NCCL's wrapping and the average's truncation).
 * Pure: no NCCL, no files.
 */
#ifndef DETNCCL_NUMERICS_REPLAY_H
#define DETNCCL_NUMERICS_REPLAY_H

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "abi/nccl_abi.h"
#include "collectives/algorithm_names.h"
#include "numerics/magnitude.h"
#include "numerics/reordering_bound.h"

namespace detnccl::numerics {

enum class ReplayCollective : std::uint8_t { kAllReduce, kReduceScatter, kReduce };

/* One reduction call, as captured: every member's input in rank order. */
struct ReplayCall {
  ReplayCollective collective = ReplayCollective::kAllReduce;
  ncclDataType_t datatype = ncclFloat32;
  ReductionOp op;
  std::size_t count = 0;  // the NCCL call's count (recvcount for ReduceScatter)
  int root = 0;           // Reduce only (the result is the same; it says which rank holds it)
  // inputs[r]: rank r's send buffer, count elements (count * n for ReduceScatter).
  std::vector<std::vector<unsigned char>> inputs;
};

struct ReplayOptions {
  int arrival_orders = 8;  // how many random arrival orders
  std::uint64_t seed = 1;  // their seed (std::mt19937_64)
  collectives::Accumulate accumulate =
      collectives::Accumulate::kNative;  // the deterministic order's DETNCCL_ACCUMULATE
};

/* One recomputed output. The output holds every element the reduction produces: count elements, or n * count for
 * ReduceScatter (rank k's output is block k). */
struct ReplayedOutput {
  std::string order;             // "rank", "deterministic", "arrival"
  std::vector<int> permutation;  // the ranks in the order they were added ("deterministic": empty, it is a tree)
  std::vector<unsigned char> output;
  Magnitude from_reference;  // compare_buffers(reference, output)
};

struct Replay {
  std::vector<unsigned char> reference;  // the exact result rounded to the datatype
  std::vector<ReplayedOutput> outputs;   // rank, deterministic, then the arrival orders
};

/* Replays `call`. nullopt with *error set when the call cannot be replayed: an invalid datatype or op, no inputs,
 * inputs of the wrong size, a PreMulSum of an integer type. */
std::optional<Replay> replay(const ReplayCall& call, const ReplayOptions& options, std::string* error);

/* The deterministic order's output alone (count elements, n * count for ReduceScatter); nullopt as replay(). */
std::optional<std::vector<unsigned char>> deterministic_output(const ReplayCall& call,
                                                               collectives::Accumulate accumulate, std::string* error);

/* The output of adding the ranks in `order` (a permutation of 0..n-1) left to right, as hostnccl does. */
std::optional<std::vector<unsigned char>> ordered_output(const ReplayCall& call, const std::vector<int>& order,
                                                         std::string* error);

}  // namespace detnccl::numerics

#endif  // DETNCCL_NUMERICS_REPLAY_H
