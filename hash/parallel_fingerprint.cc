#include "hash/parallel_fingerprint.h"

#include <algorithm>

#include "hash/fingerprint.h"
#include "hash/xxh3_host.h"

namespace detnccl::hash {

ParallelFingerprinter::ParallelFingerprinter(unsigned threads, std::size_t min_parallel_bytes)
    : min_parallel_bytes_(min_parallel_bytes) {
  if (threads == 0) threads = std::max(1U, std::thread::hardware_concurrency());
  workers_.reserve(threads - 1);
  for (unsigned share = 1; share < threads; ++share) workers_.emplace_back([this, share] { worker_loop(share); });
}

ParallelFingerprinter::~ParallelFingerprinter() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ParallelFingerprinter::hash_share(unsigned share) {
  // Equal contiguous runs of leaves: every leaf but the last costs the same, and contiguity keeps each thread's
  // reads sequential.
  const std::size_t leaves = (job_bytes_ + kLeafBytes - 1) / kLeafBytes;
  const std::size_t first = leaves * share / threads();
  const std::size_t last = leaves * (share + 1) / threads();
  for (std::size_t leaf = first; leaf < last; ++leaf) {
    const std::size_t offset = leaf * kLeafBytes;
    job_out_[leaf] = hash::xxh3_64(job_data_ + offset, std::min(kLeafBytes, job_bytes_ - offset));
  }
}

void ParallelFingerprinter::worker_loop(unsigned share) {
  std::uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
    }
    hash_share(share);
    {
      std::lock_guard lock(mutex_);
      if (--pending_ == 0) work_done_.notify_one();
    }
  }
}

void ParallelFingerprinter::leaf_digests(const std::uint8_t* data, std::size_t bytes, std::span<std::uint64_t> out) {
  {
    std::lock_guard lock(mutex_);
    job_data_ = data;
    job_bytes_ = bytes;
    job_out_ = out.data();
    pending_ = static_cast<unsigned>(workers_.size());
    ++generation_;
  }
  work_ready_.notify_all();
  hash_share(0);
  std::unique_lock lock(mutex_);
  work_done_.wait(lock, [&] { return pending_ == 0; });
}

std::uint64_t ParallelFingerprinter::fingerprint(const void* data, std::size_t bytes) {
  if (bytes < min_parallel_bytes_ || workers_.empty() || bytes <= kLeafBytes) return hash::fingerprint(data, bytes);
  std::lock_guard call(call_mutex_);
  std::vector<std::uint64_t> leaves((bytes + kLeafBytes - 1) / kLeafBytes);
  leaf_digests(static_cast<const std::uint8_t*>(data), bytes, leaves);
  return fingerprint_from_leaf_digests(leaves, bytes);
}

std::vector<std::uint64_t> ParallelFingerprinter::segment_digests(const void* data, std::size_t bytes,
                                                                  std::size_t segment_bytes) {
  check_segment_bytes(segment_bytes);
  if (bytes < min_parallel_bytes_ || workers_.empty()) return hash::segment_digests(data, bytes, segment_bytes);
  std::lock_guard call(call_mutex_);
  std::vector<std::uint64_t> leaves((bytes + kLeafBytes - 1) / kLeafBytes);
  leaf_digests(static_cast<const std::uint8_t*>(data), bytes, leaves);
  // Segments are whole numbers of leaves, so each segment's tree is built over a run of the buffer's leaves.
  const std::size_t leaves_per_segment = segment_bytes / kLeafBytes;
  std::vector<std::uint64_t> digests;
  digests.reserve((bytes + segment_bytes - 1) / segment_bytes);
  for (std::size_t first = 0; first < leaves.size(); first += leaves_per_segment) {
    const std::size_t count = std::min(leaves_per_segment, leaves.size() - first);
    const std::size_t segment_length = std::min(segment_bytes, bytes - first * kLeafBytes);
    digests.push_back(
        fingerprint_from_leaf_digests(std::span<const std::uint64_t>(leaves).subspan(first, count), segment_length));
  }
  return digests;
}

}  // namespace detnccl::hash
