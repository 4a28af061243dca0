// Fingerprints of host buffers (definition version kFingerprintVersion, docs/fingerprint.md), computed with
// libxxhash: the reference every other implementation (the CUDA one included) must match bit for bit.
//
// fingerprint = XXH3_64bits_withSeed(root of a tree of XXH3_64bits digests over 16 KiB leaves, seed = byte count).
// Segment digests are the fingerprints of consecutive slices of a buffer, to locate where two buffers differ.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "hash/tree_shape.h"

namespace detnccl::hash {

// The tree above the leaves, built as digests arrive: each run of kFanout consecutive digests of a level is
// replaced by XXH3_64bits of its bytes (little-endian u64) until one digest remains. Memory: one group per level.
class DigestTree {
 public:
  // Appends the next digest of the bottom level (a leaf digest, in buffer order).
  void add(std::uint64_t digest);

  // The root: the single digest left once every level is reduced. Needs at least one add(); the tree is spent
  // afterwards (build a new one for the next buffer).
  std::uint64_t finish();

  // Digests added so far to the bottom level.
  std::uint64_t leaves() const { return levels_.empty() ? 0 : levels_.front().total; }

 private:
  struct Level {
    std::vector<std::uint64_t> group;  // the incomplete group, at most kFanout digests
    std::uint64_t total = 0;           // digests this level has received
  };
  void push(std::size_t level, std::uint64_t digest);
  std::vector<Level> levels_;
};

// Root of the tree over `digests` (at least one): the tree-reduction step alone, without the final seeding.
std::uint64_t reduce_digests(std::span<const std::uint64_t> digests);

// Fingerprint of a buffer whose leaf digests (XXH3_64bits of each 16 KiB leaf, in order) are given; `bytes` is
// the buffer's length (the seed of the last step).
std::uint64_t fingerprint_from_leaf_digests(std::span<const std::uint64_t> leaf_digests, std::uint64_t bytes);

// Fingerprint of `bytes` bytes at `data` (any alignment; data may be null when bytes is 0), on the calling thread.
std::uint64_t fingerprint(const void* data, std::size_t bytes);

// Throws std::invalid_argument, saying why, unless segment_bytes is a positive multiple of kLeafBytes.
void check_segment_bytes(std::size_t segment_bytes);

// Fingerprint of each consecutive `segment_bytes` slice of the buffer (the last one may be shorter; an empty
// buffer has none), on the calling thread. Throws std::invalid_argument for a bad segment_bytes.
std::vector<std::uint64_t> segment_digests(const void* data, std::size_t bytes, std::size_t segment_bytes);

// A fingerprint computed from consecutive pieces of a buffer of unknown length (a pipe, a file read in chunks).
// Pieces may have any size; the result equals fingerprint() of their concatenation.
class StreamingFingerprint {
 public:
  StreamingFingerprint();

  // Appends `bytes` bytes at `data` to the buffer being fingerprinted.
  void update(const void* data, std::size_t bytes);

  // The fingerprint of everything appended; the object is spent afterwards.
  std::uint64_t finish();

  // Bytes appended so far.
  std::uint64_t bytes() const { return total_bytes_; }

 private:
  DigestTree tree_;
  std::vector<std::uint8_t> partial_leaf_;  // bytes of the current leaf, fewer than kLeafBytes
  std::uint64_t total_bytes_ = 0;
};

// A digest as 16 lowercase hexadecimal digits (the form records and the CLI print).
std::string format_digest(std::uint64_t digest);

}  // namespace detnccl::hash
