# Third-party dependencies, all from Debian packages (scripts/install-deps.sh installs them).
find_package(PkgConfig REQUIRED)
# xxHash is used from its header (hash/xxh3_host.h, hostnccl/unique_id.cc): nothing detnccl ships loads libxxhash.
# The library itself is linked only into tests and benchmarks, as the independent reference.
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
# zstd compresses capture files (DETNCCL_CAPTURE). records/zstd_codec.cc uses its header and loads libzstd.so.1 at run
# time, so that the shim needs no library beyond the C and C++ runtimes; tests link it as the independent reference.
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)
find_package(Threads REQUIRED)
find_package(Boost 1.74 REQUIRED)  # Interprocess is header-only
find_package(CLI11 CONFIG REQUIRED)
find_package(nlohmann_json CONFIG REQUIRED)
if(DETNCCL_BUILD_TESTS)
  find_package(GTest CONFIG REQUIRED)
endif()
if(DETNCCL_BUILD_BENCH)
  find_package(benchmark CONFIG REQUIRED)
endif()
