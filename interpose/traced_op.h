// detnccl shim: which DETNCCL_OPS operation (config::TracedOp) a call of records::OpId is, decided at compile time.
#ifndef DETNCCL_INTERPOSE_TRACED_OP_H
#define DETNCCL_INTERPOSE_TRACED_OP_H

#include <optional>

#include "abi/traced_ops.h"
#include "config/config.h"
#include "records/log_format.h"

namespace detnccl::interpose {

// The operation DETNCCL_OPS names for `op`, the same as config::traced_op_from_name(records::op_name(op)); nullopt
// for OpId::kUnknown and for numbers no operation has.
// RATIONALE: every traced call needs it; a switch generated from abi/traced_ops.h costs no name comparison
// (tests/test_interpose.cc checks it against the name mapping for every number).
constexpr std::optional<config::TracedOp> traced_op_of(records::OpId op) noexcept {
  switch (op) {
#define DETNCCL_TRACED_OP_CASE(id, name, ...) \
  case records::OpId::k##name:                \
    return config::TracedOp::nccl##name;
    DETNCCL_TRACED_OPS(DETNCCL_TRACED_OP_CASE)
#undef DETNCCL_TRACED_OP_CASE
    default:
      break;
  }
  return std::nullopt;
}

}  // namespace detnccl::interpose

#endif  // DETNCCL_INTERPOSE_TRACED_OP_H
