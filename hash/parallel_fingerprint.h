// Fingerprints of large host buffers on several threads. The leaves are split evenly between a fixed pool of
// worker threads (plus the caller); the tree above them is a 1/2048 fraction of the work and stays on the caller.
// Results are identical to hash::fingerprint() / hash::segment_digests() for every thread count.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

namespace detnccl::hash {

// Buffers smaller than this are hashed on the calling thread: waking workers costs more than it saves.
inline constexpr std::size_t kDefaultParallelThresholdBytes = std::size_t{4} << 20;

class ParallelFingerprinter {
 public:
  // A pool of `threads` threads in all, the caller included (0: one per hardware thread); buffers of at least
  // `min_parallel_bytes` are split between them.
  explicit ParallelFingerprinter(unsigned threads = 0, std::size_t min_parallel_bytes = kDefaultParallelThresholdBytes);
  ~ParallelFingerprinter();
  ParallelFingerprinter(const ParallelFingerprinter&) = delete;
  ParallelFingerprinter& operator=(const ParallelFingerprinter&) = delete;

  // Threads that share the work, the caller included.
  unsigned threads() const { return static_cast<unsigned>(workers_.size()) + 1; }

  // Same value as hash::fingerprint(data, bytes). Calls from several threads are served one at a time.
  std::uint64_t fingerprint(const void* data, std::size_t bytes);

  // Same values as hash::segment_digests(data, bytes, segment_bytes), which also validates segment_bytes.
  std::vector<std::uint64_t> segment_digests(const void* data, std::size_t bytes, std::size_t segment_bytes);

 private:
  // XXH3_64bits of every leaf of the buffer into `out` (one entry per leaf), on all threads.
  void leaf_digests(const std::uint8_t* data, std::size_t bytes, std::span<std::uint64_t> out);
  void hash_share(unsigned share);
  void worker_loop(unsigned share);

  std::size_t min_parallel_bytes_;
  std::mutex call_mutex_;  // one buffer at a time

  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  std::uint64_t generation_ = 0;
  unsigned pending_ = 0;
  bool stopping_ = false;
  // The job of the current generation.
  const std::uint8_t* job_data_ = nullptr;
  std::size_t job_bytes_ = 0;
  std::uint64_t* job_out_ = nullptr;

  std::vector<std::thread> workers_;
};

}  // namespace detnccl::hash
