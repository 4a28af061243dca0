// A tiny NCCL job for tests/test_launcher.cc: run under hostnccl-run, each rank shares the unique id with the
// bootstrap helper, joins the communicator and sums rank-dependent integers with ncclAllReduce. It checks the sum
// against its own computation and prints "allreduce ok: rank R of N, first F, last L" for the test to check again.
// LAUNCHER_JOB_FAIL_RANK=R makes rank R exit with code 3 between two allreduces, leaving its peers waiting.
// LAUNCHER_JOB_ABSENT_RANK=R makes rank R stay away from the communicator (it sleeps, then exits with code 4), so the
// other ranks wait inside ncclCommInitRank with the segment created. With LAUNCHER_TEST_DIR set, every rank first
// writes its pid to LAUNCHER_TEST_DIR/pid.<rank> and rank 0 its HOSTNCCL_JOB_TAG to LAUNCHER_TEST_DIR/tag.
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "abi/nccl_abi.h"
#include "launcher/bootstrap.h"
#include "posix/io.h"

namespace {

constexpr std::size_t kCount = 1027;  // odd, so no size is a convenient power of two

int rank_from_environment(const char* name) {
  const char* text = std::getenv(name);
  return text ? std::atoi(text) : -1;
}

bool nccl_ok(ncclResult_t result, const char* what, int rank) {
  if (result == ncclSuccess) return true;
  std::fprintf(stderr, "rank %d: %s failed: %s\n", rank, what, ncclGetErrorString(result));
  return false;
}

bool all_reduce_and_check(ncclComm_t comm, int rank, int world_size, std::int64_t* first, std::int64_t* last) {
  std::vector<std::int32_t> send(kCount);
  std::vector<std::int32_t> received(kCount, -1);
  for (std::size_t i = 0; i < kCount; ++i) send[i] = (rank + 1) * 1000 + static_cast<std::int32_t>(i);
  if (!nccl_ok(ncclAllReduce(send.data(), received.data(), kCount, ncclInt32, ncclSum, comm, nullptr), "ncclAllReduce",
               rank)) {
    return false;
  }
  for (std::size_t i = 0; i < kCount; ++i) {
    std::int64_t expected = 0;
    for (int r = 0; r < world_size; ++r) expected += (r + 1) * 1000 + static_cast<std::int64_t>(i);
    if (received[i] != expected) {
      std::fprintf(stderr, "rank %d: element %zu is %d, expected %lld\n", rank, i, received[i],
                   static_cast<long long>(expected));
      return false;
    }
  }
  *first = received.front();
  *last = received.back();
  return true;
}

// Writes `text` to `path` through a temporary file and a rename, so a reader sees all of it or nothing.
void publish_file(const std::string& path, const std::string& text) {
  std::string error;
  if (!detnccl::posix::replace_file(path, text.data(), text.size(), &error))
    std::fprintf(stderr, "%s\n", error.c_str());
}

}  // namespace

int main() {
  const int rank = rank_from_environment("RANK");
  const int world_size = rank_from_environment("WORLD_SIZE");
  if (rank < 0 || world_size < 1 || rank >= world_size) {
    std::fprintf(stderr, "RANK and WORLD_SIZE must be set (run under hostnccl-run)\n");
    return 2;
  }
  if (const char* dir = std::getenv("LAUNCHER_TEST_DIR"); dir != nullptr && *dir != '\0') {
    const char* tag = std::getenv("HOSTNCCL_JOB_TAG");
    if (rank == 0) publish_file(std::string(dir) + "/tag", tag ? tag : "");  // before the pid: readers wait for that
    publish_file(std::string(dir) + "/pid." + std::to_string(rank), std::to_string(getpid()));
  }
  if (rank_from_environment("LAUNCHER_JOB_ABSENT_RANK") == rank) {
    std::this_thread::sleep_for(std::chrono::seconds(100));
    return 4;
  }
  ncclUniqueId id{};
  std::string error;
  if (!detnccl::share_unique_id(rank, &id, &error)) {
    std::fprintf(stderr, "rank %d: %s\n", rank, error.c_str());
    return 2;
  }
  ncclComm_t comm = nullptr;
  if (!nccl_ok(ncclCommInitRank(&comm, world_size, id, rank), "ncclCommInitRank", rank)) return 1;
  int count = 0;
  int user_rank = -1;
  if (!nccl_ok(ncclCommCount(comm, &count), "ncclCommCount", rank) ||
      !nccl_ok(ncclCommUserRank(comm, &user_rank), "ncclCommUserRank", rank)) {
    return 1;
  }
  if (count != world_size || user_rank != rank) {
    std::fprintf(stderr, "rank %d: the communicator says rank %d of %d\n", rank, user_rank, count);
    return 1;
  }
  std::int64_t first = 0;
  std::int64_t last = 0;
  if (!all_reduce_and_check(comm, rank, world_size, &first, &last)) return 1;
  if (rank_from_environment("LAUNCHER_JOB_FAIL_RANK") == rank) {
    std::fprintf(stderr, "rank %d: failing on purpose\n", rank);
    // Dies the way a crashed rank would: no communicator teardown, no exit handlers (nor a leak report).
    std::fflush(nullptr);
    std::_Exit(3);
  }
  if (!all_reduce_and_check(comm, rank, world_size, &first, &last)) return 1;
  if (!nccl_ok(ncclCommDestroy(comm), "ncclCommDestroy", rank)) return 1;
  std::printf("allreduce ok: rank %d of %d, first %lld, last %lld\n", rank, world_size, static_cast<long long>(first),
              static_cast<long long>(last));
  return 0;
}
