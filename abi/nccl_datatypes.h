/* detnccl: the facts about NCCL's datatypes and built-in reduction operators, in one table each.
 *
 * Every part of the project that needs an element size, a datatype's name or whether it is floating (the shim, the
 * CLI reading logs, hostnccl, collectives/) reads them here; collectives/dtype_arith.h builds the arithmetic on top.
 * The numbers are NCCL's stable ABI values (ncclDataType_t, ncclRedOp_t); static_asserts below tie each row to the
 * enum of nccl_abi_types.inc, and tests/test_abi.cc ties that enum to the real nccl.h.
 *
 * C++20 header; the size and kind functions are DETNCCL_HOST_DEVICE, so device code may call them.
 */
#ifndef DETNCCL_ABI_NCCL_DATATYPES_H
#define DETNCCL_ABI_NCCL_DATATYPES_H

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "abi/nccl_abi.h"
#include "cuda/host_device.h"

/* Row: X(enumerator, number, bytes, kind, name)
 *   enumerator  the ncclDataType_t value (the first name nccl.h gives it)
 *   number      its ABI number (as stored in call records)
 *   bytes       bytes per element
 *   kind        kSigned, kUnsigned (integers; wrapping arithmetic) or kFloating (IEEE-style formats)
 *   name        the name logs and the CLI show */
#define DETNCCL_NCCL_DATATYPES(X)                   \
  X(ncclInt8, 0, 1, kSigned, "int8")                \
  X(ncclUint8, 1, 1, kUnsigned, "uint8")            \
  X(ncclInt32, 2, 4, kSigned, "int32")              \
  X(ncclUint32, 3, 4, kUnsigned, "uint32")          \
  X(ncclInt64, 4, 8, kSigned, "int64")              \
  X(ncclUint64, 5, 8, kUnsigned, "uint64")          \
  X(ncclFloat16, 6, 2, kFloating, "float16")        \
  X(ncclFloat32, 7, 4, kFloating, "float32")        \
  X(ncclFloat64, 8, 8, kFloating, "float64")        \
  X(ncclBfloat16, 9, 2, kFloating, "bfloat16")      \
  X(ncclFloat8e4m3, 10, 1, kFloating, "float8e4m3") \
  X(ncclFloat8e5m2, 11, 1, kFloating, "float8e5m2")

/* Row: X(enumerator, number, name): NCCL's built-in reduction operators. Numbers from ncclNumOps on are user
 * operators (ncclRedOpCreatePreMulSum). */
#define DETNCCL_NCCL_REDOPS(X) \
  X(ncclSum, 0, "sum")         \
  X(ncclProd, 1, "prod")       \
  X(ncclMax, 2, "max")         \
  X(ncclMin, 3, "min")         \
  X(ncclAvg, 4, "avg")

namespace detnccl::abi {

/* How a datatype's values are stored and combined. kInvalid: not an ncclDataType_t number. */
enum class DatatypeKind : std::uint8_t { kInvalid, kSigned, kUnsigned, kFloating };

#define DETNCCL_CHECK_DATATYPE_NUMBER(enumerator, number, bytes, kind, name) \
  static_assert(static_cast<int>(enumerator) == (number), #enumerator " has another ABI number than the table says");
DETNCCL_NCCL_DATATYPES(DETNCCL_CHECK_DATATYPE_NUMBER)
#undef DETNCCL_CHECK_DATATYPE_NUMBER
#define DETNCCL_COUNT_ROW(...) +1
static_assert(0 DETNCCL_NCCL_DATATYPES(DETNCCL_COUNT_ROW) == ncclNumTypes,
              "every ncclDataType_t value needs a row in DETNCCL_NCCL_DATATYPES");
static_assert(0 DETNCCL_NCCL_REDOPS(DETNCCL_COUNT_ROW) == ncclNumOps,
              "every built-in ncclRedOp_t needs a row in DETNCCL_NCCL_REDOPS");
#undef DETNCCL_COUNT_ROW
#define DETNCCL_CHECK_REDOP_NUMBER(enumerator, number, name) \
  static_assert(static_cast<int>(enumerator) == (number), #enumerator " has another ABI number than the table says");
DETNCCL_NCCL_REDOPS(DETNCCL_CHECK_REDOP_NUMBER)
#undef DETNCCL_CHECK_REDOP_NUMBER

/* Bytes per element of the datatype with ABI number `number` (a log's field, any value); 0 when no datatype has
 * it. */
DETNCCL_HOST_DEVICE constexpr std::size_t datatype_size(std::int64_t number) noexcept {
  switch (number) {
#define DETNCCL_DATATYPE_SIZE_CASE(enumerator, number, bytes, kind, name) \
  case number:                                                            \
    return bytes;
    DETNCCL_NCCL_DATATYPES(DETNCCL_DATATYPE_SIZE_CASE)
#undef DETNCCL_DATATYPE_SIZE_CASE
    default:
      return 0;
  }
}
DETNCCL_HOST_DEVICE constexpr std::size_t datatype_size(ncclDataType_t type) noexcept {
  return datatype_size(static_cast<std::int64_t>(type));
}

/* The kind of the datatype with ABI number `number`; kInvalid when no datatype has it. */
DETNCCL_HOST_DEVICE constexpr DatatypeKind datatype_kind(std::int64_t number) noexcept {
  switch (number) {
#define DETNCCL_DATATYPE_KIND_CASE(enumerator, number, bytes, kind, name) \
  case number:                                                            \
    return DatatypeKind::kind;
    DETNCCL_NCCL_DATATYPES(DETNCCL_DATATYPE_KIND_CASE)
#undef DETNCCL_DATATYPE_KIND_CASE
    default:
      return DatatypeKind::kInvalid;
  }
}

/* True when `type` is a floating-point type (fp8, fp16, bf16, float, double). */
DETNCCL_HOST_DEVICE constexpr bool datatype_is_floating(ncclDataType_t type) noexcept {
  return datatype_kind(static_cast<std::int64_t>(type)) == DatatypeKind::kFloating;
}

/* The name of the datatype with ABI number `number` ("float32", "bfloat16"); "?" when no datatype has it. */
constexpr std::string_view datatype_name(std::int64_t number) noexcept {
  switch (number) {
#define DETNCCL_DATATYPE_NAME_CASE(enumerator, number, bytes, kind, name) \
  case number:                                                            \
    return name;
    DETNCCL_NCCL_DATATYPES(DETNCCL_DATATYPE_NAME_CASE)
#undef DETNCCL_DATATYPE_NAME_CASE
    default:
      return "?";
  }
}

/* The name of reduction operator `number`: "sum" ... "avg" for the built-in ones, "user" for numbers from
 * ncclNumOps on (user operators), "none" for negative numbers (calls without a reduction). */
constexpr std::string_view redop_name(std::int64_t number) noexcept {
  switch (number) {
#define DETNCCL_REDOP_NAME_CASE(enumerator, number, name) \
  case number:                                            \
    return name;
    DETNCCL_NCCL_REDOPS(DETNCCL_REDOP_NAME_CASE)
#undef DETNCCL_REDOP_NAME_CASE
    default:
      return number < 0 ? "none" : "user";
  }
}

}  // namespace detnccl::abi

#endif /* DETNCCL_ABI_NCCL_DATATYPES_H */
