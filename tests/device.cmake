# Device fingerprints of the shim (hash/device_fingerprints.h): everything that runs without a GPU — the
# plan of a request, the pool size classes, and the behaviour when no CUDA driver is loaded (or CUDA not built).
add_executable(test_device_fingerprints test_device_fingerprints.cc)
target_link_libraries(test_device_fingerprints PRIVATE detnccl_device_fingerprints detnccl_hash detnccl_options
                                                       ${CMAKE_DL_LIBS} GTest::gtest_main)
if(DETNCCL_HAVE_CUDA)
  # The plan's scratch sizes are checked against the CUDA code's own sizing functions (host code, no GPU needed).
  target_link_libraries(test_device_fingerprints PRIVATE detnccl_hash_cuda)
  target_compile_definitions(test_device_fingerprints PRIVATE DETNCCL_TEST_HAVE_CUDA=1)
endif()
gtest_discover_tests(test_device_fingerprints)
