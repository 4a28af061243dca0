// hostnccl-run: the job tag that marks the shared memory of one job, and the removal of what the job left behind.
//
// hostnccl removes its segments itself, except when every rank of a communicator dies while it is being created
// (the segment exists, not every rank has attached). The launcher gives each job a fresh tag in HOSTNCCL_JOB_TAG,
// hostnccl puts it into every name it creates (hostnccl/shm_names.h), and once the ranks are gone the launcher
// removes what still carries the tag.
#ifndef DETNCCL_LAUNCHER_JOB_SHM_H
#define DETNCCL_LAUNCHER_JOB_SHM_H

#include <string>
#include <string_view>
#include <vector>

namespace detnccl::launcher {

// Makes a fresh job tag: "<launcher pid>x<16 random hex digits>". The pid makes it differ from the tag of every
// launcher running at the same time, the random digits from those of earlier launchers that had the same pid.
// Returns false with the reason in *error when no randomness is available.
bool make_job_tag(std::string* tag, std::string* error);

// Removes every entry of `directory` whose name starts with `prefix` (a symbolic link is removed, not followed).
// Returns the names removed, sorted. An empty prefix removes nothing. A directory that cannot be read, or an entry that
// cannot be removed, is skipped silently: this is clean-up after the job, which must not change its outcome.
std::vector<std::string> remove_entries_with_prefix(const std::string& directory, std::string_view prefix);

}  // namespace detnccl::launcher

#endif  // DETNCCL_LAUNCHER_JOB_SHM_H
