#include "hostnccl/ops.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "collectives/dtype_arith.h"

namespace hostnccl {
namespace {

// ---------------------------------------------------------------------------------------------------------------
// Init: rank 0 creates the segment, the others attach once it exists; the last to attach unlinks the name, so
// nothing is left in /dev/shm whatever happens to the processes afterwards. If they all die before that, no process
// is left to unlink it: hostnccl-run removes such leftovers by the job tag in the name (shm_names.h).
class InitOp final : public Op {
 public:
  explicit InitOp(Comm* comm) : Op(comm) {}
  bool creates_communicator() const override { return true; }
  const char* name() const override { return "ncclCommInitRank"; }

  ncclResult_t advance(bool* progressed) override {
    if (comm_->segment == nullptr) {
      std::string error;
      std::unique_ptr<Segment> segment;
      ncclResult_t result;
      if (comm_->rank == 0) {
        result = Segment::create(comm_->segment_name, comm_->nranks, static_cast<int>(comm_->config.reduce_order),
                                 comm_->config.slot_bytes, comm_->config.ring_bytes, &segment, &error);
      } else {
        result = Segment::try_open(comm_->segment_name, &segment, &error);
      }
      if (result != ncclSuccess) return fail(result, error);
      if (segment == nullptr) return ncclSuccess;  // not created yet
      if (segment->nranks() != comm_->nranks) {
        return fail(ncclInvalidArgument, "hostnccl: rank " + std::to_string(comm_->rank) + " was given nranks " +
                                             std::to_string(comm_->nranks) + " but the communicator has " +
                                             std::to_string(segment->nranks()) + " ranks");
      }
      std::int32_t expected = 0;
      if (!segment->rank(comm_->rank).pid.compare_exchange_strong(expected, static_cast<std::int32_t>(getpid()))) {
        return fail(ncclInvalidUsage, "hostnccl: rank " + std::to_string(comm_->rank) +
                                          " joined the communicator twice (pid " + std::to_string(expected) + ")");
      }
      if (segment->header().attached.fetch_add(1, std::memory_order_acq_rel) + 1 == comm_->nranks) {
        Segment::unlink(comm_->segment_name);
      }
      comm_->segment = std::move(segment);
      *progressed = true;
    }
    if (comm_->segment->header().attached.load(std::memory_order_acquire) == comm_->nranks) {
      comm_->ready = true;
      done_ = true;
      *progressed = true;
    }
    return ncclSuccess;
  }

  void on_failure() override { Segment::unlink(comm_->segment_name); }

 private:
  static ncclResult_t fail(ncclResult_t result, const std::string& text) {
    set_last_error(text);
    return result;
  }
};

// ---------------------------------------------------------------------------------------------------------------
// Collectives, chunk by chunk through the staging slots. Chunk protocol for generation g (the number of chunks this
// communicator has completed; equal on every rank):
//   1. wait until departed >= g*n (every rank finished reading chunk g-1), then fill the own slot;
//   2. take an arrival ticket t = arrived++ and publish order[t - g*n] = rank (tagged with g+1);
//   3. wait until arrived >= (g+1)*n, read the order, compute this rank's output from the slots;
//   4. departed++.
// Every rank reduces the same slots in the same order, so every rank gets identical bits.
class CollOp final : public Op {
 public:
  CollOp(Comm* comm, const CollArgs& args, std::uint64_t sequence)
      : Op(comm),
        args_(args),
        sequence_(sequence),
        element_bytes_(detnccl::arith::dtype_size(args.type)),
        order_(static_cast<std::size_t>(comm->nranks)),
        inputs_(static_cast<std::size_t>(comm->nranks)) {}

  // A string literal ("ncclAllReduce"), so NUL-terminated.
  const char* name() const override { return row_of(args_.kind).nccl_name.data(); }

  ncclResult_t advance(bool* progressed) override {
    for (;;) {
      switch (phase_) {
        case Phase::kWaitTurn:
          if (!comm_->ready || comm_->colls_done != sequence_) return ncclSuccess;
          *progressed = true;
          if (args_.count == 0) return finish();
          if (const ncclResult_t result = plan_chunks(); result != ncclSuccess) return result;
          phase_ = Phase::kWaitSlotFree;
          break;
        case Phase::kWaitSlotFree: {
          SegmentHeader& header = comm_->segment->header();
          const std::uint64_t generation = comm_->chunk_generation;
          const auto n = static_cast<std::uint64_t>(comm_->nranks);
          if (header.departed.load(std::memory_order_acquire) < generation * n) return ncclSuccess;
          chunk_length_ = std::min(per_chunk_, args_.count - offset_);
          fill_slot();
          const std::uint64_t position = header.arrived.fetch_add(1, std::memory_order_acq_rel) - generation * n;
          if (position >= n) {
            set_last_error(std::string("hostnccl: ") + name() +
                           ": ranks disagree on the sequence of collectives (mismatched calls or counts)");
            return ncclInvalidUsage;
          }
          comm_->segment->order(static_cast<int>(position))
              .tagged_rank.store(((generation + 1) << 32) | static_cast<std::uint64_t>(comm_->rank),
                                 std::memory_order_release);
          phase_ = Phase::kWaitArrivals;
          *progressed = true;
          break;
        }
        case Phase::kWaitArrivals: {
          SegmentHeader& header = comm_->segment->header();
          const std::uint64_t generation = comm_->chunk_generation;
          const auto n = static_cast<std::uint64_t>(comm_->nranks);
          if (header.arrived.load(std::memory_order_acquire) < (generation + 1) * n) return ncclSuccess;
          if (!read_order(generation)) return ncclSuccess;
          consume_slots();
          header.departed.fetch_add(1, std::memory_order_acq_rel);
          comm_->chunk_generation = generation + 1;
          offset_ += chunk_length_;
          *progressed = true;
          if (offset_ >= args_.count) return finish();
          phase_ = Phase::kWaitSlotFree;
          break;
        }
      }
    }
  }

 private:
  enum class Phase { kWaitTurn, kWaitSlotFree, kWaitArrivals };

  // Elements per chunk, from the segment's slot size (the creator's, so every rank agrees) and the number of blocks
  // a slot holds (one per rank for the calls whose buffers have one block per rank).
  ncclResult_t plan_chunks() {
    const bool blocked = row_of(args_.kind).input == detnccl::abi::Blocks::kPerRank;
    const std::size_t blocks = blocked ? static_cast<std::size_t>(comm_->nranks) : 1;
    per_chunk_ = comm_->segment->slot_bytes() / element_bytes_ / blocks;
    if (per_chunk_ != 0) return ncclSuccess;
    set_last_error(std::string("hostnccl: ") + name() + ": the staging slot (" +
                   std::to_string(comm_->segment->slot_bytes()) +
                   " bytes) cannot hold one element per rank; raise HOSTNCCL_SLOT_BYTES");
    return ncclInvalidUsage;
  }

  ncclResult_t finish() {
    ++comm_->colls_done;
    done_ = true;
    return ncclSuccess;
  }

  bool reduces() const { return row_of(args_.kind).reduces; }

  // The agreed order of contributions: arrival order, or rank order when the creator chose HOSTNCCL_REDUCE_ORDER=rank.
  bool read_order(std::uint64_t generation) {
    const bool by_rank = comm_->segment->header().reduce_order == static_cast<int>(ReduceOrder::kRank);
    for (int position = 0; position < comm_->nranks; ++position) {
      if (!reduces() || by_rank) {
        order_[static_cast<std::size_t>(position)] = position;
        continue;
      }
      // The ticket is taken before the order entry is written, so an entry can lag its ticket very briefly.
      const std::uint64_t tagged = comm_->segment->order(position).tagged_rank.load(std::memory_order_acquire);
      if ((tagged >> 32) != generation + 1) return false;
      order_[static_cast<std::size_t>(position)] = static_cast<int>(tagged & 0xFFFFFFFFu);
    }
    return true;
  }

  const char* send_at(std::size_t element) const {
    return static_cast<const char*>(args_.send) + element * element_bytes_;
  }
  char* recv_at(std::size_t element) const { return static_cast<char*>(args_.recv) + element * element_bytes_; }
  char* slot_at(int rank, std::size_t element) const { return comm_->segment->slot(rank) + element * element_bytes_; }
  void copy(void* dst, const void* src, std::size_t elements) const {
    if (dst != src && elements != 0) std::memcpy(dst, src, elements * element_bytes_);
  }

  // Step 1: what this rank contributes to the chunk [offset_, offset_ + chunk_length_) of every block.
  void fill_slot() const {
    const int me = comm_->rank;
    const std::size_t count = args_.count, length = chunk_length_;
    switch (args_.kind) {
      case CollKind::kAllReduce:
      case CollKind::kReduce:
      case CollKind::kAllGather:
      case CollKind::kGather:
        copy(slot_at(me, 0), send_at(offset_), length);
        break;
      case CollKind::kBroadcast:
        if (me == args_.root) copy(slot_at(me, 0), send_at(offset_), length);
        break;
      case CollKind::kScatter:
        if (me != args_.root) break;
        [[fallthrough]];
      case CollKind::kReduceScatter:
      case CollKind::kAlltoAll:
        for (int block = 0; block < comm_->nranks; ++block) {
          const auto b = static_cast<std::size_t>(block);
          copy(slot_at(me, b * length), send_at(b * count + offset_), length);
        }
        break;
      case CollKind::kBcast:
      case CollKind::kSend:
      case CollKind::kRecv:
        break;  // never a CollOp (see CollKind)
    }
  }

  // Step 3: this rank's output for the chunk, from every rank's slot. Writing the output only after the chunk's
  // input went into the slot is what makes in-place calls correct.
  void consume_slots() {
    const int me = comm_->rank, n = comm_->nranks;
    const std::size_t count = args_.count, length = chunk_length_;
    const auto mine = static_cast<std::size_t>(me);
    switch (args_.kind) {
      case CollKind::kAllReduce:
      case CollKind::kReduce:
        if (args_.kind == CollKind::kReduce && me != args_.root) break;
        for (int k = 0; k < n; ++k)
          inputs_[static_cast<std::size_t>(k)] = slot_at(order_[static_cast<std::size_t>(k)], 0);
        reduce_in_order(recv_at(offset_), inputs_.data(), n, length, args_.type, args_.spec);
        corrupt_if_chosen(length);
        break;
      case CollKind::kReduceScatter:
        for (int k = 0; k < n; ++k) {
          inputs_[static_cast<std::size_t>(k)] = slot_at(order_[static_cast<std::size_t>(k)], mine * length);
        }
        reduce_in_order(recv_at(offset_), inputs_.data(), n, length, args_.type, args_.spec);
        corrupt_if_chosen(length);
        break;
      case CollKind::kBroadcast:
        copy(recv_at(offset_), me == args_.root ? send_at(offset_) : slot_at(args_.root, 0), length);
        break;
      case CollKind::kGather:
        if (me != args_.root) break;
        [[fallthrough]];
      case CollKind::kAllGather:
        for (int j = 0; j < n; ++j) copy(recv_at(static_cast<std::size_t>(j) * count + offset_), slot_at(j, 0), length);
        break;
      case CollKind::kAlltoAll:
        for (int j = 0; j < n; ++j) {
          copy(recv_at(static_cast<std::size_t>(j) * count + offset_), slot_at(j, mine * length), length);
        }
        break;
      case CollKind::kScatter:
        copy(recv_at(offset_), slot_at(args_.root, mine * length), length);
        break;
      case CollKind::kBcast:
      case CollKind::kSend:
      case CollKind::kRecv:
        break;  // never a CollOp (see CollKind)
    }
  }

  // HOSTNCCL_CORRUPT: the chosen element, once the chunk holding it is reduced.
  void corrupt_if_chosen(std::size_t length) const {
    if (args_.corrupt && args_.corrupt_element >= offset_ && args_.corrupt_element - offset_ < length) {
      corrupt_element(args_.recv, args_.corrupt_element, args_.type, args_.corrupt_factor);
    }
  }

  CollArgs args_;
  std::uint64_t sequence_;
  std::size_t element_bytes_;
  std::size_t per_chunk_ = 0;
  Phase phase_ = Phase::kWaitTurn;
  std::size_t offset_ = 0;
  std::size_t chunk_length_ = 0;
  std::vector<int> order_;
  std::vector<const void*> inputs_;
};

// ---------------------------------------------------------------------------------------------------------------
// Split: an allgather of (color, key) over the parent, then the init of the child communicator.
class SplitOp final : public Op {
 public:
  SplitOp(Comm* parent, int color, int key, Comm** newcomm, int child_blocking)
      : Op(parent),
        color_(color),
        child_blocking_(child_blocking),
        split_index_(parent->splits_issued++),
        newcomm_(newcomm),
        pairs_(2 * static_cast<std::size_t>(parent->nranks)) {
    mine_[0] = color;
    mine_[1] = key;
    CollArgs args;
    args.kind = CollKind::kAllGather;
    args.send = mine_;
    args.recv = pairs_.data();
    args.count = 2;
    args.type = ncclInt32;
    exchange_ = make_coll_op(parent, args);
  }
  const char* name() const override { return "ncclCommSplit"; }
  bool creates_communicator() const override { return true; }

  ncclResult_t advance(bool* progressed) override {
    if (!exchange_->done()) {
      if (const ncclResult_t result = exchange_->advance(progressed); result != ncclSuccess) return result;
      if (!exchange_->done()) return ncclSuccess;
      if (color_ == NCCL_SPLIT_NOCOLOR) {
        *newcomm_ = nullptr;
        done_ = true;
        return ncclSuccess;
      }
      create_child();
    }
    if (const ncclResult_t result = child_init_->advance(progressed); result != ncclSuccess) return result;
    if (child_init_->done()) {
      // Written with release semantics: on a non-blocking parent this thread is the background one, and the caller
      // reads *newcomm once the parent's async error (stored after this) says the split is over.
      __atomic_store_n(newcomm_, child_.release(), __ATOMIC_RELEASE);
      done_ = true;
    }
    return ncclSuccess;
  }

  void on_failure() override {
    if (child_init_ != nullptr && !child_init_->done()) child_init_->on_failure();
  }

  // Parent ranks that chose NCCL_SPLIT_NOCOLOR may be gone once the exchange is over: wait on the child's ranks.
  const Comm* waited_comm() const override { return child_ != nullptr ? child_.get() : comm_; }

 private:
  // Members of the new communicator are ordered by (key, parent rank), as NCCL orders them.
  void create_child() {
    std::vector<std::pair<int, int>> members;  // (key, parent rank)
    for (int r = 0; r < comm_->nranks; ++r) {
      if (pairs_[2 * static_cast<std::size_t>(r)] == color_)
        members.emplace_back(pairs_[2 * static_cast<std::size_t>(r) + 1], r);
    }
    std::sort(members.begin(), members.end());
    child_ = std::make_unique<Comm>();
    child_->nranks = static_cast<int>(members.size());
    for (std::size_t i = 0; i < members.size(); ++i) {
      if (members[i].second == comm_->rank) child_->rank = static_cast<int>(i);
    }
    child_->cuda_device = comm_->cuda_device;
    child_->config = comm_->config;
    if (child_blocking_ >= 0) child_->config.blocking = child_blocking_ != 0;
    child_->config.reduce_order = static_cast<ReduceOrder>(comm_->segment->header().reduce_order);
    child_->config.slot_bytes = comm_->segment->slot_bytes();
    child_->config.ring_bytes = comm_->segment->ring_bytes();
    child_->id = derive_split_id(comm_->id, split_index_, color_);
    child_->segment_name = segment_name(child_->id);
    const auto n = static_cast<std::size_t>(child_->nranks);
    child_->sends_issued.assign(n, 0);
    child_->sends_done.assign(n, 0);
    child_->recvs_issued.assign(n, 0);
    child_->recvs_done.assign(n, 0);
    child_init_ = make_init_op(child_.get());
  }

  int color_;
  int child_blocking_;
  std::uint32_t split_index_;
  Comm** newcomm_;
  std::int32_t mine_[2];
  std::vector<std::int32_t> pairs_;
  std::unique_ptr<Op> exchange_;
  std::unique_ptr<Comm> child_;
  std::unique_ptr<Op> child_init_;
};

// ---------------------------------------------------------------------------------------------------------------
// Point-to-point through the ring of the ordered pair (sender, receiver). Each message is an 8-byte length header
// followed by the payload, so a receive that does not match its send's size is detected instead of misreading.
class StreamOp : public Op {
 protected:
  StreamOp(Comm* comm, std::size_t bytes, int peer) : Op(comm), bytes_(bytes), peer_(peer) {}

  // Copies `length` bytes between the logical message position `position` (header, then payload) and `ring_bytes`.
  template <bool kToRing>
  void transfer(char* ring_bytes, std::uint64_t position, std::size_t length, char* payload) {
    while (length > 0) {
      std::size_t piece;
      char* message_bytes;
      if (position < kHeaderBytes) {
        piece = std::min<std::size_t>(length, kHeaderBytes - position);
        message_bytes = reinterpret_cast<char*>(&header_) + position;
      } else {
        piece = length;
        message_bytes = payload + (position - kHeaderBytes);
      }
      if (kToRing) {
        std::memcpy(ring_bytes, message_bytes, piece);
      } else {
        std::memcpy(message_bytes, ring_bytes, piece);
      }
      ring_bytes += piece;
      position += piece;
      length -= piece;
    }
  }

  // Other ranks may have finished everything and exited: only the peer matters.
  int waited_rank() const override { return peer_; }

  static constexpr std::uint64_t kHeaderBytes = sizeof(std::uint64_t);
  std::uint64_t bytes_;
  int peer_;
  std::uint64_t sequence_ = 0;
  std::uint64_t position_ = 0;  // bytes of header + payload moved so far
  std::uint64_t header_ = 0;
};

class SendOp final : public StreamOp {
 public:
  SendOp(Comm* comm, const void* data, std::size_t bytes, int peer)
      : StreamOp(comm, bytes, peer), data_(static_cast<const char*>(data)) {
    sequence_ = comm->sends_issued[static_cast<std::size_t>(peer)]++;
    header_ = bytes;
  }
  const char* name() const override { return "ncclSend"; }

  ncclResult_t advance(bool* progressed) override {
    const auto p = static_cast<std::size_t>(peer_);
    if (!comm_->ready || comm_->sends_done[p] != sequence_) return ncclSuccess;
    RingControl& control = comm_->segment->ring_control(comm_->rank, peer_);
    char* ring = comm_->segment->ring(comm_->rank, peer_);
    const std::uint64_t capacity = comm_->segment->ring_bytes(), total = kHeaderBytes + bytes_;
    while (position_ < total) {
      const std::uint64_t head = control.head.load(std::memory_order_relaxed);  // only this rank writes it
      const std::uint64_t tail = control.tail.load(std::memory_order_acquire);
      const std::uint64_t room = capacity - (head - tail);
      if (room == 0) return ncclSuccess;
      const std::uint64_t length = std::min({room, total - position_, capacity - head % capacity});
      transfer<true>(ring + head % capacity, position_, length, const_cast<char*>(data_));
      control.head.store(head + length, std::memory_order_release);
      position_ += length;
      *progressed = true;
    }
    ++comm_->sends_done[p];
    done_ = true;
    *progressed = true;
    return ncclSuccess;
  }

 private:
  const char* data_;
};

class RecvOp final : public StreamOp {
 public:
  RecvOp(Comm* comm, void* data, std::size_t bytes, int peer)
      : StreamOp(comm, bytes, peer), data_(static_cast<char*>(data)) {
    sequence_ = comm->recvs_issued[static_cast<std::size_t>(peer)]++;
  }
  const char* name() const override { return "ncclRecv"; }

  ncclResult_t advance(bool* progressed) override {
    const auto p = static_cast<std::size_t>(peer_);
    if (!comm_->ready || comm_->recvs_done[p] != sequence_) return ncclSuccess;
    RingControl& control = comm_->segment->ring_control(peer_, comm_->rank);
    const char* ring = comm_->segment->ring(peer_, comm_->rank);
    const std::uint64_t capacity = comm_->segment->ring_bytes(), total = kHeaderBytes + bytes_;
    while (position_ < total) {
      const std::uint64_t tail = control.tail.load(std::memory_order_relaxed);  // only this rank writes it
      const std::uint64_t head = control.head.load(std::memory_order_acquire);
      if (head == tail) return ncclSuccess;
      std::uint64_t length = std::min({head - tail, total - position_, capacity - tail % capacity});
      if (position_ < kHeaderBytes) length = std::min(length, kHeaderBytes - position_);  // check the size first
      transfer<false>(const_cast<char*>(ring) + tail % capacity, position_, length, data_);
      control.tail.store(tail + length, std::memory_order_release);
      position_ += length;
      *progressed = true;
      if (position_ == kHeaderBytes && header_ != bytes_) {
        set_last_error("hostnccl: rank " + std::to_string(comm_->rank) + " receives " + std::to_string(bytes_) +
                       " bytes from rank " + std::to_string(peer_) + ", which sent " + std::to_string(header_));
        return ncclInvalidUsage;
      }
    }
    ++comm_->recvs_done[p];
    done_ = true;
    *progressed = true;
    return ncclSuccess;
  }

 private:
  char* data_;
};

}  // namespace

std::unique_ptr<Op> make_init_op(Comm* comm) { return std::make_unique<InitOp>(comm); }

std::unique_ptr<Op> make_coll_op(Comm* comm, const CollArgs& args) {
  return std::make_unique<CollOp>(comm, args, comm->colls_issued++);
}

std::unique_ptr<Op> make_split_op(Comm* parent, int color, int key, Comm** newcomm, int child_blocking) {
  return std::make_unique<SplitOp>(parent, color, key, newcomm, child_blocking);
}

std::unique_ptr<Op> make_send_op(Comm* comm, const void* data, std::size_t bytes, int peer) {
  return std::make_unique<SendOp>(comm, data, bytes, peer);
}

std::unique_ptr<Op> make_recv_op(Comm* comm, void* data, std::size_t bytes, int peer) {
  return std::make_unique<RecvOp>(comm, data, bytes, peer);
}

}  // namespace hostnccl
