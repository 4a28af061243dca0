// detnccl: THE table of call-record fields. One row per member of records::CallFields (log_format.h) says how the
// offline tools show it; dump's text, JSON-lines and CSV output and diff's JSON call fields are generated from it
// (cli/call_field_output.h), and so is nothing else: the bytes on disk are CallFields itself.
//
// Adding a call-record field (no format version change: a fixed part may grow, log_format.h):
//   1. log_format.h: append the member to CallFields, after the last one, with its default (what a reader shows
//      for logs written before it). CallFields has no implicit padding: round it to 8 bytes with a reserved
//      member when the new one is narrower.
//   2. here: one row, at the place of its CSV column.
//   3. the code that fills it (the tracer's call record, interpose/).
// A member without its row (or a row without its member, or padding) fails the build (the static_assert below);
// the v1 log fixture test (tests/fixtures/check-logs.sh) shows the new field's default in every output.
#ifndef DETNCCL_RECORDS_CALL_RECORD_FIELDS_H
#define DETNCCL_RECORDS_CALL_RECORD_FIELDS_H

#include <type_traits>

#include "records/log_format.h"

namespace detnccl::records::call_field {

// How a field's value is shown.
enum class Value {
  kNumber,              // the integer
  kOpName,              // op_name(): "AllReduce"
  kDatatypeName,        // datatype_name(): "float32"
  kRedopName,           // redop_name(): "sum"
  kResultName,          // result_name(): "ncclSuccess"
  kFlags,               // the integer (JSON: also "in_place"); text: the flag names ("in-place,deterministic")
  kInputFingerprint,    // the digest when kCallInputFingerprint is set; else null (JSON), "" (CSV), "-" (text)
  kOutputFingerprint,   // the same for kCallOutputFingerprint
  kAlgorithm,           // the integer, only when kCallDeterministic is set
  kStepSource,          // step_source_name(): "marked"; only when known (not StepSource::kUnknown)
  kInputBlocksDigest,   // the digest when kCallInputBlocksFolded is set; else left out (JSON), "" (CSV), not shown
  kOutputBlocksDigest,  // the same for kCallOutputBlocksFolded
};

// Where a field appears, besides the text line (see Text).
enum Outputs : unsigned {
  kNowhere = 0,
  kJsonl = 1u << 0,  // dump --format jsonl: a key named after the member
  kCsv = 1u << 1,    // dump --format csv: a column named after the member
  kDiff = 1u << 2,   // diff --json: a key of each side of a divergent call
  kDump = kJsonl | kCsv,
  kEverywhere = kJsonl | kCsv | kDiff,
};

// How a field appears in dump's text line, at its text position (fields in increasing position).
enum class Text {
  kNone,       // not in the line
  kAlways,     // before, the value (right-aligned to width, or left-aligned to -width; 0: as it is), after
  kIfSet,      // the same, only when the member is not 0 and its text is not empty
  kDescribed,  // describe_call(): the operation with its datatype, count, redop, root or peer
};

}  // namespace detnccl::records::call_field

// X(member, value, outputs, text, text position, before, width, after): every member of CallFields, in the order of
// the CSV columns.
#define DETNCCL_CALL_RECORD_FIELDS(X)                                                          \
  X(seq, kNumber, kEverywhere, kAlways, 1, "", 6, "  ")                                        \
  X(step, kNumber, kEverywhere, kAlways, 2, "step ", -5, " ")                                  \
  X(step_source, kStepSource, kEverywhere, kNone, 0, "", 0, "")                                \
  X(comm_ordinal, kNumber, kEverywhere, kAlways, 3, "comm ", 0, " ")                           \
  X(comm_seq, kNumber, kEverywhere, kAlways, 4, "#", -6, " ")                                  \
  X(op, kOpName, kEverywhere, kDescribed, 5, "", 0, "")                                        \
  X(datatype, kDatatypeName, kEverywhere, kNone, 0, "", 0, "")                                 \
  X(count, kNumber, kEverywhere, kNone, 0, "", 0, "")                                          \
  X(redop, kRedopName, kEverywhere, kNone, 0, "", 0, "")                                       \
  X(peer, kNumber, kEverywhere, kNone, 0, "", 0, "")                                           \
  X(result, kResultName, kDump, kIfSet, 12, "  -> ", 0, "")                                    \
  X(group_id, kNumber, kDump, kIfSet, 10, "  group ", 0, "")                                   \
  X(flags, kFlags, kDump, kIfSet, 11, "  ", 0, "")                                             \
  X(input_fingerprint, kInputFingerprint, kEverywhere, kAlways, 6, "  in ", 0, "")             \
  X(output_fingerprint, kOutputFingerprint, kEverywhere, kAlways, 7, "  out ", 0, "")          \
  X(input_blocks_digest, kInputBlocksDigest, kEverywhere, kIfSet, 8, "  in-blocks ", 0, "")    \
  X(output_blocks_digest, kOutputBlocksDigest, kEverywhere, kIfSet, 9, "  out-blocks ", 0, "") \
  X(algorithm, kAlgorithm, kJsonl, kNone, 0, "", 0, "")                                        \
  X(premulsum_scalar, kNumber, kNowhere, kNone, 0, "", 0, "")                                  \
  X(input_block_count, kNumber, kNowhere, kNone, 0, "", 0, "") /* shown with the arrays */     \
  X(output_block_count, kNumber, kNowhere, kNone, 0, "", 0, "")                                \
  X(input_segment_count, kNumber, kNowhere, kNone, 0, "", 0, "")                               \
  X(output_segment_count, kNumber, kNowhere, kNone, 0, "", 0, "")                              \
  X(reserved, kNumber, kNowhere, kNone, 0, "", 0, "")                                          \
  X(reserved_2, kNumber, kNowhere, kNone, 0, "", 0, "")

// X(member): the arrays of a CallRecord, in their order on disk. JSON lines: the digests, when there are any; CSV:
// how many; text: "blocks IN/OUT", "segments IN/OUT" when there are any.
#define DETNCCL_CALL_RECORD_ARRAYS(X) X(input_blocks) X(output_blocks) X(input_segments) X(output_segments)

namespace detnccl::records::call_field {

#define DETNCCL_CALL_FIELD_BYTES(member, ...) +sizeof(CallFields::member)
static_assert(0 DETNCCL_CALL_RECORD_FIELDS(DETNCCL_CALL_FIELD_BYTES) == sizeof(CallFields) &&
                  std::has_unique_object_representations_v<CallFields>,
              "every member of records::CallFields needs one row in DETNCCL_CALL_RECORD_FIELDS "
              "(records/call_record_fields.h), and CallFields no implicit padding (add a reserved member)");
#undef DETNCCL_CALL_FIELD_BYTES

}  // namespace detnccl::records::call_field

#endif  // DETNCCL_RECORDS_CALL_RECORD_FIELDS_H
