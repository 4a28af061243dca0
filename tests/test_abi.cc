// Proves that detnccl's own NCCL ABI (abi/) agrees with the real nccl.h: every enum value, every size and field
// offset that matters, every constant, and the exact signature of every entry point (both nccl and pnccl names).
// Compile-time checks are static_asserts; the completeness check (nothing in nccl.h missing from our table) and the
// symbol check against the real libnccl.so.2 run as tests.
#include DETNCCL_REAL_NCCL_H

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>

// Our types, inside a namespace so they can sit beside the real ones. The opaque structs (ncclComm,
// ncclWindow_vidmem, CUstream_st) are already declared globally by nccl.h, so both sides share them.
#include "abi/nccl_api_table.h"
namespace ours {
#include "abi/nccl_abi_types.inc"

// Our signature of every entry point, as a function-pointer type spelled with our types.
namespace fn {
#define DETNCCL_SIGNATURE_ALIAS(ret, name, params, args, kind, need) using name = ret(*) params;
DETNCCL_NCCL_API(DETNCCL_SIGNATURE_ALIAS)
#undef DETNCCL_SIGNATURE_ALIAS
}  // namespace fn

inline ncclConfig_t config_initializer() { return DETNCCL_NCCL_CONFIG_INITIALIZER; }
inline ncclSimInfo_t sim_info_initializer() { return DETNCCL_NCCL_SIM_INFO_INITIALIZER; }
}  // namespace ours

namespace {

// Maps a type spelled with our declarations to the same type spelled with the real ones.
template <class T>
struct to_real {
  using type = T;
};
template <class T>
using to_real_t = typename to_real<T>::type;
template <class T>
struct to_real<T*> {
  using type = to_real_t<T>*;
};
template <class T>
struct to_real<const T> {
  using type = const to_real_t<T>;
};
template <class R, class... A>
struct to_real<R (*)(A...)> {
  using type = to_real_t<R> (*)(to_real_t<A>...);
};
#define DETNCCL_MAP_TYPE(T) \
  template <>               \
  struct to_real<ours::T> { \
    using type = ::T;       \
  };
DETNCCL_MAP_TYPE(ncclResult_t)
DETNCCL_MAP_TYPE(ncclDataType_t)
DETNCCL_MAP_TYPE(ncclRedOp_t)
DETNCCL_MAP_TYPE(ncclScalarResidence_t)
DETNCCL_MAP_TYPE(ncclUniqueId)
DETNCCL_MAP_TYPE(ncclConfig_t)
DETNCCL_MAP_TYPE(ncclSimInfo_t)
#undef DETNCCL_MAP_TYPE

// The handle types are not mapped: they must already be the very same types.
static_assert(std::is_same_v<ours::ncclComm_t, ::ncclComm_t>);
static_assert(std::is_same_v<ours::ncclWindow_t, ::ncclWindow_t>);
static_assert(std::is_same_v<ours::cudaStream_t, ::cudaStream_t>);

// Every entry point: our signature, mapped to real types, is exactly the real function's type, for both names.
#define DETNCCL_CHECK_SIGNATURE(ret, name, params, args, kind, need)                                       \
  static_assert(std::is_same_v<to_real_t<ours::fn::name>, decltype(&::name)>, #name " signature differs"); \
  static_assert(std::is_same_v<to_real_t<ours::fn::name>, decltype(&::p##name)>, "p" #name " signature differs");
DETNCCL_NCCL_API(DETNCCL_CHECK_SIGNATURE)
#undef DETNCCL_CHECK_SIGNATURE

// Enum values.
#define DETNCCL_SAME_VALUE(x) static_assert(static_cast<long long>(ours::x) == static_cast<long long>(::x), #x);
DETNCCL_SAME_VALUE(ncclSuccess)
DETNCCL_SAME_VALUE(ncclUnhandledCudaError)
DETNCCL_SAME_VALUE(ncclSystemError)
DETNCCL_SAME_VALUE(ncclInternalError)
DETNCCL_SAME_VALUE(ncclInvalidArgument)
DETNCCL_SAME_VALUE(ncclInvalidUsage)
DETNCCL_SAME_VALUE(ncclRemoteError)
DETNCCL_SAME_VALUE(ncclInProgress)
DETNCCL_SAME_VALUE(ncclNumResults)
DETNCCL_SAME_VALUE(ncclNumOps_dummy)
DETNCCL_SAME_VALUE(ncclSum)
DETNCCL_SAME_VALUE(ncclProd)
DETNCCL_SAME_VALUE(ncclMax)
DETNCCL_SAME_VALUE(ncclMin)
DETNCCL_SAME_VALUE(ncclAvg)
DETNCCL_SAME_VALUE(ncclNumOps)
DETNCCL_SAME_VALUE(ncclMaxRedOp)
DETNCCL_SAME_VALUE(ncclInt8)
DETNCCL_SAME_VALUE(ncclChar)
DETNCCL_SAME_VALUE(ncclUint8)
DETNCCL_SAME_VALUE(ncclInt32)
DETNCCL_SAME_VALUE(ncclInt)
DETNCCL_SAME_VALUE(ncclUint32)
DETNCCL_SAME_VALUE(ncclInt64)
DETNCCL_SAME_VALUE(ncclUint64)
DETNCCL_SAME_VALUE(ncclFloat16)
DETNCCL_SAME_VALUE(ncclHalf)
DETNCCL_SAME_VALUE(ncclFloat32)
DETNCCL_SAME_VALUE(ncclFloat)
DETNCCL_SAME_VALUE(ncclFloat64)
DETNCCL_SAME_VALUE(ncclDouble)
DETNCCL_SAME_VALUE(ncclBfloat16)
DETNCCL_SAME_VALUE(ncclFloat8e4m3)
DETNCCL_SAME_VALUE(ncclFloat8e5m2)
DETNCCL_SAME_VALUE(ncclNumTypes)
DETNCCL_SAME_VALUE(ncclScalarDevice)
DETNCCL_SAME_VALUE(ncclScalarHostImmediate)
#undef DETNCCL_SAME_VALUE

// Sizes of everything passed by value or through pointers.
#define DETNCCL_SAME_SIZE(T) \
  static_assert(sizeof(ours::T) == sizeof(::T) && alignof(ours::T) == alignof(::T), "size of " #T);
DETNCCL_SAME_SIZE(ncclResult_t)
DETNCCL_SAME_SIZE(ncclDataType_t)
DETNCCL_SAME_SIZE(ncclRedOp_t)
DETNCCL_SAME_SIZE(ncclScalarResidence_t)
DETNCCL_SAME_SIZE(ncclUniqueId)
DETNCCL_SAME_SIZE(ncclConfig_t)
DETNCCL_SAME_SIZE(ncclSimInfo_t)
#undef DETNCCL_SAME_SIZE

// Field layout of the structs users fill in.
#define DETNCCL_SAME_FIELD(T, f)                                                \
  static_assert(offsetof(ours::T, f) == offsetof(::T, f), #T "." #f " offset"); \
  static_assert(std::is_same_v<to_real_t<decltype(ours::T::f)>, decltype(::T::f)>, #T "." #f " type");
DETNCCL_SAME_FIELD(ncclUniqueId, internal)
DETNCCL_SAME_FIELD(ncclConfig_t, size)
DETNCCL_SAME_FIELD(ncclConfig_t, magic)
DETNCCL_SAME_FIELD(ncclConfig_t, version)
DETNCCL_SAME_FIELD(ncclConfig_t, blocking)
DETNCCL_SAME_FIELD(ncclConfig_t, cgaClusterSize)
DETNCCL_SAME_FIELD(ncclConfig_t, minCTAs)
DETNCCL_SAME_FIELD(ncclConfig_t, maxCTAs)
DETNCCL_SAME_FIELD(ncclConfig_t, netName)
DETNCCL_SAME_FIELD(ncclConfig_t, splitShare)
DETNCCL_SAME_FIELD(ncclConfig_t, trafficClass)
DETNCCL_SAME_FIELD(ncclConfig_t, commName)
DETNCCL_SAME_FIELD(ncclConfig_t, collnetEnable)
DETNCCL_SAME_FIELD(ncclConfig_t, CTAPolicy)
DETNCCL_SAME_FIELD(ncclConfig_t, shrinkShare)
DETNCCL_SAME_FIELD(ncclConfig_t, nvlsCTAs)
DETNCCL_SAME_FIELD(ncclConfig_t, nChannelsPerNetPeer)
DETNCCL_SAME_FIELD(ncclConfig_t, nvlinkCentricSched)
DETNCCL_SAME_FIELD(ncclSimInfo_t, size)
DETNCCL_SAME_FIELD(ncclSimInfo_t, magic)
DETNCCL_SAME_FIELD(ncclSimInfo_t, version)
DETNCCL_SAME_FIELD(ncclSimInfo_t, estimatedTime)
#undef DETNCCL_SAME_FIELD

// Constants.
static_assert(DETNCCL_NCCL_MAJOR == NCCL_MAJOR && DETNCCL_NCCL_MINOR == NCCL_MINOR && DETNCCL_NCCL_PATCH == NCCL_PATCH);
static_assert(DETNCCL_NCCL_VERSION_CODE == NCCL_VERSION_CODE);
static_assert(DETNCCL_NCCL_VERSION(2, 8, 4) == NCCL_VERSION(2, 8, 4));
static_assert(DETNCCL_NCCL_VERSION(2, 28, 9) == NCCL_VERSION(2, 28, 9));
static_assert(DETNCCL_NCCL_UNIQUE_ID_BYTES == NCCL_UNIQUE_ID_BYTES);
static_assert(DETNCCL_NCCL_CONFIG_UNDEF_INT == NCCL_CONFIG_UNDEF_INT);
static_assert(DETNCCL_NCCL_SPLIT_NOCOLOR == NCCL_SPLIT_NOCOLOR);
static_assert(DETNCCL_NCCL_UNDEF_FLOAT == NCCL_UNDEF_FLOAT);
static_assert(DETNCCL_NCCL_WIN_DEFAULT == NCCL_WIN_DEFAULT);
static_assert(DETNCCL_NCCL_WIN_COLL_SYMMETRIC == NCCL_WIN_COLL_SYMMETRIC);
static_assert(DETNCCL_NCCL_WIN_REQUIRED_ALIGNMENT == NCCL_WIN_REQUIRED_ALIGNMENT);
static_assert(DETNCCL_NCCL_CTA_POLICY_DEFAULT == NCCL_CTA_POLICY_DEFAULT);
static_assert(DETNCCL_NCCL_CTA_POLICY_EFFICIENCY == NCCL_CTA_POLICY_EFFICIENCY);
static_assert(DETNCCL_NCCL_CTA_POLICY_ZERO == NCCL_CTA_POLICY_ZERO);
static_assert(DETNCCL_NCCL_SHRINK_DEFAULT == NCCL_SHRINK_DEFAULT);
static_assert(DETNCCL_NCCL_SHRINK_ABORT == NCCL_SHRINK_ABORT);
static_assert(DETNCCL_NCCL_REVOKE_DEFAULT == NCCL_REVOKE_DEFAULT);

// The initializers produce the same values, field by field.
TEST(Abi, ConfigInitializerMatches) {
  const ours::ncclConfig_t mine = ours::config_initializer();
  const ::ncclConfig_t real = NCCL_CONFIG_INITIALIZER;
  EXPECT_EQ(mine.size, real.size);
  EXPECT_EQ(mine.magic, real.magic);
  EXPECT_EQ(mine.version, real.version);
  EXPECT_EQ(mine.blocking, real.blocking);
  EXPECT_EQ(mine.cgaClusterSize, real.cgaClusterSize);
  EXPECT_EQ(mine.minCTAs, real.minCTAs);
  EXPECT_EQ(mine.maxCTAs, real.maxCTAs);
  EXPECT_EQ(mine.netName, real.netName);
  EXPECT_EQ(mine.splitShare, real.splitShare);
  EXPECT_EQ(mine.trafficClass, real.trafficClass);
  EXPECT_EQ(mine.commName, real.commName);
  EXPECT_EQ(mine.collnetEnable, real.collnetEnable);
  EXPECT_EQ(mine.CTAPolicy, real.CTAPolicy);
  EXPECT_EQ(mine.shrinkShare, real.shrinkShare);
  EXPECT_EQ(mine.nvlsCTAs, real.nvlsCTAs);
  EXPECT_EQ(mine.nChannelsPerNetPeer, real.nChannelsPerNetPeer);
  EXPECT_EQ(mine.nvlinkCentricSched, real.nvlinkCentricSched);
}

TEST(Abi, SimInfoInitializerMatches) {
  const ours::ncclSimInfo_t mine = ours::sim_info_initializer();
  const ::ncclSimInfo_t real = NCCL_SIM_INFO_INITIALIZER;
  EXPECT_EQ(mine.size, real.size);
  EXPECT_EQ(mine.magic, real.magic);
  EXPECT_EQ(mine.version, real.version);
  EXPECT_EQ(mine.estimatedTime, real.estimatedTime);
}

std::set<std::string> our_entry_points() {
  std::set<std::string> names;
#define DETNCCL_NAME(ret, name, params, args, kind, need) names.insert(#name);
  DETNCCL_NCCL_API(DETNCCL_NAME)
#undef DETNCCL_NAME
  return names;
}

// Completeness the compiler cannot see: every function nccl.h declares is in our table, and nothing else is.
TEST(Abi, TableListsEveryFunctionOfTheRealHeader) {
  std::ifstream header(DETNCCL_REAL_NCCL_H);
  ASSERT_TRUE(header) << "cannot read " << DETNCCL_REAL_NCCL_H;
  std::stringstream text;
  text << header.rdbuf();
  const std::string source = text.str();
  const std::regex declaration(R"((?:^|\n)\s*(?:ncclResult_t|const\s+char\s*\*)\s+(nccl[A-Za-z0-9_]+)\s*\()");
  std::set<std::string> declared;
  for (auto it = std::sregex_iterator(source.begin(), source.end(), declaration); it != std::sregex_iterator(); ++it) {
    declared.insert((*it)[1]);
  }
  ASSERT_GT(declared.size(), 30u) << "the declaration pattern no longer matches nccl.h";
  EXPECT_EQ(declared, our_entry_points());
}

// Every entry point of our table, both names, is exported by the real library (REQUIRED ones must be).
TEST(Abi, RealLibraryExportsEveryEntryPoint) {
#ifndef DETNCCL_REAL_NCCL_LIBRARY
  GTEST_SKIP() << "no real libnccl.so.2 was found at configure time";
#else
  void* library = dlopen(DETNCCL_REAL_NCCL_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(library, nullptr) << dlerror();
#define DETNCCL_CHECK_EXPORT(ret, name, params, args, kind, need)                 \
  EXPECT_NE(dlsym(library, #name), nullptr) << #name " missing from the library"; \
  EXPECT_NE(dlsym(library, "p" #name), nullptr) << "p" #name " missing from the library";
  DETNCCL_NCCL_API(DETNCCL_CHECK_EXPORT)
#undef DETNCCL_CHECK_EXPORT
  // The version the library reports is the one our header describes.
  auto get_version = reinterpret_cast< ::ncclResult_t (*)(int*)>(dlsym(library, "ncclGetVersion"));
  ASSERT_NE(get_version, nullptr);
  int version = 0;
  ASSERT_EQ(get_version(&version), ::ncclSuccess);
  EXPECT_EQ(version, DETNCCL_NCCL_VERSION_CODE);
  dlclose(library);
#endif
}

}  // namespace
