/* detnccl: the one table of NCCL 2.28 host API entry points.
 *
 * Every public entry point of nccl.h (2.28.9) is one row. Everything that needs the list (the ABI declarations,
 * the ABI agreement test, hostnccl's "not implemented" stubs, the shim's wrappers and real-function table) is
 * generated from it with an X-macro, so the list exists once.
 *
 * Row: X(ret, name, params, args, kind, need)
 *   ret    return type (ncclResult_t or const char*)
 *   name   the public name; the strong symbol is p##name
 *   params the parenthesised parameter list, with names
 *   args   the parenthesised argument list, forwarding params
 *   kind   what the call is, for generators that treat groups of calls alike:
 *            version  ncclGetVersion               query  communicator or error queries
 *            init     creates a communicator       destroy  ends one
 *            coll     a collective on buffers      p2p      ncclSend / ncclRecv
 *            group    group bracket calls          redop    custom reduction operators
 *            mem      memory and registration      misc     anything else
 *   need   REQUIRED (present in every NCCL detnccl supports, >= 2.19) or OPTIONAL (newer; may be absent)
 *
 * Not listed: the host functions of the device API (nccl_device.h: ncclDevCommCreate, ncclTeam*, barrier
 * requirements), whose types live outside nccl.h.
 */
#ifndef DETNCCL_ABI_NCCL_API_TABLE_H
#define DETNCCL_ABI_NCCL_API_TABLE_H

#define DETNCCL_NCCL_API(X)                                                                                          \
  X(ncclResult_t, ncclGetVersion, (int* version), (version), version, REQUIRED)                                     \
  X(ncclResult_t, ncclGetUniqueId, (ncclUniqueId * uniqueId), (uniqueId), init, REQUIRED)                            \
  X(ncclResult_t, ncclCommInitRankConfig,                                                                            \
    (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config),                            \
    (comm, nranks, commId, rank, config), init, REQUIRED)                                                            \
  X(ncclResult_t, ncclCommInitRank, (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank),                  \
    (comm, nranks, commId, rank), init, REQUIRED)                                                                    \
  X(ncclResult_t, ncclCommInitAll, (ncclComm_t * comm, int ndev, const int* devlist), (comm, ndev, devlist), init,   \
    REQUIRED)                                                                                                        \
  X(ncclResult_t, ncclCommInitRankScalable,                                                                          \
    (ncclComm_t * newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds, ncclConfig_t* config),            \
    (newcomm, nranks, myrank, nId, commIds, config), init, OPTIONAL)                                                 \
  X(ncclResult_t, ncclCommSplit, (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config),   \
    (comm, color, key, newcomm, config), init, REQUIRED)                                                             \
  X(ncclResult_t, ncclCommShrink,                                                                                    \
    (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm, ncclConfig_t* config,       \
     int shrinkFlags),                                                                                               \
    (comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags), init, OPTIONAL)                       \
  X(ncclResult_t, ncclCommFinalize, (ncclComm_t comm), (comm), destroy, REQUIRED)                                    \
  X(ncclResult_t, ncclCommDestroy, (ncclComm_t comm), (comm), destroy, REQUIRED)                                     \
  X(ncclResult_t, ncclCommAbort, (ncclComm_t comm), (comm), destroy, REQUIRED)                                       \
  X(ncclResult_t, ncclCommRevoke, (ncclComm_t comm, int revokeFlags), (comm, revokeFlags), destroy, OPTIONAL)        \
  X(const char*, ncclGetErrorString, (ncclResult_t result), (result), query, REQUIRED)                               \
  X(const char*, ncclGetLastError, (ncclComm_t comm), (comm), query, REQUIRED)                                       \
  X(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t * asyncError), (comm, asyncError), query,    \
    REQUIRED)                                                                                                        \
  X(ncclResult_t, ncclCommCount, (const ncclComm_t comm, int* count), (comm, count), query, REQUIRED)                \
  X(ncclResult_t, ncclCommCuDevice, (const ncclComm_t comm, int* device), (comm, device), query, REQUIRED)           \
  X(ncclResult_t, ncclCommUserRank, (const ncclComm_t comm, int* rank), (comm, rank), query, REQUIRED)               \
  X(ncclResult_t, ncclMemAlloc, (void** ptr, size_t size), (ptr, size), mem, REQUIRED)                               \
  X(ncclResult_t, ncclMemFree, (void* ptr), (ptr), mem, REQUIRED)                                                    \
  X(ncclResult_t, ncclCommRegister, (const ncclComm_t comm, void* buff, size_t size, void** handle),                 \
    (comm, buff, size, handle), mem, REQUIRED)                                                                       \
  X(ncclResult_t, ncclCommDeregister, (const ncclComm_t comm, void* handle), (comm, handle), mem, REQUIRED)          \
  X(ncclResult_t, ncclCommWindowRegister, (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags), \
    (comm, buff, size, win, winFlags), mem, OPTIONAL)                                                                \
  X(ncclResult_t, ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win), (comm, win), mem, OPTIONAL)         \
  X(ncclResult_t, ncclRedOpCreatePreMulSum,                                                                          \
    (ncclRedOp_t * op, void* scalar, ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm),     \
    (op, scalar, datatype, residence, comm), redop, REQUIRED)                                                        \
  X(ncclResult_t, ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t comm), (op, comm), redop, REQUIRED)                  \
  X(ncclResult_t, ncclReduce,                                                                                        \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root,          \
     ncclComm_t comm, cudaStream_t stream),                                                                          \
    (sendbuff, recvbuff, count, datatype, op, root, comm, stream), coll, REQUIRED)                                   \
  X(ncclResult_t, ncclBcast,                                                                                         \
    (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream),             \
    (buff, count, datatype, root, comm, stream), coll, REQUIRED)                                                     \
  X(ncclResult_t, ncclBroadcast,                                                                                     \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,         \
     cudaStream_t stream),                                                                                           \
    (sendbuff, recvbuff, count, datatype, root, comm, stream), coll, REQUIRED)                                       \
  X(ncclResult_t, ncclAllReduce,                                                                                     \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,   \
     cudaStream_t stream),                                                                                           \
    (sendbuff, recvbuff, count, datatype, op, comm, stream), coll, REQUIRED)                                         \
  X(ncclResult_t, ncclReduceScatter,                                                                                 \
    (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,                \
     ncclComm_t comm, cudaStream_t stream),                                                                          \
    (sendbuff, recvbuff, recvcount, datatype, op, comm, stream), coll, REQUIRED)                                     \
  X(ncclResult_t, ncclAllGather,                                                                                     \
    (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,               \
     cudaStream_t stream),                                                                                           \
    (sendbuff, recvbuff, sendcount, datatype, comm, stream), coll, REQUIRED)                                         \
  X(ncclResult_t, ncclAlltoAll,                                                                                      \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,                   \
     cudaStream_t stream),                                                                                           \
    (sendbuff, recvbuff, count, datatype, comm, stream), coll, OPTIONAL)                                             \
  X(ncclResult_t, ncclGather,                                                                                        \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,         \
     cudaStream_t stream),                                                                                           \
    (sendbuff, recvbuff, count, datatype, root, comm, stream), coll, OPTIONAL)                                       \
  X(ncclResult_t, ncclScatter,                                                                                       \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,         \
     cudaStream_t stream),                                                                                           \
    (sendbuff, recvbuff, count, datatype, root, comm, stream), coll, OPTIONAL)                                       \
  X(ncclResult_t, ncclSend,                                                                                          \
    (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream),   \
    (sendbuff, count, datatype, peer, comm, stream), p2p, REQUIRED)                                                  \
  X(ncclResult_t, ncclRecv,                                                                                          \
    (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream),         \
    (recvbuff, count, datatype, peer, comm, stream), p2p, REQUIRED)                                                  \
  X(ncclResult_t, ncclGroupStart, (), (), group, REQUIRED)                                                           \
  X(ncclResult_t, ncclGroupEnd, (), (), group, REQUIRED)                                                             \
  X(ncclResult_t, ncclGroupSimulateEnd, (ncclSimInfo_t * simInfo), (simInfo), group, OPTIONAL)

#endif /* DETNCCL_ABI_NCCL_API_TABLE_H */
