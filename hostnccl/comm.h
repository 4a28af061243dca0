/* hostnccl: the communicator object behind an ncclComm_t, and the thread-local last-error text.
 *
 * A Comm is used by one thread at a time (as NCCL requires); the only fields other threads may touch are the
 * async error (atomic) and the custom reduction operators (mutex). A non-blocking communicator's operations run on
 * a background thread while its async error says ncclInProgress; no other call is accepted meanwhile.
 */
#ifndef DETNCCL_HOSTNCCL_COMM_H
#define DETNCCL_HOSTNCCL_COMM_H

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "abi/nccl_abi.h"
#include "hostnccl/config.h"
#include "hostnccl/reduce.h"
#include "hostnccl/segment.h"
#include "hostnccl/unique_id.h"

namespace hostnccl {
class InFlightGroup;
}

struct ncclComm {
  static constexpr std::uint64_t kMagic = 0x6c63636e74736f68ull;  // "hostnccl"

  std::uint64_t magic = kMagic;
  int rank = 0;
  int nranks = 0;
  int cuda_device = 0;
  hostnccl::IdFields id;
  std::string segment_name;
  hostnccl::Config config;
  std::unique_ptr<hostnccl::Segment> segment;
  bool ready = false;      // every rank has attached: operations may run
  bool finalized = false;  // ncclCommFinalize was called: no new operations
  std::atomic<ncclResult_t> async_error{ncclSuccess};
  // Threads driving a blocking group of this communicator right now. ncclCommAbort from another thread (a watchdog)
  // raises the abort flag, which ends their wait, and frees the communicator only once they have let go of it.
  std::atomic<int> drivers{0};
  // Non-blocking communicators: the group last handed to a background thread (joined before the next one), and the
  // text of its failure, written before async_error leaves ncclInProgress (ncclCommGetAsyncError hands it to the
  // polling thread's ncclGetLastError).
  std::shared_ptr<hostnccl::InFlightGroup> in_flight;
  std::string async_error_text;

  // Issue order. Every rank issues the same collectives in the same order, so these counters agree across ranks.
  std::uint64_t colls_issued = 0;
  std::uint64_t colls_done = 0;
  std::uint64_t chunk_generation = 0;  // collective chunks completed on this communicator
  std::uint32_t splits_issued = 0;
  // Per peer: sends to it and receives from it, issued and completed (p2p runs in issue order per direction).
  std::vector<std::uint64_t> sends_issued, sends_done, recvs_issued, recvs_done;

  // Custom operators (ncclRedOpCreatePreMulSum): entry i is op ncclNumOps + i.
  struct CustomOp {
    bool in_use = false;
    ncclDataType_t type = ncclFloat32;
    ncclScalarResidence_t residence = ncclScalarHostImmediate;
    std::uint64_t scalar_bits = 0;  // host-immediate: the value read at creation
    const void* scalar = nullptr;   // device-style residence: read at every call
  };
  std::mutex custom_ops_mutex;
  std::vector<CustomOp> custom_ops;
};

namespace hostnccl {

using Comm = ncclComm;

/* True when `comm` looks like a live hostnccl communicator. */
inline bool comm_is_valid(const Comm* comm) { return comm != nullptr && comm->magic == Comm::kMagic; }

/* Records `text` as this thread's last error (what ncclGetLastError returns) and prints it when NCCL_DEBUG is set. */
void set_last_error(const std::string& text);

/* This thread's last error text ("" if none). */
const char* last_error();

}  // namespace hostnccl

#endif  // DETNCCL_HOSTNCCL_COMM_H
