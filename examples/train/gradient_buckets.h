// How the training example groups its gradient into AllReduce calls, the way PyTorch DDP buckets gradients.
//
// DDP fills buckets in reverse parameter order (the order backward produces gradients) and reduces each bucket as
// soon as it is full. Here the flat gradient is cut from its end into slices of `bucket_elements` floats, reduced
// last slice first; unlike DDP a tensor may straddle two buckets, so that every bucket but the last has exactly the
// requested size. Fusing different slices into one call is what changes NCCL's chunking, hence the bits.
#pragma once

#include <cstddef>
#include <vector>

namespace train {

struct Bucket {
  std::size_t offset = 0;  // first element in the flat gradient
  std::size_t count = 0;   // elements
};

// The buckets of a gradient of `elements` floats, in the order they are reduced (from the end of the vector). Each
// element is in exactly one bucket. `bucket_elements` must be positive.
std::vector<Bucket> gradient_buckets(std::size_t elements, std::size_t bucket_elements);

}  // namespace train
