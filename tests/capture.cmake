# Tests of capture files (DETNCCL_CAPTURE): records/capture_writer.h and capture_reader.h; the shim's capture end to
# end (test_capture_shim, in interpose.cmake's company: jobs over hostnccl under the shim).
add_executable(test_capture test_capture.cc)
target_link_libraries(test_capture PRIVATE detnccl_records detnccl_hash PkgConfig::ZSTD detnccl_options GTest::gtest_main)
gtest_discover_tests(test_capture)
