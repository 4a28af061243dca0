// detnccl analysis: buffer layouts of recorded calls (see call_layout.h).
#include "cli/analysis/call_layout.h"

#include <algorithm>
#include <charconv>

#include "abi/nccl_datatypes.h"
#include "abi/traced_ops.h"
#include "records/step_index.h"

namespace detnccl::analysis {

using records::OpId;

std::uint64_t datatype_bytes(std::uint16_t datatype) noexcept { return abi::datatype_size(datatype); }

std::uint64_t saturating_product(std::uint64_t a, std::uint64_t b) noexcept {
  std::uint64_t product = 0;
  return __builtin_mul_overflow(a, b, &product) ? kSaturated : product;
}

bool is_point_to_point(OpId op) noexcept { return records::is_paired_op(op); }

bool is_rooted(OpId op) noexcept {
  const abi::TracedOpRow* row = abi::traced_op_row(static_cast<std::uint16_t>(op));
  return row != nullptr && row->peer == abi::PeerRole::kRoot;
}

namespace {

// Elements of one side of a call, from its op's row of abi/traced_ops.h.
std::uint64_t side_elements(const records::CallFields& call, abi::Blocks blocks, abi::OnRanks on, std::uint32_t nranks,
                            std::uint32_t comm_rank) noexcept {
  const bool is_root = call.peer >= 0 && static_cast<std::uint32_t>(call.peer) == comm_rank;
  if (on == abi::OnRanks::kRoot && !is_root) return 0;
  switch (blocks) {
    case abi::Blocks::kOne:
      return call.count;
    case abi::Blocks::kPerRank:
      return saturating_product(call.count, nranks);
    case abi::Blocks::kNone:
      break;
  }
  return 0;
}

}  // namespace

std::uint64_t input_elements(const records::CallFields& call, std::uint32_t nranks, std::uint32_t comm_rank) noexcept {
  const abi::TracedOpRow* row = abi::traced_op_row(static_cast<std::uint16_t>(call.op));
  return row != nullptr ? side_elements(call, row->input, row->input_on, nranks, comm_rank) : 0;
}

std::uint64_t output_elements(const records::CallFields& call, std::uint32_t nranks, std::uint32_t comm_rank) noexcept {
  const abi::TracedOpRow* row = abi::traced_op_row(static_cast<std::uint16_t>(call.op));
  return row != nullptr ? side_elements(call, row->output, row->output_on, nranks, comm_rank) : 0;
}

std::optional<std::uint64_t> segment_bytes_from_config(std::string_view config_text) {
  constexpr std::string_view kName = "DETNCCL_SEGMENT_BYTES=";
  std::size_t at = 0;
  while (at < config_text.size()) {
    std::size_t end = config_text.find('\n', at);
    if (end == std::string_view::npos) end = config_text.size();
    const std::string_view line = config_text.substr(at, end - at);
    at = end + 1;
    if (!line.starts_with(kName)) continue;
    std::string_view value = line.substr(kName.size());
    std::uint64_t multiplier = 1;
    if (!value.empty()) {
      switch (value.back()) {
        case 'K':
        case 'k':
          multiplier = 1ull << 10;
          break;
        case 'M':
        case 'm':
          multiplier = 1ull << 20;
          break;
        case 'G':
        case 'g':
          multiplier = 1ull << 30;
          break;
        default:
          break;
      }
      if (multiplier != 1) value.remove_suffix(1);
    }
    std::uint64_t number = 0;
    const auto [stop, error] = std::from_chars(value.data(), value.data() + value.size(), number);
    if (error != std::errc() || stop != value.data() + value.size() || number == 0) return std::nullopt;
    return number * multiplier;
  }
  return std::nullopt;
}

std::vector<DifferingRange> differing_ranges(std::span<const std::uint64_t> a, std::span<const std::uint64_t> b,
                                             std::uint64_t segment_bytes, std::uint64_t buffer_bytes,
                                             std::uint64_t element_bytes) {
  std::vector<DifferingRange> ranges;
  if (a.size() != b.size() || segment_bytes == 0) return ranges;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    const std::uint64_t first = i * segment_bytes;
    const std::uint64_t end = std::min(first + segment_bytes, std::max(buffer_bytes, first + 1));
    if (!ranges.empty() && ranges.back().end_byte == first) {
      ranges.back().end_byte = end;
    } else {
      ranges.push_back({first, end, 0, 0});
    }
  }
  for (DifferingRange& range : ranges) {
    if (element_bytes == 0) continue;
    range.first_element = range.first_byte / element_bytes;
    range.end_element = (range.end_byte + element_bytes - 1) / element_bytes;
  }
  return ranges;
}

std::vector<std::uint32_t> differing_blocks(std::span<const std::uint64_t> a, std::span<const std::uint64_t> b) {
  std::vector<std::uint32_t> blocks;
  if (a.size() != b.size()) return blocks;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) blocks.push_back(static_cast<std::uint32_t>(i));
  }
  return blocks;
}

std::string describe_call(const records::CallFields& call) {
  std::string text(records::op_name(call.op));
  text += ' ';
  text += records::datatype_name(call.datatype);
  text += " x " + std::to_string(call.count);
  if (call.redop >= 0) {
    text += ' ';
    text += records::redop_name(call.redop);
  }
  if (is_point_to_point(call.op)) {
    text += (call.op == OpId::kSend ? " to peer " : " from peer ") + std::to_string(call.peer);
  } else if (is_rooted(call.op)) {
    text += " root " + std::to_string(call.peer);
  }
  return text;
}

}  // namespace detnccl::analysis
