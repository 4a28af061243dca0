/* detnccl: the project's own declaration of NCCL 2.28's public host C ABI.
 *
 * detnccl builds without nccl.h: every part of the project includes this header instead. Types, enum values and
 * constants come from nccl_abi_types.inc; every entry point is declared from the table in nccl_api_table.h. The
 * test tests/test_abi.cc proves this header agrees with the real nccl.h whenever one is found.
 *
 * Never include this together with the real nccl.h in one translation unit (the ABI test is the one exception,
 * and it includes the types inside a namespace).
 */
#ifndef DETNCCL_ABI_NCCL_ABI_H
#define DETNCCL_ABI_NCCL_ABI_H

#include <limits.h>
#include <stddef.h>

#include "nccl_api_table.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ncclComm;
struct ncclWindow_vidmem;
struct CUstream_st;

#include "nccl_abi_types.inc"

#define NCCL_MAJOR DETNCCL_NCCL_MAJOR
#define NCCL_MINOR DETNCCL_NCCL_MINOR
#define NCCL_PATCH DETNCCL_NCCL_PATCH
#define NCCL_VERSION(X, Y, Z) DETNCCL_NCCL_VERSION(X, Y, Z)
#define NCCL_VERSION_CODE DETNCCL_NCCL_VERSION_CODE
#define NCCL_COMM_NULL NULL
#define NCCL_UNIQUE_ID_BYTES DETNCCL_NCCL_UNIQUE_ID_BYTES
#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR DETNCCL_NCCL_SPLIT_NOCOLOR
#define NCCL_UNDEF_FLOAT DETNCCL_NCCL_UNDEF_FLOAT
#define NCCL_WIN_DEFAULT DETNCCL_NCCL_WIN_DEFAULT
#define NCCL_WIN_COLL_SYMMETRIC DETNCCL_NCCL_WIN_COLL_SYMMETRIC
#define NCCL_WIN_REQUIRED_ALIGNMENT DETNCCL_NCCL_WIN_REQUIRED_ALIGNMENT
#define NCCL_CTA_POLICY_DEFAULT DETNCCL_NCCL_CTA_POLICY_DEFAULT
#define NCCL_CTA_POLICY_EFFICIENCY DETNCCL_NCCL_CTA_POLICY_EFFICIENCY
#define NCCL_CTA_POLICY_ZERO DETNCCL_NCCL_CTA_POLICY_ZERO
#define NCCL_SHRINK_DEFAULT DETNCCL_NCCL_SHRINK_DEFAULT
#define NCCL_SHRINK_ABORT DETNCCL_NCCL_SHRINK_ABORT
#define NCCL_REVOKE_DEFAULT DETNCCL_NCCL_REVOKE_DEFAULT
#define NCCL_CONFIG_INITIALIZER DETNCCL_NCCL_CONFIG_INITIALIZER
#define NCCL_SIM_INFO_INITIALIZER DETNCCL_NCCL_SIM_INFO_INITIALIZER

/* Every NCCL entry point, with its strong pnccl alias as NCCL itself declares it. Implementations (hostnccl)
 * define both; the shim defines only the weak-style public name and calls the real library's pnccl symbol. */
#define DETNCCL_DECLARE_NCCL_API(ret, name, params, args, kind, need) \
  ret name params;                                                   \
  ret p##name params;
DETNCCL_NCCL_API(DETNCCL_DECLARE_NCCL_API)
#undef DETNCCL_DECLARE_NCCL_API

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DETNCCL_ABI_NCCL_ABI_H */
