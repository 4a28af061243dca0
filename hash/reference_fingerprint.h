// The fingerprint definition (docs/fingerprint.md) written as literally as possible, every level of the tree
// materialised: the model other implementations are checked against where libxxhash is not available (the GPU
// check) or where the check must not share code with hash/fingerprint.cc. Slow and memory-hungry; host only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "hash/tree_shape.h"

namespace detnccl::hash::reference {

// Fingerprint of `bytes` bytes at `data`, where hash64(pointer, length, seed) is XXH3_64bits_withSeed.
template <class Hash64>
std::uint64_t fingerprint(const std::uint8_t* data, std::uint64_t bytes, Hash64 hash64) {
  std::vector<std::uint64_t> level;
  for (std::uint64_t offset = 0; offset < bytes || level.empty(); offset += kLeafBytes) {
    level.push_back(hash64(data + offset, std::min<std::uint64_t>(kLeafBytes, bytes - offset), 0));
  }
  while (level.size() > 1) {
    std::vector<std::uint8_t> le(level.size() * 8);
    for (std::size_t i = 0; i < level.size(); ++i) xxh3::write_le64(le.data() + 8 * i, level[i]);
    std::vector<std::uint64_t> next;
    for (std::size_t first = 0; first < level.size(); first += kFanout) {
      const std::size_t count = std::min(kFanout, level.size() - first);
      next.push_back(hash64(le.data() + 8 * first, 8 * count, 0));
    }
    level.swap(next);
  }
  std::uint8_t root[8];
  xxh3::write_le64(root, level.front());
  return hash64(root, sizeof root, bytes);
}

// Fingerprint of each `segment_bytes` slice (segment_bytes > 0; the last slice may be shorter).
template <class Hash64>
std::vector<std::uint64_t> segment_digests(const std::uint8_t* data, std::uint64_t bytes, std::uint64_t segment_bytes,
                                           Hash64 hash64) {
  std::vector<std::uint64_t> digests;
  for (std::uint64_t offset = 0; offset < bytes; offset += segment_bytes) {
    digests.push_back(fingerprint(data + offset, std::min(segment_bytes, bytes - offset), hash64));
  }
  return digests;
}

}  // namespace detnccl::hash::reference
