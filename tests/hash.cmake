# hash: fingerprints on the host, the portable (CPU-built) form of the CUDA decomposition, and the CLI end to end.
# xxhsum (Debian package xxhash) supplies independent expected values; the tests fail, loudly, without it.
find_program(DETNCCL_XXHSUM_PROGRAM xxhsum)

add_executable(test_hash test_hash.cc)
target_compile_definitions(test_hash PRIVATE DETNCCL_XXHSUM="${DETNCCL_XXHSUM_PROGRAM}")
target_link_libraries(test_hash PRIVATE detnccl_hash PkgConfig::XXHASH detnccl_options GTest::gtest_main)
gtest_discover_tests(test_hash DISCOVERY_TIMEOUT 60)

add_executable(test_hash_portable test_hash_portable.cc)
target_link_libraries(test_hash_portable PRIVATE detnccl_hash PkgConfig::XXHASH detnccl_options GTest::gtest_main)
gtest_discover_tests(test_hash_portable DISCOVERY_TIMEOUT 60)

add_executable(test_hash_cli test_hash_cli.cc)
target_compile_definitions(test_hash_cli PRIVATE DETNCCL_FINGERPRINT_TOOL="$<TARGET_FILE:detnccl-fingerprint>")
target_link_libraries(test_hash_cli PRIVATE detnccl_hash detnccl_options GTest::gtest_main)
add_dependencies(test_hash_cli detnccl-fingerprint)
gtest_discover_tests(test_hash_cli DISCOVERY_TIMEOUT 60)
