// detnccl shim: the hand-written wrappers — communicator creation and destruction, and group brackets.
// These are the calls where the shim learns about communicators and group boundaries; today they forward.
#include "abi/nccl_abi.h"
#include "interpose/real_nccl.h"
#include "interpose/shim_state.h"

DETNCCL_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) { return DETNCCL_REAL(ncclGetUniqueId)(uniqueId); }

DETNCCL_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                                   ncclConfig_t* config) {
  return DETNCCL_REAL(ncclCommInitRankConfig)(comm, nranks, commId, rank, config);
}

DETNCCL_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return DETNCCL_REAL(ncclCommInitRank)(comm, nranks, commId, rank);
}

DETNCCL_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
  return DETNCCL_REAL(ncclCommInitAll)(comm, ndev, devlist);
}

DETNCCL_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                                     ncclUniqueId* commIds, ncclConfig_t* config) {
  return DETNCCL_REAL(ncclCommInitRankScalable)(newcomm, nranks, myrank, nId, commIds, config);
}

DETNCCL_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                          ncclConfig_t* config) {
  return DETNCCL_REAL(ncclCommSplit)(comm, color, key, newcomm, config);
}

DETNCCL_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                           ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  return DETNCCL_REAL(ncclCommShrink)(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags);
}

DETNCCL_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) { return DETNCCL_REAL(ncclCommFinalize)(comm); }

DETNCCL_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) { return DETNCCL_REAL(ncclCommDestroy)(comm); }

DETNCCL_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) { return DETNCCL_REAL(ncclCommAbort)(comm); }

DETNCCL_EXPORT ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  return DETNCCL_REAL(ncclCommRevoke)(comm, revokeFlags);
}

DETNCCL_EXPORT ncclResult_t ncclGroupStart() { return DETNCCL_REAL(ncclGroupStart)(); }

DETNCCL_EXPORT ncclResult_t ncclGroupEnd() { return DETNCCL_REAL(ncclGroupEnd)(); }

DETNCCL_EXPORT ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  return DETNCCL_REAL(ncclGroupSimulateEnd)(simInfo);
}
