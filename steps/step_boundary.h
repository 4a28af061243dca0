// detnccl steps: the call that starts or ends an iteration, as DETNCCL_STEP_BOUNDARY and `--step-boundary` name it.
//
// A boundary is an operation, optionally narrowed by element count, datatype and communicator (its ordinal, as
// `detnccl dump` shows it), and whether the matching call starts an iteration or ends one. Header-only and free of
// the rest of detnccl but abi/, so that config/ can parse the setting and the CLI the option with the same words.
#ifndef DETNCCL_STEPS_STEP_BOUNDARY_H
#define DETNCCL_STEPS_STEP_BOUNDARY_H

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "abi/nccl_datatypes.h"
#include "abi/traced_ops.h"

namespace detnccl::steps {

// Whether a matching call is the first call of an iteration or its last.
enum class BoundarySide : std::uint8_t { kStart, kEnd };

// The call that marks iterations. A default-constructed boundary names no call (no rule).
struct StepBoundary {
  std::uint16_t op = 0;                  // stable op number (abi/traced_ops.h); 0: no rule
  std::optional<std::uint64_t> count;    // NCCL's count argument
  std::optional<std::int32_t> datatype;  // ncclDataType_t number
  std::optional<std::uint64_t> comm;     // the communicator's ordinal in the process (CommunicatorRecord::ordinal)
  BoundarySide side = BoundarySide::kStart;

  // Whether a rule is set.
  bool enabled() const noexcept { return op != 0; }

  // Whether a call with these fields is the boundary call.
  bool matches(std::uint16_t call_op, std::uint64_t call_count, std::int32_t call_datatype,
               std::uint64_t call_comm) const noexcept {
    return enabled() && call_op == op && (!count || *count == call_count) &&
           (!datatype || *datatype == call_datatype) && (!comm || *comm == call_comm);
  }

  friend bool operator==(const StepBoundary&, const StepBoundary&) = default;
};

// The accepted text, for messages and documentation.
inline constexpr std::string_view kStepBoundaryAccepted =
    "OP[,count=N][,datatype=TYPE][,comm=ORDINAL][,at=start or end]: OP a traced operation (AllReduce, Send, ...), TYPE "
    "a datatype name (float32, bfloat16, ...), ORDINAL the communicator's number in detnccl dump; at=start (the "
    "default) starts an iteration at each matching call, at=end starts one after it";

namespace boundary_detail {

inline bool same_ignoring_case(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

inline bool parse_unsigned(std::string_view text, std::uint64_t& out) noexcept {
  if (text.empty() || text.size() > 20) return false;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), out);
  return error == std::errc() && end == text.data() + text.size();
}

}  // namespace boundary_detail

// Parses a boundary ("AllReduce,count=1,datatype=float32,at=end"); names and keys in any case. Returns the problem as
// a phrase that never quotes the text (callers quote it, escaped); nullopt on success. `out` is set only on success.
inline std::optional<std::string> parse_step_boundary(std::string_view text, StepBoundary& out) {
  using boundary_detail::same_ignoring_case;
  StepBoundary boundary;
  bool first = true;
  while (true) {
    const std::size_t comma = text.find(',');
    const std::string_view part = text.substr(0, comma);
    if (part.empty()) return std::string("an empty part between commas");
    if (first) {
      for (const abi::TracedOpRow& row : abi::kTracedOps) {
        if (same_ignoring_case(part, row.name)) boundary.op = static_cast<std::uint16_t>(row.id);
      }
      if (boundary.op == 0) return std::string("it does not start with a traced operation");
      first = false;
    } else {
      const std::size_t equals = part.find('=');
      if (equals == std::string_view::npos) return std::string("a part after the operation is not KEY=VALUE");
      const std::string_view key = part.substr(0, equals);
      const std::string_view value = part.substr(equals + 1);
      std::uint64_t number = 0;
      if (same_ignoring_case(key, "count")) {
        if (boundary.count || !boundary_detail::parse_unsigned(value, number)) return std::string("a bad count=");
        boundary.count = number;
      } else if (same_ignoring_case(key, "comm")) {
        if (boundary.comm || !boundary_detail::parse_unsigned(value, number)) return std::string("a bad comm=");
        boundary.comm = number;
      } else if (same_ignoring_case(key, "datatype")) {
        if (boundary.datatype) return std::string("datatype= twice");
        for (std::int32_t type = 0; type < 64; ++type) {
          if (abi::datatype_size(static_cast<std::int64_t>(type)) != 0 &&
              same_ignoring_case(value, abi::datatype_name(type))) {
            boundary.datatype = type;
          }
        }
        if (!boundary.datatype) return std::string("datatype= names no datatype");
      } else if (same_ignoring_case(key, "at")) {
        if (same_ignoring_case(value, "start")) {
          boundary.side = BoundarySide::kStart;
        } else if (same_ignoring_case(value, "end")) {
          boundary.side = BoundarySide::kEnd;
        } else {
          return std::string("at= takes start or end");
        }
      } else {
        return std::string("an unknown key (the keys are count, datatype, comm and at)");
      }
    }
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  out = boundary;
  return std::nullopt;
}

// The canonical text of a boundary, which parses back to it ("" for no rule).
inline std::string format_step_boundary(const StepBoundary& boundary) {
  if (!boundary.enabled()) return "";
  const abi::TracedOpRow* row = abi::traced_op_row(boundary.op);
  std::string text(row != nullptr ? row->name : "?");
  if (boundary.count) text += ",count=" + std::to_string(*boundary.count);
  if (boundary.datatype) text += ",datatype=" + std::string(abi::datatype_name(*boundary.datatype));
  if (boundary.comm) text += ",comm=" + std::to_string(*boundary.comm);
  if (boundary.side == BoundarySide::kEnd) text += ",at=end";
  return text;
}

}  // namespace detnccl::steps

#endif  // DETNCCL_STEPS_STEP_BOUNDARY_H
