#include "hash/fingerprint.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "hash/xxh3_host.h"

namespace detnccl::hash {
namespace {

std::uint64_t hash_group(const std::vector<std::uint64_t>& group) {
  // RATIONALE: the definition hashes digests as little-endian u64; the host is little-endian (static_assert in
  // xxh3_portable.h), so the vector's bytes are already that layout.
  return hash::xxh3_64(group.data(), group.size() * sizeof(std::uint64_t));
}

std::uint64_t seal(std::uint64_t root, std::uint64_t bytes) {
  std::uint8_t le[8];
  xxh3::write_le64(le, root);
  return hash::xxh3_64(le, sizeof le, bytes);
}

}  // namespace

void DigestTree::push(std::size_t level, std::uint64_t digest) {
  if (level == levels_.size()) {
    levels_.emplace_back();
    levels_.back().group.reserve(kFanout);
  }
  if (levels_[level].group.size() == kFanout) {
    // A full group is reduced only when a further digest proves the level has more than one group's worth.
    const std::uint64_t group_digest = hash_group(levels_[level].group);
    levels_[level].group.clear();
    push(level + 1, group_digest);  // may grow levels_: index again below
  }
  levels_[level].group.push_back(digest);
  ++levels_[level].total;
}

void DigestTree::add(std::uint64_t digest) { push(0, digest); }

std::uint64_t DigestTree::finish() {
  if (levels_.empty()) throw std::logic_error("DigestTree::finish: no digest was added");
  for (std::size_t level = 0;; ++level) {
    if (levels_[level].total == 1) return levels_[level].group.front();
    const std::uint64_t group_digest = hash_group(levels_[level].group);
    levels_[level].group.clear();
    push(level + 1, group_digest);
  }
}

std::uint64_t reduce_digests(std::span<const std::uint64_t> digests) {
  DigestTree tree;
  for (const std::uint64_t d : digests) tree.add(d);
  return tree.finish();
}

std::uint64_t fingerprint_from_leaf_digests(std::span<const std::uint64_t> leaf_digests, std::uint64_t bytes) {
  return seal(reduce_digests(leaf_digests), bytes);
}

std::uint64_t fingerprint(const void* data, std::size_t bytes) {
  const auto* in = static_cast<const std::uint8_t*>(data);
  if (bytes <= kLeafBytes) return seal(hash::xxh3_64(in, bytes), bytes);
  DigestTree tree;
  for (std::size_t offset = 0; offset < bytes; offset += kLeafBytes) {
    tree.add(hash::xxh3_64(in + offset, std::min(kLeafBytes, bytes - offset)));
  }
  return seal(tree.finish(), bytes);
}

void check_segment_bytes(std::size_t segment_bytes) {
  if (segment_bytes == 0 || segment_bytes % kLeafBytes != 0) {
    throw std::invalid_argument("segment size must be a positive multiple of " + std::to_string(kLeafBytes) +
                                " bytes (the leaf size), got " + std::to_string(segment_bytes));
  }
}

std::vector<std::uint64_t> segment_digests(const void* data, std::size_t bytes, std::size_t segment_bytes) {
  check_segment_bytes(segment_bytes);
  const auto* in = static_cast<const std::uint8_t*>(data);
  std::vector<std::uint64_t> digests;
  digests.reserve((bytes + segment_bytes - 1) / segment_bytes);
  for (std::size_t offset = 0; offset < bytes; offset += segment_bytes) {
    digests.push_back(fingerprint(in + offset, std::min(segment_bytes, bytes - offset)));
  }
  return digests;
}

StreamingFingerprint::StreamingFingerprint() { partial_leaf_.reserve(kLeafBytes); }

void StreamingFingerprint::update(const void* data, std::size_t bytes) {
  const auto* in = static_cast<const std::uint8_t*>(data);
  total_bytes_ += bytes;
  if (!partial_leaf_.empty()) {
    const std::size_t take = std::min(bytes, kLeafBytes - partial_leaf_.size());
    partial_leaf_.insert(partial_leaf_.end(), in, in + take);
    in += take;
    bytes -= take;
    if (partial_leaf_.size() < kLeafBytes) return;
    tree_.add(hash::xxh3_64(partial_leaf_.data(), kLeafBytes));
    partial_leaf_.clear();
  }
  // A complete leaf is final even if the stream ends right after it: only the last leaf may be short.
  for (; bytes >= kLeafBytes; in += kLeafBytes, bytes -= kLeafBytes) tree_.add(hash::xxh3_64(in, kLeafBytes));
  partial_leaf_.assign(in, in + bytes);
}

std::uint64_t StreamingFingerprint::finish() {
  if (!partial_leaf_.empty() || total_bytes_ == 0) {
    tree_.add(hash::xxh3_64(partial_leaf_.data(), partial_leaf_.size()));
    partial_leaf_.clear();
  }
  return seal(tree_.finish(), total_bytes_);
}

std::string format_digest(std::uint64_t digest) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(digest));
  return text;
}

}  // namespace detnccl::hash
