#include "hostnccl/segment.h"

#include <new>

#include <boost/interprocess/exceptions.hpp>
#include <boost/interprocess/permissions.hpp>
#include <boost/interprocess/shared_memory_object.hpp>

namespace hostnccl {
namespace bip = boost::interprocess;

namespace {
constexpr std::size_t align_up(std::size_t value, std::size_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}
}  // namespace

Segment::Layout Segment::compute_layout(int nranks, std::size_t slot_bytes, std::size_t ring_bytes) {
  const auto n = static_cast<std::size_t>(nranks);
  Layout layout;
  layout.ranks = align_up(sizeof(SegmentHeader), 64);
  layout.order = layout.ranks + n * sizeof(RankRecord);
  layout.ring_controls = layout.order + n * sizeof(OrderEntry);
  layout.slots = align_up(layout.ring_controls + n * n * sizeof(RingControl), 4096);
  layout.rings = layout.slots + n * slot_bytes;
  layout.total = layout.rings + n * n * ring_bytes;
  return layout;
}

ncclResult_t Segment::create(const std::string& name, int nranks, int reduce_order, std::size_t slot_bytes,
                             std::size_t ring_bytes, std::unique_ptr<Segment>* out, std::string* error) {
  try {
    // RATIONALE: the name exists from here on, empty until truncate (attaching ranks wait for the magic, stored last).
    // Creating the object unnamed (O_TMPFILE in /dev/shm) and linking it in once initialised would close that short
    // window but not the long one in which the creator waits for its peers, so it would not prevent a leftover when
    // every rank dies during init; hostnccl-run removes those by the job tag in the name.
    bip::permissions owner_only;
    owner_only.set_permissions(0600);
    bip::shared_memory_object object(bip::create_only, name.c_str(), bip::read_write, owner_only);
    auto segment = std::unique_ptr<Segment>(new Segment);
    segment->layout_ = compute_layout(nranks, slot_bytes, ring_bytes);
    try {
      object.truncate(static_cast<bip::offset_t>(segment->layout_.total));
      segment->region_ = bip::mapped_region(object, bip::read_write);
    } catch (...) {
      bip::shared_memory_object::remove(name.c_str());
      throw;
    }
    segment->base_ = static_cast<char*>(segment->region_.get_address());
    // The pages are zero after truncate; constructing the atomics in place makes their lifetime explicit.
    auto* header = new (segment->base_) SegmentHeader{};
    header->nranks = nranks;
    header->reduce_order = reduce_order;
    header->slot_bytes = slot_bytes;
    header->ring_bytes = ring_bytes;
    for (int r = 0; r < nranks; ++r) {
      new (&segment->rank(r)) RankRecord{};
      new (&segment->order(r)) OrderEntry{};
      for (int d = 0; d < nranks; ++d) new (&segment->ring_control(r, d)) RingControl{};
    }
    header->magic.store(kSegmentMagic, std::memory_order_release);
    *out = std::move(segment);
    return ncclSuccess;
  } catch (const std::exception& e) {
    *error = "hostnccl: cannot create shared memory /" + name + ": " + e.what();
    return ncclSystemError;
  }
}

ncclResult_t Segment::try_open(const std::string& name, std::unique_ptr<Segment>* out, std::string* error) {
  out->reset();
  try {
    bip::shared_memory_object object(bip::open_only, name.c_str(), bip::read_write);
    bip::offset_t size = 0;
    if (!object.get_size(size) || size < static_cast<bip::offset_t>(sizeof(SegmentHeader))) return ncclSuccess;
    auto segment = std::unique_ptr<Segment>(new Segment);
    segment->region_ = bip::mapped_region(object, bip::read_write);
    segment->base_ = static_cast<char*>(segment->region_.get_address());
    if (segment->header().magic.load(std::memory_order_acquire) != kSegmentMagic) return ncclSuccess;
    const SegmentHeader& header = segment->header();
    segment->layout_ = compute_layout(header.nranks, header.slot_bytes, header.ring_bytes);
    if (segment->layout_.total > static_cast<std::size_t>(size)) {
      *error = "hostnccl: shared memory /" + name + " is smaller than its header says";
      return ncclSystemError;
    }
    *out = std::move(segment);
    return ncclSuccess;
  } catch (const bip::interprocess_exception& e) {
    if (e.get_error_code() == bip::not_found_error) return ncclSuccess;  // the creator has not got there yet
    *error = "hostnccl: cannot open shared memory /" + name + ": " + e.what();
    return ncclSystemError;
  }
}

void Segment::unlink(const std::string& name) { bip::shared_memory_object::remove(name.c_str()); }

}  // namespace hostnccl
