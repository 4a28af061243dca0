// detnccl analysis: what a recorded call's buffers look like — sizes per operation, which side exists on which
// rank, and how segment digests map to byte ranges and element indices. The sizes come from abi/traced_ops.h, the
// table interpose/call_shape.cc records calls with: AllGather gathers `count` elements per rank, ReduceScatter
// leaves `count` per rank, AlltoAll, Gather and Scatter move `count` elements per peer.
#ifndef DETNCCL_CLI_ANALYSIS_CALL_LAYOUT_H
#define DETNCCL_CLI_ANALYSIS_CALL_LAYOUT_H

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "records/log_format.h"

namespace detnccl::analysis {

// Bytes per element of an ncclDataType_t value (abi/nccl_datatypes.h); 0 for an unknown value.
std::uint64_t datatype_bytes(std::uint16_t datatype) noexcept;

// Whether an operation is Send or Recv (matched per peer pair, not per collective).
bool is_point_to_point(records::OpId op) noexcept;

// Whether an operation is rooted (its peer field holds the root).
bool is_rooted(records::OpId op) noexcept;

// a * b, or kSaturated (2^64-1) when the product does not fit in 64 bits. RATIONALE: counts come from logs, which may
// be corrupt or crafted; a wrapped product would pass for a small, plausible size.
inline constexpr std::uint64_t kSaturated = ~std::uint64_t{0};
std::uint64_t saturating_product(std::uint64_t a, std::uint64_t b) noexcept;

// Elements of the input and output buffers of a call on a communicator of nranks ranks (0: that side does not
// exist for this call, e.g. a Recv's input or a non-root's Gather output). comm_rank is the caller's rank in it.
// kSaturated when the count times nranks does not fit in 64 bits.
std::uint64_t input_elements(const records::CallFields& call, std::uint32_t nranks, std::uint32_t comm_rank) noexcept;
std::uint64_t output_elements(const records::CallFields& call, std::uint32_t nranks, std::uint32_t comm_rank) noexcept;

// DETNCCL_SEGMENT_BYTES from a header's configuration text ("DETNCCL_SEGMENT_BYTES=1M" lines); nullopt when absent
// or unreadable.
std::optional<std::uint64_t> segment_bytes_from_config(std::string_view config_text);

// A half-open range [first, last) of bytes and the elements it covers.
struct DifferingRange {
  std::uint64_t first_byte = 0;
  std::uint64_t end_byte = 0;
  std::uint64_t first_element = 0;
  std::uint64_t end_element = 0;
};

// The byte ranges whose segment digests differ between two records of one buffer (consecutive segments merged).
// buffer_bytes is the buffer's length (the last segment may be shorter); element_bytes 0 leaves element indices 0.
// Empty when the digest lists have different lengths (then nothing can be located).
std::vector<DifferingRange> differing_ranges(std::span<const std::uint64_t> a, std::span<const std::uint64_t> b,
                                             std::uint64_t segment_bytes, std::uint64_t buffer_bytes,
                                             std::uint64_t element_bytes);

// The indices where two per-peer block lists differ (empty when their lengths differ or they are equal).
std::vector<std::uint32_t> differing_blocks(std::span<const std::uint64_t> a, std::span<const std::uint64_t> b);

// "AllReduce float32 x 1031 sum" style description of a call's metadata; includes root or peer when present.
std::string describe_call(const records::CallFields& call);

}  // namespace detnccl::analysis

#endif  // DETNCCL_CLI_ANALYSIS_CALL_LAYOUT_H
