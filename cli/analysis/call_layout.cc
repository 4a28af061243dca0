// detnccl analysis: buffer layouts of recorded calls (see call_layout.h).
#include "cli/analysis/call_layout.h"

#include <algorithm>
#include <charconv>

namespace detnccl::analysis {

using records::OpId;

std::uint64_t datatype_bytes(std::uint16_t datatype) noexcept {
  switch (datatype) {
    case 0:   // int8
    case 1:   // uint8
    case 10:  // fp8 e4m3
    case 11:  // fp8 e5m2
      return 1;
    case 6:  // float16
    case 9:  // bfloat16
      return 2;
    case 2:  // int32
    case 3:  // uint32
    case 7:  // float32
      return 4;
    case 4:  // int64
    case 5:  // uint64
    case 8:  // float64
      return 8;
    default:
      return 0;
  }
}

std::uint64_t saturating_product(std::uint64_t a, std::uint64_t b) noexcept {
  std::uint64_t product = 0;
  return __builtin_mul_overflow(a, b, &product) ? kSaturated : product;
}

bool is_point_to_point(OpId op) noexcept { return op == OpId::kSend || op == OpId::kRecv; }

bool is_rooted(OpId op) noexcept {
  return op == OpId::kReduce || op == OpId::kBroadcast || op == OpId::kBcast || op == OpId::kGather ||
         op == OpId::kScatter;
}

std::uint64_t input_elements(const records::CallFields& call, std::uint32_t nranks, std::uint32_t comm_rank) noexcept {
  const bool is_root = call.peer >= 0 && static_cast<std::uint32_t>(call.peer) == comm_rank;
  switch (call.op) {
    case OpId::kAllReduce:
    case OpId::kReduce:
    case OpId::kAllGather:
    case OpId::kGather:
    case OpId::kSend:
      return call.count;
    case OpId::kReduceScatter:
    case OpId::kAlltoAll:
      return saturating_product(call.count, nranks);
    case OpId::kBroadcast:
    case OpId::kBcast:
      return is_root ? call.count : 0;
    case OpId::kScatter:
      return is_root ? saturating_product(call.count, nranks) : 0;
    case OpId::kRecv:
    case OpId::kUnknown:
      break;
  }
  return 0;
}

std::uint64_t output_elements(const records::CallFields& call, std::uint32_t nranks, std::uint32_t comm_rank) noexcept {
  const bool is_root = call.peer >= 0 && static_cast<std::uint32_t>(call.peer) == comm_rank;
  switch (call.op) {
    case OpId::kAllReduce:
    case OpId::kReduceScatter:
    case OpId::kBroadcast:
    case OpId::kBcast:
    case OpId::kScatter:
    case OpId::kRecv:
      return call.count;
    case OpId::kAllGather:
    case OpId::kAlltoAll:
      return saturating_product(call.count, nranks);
    case OpId::kReduce:
      return is_root ? call.count : 0;
    case OpId::kGather:
      return is_root ? saturating_product(call.count, nranks) : 0;
    case OpId::kSend:
    case OpId::kUnknown:
      break;
  }
  return 0;
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
