/* detnccl collectives: what an algorithm is, and what it is given.
 *
 * An algorithm is one file (mixed_radix.cc, one_shot.cc) that defines an AlgorithmDescriptor, one line in
 * registry.cc, and its row (number and name) in algorithm_names.h. The driver (deterministic.cc) validates the call,
 * picks the algorithm, splits the message into chunks that fit the scratch cap, and calls run_chunk for each chunk in
 * order on every rank.
 *
 * A chunk is n blocks, one per rank; block b is what rank b owns at the end of a reduce-scatter. An algorithm may
 * move blocks any way it likes, but must combine contributions in the AssociationTree's order, with the Backend.
 */
#ifndef DETNCCL_COLLECTIVES_ALGORITHM_H
#define DETNCCL_COLLECTIVES_ALGORITHM_H

#include <cstddef>
#include <string>
#include <vector>

#include "collectives/association_tree.h"
#include "collectives/backend.h"
#include "collectives/deterministic.h"

namespace detnccl::collectives {

/* The parts of a call that every chunk shares. */
struct Problem {
  Collective collective = Collective::kAllReduce;
  int rank = 0;
  int nranks = 1;
  int root = 0;  // kReduce
  const AssociationTree* tree = nullptr;
  std::size_t type_size = 0;  // bytes of one element of the datatype (T)
  std::size_t acc_size = 0;   // bytes of one accumulator element (Acc)
  bool acc_is_type = true;    // Acc is T (no fp32 accumulation)
};

/* One chunk: block b holds block_length(b) elements; packed one after the other (in rank order) a chunk's blocks
 * occupy [packed_offset(b), packed_offset(b + 1)).
 *   AllReduce, Reduce: the chunk is elements [first, first + total) of the buffers, blocks split it as evenly as
 *     possible (the first total % n blocks one longer); the packed layout is the user's layout.
 *   ReduceScatter: block b is elements [b * recvcount + first, + per_block) of sendbuff; the output is
 *     recvbuff[first, first + per_block). */
struct Chunk {
  int nblocks = 1;
  std::size_t total = 0;      // elements in the chunk
  bool strided = false;       // ReduceScatter layout
  std::size_t per_block = 0;  // strided: elements per block
  std::size_t stride = 0;     // strided: recvcount
  std::size_t first = 0;

  std::size_t packed_offset(int block) const {
    const auto b = static_cast<std::size_t>(block);
    if (strided) return b * per_block;
    const std::size_t n = static_cast<std::size_t>(nblocks), base = total / n, extra = total % n;
    return b * base + (b < extra ? b : extra);
  }
  std::size_t block_length(int block) const { return packed_offset(block + 1) - packed_offset(block); }
  /* Elements of blocks [begin, end), packed. */
  std::size_t range_length(int begin, int end) const { return packed_offset(end) - packed_offset(begin); }
  /* Offset (elements) in sendbuff of block b's first element. */
  std::size_t send_offset(int block) const {
    return strided ? static_cast<std::size_t>(block) * stride + first : first + packed_offset(block);
  }
  /* The most elements any one block holds. */
  std::size_t max_block_length() const {
    return strided ? per_block : (total + static_cast<std::size_t>(nblocks) - 1) / static_cast<std::size_t>(nblocks);
  }
};

/* The transfers of one step, issued as one group on the real NCCL. Bytes go as ncclInt8, so every datatype and
 * fp32 partials move alike; empty transfers are skipped (every rank computes the same lengths, so both sides skip). */
class Exchange {
 public:
  Exchange(const P2pFunctions& nccl, ncclComm_t comm, cudaStream_t stream)
      : nccl_(nccl), comm_(comm), stream_(stream) {}
  void send(const void* data, std::size_t bytes, int peer) { add(true, const_cast<void*>(data), bytes, peer); }
  void recv(void* data, std::size_t bytes, int peer) { add(false, data, bytes, peer); }
  /* Issues the queued transfers in one group and clears the queue; the first failure's result, with error() set. */
  ncclResult_t run();
  std::size_t bytes_sent() const { return bytes_sent_; }
  const std::string& error() const { return error_; }

 private:
  struct Transfer {
    bool sending;
    void* data;
    std::size_t bytes;
    int peer;
  };
  void add(bool sending, void* data, std::size_t bytes, int peer) {
    if (bytes != 0) transfers_.push_back({sending, data, bytes, peer});
  }
  const P2pFunctions& nccl_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  std::vector<Transfer> transfers_;
  std::size_t bytes_sent_ = 0;
  std::string error_;
};

/* What run_chunk works with. */
struct ChunkContext {
  const Problem& problem;
  const Chunk& chunk;
  const unsigned char* send;  // the user's sendbuff
  unsigned char* recv;        // the user's recvbuff (null on non-root ranks of a Reduce)
  unsigned char* scratch;     // at least scratch_bytes_per_unit(problem) * chunk.max_block_length() bytes
  Backend& backend;
  Exchange& exchange;
};

struct AlgorithmDescriptor {
  Algorithm id;  // its name is algorithm_name(id) (algorithm_names.h)
  /* Scratch bytes needed per element of the longest block of a chunk (the chunk size unit). */
  std::size_t (*scratch_bytes_per_unit)(const Problem& problem);
  /* About how many bytes this rank sends for a whole message of `message_bytes` (count x datatype size; for
   * ReduceScatter nranks x recvcount x size), ignoring the rounding of uneven blocks. */
  double (*bytes_sent)(const Problem& problem, double message_bytes);
  /* Runs one chunk; on failure returns the NCCL result and leaves a message in the exchange or backend. */
  ncclResult_t (*run_chunk)(const ChunkContext& context);
};

/* The registry: every algorithm, in the order of the Algorithm enum after kAuto. */
const AlgorithmDescriptor& algorithm_descriptor(Algorithm algorithm);

extern const AlgorithmDescriptor kMixedRadixAlgorithm;
extern const AlgorithmDescriptor kOneShotAlgorithm;

/* Reduces n arrays of Acc in place with the association tree, for `count` elements: array x is at
 * base + x * stride elements; the result ends in array 0. Used by algorithms that hold every contribution. */
ncclResult_t reduce_with_tree(const AssociationTree& tree, Backend& backend, unsigned char* base, std::size_t stride,
                              std::size_t acc_size, std::size_t count);

}  // namespace detnccl::collectives

#endif  // DETNCCL_COLLECTIVES_ALGORITHM_H
