// hostnccl API surface: version, unique ids, error strings, communicator queries and lifetime, argument errors with
// NCCL's codes, the unimplemented entry points, groups (one thread driving several communicators), split,
// configuration errors, and the shared-memory segment's name and mode.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_hostnccl_harness.h"

namespace {
using namespace hostnccl_test;

std::string last_error() { return ncclGetLastError(nullptr); }

TEST(HostncclApi, VersionIs2289) {
  int version = 0;
  ASSERT_EQ(ncclGetVersion(&version), ncclSuccess);
  EXPECT_EQ(version, 22809);
  EXPECT_EQ(ncclGetVersion(nullptr), ncclInvalidArgument);
}

TEST(HostncclApi, ExportsEveryEntryTwiceWithTheSameCode) {
  // ncclX is a weak alias of the strong pncclX, so an LD_PRELOAD shim can reach the implementation as pncclX.
  EXPECT_EQ(reinterpret_cast<void*>(&ncclAllReduce), reinterpret_cast<void*>(&pncclAllReduce));
  EXPECT_EQ(reinterpret_cast<void*>(&ncclMemAlloc), reinterpret_cast<void*>(&pncclMemAlloc));
  Dl_info info;
  ASSERT_NE(dladdr(reinterpret_cast<void*>(&pncclAllReduce), &info), 0);
  EXPECT_NE(std::string(info.dli_fname).find("hostnccl/lib/libnccl.so.2"), std::string::npos) << info.dli_fname;
  void* library = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(library, nullptr);
#define EXPECT_BOTH_EXPORTED(ret, name, params, args, kind, need) \
  EXPECT_NE(dlsym(library, #name), nullptr) << #name;             \
  EXPECT_NE(dlsym(library, "p" #name), nullptr) << "p" #name;
  DETNCCL_NCCL_API(EXPECT_BOTH_EXPORTED)
#undef EXPECT_BOTH_EXPORTED
  EXPECT_EQ(dlsym(library, "_ZN8hostnccl5driveERSt6vectorISt10unique_ptrINS_2OpESt14default_deleteIS2_EESaIS5_EE"),
            nullptr)
      << "internal symbols must stay hidden";
  dlclose(library);
}

TEST(HostncclApi, UniqueIdLayout) {
  ScopedEnv env{{"HOSTNCCL_JOB_TAG", nullptr}};
  ncclUniqueId a, b;
  ASSERT_EQ(ncclGetUniqueId(&a), ncclSuccess);
  ASSERT_EQ(ncclGetUniqueId(&b), ncclSuccess);
  std::uint32_t magic = 0, version = 0;
  std::int32_t pid = 0;
  std::memcpy(&magic, a.internal, 4);
  std::memcpy(&version, a.internal + 4, 4);
  std::memcpy(&pid, a.internal + 24, 4);
  EXPECT_EQ(magic, 0x434E4E48u);
  EXPECT_EQ(version, 2u);
  EXPECT_EQ(pid, getpid());
  EXPECT_NE(std::memcmp(a.internal + 8, b.internal + 8, 16), 0) << "16 random bytes";
  for (std::size_t i = 28; i < sizeof a.internal; ++i) EXPECT_EQ(a.internal[i], 0) << "byte " << i;
  EXPECT_EQ(ncclGetUniqueId(nullptr), ncclInvalidArgument);
}

TEST(HostncclApi, UniqueIdCarriesTheJobTag) {
  const std::string tag = "4242x0123456789abcdef";
  ScopedEnv env{{"HOSTNCCL_JOB_TAG", tag.c_str()}};
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  EXPECT_EQ(std::string(id.internal + 28, tag.size()), tag);
  for (std::size_t i = 28 + tag.size(); i < sizeof id.internal; ++i) EXPECT_EQ(id.internal[i], 0) << "byte " << i;
  // The longest tag fills bytes 28..59 with no terminating zero.
  const std::string longest(32, 'z');
  ScopedEnv longest_env{{"HOSTNCCL_JOB_TAG", longest.c_str()}};
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  EXPECT_EQ(std::string(id.internal + 28, 32), longest);
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess) << last_error();
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

TEST(HostncclApi, AnInvalidJobTagIsRefusedNamingTheVariable) {
  ncclComm_t comms[2] = {nullptr, nullptr};
  for (const char* tag : {"Upper", "with-dash", "a/b", "..", "dot.ted", "123456789012345678901234567890123"}) {
    ScopedEnv env{{"HOSTNCCL_JOB_TAG", tag}};
    ncclUniqueId id;
    EXPECT_EQ(ncclGetUniqueId(&id), ncclInvalidArgument) << tag;
    EXPECT_NE(last_error().find(std::string("HOSTNCCL_JOB_TAG='") + tag + "' is not valid"), std::string::npos)
        << last_error();
    EXPECT_EQ(ncclCommInitAll(comms, 2, nullptr), ncclInvalidArgument) << tag;
  }
}

TEST(HostncclApi, AnIdWithAMalformedTagIsRejected) {
  ScopedEnv env{{"HOSTNCCL_JOB_TAG", "abc"}};
  ncclUniqueId good;
  ASSERT_EQ(ncclGetUniqueId(&good), ncclSuccess);
  // A '/' would reach the object name; bytes after the tag must be zero, as ncclGetUniqueId writes them.
  const std::vector<std::pair<std::size_t, char>> damage = {{29, '/'}, {28, 'A'}, {30, '-'}, {31, 0x01}, {127, 'x'}};
  for (const auto& [offset, byte] : damage) {
    ncclUniqueId id = good;
    id.internal[offset] = byte;
    ncclComm_t comm = nullptr;
    EXPECT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclInvalidArgument) << "byte " << offset;
    EXPECT_EQ(comm, nullptr);
  }
}

TEST(HostncclApi, ErrorStringsAreNccls) {
  const char* const expected[] = {"no error",
                                  "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
                                  "unhandled system error (run with NCCL_DEBUG=INFO for details)",
                                  "internal error - please report this issue to the NCCL developers",
                                  "invalid argument (run with NCCL_DEBUG=WARN for details)",
                                  "invalid usage (run with NCCL_DEBUG=WARN for details)",
                                  "remote process exited or there was a network error",
                                  "NCCL operation in progress",
                                  "unknown result code"};
  for (int code = 0; code <= ncclNumResults; ++code) {
    EXPECT_STREQ(ncclGetErrorString(static_cast<ncclResult_t>(code)), expected[code]) << code;
  }
#ifdef DETNCCL_REAL_NCCL_LIBRARY
  // The real NCCL answers this without a GPU; load it privately so that it cannot replace our symbols.
  if (void* real = dlopen(DETNCCL_REAL_NCCL_LIBRARY, RTLD_NOW | RTLD_LOCAL)) {
    using ErrorString = const char* (*)(ncclResult_t);
    auto real_error_string = reinterpret_cast<ErrorString>(dlsym(real, "ncclGetErrorString"));
    ASSERT_NE(real_error_string, nullptr);
    for (int code = 0; code <= ncclNumResults; ++code) {
      EXPECT_STREQ(ncclGetErrorString(static_cast<ncclResult_t>(code)),
                   real_error_string(static_cast<ncclResult_t>(code)))
          << code;
    }
    dlclose(real);
  }
#endif
}

TEST(HostncclApi, UnimplementedEntryPointsSaySo) {
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess);
  void* pointer = nullptr;
  void* handle = nullptr;
  ncclWindow_t window = nullptr;
  ncclComm_t child = nullptr;
  int exclude = 0;
  ncclUniqueId id;
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  const std::pair<ncclResult_t, const char*> calls[] = {
      {ncclMemAlloc(&pointer, 64), "ncclMemAlloc"},
      {ncclMemFree(pointer), "ncclMemFree"},
      {ncclCommRegister(comm, &exclude, 4, &handle), "ncclCommRegister"},
      {ncclCommDeregister(comm, handle), "ncclCommDeregister"},
      {ncclCommWindowRegister(comm, &exclude, 4, &window, 0), "ncclCommWindowRegister"},
      {ncclCommWindowDeregister(comm, window), "ncclCommWindowDeregister"},
      {ncclCommShrink(comm, &exclude, 1, &child, nullptr, 0), "ncclCommShrink"},
      {ncclCommRevoke(comm, 0), "ncclCommRevoke"},
      {ncclCommInitRankScalable(&child, 1, 0, 1, &id, nullptr), "ncclCommInitRankScalable"},
      {ncclGroupSimulateEnd(&sim), "ncclGroupSimulateEnd"},
  };
  for (const auto& [result, name] : calls) {
    EXPECT_EQ(result, ncclInvalidUsage) << name;
  }
  // The text is set by each call: check it right after one.
  EXPECT_EQ(pncclCommRevoke(comm, 0), ncclInvalidUsage);
  EXPECT_EQ(std::string(ncclGetLastError(comm)), "hostnccl: ncclCommRevoke is not implemented");
  EXPECT_EQ(ncclMemAlloc(&pointer, 64), ncclInvalidUsage);
  EXPECT_EQ(last_error(), "hostnccl: ncclMemAlloc is not implemented");
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

TEST(HostncclApi, QueriesFinalizeAndDestroy) {
  ScopedEnv env{{"LOCAL_RANK", "3"}};
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  EXPECT_FALSE(path_exists(segment_path(id))) << "unlinked as soon as every rank attached";
  int value = -1;
  EXPECT_EQ(ncclCommCount(comm, &value), ncclSuccess);
  EXPECT_EQ(value, 1);
  EXPECT_EQ(ncclCommUserRank(comm, &value), ncclSuccess);
  EXPECT_EQ(value, 0);
  EXPECT_EQ(ncclCommCuDevice(comm, &value), ncclSuccess);
  EXPECT_EQ(value, 3) << "LOCAL_RANK";
  ncclResult_t async = ncclInternalError;
  EXPECT_EQ(ncclCommGetAsyncError(comm, &async), ncclSuccess);
  EXPECT_EQ(async, ncclSuccess);
  EXPECT_EQ(ncclCommCount(comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommCount(nullptr, &value), ncclInvalidArgument);
  EXPECT_EQ(ncclCommUserRank(nullptr, &value), ncclInvalidArgument);
  EXPECT_EQ(ncclCommCuDevice(nullptr, &value), ncclInvalidArgument);
  EXPECT_EQ(ncclCommGetAsyncError(nullptr, &async), ncclInvalidArgument);
  float x = 2.5f, y = 0;
  EXPECT_EQ(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, nullptr), ncclSuccess);
  EXPECT_EQ(y, 2.5f);
  EXPECT_EQ(ncclCommFinalize(comm), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, nullptr), ncclInvalidUsage);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(nullptr), ncclSuccess);
  EXPECT_EQ(ncclCommAbort(nullptr), ncclSuccess);
}

TEST(HostncclApi, InitArgumentErrors) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  EXPECT_EQ(ncclCommInitRank(nullptr, 1, id, 0), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitRank(&comm, 0, id, 0), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitRank(&comm, 2, id, 2), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitRank(&comm, 2, id, -1), ncclInvalidArgument);
  ncclUniqueId foreign{};
  std::memset(foreign.internal, 0x5a, sizeof foreign.internal);
  EXPECT_EQ(ncclCommInitRank(&comm, 1, foreign, 0), ncclInvalidArgument);
  EXPECT_EQ(comm, nullptr);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.magic = 0;
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 1, id, 0, &config), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitAll(nullptr, 2, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitAll(&comm, 0, nullptr), ncclInvalidArgument);
  ncclComm_t pair[2];
  const int duplicate[2] = {1, 1};
  EXPECT_EQ(ncclCommInitAll(pair, 2, duplicate), ncclInvalidUsage);
  // A valid config is accepted.
  config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ASSERT_EQ(ncclCommInitRankConfig(&comm, 1, id, 0, &config), ncclInProgress);  // non-blocking: completes later
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);                                // waits for it
}

TEST(HostncclApi, BadEnvironmentFailsInitNamingTheVariable) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  {
    ScopedEnv env{{"HOSTNCCL_REDUCE_ORDER", "sorted"}};
    EXPECT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclInvalidArgument);
    EXPECT_NE(last_error().find("HOSTNCCL_REDUCE_ORDER"), std::string::npos) << last_error();
    EXPECT_NE(last_error().find("'arrival' or 'rank'"), std::string::npos) << last_error();
    ncclComm_t comms[2];
    EXPECT_EQ(ncclCommInitAll(comms, 2, nullptr), ncclInvalidArgument);
  }
  {
    ScopedEnv env{{"HOSTNCCL_TIMEOUT_S", "soon"}};
    EXPECT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclInvalidArgument);
    EXPECT_NE(last_error().find("HOSTNCCL_TIMEOUT_S"), std::string::npos) << last_error();
  }
  {
    ScopedEnv env{{"HOSTNCCL_SLOT_BYTES", "12"}};
    EXPECT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclInvalidArgument);
    EXPECT_NE(last_error().find("HOSTNCCL_SLOT_BYTES"), std::string::npos) << last_error();
  }
  EXPECT_FALSE(path_exists(segment_path(id)));
}

class HostncclArgumentErrors : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(ncclCommInitAll(comms_, 2, nullptr), ncclSuccess); }
  void TearDown() override {
    EXPECT_EQ(ncclCommDestroy(comms_[0]), ncclSuccess);
    EXPECT_EQ(ncclCommDestroy(comms_[1]), ncclSuccess);
  }
  ncclComm_t comms_[2] = {nullptr, nullptr};
  float buffer_[16] = {};
};

// Every error is detected before any data moves, so one rank of a 2-rank communicator can be probed alone.
TEST_F(HostncclArgumentErrors, CollectivesReturnNcclsCodes) {
  ncclComm_t comm = comms_[0];
  float* b = buffer_;
  const size_t huge = std::numeric_limits<size_t>::max() / 2;
  EXPECT_EQ(ncclAllReduce(b, b, 4, ncclFloat32, ncclSum, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(nullptr, b, 4, ncclFloat32, ncclSum, comm, nullptr), ncclInvalidArgument);
  EXPECT_NE(last_error().find("sendbuff is NULL"), std::string::npos) << last_error();
  EXPECT_EQ(ncclAllReduce(b, nullptr, 4, ncclFloat32, ncclSum, comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(b, b, 4, ncclNumTypes, ncclSum, comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(b, b, 4, ncclFloat32, ncclNumOps, comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(b, b, 4, ncclFloat32, static_cast<ncclRedOp_t>(ncclNumOps + 40), comm, nullptr),
            ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(b, b, huge, ncclFloat32, ncclSum, comm, nullptr), ncclInvalidArgument);
  EXPECT_NE(last_error().find("overflows"), std::string::npos) << last_error();
  EXPECT_EQ(ncclReduce(b, b, 4, ncclFloat32, ncclSum, 2, comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclReduce(b, b, 4, ncclFloat32, ncclSum, -1, comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclReduce(b, nullptr, 4, ncclFloat32, ncclSum, 0, comm, nullptr), ncclInvalidArgument);  // root's recv
  EXPECT_EQ(ncclBroadcast(nullptr, b, 4, ncclFloat32, 0, comm, nullptr), ncclInvalidArgument);        // root's send
  EXPECT_EQ(ncclBroadcast(b, b, 4, ncclFloat32, 5, comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclBcast(nullptr, 4, ncclFloat32, 0, comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclAllGather(b, nullptr, 4, ncclFloat32, comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclAllGather(b, b, huge / 2, ncclFloat32, comm, nullptr), ncclInvalidArgument);  // * nranks overflows
  EXPECT_EQ(ncclReduceScatter(nullptr, b, 4, ncclFloat32, ncclMax, comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclAlltoAll(b, nullptr, 4, ncclFloat32, comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclGather(b, b, 4, ncclFloat32, 2, comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclScatter(b, b, 4, ncclFloat32, -3, comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclSend(b, 4, ncclFloat32, 2, comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclSend(nullptr, 4, ncclFloat32, 1, comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclRecv(b, 4, ncclFloat32, -1, comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclRecv(b, 4, ncclNumTypes, 1, comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclSend(b, 4, ncclFloat32, 1, nullptr, nullptr), ncclInvalidArgument);
}

TEST_F(HostncclArgumentErrors, ReductionOperators) {
  ncclComm_t comm = comms_[0];
  float scalar = 2.0f;
  ncclRedOp_t op;
  EXPECT_EQ(ncclRedOpCreatePreMulSum(nullptr, &scalar, ncclFloat32, ncclScalarHostImmediate, comm),
            ncclInvalidArgument);
  EXPECT_EQ(ncclRedOpCreatePreMulSum(&op, nullptr, ncclFloat32, ncclScalarHostImmediate, comm), ncclInvalidArgument);
  EXPECT_EQ(ncclRedOpCreatePreMulSum(&op, &scalar, ncclNumTypes, ncclScalarHostImmediate, comm), ncclInvalidArgument);
  EXPECT_EQ(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32, ncclScalarHostImmediate, nullptr), ncclInvalidArgument);
  ASSERT_EQ(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32, ncclScalarHostImmediate, comm), ncclSuccess);
  EXPECT_GE(op, ncclNumOps);
  // Ops belong to their communicator and datatype.
  EXPECT_EQ(ncclAllReduce(buffer_, buffer_, 4, ncclFloat64, op, comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(buffer_, buffer_, 4, ncclFloat32, op, comms_[1], nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclRedOpDestroy(op, comms_[1]), ncclInvalidArgument);
  EXPECT_EQ(ncclRedOpDestroy(ncclSum, comm), ncclInvalidArgument);
  EXPECT_EQ(ncclRedOpDestroy(op, comm), ncclSuccess);
  EXPECT_EQ(ncclRedOpDestroy(op, comm), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(buffer_, buffer_, 4, ncclFloat32, op, comm, nullptr), ncclInvalidArgument);
}

TEST_F(HostncclArgumentErrors, GroupsReportTheirCallsErrors) {
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  // An argument error inside a group is returned by the call and again by the outermost ncclGroupEnd, which then
  // drops the group; the communicators stay usable.
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(buffer_, buffer_, 4, ncclFloat32, ncclSum, comms_[0], nullptr), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(buffer_, buffer_, 4, ncclNumTypes, ncclSum, comms_[1], nullptr), ncclInvalidArgument);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess);  // nested: nothing runs yet
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidArgument);
  float a[3] = {1, 2, 3}, b[3] = {10, 20, 30};
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(a, a, 3, ncclFloat32, ncclSum, comms_[0], nullptr), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(b, b, 3, ncclFloat32, ncclSum, comms_[1], nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(a[i], 11.0f * static_cast<float>(i + 1));
    EXPECT_EQ(b[i], 11.0f * static_cast<float>(i + 1));
  }
}

// The classic single-process pattern: ncclCommInitAll, then one thread drives every rank inside one group.
TEST(HostncclGroups, OneThreadDrivesEveryCommunicator) {
  ScopedEnv env{{"HOSTNCCL_SLOT_BYTES", "4096"}, {"HOSTNCCL_RING_BYTES", "4096"}};
  constexpr int kRanks = 4;
  const int devices[kRanks] = {3, 1, 0, 2};
  ncclComm_t comms[kRanks];
  ASSERT_EQ(ncclCommInitAll(comms, kRanks, devices), ncclSuccess);
  for (int r = 0; r < kRanks; ++r) {
    int device = -1, rank = -1;
    EXPECT_EQ(ncclCommCuDevice(comms[r], &device), ncclSuccess);
    EXPECT_EQ(device, devices[r]);
    EXPECT_EQ(ncclCommUserRank(comms[r], &rank), ncclSuccess);
    EXPECT_EQ(rank, r);
  }
  const std::size_t count = 3001;  // several chunks
  std::vector<std::vector<std::int64_t>> data(kRanks, std::vector<std::int64_t>(count));
  std::vector<std::vector<std::int64_t>> ring_in(kRanks, std::vector<std::int64_t>(count, -1));
  for (int r = 0; r < kRanks; ++r) {
    for (std::size_t i = 0; i < count; ++i) data[r][i] = r * 1000000 + static_cast<std::int64_t>(i);
  }
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < kRanks; ++r) {
    // A ring shift by sends and receives, and an allreduce, in the same group, on every communicator.
    EXPECT_EQ(ncclSend(data[r].data(), count, ncclInt64, (r + 1) % kRanks, comms[r], nullptr), ncclSuccess);
    EXPECT_EQ(ncclRecv(ring_in[r].data(), count, ncclInt64, (r + kRanks - 1) % kRanks, comms[r], nullptr), ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(ncclAllReduce(data[r].data(), data[r].data(), count, ncclInt64, ncclSum, comms[r], nullptr), ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < kRanks; ++r) {
    const int left = (r + kRanks - 1) % kRanks;
    for (std::size_t i = 0; i < count; i += 97) {
      EXPECT_EQ(ring_in[r][i], left * 1000000 + static_cast<std::int64_t>(i));
      EXPECT_EQ(data[r][i], 6000000 + 4 * static_cast<std::int64_t>(i));
    }
  }
  for (ncclComm_t comm : comms) EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// ncclCommInitRank for every rank inside one group, from one thread (the other single-process pattern).
TEST(HostncclGroups, InitRankOfEveryRankInOneGroup) {
  constexpr int kRanks = 3;
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comms[kRanks];
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(ncclCommInitRank(&comms[r], kRanks, id, r), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  int values[kRanks] = {5, 7, 11};
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(ncclAllReduce(&values[r], &values[r], 1, ncclInt32, ncclProd, comms[r], nullptr), ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  for (int value : values) EXPECT_EQ(value, 385);
  for (ncclComm_t comm : comms) EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  EXPECT_FALSE(path_exists(segment_path(id)));
}

// Split by color = rank % 3 (the last rank opts out), key = -rank (reverse order), then split the children again.
void split_body(Rank& R) {
  const int n = R.nranks, me = R.rank;
  const bool opts_out = n > 1 && me == n - 1;
  const int color = opts_out ? NCCL_SPLIT_NOCOLOR : me % 3;
  ncclComm_t child = reinterpret_cast<ncclComm_t>(&R);  // must be overwritten
  if (!R.check.ok(ncclCommSplit(R.comm, color, -me, &child, nullptr), "ncclCommSplit")) return;
  if (opts_out) {
    R.check.expect(child == nullptr, "NCCL_SPLIT_NOCOLOR gives a NULL communicator");
    return;
  }
  std::vector<int> members;  // parent ranks of my color, ordered by key = -rank: descending rank
  for (int r = n - 1; r >= 0; --r) {
    if (r % 3 == color && !(n > 1 && r == n - 1)) members.push_back(r);
  }
  int count = -1, rank = -1;
  R.check.ok(ncclCommCount(child, &count), "ncclCommCount");
  R.check.ok(ncclCommUserRank(child, &rank), "ncclCommUserRank");
  R.check.expect(count == static_cast<int>(members.size()), "child size %d, expected %zu", count, members.size());
  const int expected_rank = static_cast<int>(std::find(members.begin(), members.end(), me) - members.begin());
  R.check.expect(rank == expected_rank, "child rank %d, expected %d", rank, expected_rank);
  std::int64_t sum = me + 1, gathered[8] = {};
  R.check.ok(ncclAllReduce(&sum, &sum, 1, ncclInt64, ncclSum, child, nullptr), "child ncclAllReduce");
  std::int64_t expected_sum = 0;
  for (int member : members) expected_sum += member + 1;
  R.check.expect(sum == expected_sum, "child sum %lld, expected %lld", static_cast<long long>(sum),
                 static_cast<long long>(expected_sum));
  std::int64_t mine = me;
  R.check.ok(ncclAllGather(&mine, gathered, 1, ncclInt64, child, nullptr), "child ncclAllGather");
  for (std::size_t i = 0; i < members.size(); ++i) {
    R.check.expect(gathered[i] == members[i], "child rank %zu is parent rank %lld, expected %d", i,
                   static_cast<long long>(gathered[i]), members[i]);
  }
  // A split of the child (everyone the same color, same key: ordered by child rank), then the parent still works.
  ncclComm_t grandchild = nullptr;
  R.check.ok(ncclCommSplit(child, 0, 0, &grandchild, nullptr), "nested ncclCommSplit");
  int grand_rank = -1;
  R.check.ok(ncclCommUserRank(grandchild, &grand_rank), "ncclCommUserRank");
  R.check.expect(grand_rank == rank, "grandchild rank %d, expected %d", grand_rank, rank);
  R.check.ok(ncclCommDestroy(grandchild), "ncclCommDestroy");
  R.check.ok(ncclCommDestroy(child), "ncclCommDestroy");
}

void split_then_parent(Rank& R) {
  split_body(R);
  int one = 1;
  R.check.ok(ncclAllReduce(&one, &one, 1, ncclInt32, ncclSum, R.comm, nullptr), "parent ncclAllReduce after split");
  R.check.expect(one == R.nranks, "parent sum %d", one);
}

class HostncclSplit : public ::testing::TestWithParam<int> {};
TEST_P(HostncclSplit, Forked) { EXPECT_TRUE(run_forked(GetParam(), split_then_parent).all_ok()); }
TEST_P(HostncclSplit, Threads) { EXPECT_EQ(run_threads(GetParam(), ThreadInit::kInitAll, split_then_parent), 0); }
INSTANTIATE_TEST_SUITE_P(Ranks, HostncclSplit, ::testing::Values(1, 2, 3, 4, 5, 8));

TEST(HostncclSharedMemory, SegmentIsPrivateNamedFromTheIdAndUnlinkedOnceAllAttached) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  const std::string path = segment_path(id);
  ncclComm_t comms[2] = {nullptr, nullptr};
  std::thread rank0([&] { EXPECT_EQ(ncclCommInitRank(&comms[0], 2, id, 0), ncclSuccess); });
  // Rank 0 waits for rank 1 inside init, with the segment created: look at it before rank 1 comes.
  struct stat info {};
  bool seen = false;
  for (int i = 0; i < 5000 && !seen; ++i) {
    seen = stat(path.c_str(), &info) == 0;
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(seen) << path << " never appeared";
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  EXPECT_EQ(info.st_uid, getuid());
  EXPECT_EQ(ncclCommInitRank(&comms[1], 2, id, 1), ncclSuccess);
  rank0.join();
  EXPECT_FALSE(path_exists(path));
  for (ncclComm_t comm : comms) EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

TEST(HostncclSharedMemory, ATaggedSegmentIsNamedWithTheTag) {
  ScopedEnv env{{"HOSTNCCL_JOB_TAG", "77x00ff"}};
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::string path = "/dev/shm/hostnccl-77x00ff-";
  for (int i = 8; i < 24; ++i) {
    char hex[3];
    std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned char>(id.internal[i]));
    path += hex;
  }
  ncclComm_t comms[2] = {nullptr, nullptr};
  std::thread rank0([&] { EXPECT_EQ(ncclCommInitRank(&comms[0], 2, id, 0), ncclSuccess); });
  bool seen = false;
  for (int i = 0; i < 5000 && !seen; ++i) {
    seen = path_exists(path);
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(seen) << path << " never appeared";
  EXPECT_EQ(ncclCommInitRank(&comms[1], 2, id, 1), ncclSuccess);
  rank0.join();
  EXPECT_FALSE(path_exists(path));
  for (ncclComm_t comm : comms) EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

TEST(HostncclSharedMemory, AbortTellsWaitingPeers) {
  ncclComm_t comms[2];
  ASSERT_EQ(ncclCommInitAll(comms, 2, nullptr), ncclSuccess);
  EXPECT_EQ(ncclCommAbort(comms[1]), ncclSuccess);
  float x = 1;
  EXPECT_EQ(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comms[0], nullptr), ncclRemoteError);
  ncclResult_t async = ncclSuccess;
  EXPECT_EQ(ncclCommGetAsyncError(comms[0], &async), ncclSuccess);
  EXPECT_EQ(async, ncclRemoteError);
  EXPECT_EQ(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comms[0], nullptr), ncclRemoteError) << "stays failed";
  EXPECT_EQ(ncclCommDestroy(comms[0]), ncclSuccess);
}

}  // namespace
