/* hostnccl: the environment variables that tune hostnccl, parsed once per communicator creation: HOSTNCCL_TIMEOUT_S,
 * HOSTNCCL_REDUCE_ORDER, HOSTNCCL_SLOT_BYTES, HOSTNCCL_RING_BYTES and HOSTNCCL_CORRUPT (their rows, defaults and
 * accepted values are in settings.h, the one table of HOSTNCCL_* variables). The creator of a communicator's segment
 * (rank 0) decides the reduce order and the sizes for every rank. HOSTNCCL_JOB_TAG (set by hostnccl-run) is not read
 * here but by ncclGetUniqueId, into the id (shm_names.h).
 */
#ifndef DETNCCL_HOSTNCCL_CONFIG_H
#define DETNCCL_HOSTNCCL_CONFIG_H

#include <cstddef>
#include <string>

#include "abi/nccl_abi.h"
#include "hostnccl/settings.h"

namespace hostnccl {

struct Config {
  double timeout_s = kDefaultTimeoutSeconds;  // 0: wait forever
  // ncclConfig_t.blocking (not an environment setting): 0 makes calls return ncclInProgress and complete on a
  // background thread (progress.h). A split's child takes its own config's value, else its parent's.
  bool blocking = true;
  ReduceOrder reduce_order = ReduceOrder::kArrival;
  std::size_t slot_bytes = std::size_t{4} << 20;
  std::size_t ring_bytes = std::size_t{1} << 20;
  Corruption corruption;  // HOSTNCCL_CORRUPT (each process reads its own; a split's child keeps its parent's)
};

/* Reads the HOSTNCCL_* variables into *config. On a malformed value returns ncclInvalidArgument and puts a message
 * naming the variable and the accepted values into *error. */
ncclResult_t read_config(Config* config, std::string* error);

}  // namespace hostnccl

#endif  // DETNCCL_HOSTNCCL_CONFIG_H
