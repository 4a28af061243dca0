/* hostnccl: one communicator's shared-memory segment — its layout and how ranks create, attach to and unlink it.
 *
 * Layout (offsets computed from nranks, slot and ring sizes, all cache-line aligned):
 *   SegmentHeader            magic, sizes, attach count, abort flag, collective arrival/departure counters
 *   RankRecord[nranks]       pid of each attached rank
 *   OrderEntry[nranks]       arrival order of the current collective chunk: (generation + 1) << 32 | rank
 *   RingControl[n * n]       head/tail byte counters of the send/recv ring from src to dst
 *   slots                    nranks staging slots of slot_bytes (collective chunks)
 *   rings                    n * n ring buffers of ring_bytes (p2p streams)
 * Synchronisation uses lock-free std::atomic objects placed in the segment (never a process-shared mutex: a process
 * that died holding one would hang the survivors).
 */
#ifndef DETNCCL_HOSTNCCL_SEGMENT_H
#define DETNCCL_HOSTNCCL_SEGMENT_H

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <boost/interprocess/mapped_region.hpp>

#include "abi/nccl_abi.h"

namespace hostnccl {

static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "shared-memory counters must be lock-free");
static_assert(std::atomic<std::int32_t>::is_always_lock_free, "shared-memory flags must be lock-free");

inline constexpr std::uint64_t kSegmentMagic = 0x31636363'6e74736full;  // "ostnccc1"

struct SegmentHeader {
  std::atomic<std::uint64_t> magic;  // stored last by the creator: the layout fields below are valid once it is set
  std::int32_t nranks;
  std::int32_t reduce_order;  // ReduceOrder of the creator: every rank must add in the same order
  std::uint64_t slot_bytes;
  std::uint64_t ring_bytes;
  alignas(64) std::atomic<std::int32_t> attached;    // ranks attached so far; the last one unlinks the name
  alignas(64) std::atomic<std::int32_t> abort_flag;  // a rank failed or aborted: every waiting peer gives up
  alignas(64) std::atomic<std::uint64_t> arrived;    // collective chunk arrivals, over the communicator's lifetime
  alignas(64) std::atomic<std::uint64_t> departed;   // ranks done reading a chunk's slots
};

struct alignas(64) RankRecord {
  std::atomic<std::int32_t> pid;
};

struct alignas(64) OrderEntry {
  std::atomic<std::uint64_t> tagged_rank;
};

struct alignas(64) RingControl {
  std::atomic<std::uint64_t> head;              // bytes ever written by the sender
  alignas(64) std::atomic<std::uint64_t> tail;  // bytes ever consumed by the receiver
};

class Segment {
 public:
  /* Creates the named object (mode 0600, fails if it exists), sizes it and initialises the header. */
  static ncclResult_t create(const std::string& name, int nranks, int reduce_order, std::size_t slot_bytes,
                             std::size_t ring_bytes, std::unique_ptr<Segment>* out, std::string* error);

  /* Attaches to an existing, fully initialised segment. Sets *out to null (and returns ncclSuccess) when the
   * segment does not exist yet or its creator has not finished initialising it: the caller retries later. */
  static ncclResult_t try_open(const std::string& name, std::unique_ptr<Segment>* out, std::string* error);

  /* Removes the name (mappings stay valid). Harmless when the name is already gone. */
  static void unlink(const std::string& name);

  SegmentHeader& header() const { return *reinterpret_cast<SegmentHeader*>(base_); }
  int nranks() const { return header().nranks; }
  std::size_t slot_bytes() const { return header().slot_bytes; }
  std::size_t ring_bytes() const { return header().ring_bytes; }
  RankRecord& rank(int r) const { return reinterpret_cast<RankRecord*>(base_ + layout_.ranks)[r]; }
  OrderEntry& order(int position) const { return reinterpret_cast<OrderEntry*>(base_ + layout_.order)[position]; }
  RingControl& ring_control(int src, int dst) const {
    return reinterpret_cast<RingControl*>(base_ + layout_.ring_controls)[src * nranks() + dst];
  }
  char* slot(int r) const { return base_ + layout_.slots + static_cast<std::size_t>(r) * slot_bytes(); }
  char* ring(int src, int dst) const {
    return base_ + layout_.rings + static_cast<std::size_t>(src * nranks() + dst) * ring_bytes();
  }

 private:
  struct Layout {
    std::size_t ranks = 0, order = 0, ring_controls = 0, slots = 0, rings = 0, total = 0;
  };
  static Layout compute_layout(int nranks, std::size_t slot_bytes, std::size_t ring_bytes);

  boost::interprocess::mapped_region region_;
  char* base_ = nullptr;
  Layout layout_;
};

}  // namespace hostnccl

#endif  // DETNCCL_HOSTNCCL_SEGMENT_H
