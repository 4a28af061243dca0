# Tests of capture files (DETNCCL_CAPTURE): records/capture_writer.h and capture_reader.h; the shim's capture end to
# end (test_capture_shim, in interpose.cmake's company: jobs over hostnccl under the shim).
add_executable(test_capture test_capture.cc)
target_link_libraries(test_capture PRIVATE detnccl_records detnccl_hash PkgConfig::ZSTD detnccl_options GTest::gtest_main)
gtest_discover_tests(test_capture)

# End to end: trace_job (interpose.cmake) under the shim over hostnccl with DETNCCL_CAPTURE=1; every saved buffer is
# looked up from its call record and fingerprinted again here.
if(TARGET trace_job AND TARGET hostnccl-run)
  add_executable(test_capture_shim test_capture_shim.cc)
  target_link_libraries(test_capture_shim PRIVATE detnccl_abi detnccl_options detnccl_hash detnccl_records
                                                  detnccl_analysis GTest::gtest_main)
  target_compile_definitions(test_capture_shim PRIVATE
    DETNCCL_SHIM_PATH="$<TARGET_FILE:detnccl>" DETNCCL_TRACE_JOB="$<TARGET_FILE:trace_job>"
    DETNCCL_LAUNCHER="$<TARGET_FILE:hostnccl-run>")
  add_dependencies(test_capture_shim detnccl trace_job hostnccl-run)
  gtest_discover_tests(test_capture_shim DISCOVERY_TIMEOUT 30
                       PROPERTIES TIMEOUT 300 RESOURCE_LOCK hostnccl_shm FIXTURES_REQUIRED hostnccl_suite)
endif()
