// detnccl: a call record as the CLI shows it, generated from the call-record field table
// (records/call_record_fields.h): dump's text line, JSON line and CSV row, and diff's JSON call fields.
#ifndef DETNCCL_CLI_CALL_FIELD_OUTPUT_H
#define DETNCCL_CLI_CALL_FIELD_OUTPUT_H

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>

#include "cli/analysis/call_layout.h"
#include "hash/fingerprint.h"
#include "records/call_record_fields.h"

namespace detnccl::cli {

// A member's value, widened without changing its sign (JSON and CSV print it as the member's own type would).
struct CallFieldValue {
  bool is_signed = false;
  std::int64_t signed_value = 0;
  std::uint64_t unsigned_value = 0;
  bool is_zero() const { return is_signed ? signed_value == 0 : unsigned_value == 0; }
};

template <typename T>
CallFieldValue call_field_value(T member) {
  if constexpr (std::is_enum_v<T>) {
    return call_field_value(static_cast<std::underlying_type_t<T>>(member));
  } else if constexpr (std::is_signed_v<T>) {
    return {true, static_cast<std::int64_t>(member), 0};
  } else {
    return {false, 0, static_cast<std::uint64_t>(member)};
  }
}

// The names of the flags dump shows ("in-place,deterministic"); the fingerprint and folded-blocks bits show as the
// digests they make valid.
inline std::string call_flag_names(std::uint16_t flags) {
  std::string text;
  const auto add = [&](std::uint16_t bit, const char* name) {
    if ((flags & bit) == 0) return;
    if (!text.empty()) text += ',';
    text += name;
  };
  add(records::kCallInPlace, "in-place");
  add(records::kCallDeterministic, "deterministic");
  add(records::kCallPreMulSumScalar, "premulsum");
  add(records::kCallSegmentsDropped, "segments-dropped");
  add(records::kCallCaptured, "captured");
  add(records::kCallInputSaved, "input-saved");
  add(records::kCallOutputSaved, "output-saved");
  add(records::kCallSaveSkipped, "save-skipped");
  return text;
}

// Whether a field of this kind has a value in this call (fingerprints and the algorithm depend on flags).
inline bool call_field_present(records::call_field::Value kind, const records::CallFields& call) {
  using records::call_field::Value;
  switch (kind) {
    case Value::kInputFingerprint:
      return (call.flags & records::kCallInputFingerprint) != 0;
    case Value::kOutputFingerprint:
      return (call.flags & records::kCallOutputFingerprint) != 0;
    case Value::kAlgorithm:
      return (call.flags & records::kCallDeterministic) != 0;
    case Value::kStepSource:
      return call.step_source != records::StepSource::kUnknown;
    case Value::kInputBlocksDigest:
      return (call.flags & records::kCallInputBlocksFolded) != 0;
    case Value::kOutputBlocksDigest:
      return (call.flags & records::kCallOutputBlocksFolded) != 0;
    default:
      return true;
  }
}

// Whether JSON shows an absent field of this kind as null (fingerprints: "not computed") rather than leaving its key
// out (a value the call does not have, or one its writer did not record).
inline bool call_field_null_when_absent(records::call_field::Value kind) {
  using records::call_field::Value;
  return kind == Value::kInputFingerprint || kind == Value::kOutputFingerprint;
}

// A present field's value as text (the text line and CSV; CSV shows flags as their number).
inline std::string call_field_text(records::call_field::Value kind, CallFieldValue value) {
  using records::call_field::Value;
  const std::uint64_t raw = value.is_signed ? static_cast<std::uint64_t>(value.signed_value) : value.unsigned_value;
  switch (kind) {
    case Value::kOpName:
      return std::string(records::op_name(static_cast<records::OpId>(raw)));
    case Value::kDatatypeName:
      return std::string(records::datatype_name(static_cast<std::uint16_t>(raw)));
    case Value::kRedopName:
      return std::string(records::redop_name(static_cast<std::int32_t>(value.signed_value)));
    case Value::kResultName:
      return std::string(records::result_name(static_cast<std::int32_t>(value.signed_value)));
    case Value::kFlags:
      return call_flag_names(static_cast<std::uint16_t>(raw));
    case Value::kStepSource:
      return std::string(records::step_source_name(static_cast<records::StepSource>(raw)));
    case Value::kInputFingerprint:
    case Value::kOutputFingerprint:
    case Value::kInputBlocksDigest:
    case Value::kOutputBlocksDigest:
      return hash::format_digest(raw);
    case Value::kNumber:
    case Value::kAlgorithm:
      break;
  }
  return value.is_signed ? std::to_string(value.signed_value) : std::to_string(value.unsigned_value);
}

// A present field's value as JSON.
inline nlohmann::json call_field_json(records::call_field::Value kind, CallFieldValue value) {
  using records::call_field::Value;
  switch (kind) {
    case Value::kNumber:
    case Value::kFlags:
    case Value::kAlgorithm:
      return value.is_signed ? nlohmann::json(value.signed_value) : nlohmann::json(value.unsigned_value);
    default:
      return call_field_text(kind, value);
  }
}

// The table's fields of `call` for these outputs as JSON keys, into `out` (absent fingerprints are null; other
// absent fields are left out; flags bring "in_place").
inline void add_call_fields_json(nlohmann::json& out, const records::CallFields& call,
                                 records::call_field::Outputs outputs) {
  using namespace records::call_field;
#define DETNCCL_CALL_FIELD_JSON(member, value, where, ...)                                          \
  if ((where & outputs) != 0) {                                                                     \
    if (call_field_present(Value::value, call)) {                                                   \
      out[#member] = call_field_json(Value::value, call_field_value(call.member));                  \
    } else if (call_field_null_when_absent(Value::value)) {                                         \
      out[#member] = nullptr;                                                                       \
    }                                                                                               \
    if (Value::value == Value::kFlags) out["in_place"] = (call.flags & records::kCallInPlace) != 0; \
  }
  DETNCCL_CALL_RECORD_FIELDS(DETNCCL_CALL_FIELD_JSON)
#undef DETNCCL_CALL_FIELD_JSON
}

// dump's JSON line of a call: its fields and its non-empty arrays.
inline nlohmann::json call_json_line(std::uint32_t rank, const records::CallRecord& call) {
  nlohmann::json line = {{"type", "call"}, {"rank", rank}};
  add_call_fields_json(line, call, records::call_field::kJsonl);
  const auto digests = [](std::span<const std::uint64_t> array) {
    nlohmann::json list = nlohmann::json::array();
    for (std::uint64_t digest : array) list.push_back(hash::format_digest(digest));
    return list;
  };
#define DETNCCL_CALL_ARRAY_JSON(member) \
  if (!call.member.empty()) line[#member] = digests(call.member);
  DETNCCL_CALL_RECORD_ARRAYS(DETNCCL_CALL_ARRAY_JSON)
#undef DETNCCL_CALL_ARRAY_JSON
  return line;
}

// dump's CSV header line (rank, then the table's CSV fields, then the arrays' sizes), newline included.
inline std::string call_csv_header() {
  using namespace records::call_field;
  std::string line = "rank";
#define DETNCCL_CALL_FIELD_CSV_NAME(member, value, where, ...) \
  if ((where & kCsv) != 0) line += "," #member;
  DETNCCL_CALL_RECORD_FIELDS(DETNCCL_CALL_FIELD_CSV_NAME)
#undef DETNCCL_CALL_FIELD_CSV_NAME
#define DETNCCL_CALL_ARRAY_CSV_NAME(member) line += "," #member;
  DETNCCL_CALL_RECORD_ARRAYS(DETNCCL_CALL_ARRAY_CSV_NAME)
#undef DETNCCL_CALL_ARRAY_CSV_NAME
  return line + '\n';
}

// dump's CSV row of a call, newline included: absent fingerprints are empty, flags their number.
inline std::string call_csv_row(std::uint32_t rank, const records::CallRecord& call) {
  using namespace records::call_field;
  std::string line = std::to_string(rank);
#define DETNCCL_CALL_FIELD_CSV(member, value, where, ...)                     \
  if ((where & kCsv) != 0) {                                                  \
    line += ',';                                                              \
    if (Value::value == Value::kFlags) {                                      \
      line += call_field_text(Value::kNumber, call_field_value(call.member)); \
    } else if (call_field_present(Value::value, call)) {                      \
      line += call_field_text(Value::value, call_field_value(call.member));   \
    }                                                                         \
  }
  DETNCCL_CALL_RECORD_FIELDS(DETNCCL_CALL_FIELD_CSV)
#undef DETNCCL_CALL_FIELD_CSV
#define DETNCCL_CALL_ARRAY_CSV(member) line += ',' + std::to_string(call.member.size());
  DETNCCL_CALL_RECORD_ARRAYS(DETNCCL_CALL_ARRAY_CSV)
#undef DETNCCL_CALL_ARRAY_CSV
  return line + '\n';
}

namespace call_text_detail {

// One field's place in the text line.
struct TextPiece {
  int position = 0;
  int field = 0;  // the row's index in the table
};

// The table's rows in the order of the text line (by position; rows left out have position 0 and come first).
#define DETNCCL_CALL_FIELD_TEXT_PIECE(member, value, where, text, position, ...) \
  TextPiece{records::call_field::Text::text == records::call_field::Text::kNone ? 0 : position, 0},
inline constexpr auto kPiecesInTableOrder = std::array{DETNCCL_CALL_RECORD_FIELDS(DETNCCL_CALL_FIELD_TEXT_PIECE)};

// The pieces numbered by row and sorted by position (stable: an insertion sort).
constexpr std::array<TextPiece, kPiecesInTableOrder.size()> sorted_pieces() {
  std::array<TextPiece, kPiecesInTableOrder.size()> pieces{};
  std::size_t size = 0;
  while (size < pieces.size()) {
    TextPiece piece{kPiecesInTableOrder[size].position, static_cast<int>(size)};
    std::size_t at = size++;
    while (at > 0 && pieces[at - 1].position > piece.position) {
      pieces[at] = pieces[at - 1];
      --at;
    }
    pieces[at] = piece;
  }
  return pieces;
}
inline constexpr auto kPieces = sorted_pieces();
#undef DETNCCL_CALL_FIELD_TEXT_PIECE

// `text` padded to |width| (right-aligned for a positive width, left-aligned for a negative one).
inline std::string padded(std::string text, int width) {
  const auto size = static_cast<std::size_t>(width < 0 ? -width : width);
  if (text.size() >= size) return text;
  // RATIONALE: insert/append rather than operator+, which GCC 12 wrongly flags (-Wrestrict) at -O3.
  if (width < 0) return text.append(size - text.size(), ' ');
  return text.insert(0, size - text.size(), ' ');
}

// The text of each of the table's fields in `call`, in table order (empty where the line leaves it out).
inline std::array<std::string, kPieces.size()> piece_texts(const records::CallFields& call) {
  using namespace records::call_field;
  std::array<std::string, kPieces.size()> texts;
  std::size_t index = 0;
#define DETNCCL_CALL_FIELD_TEXT(member, value, where, style, position, before, width, after)            \
  if constexpr (Text::style == Text::kDescribed) {                                                      \
    texts[index] = analysis::describe_call(call);                                                       \
  } else if constexpr (Text::style != Text::kNone) {                                                    \
    const CallFieldValue raw = call_field_value(call.member);                                           \
    const std::string shown =                                                                           \
        call_field_present(Value::value, call) ? call_field_text(Value::value, raw) : std::string("-"); \
    if (Text::style == Text::kAlways || (!raw.is_zero() && !shown.empty())) {                           \
      texts[index].append(before).append(padded(shown, width)).append(after);                           \
    }                                                                                                   \
  }                                                                                                     \
  ++index;
  DETNCCL_CALL_RECORD_FIELDS(DETNCCL_CALL_FIELD_TEXT)
#undef DETNCCL_CALL_FIELD_TEXT
  return texts;
}

}  // namespace call_text_detail

// dump's text line of a call, newline included: the fields by text position, then the arrays' sizes.
inline std::string call_text_line(const records::CallRecord& call) {
  const auto texts = call_text_detail::piece_texts(call);
  std::string line;
  for (const auto& piece : call_text_detail::kPieces) {
    if (piece.position > 0) line += texts[static_cast<std::size_t>(piece.field)];
  }
  if (!call.input_blocks.empty() || !call.output_blocks.empty()) {
    line += "  blocks " + std::to_string(call.input_blocks.size()) + "/" + std::to_string(call.output_blocks.size());
  }
  if (!call.input_segments.empty() || !call.output_segments.empty()) {
    line +=
        "  segments " + std::to_string(call.input_segments.size()) + "/" + std::to_string(call.output_segments.size());
  }
  return line + '\n';
}

}  // namespace detnccl::cli

#endif  // DETNCCL_CLI_CALL_FIELD_OUTPUT_H
