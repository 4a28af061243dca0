# Tests of records/: format, writer (kill -9, file size limit, safe creation, threads) and reader (damage, cuts).
add_executable(test_records test_records.cc)
target_link_libraries(test_records PRIVATE detnccl_records PkgConfig::XXHASH detnccl_options GTest::gtest_main)
target_compile_definitions(test_records PRIVATE DETNCCL_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
gtest_discover_tests(test_records)
