#include "examples/train/gradient_buckets.h"

#include <algorithm>

namespace train {

std::vector<Bucket> gradient_buckets(std::size_t elements, std::size_t bucket_elements) {
  std::vector<Bucket> buckets;
  for (std::size_t end = elements; end > 0;) {
    const std::size_t count = std::min(bucket_elements, end);
    buckets.push_back({end - count, count});
    end -= count;
  }
  return buckets;
}

}  // namespace train
