# Tests of records/: format, writer (kill -9, file size limit, safe creation, threads) and reader (damage, cuts).
add_executable(test_records test_records.cc)
target_link_libraries(test_records PRIVATE detnccl_records PkgConfig::XXHASH detnccl_options GTest::gtest_main)
target_compile_definitions(test_records PRIVATE DETNCCL_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
gtest_discover_tests(test_records)

# Readers read every released log forever: the CLI's dump, stats, check and diff on the committed logs of each format
# (tests/fixtures/logs-v1, written by format-version-1 code; logs-v2.0, by the first released version-2 writer, before
# the step index) must say exactly what they said when the logs were written.
if(TARGET detnccl-cli)
  add_test(NAME records_v1_log_fixture_reads_the_same
           COMMAND ${PROJECT_SOURCE_DIR}/tests/fixtures/check-logs.sh $<TARGET_FILE:detnccl-cli> logs-v1)
  add_test(NAME records_v2_0_log_fixture_reads_the_same
           COMMAND ${PROJECT_SOURCE_DIR}/tests/fixtures/check-logs.sh $<TARGET_FILE:detnccl-cli> logs-v2.0)
endif()
