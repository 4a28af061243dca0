// hostnccl-run's contract with the programs it starts: how the ranks of one job agree on an ncclUniqueId.
//
// The launcher sets HOSTNCCL_ID_FILE to a path in a fresh private directory (mode 0700). Rank 0 creates the id
// with ncclGetUniqueId and publishes it there; the other ranks wait for the file and read it. Nothing here is
// specific to hostnccl: the functions call whichever ncclGetUniqueId the program links (hostnccl's or a real
// NCCL's), so the same program runs over both. Link the static library target `detnccl_bootstrap`; the program
// itself provides NCCL.
#ifndef DETNCCL_LAUNCHER_BOOTSTRAP_H
#define DETNCCL_LAUNCHER_BOOTSTRAP_H

#include <chrono>
#include <string>

#include "abi/nccl_abi.h"
#include "hostnccl/settings.h"

namespace detnccl {

// The environment variable naming the file through which the ranks share the unique id (set by hostnccl-run).
inline constexpr const char* kUniqueIdFileVariable = hostnccl::setting_info(hostnccl::Setting::kIdFile).name;
// How long ranks other than 0 wait for the id is HOSTNCCL_TIMEOUT_S seconds (default 60; 0 waits forever), read as
// hostnccl itself reads it (hostnccl/timeout_setting.h).

// Gives every rank of the job the same ncclUniqueId, through the file named by HOSTNCCL_ID_FILE: rank 0 calls
// ncclGetUniqueId and publishes the id; other ranks wait (up to HOSTNCCL_TIMEOUT_S seconds) and read it.
// Returns false with a message in *error when the variable is unset or invalid, the id cannot be created or
// written, or it does not appear in time.
bool share_unique_id(int rank, ncclUniqueId* id, std::string* error);

// The same with the file and the waiting time given explicitly (0: wait forever). The file is written atomically (a
// temporary file in the same directory, fsync, rename), so readers never see a partial id. Rank 0 replaces any file
// already at `path`; use a fresh path per job, or a reader may pick up an id left by an earlier job.
bool share_unique_id_through_file(const std::string& path, int rank, std::chrono::milliseconds timeout,
                                  ncclUniqueId* id, std::string* error);

}  // namespace detnccl

#endif  // DETNCCL_LAUNCHER_BOOTSTRAP_H
