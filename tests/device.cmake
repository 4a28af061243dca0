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

# cuda/'s driver-side headers against the stand-in driver (fake_cuda_driver.cc), no CUDA needed: the device scope
# (context_scope.h) restores the thread's context, none included, and never creates a context on a device it was not
# asked for; kernel preloads (kernel_preload.h) load each kernel once into each device's context; the driver version
# (driver_version.h) is read from the driver and an older major release than the shim's runtime is refused.
if(TARGET fake_cuda_driver)
  add_executable(test_device_scope test_device_scope.cc)
  target_include_directories(test_device_scope PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(test_device_scope PRIVATE ${CMAKE_DL_LIBS} GTest::gtest_main)
  target_compile_definitions(test_device_scope PRIVATE DETNCCL_FAKE_CUDA_DRIVER="$<TARGET_FILE:fake_cuda_driver>")
  add_dependencies(test_device_scope fake_cuda_driver)
  gtest_discover_tests(test_device_scope)
endif()
