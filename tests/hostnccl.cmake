# hostnccl tests. The hostnccl library (libnccl.so.2) is linked directly; the multi-rank tests fork processes or
# start threads themselves. Every hostnccl test holds the "hostnccl_shm" resource and belongs to the
# hostnccl_suite fixture, whose cleanup test checks that no /dev/shm/hostnccl-* segment was left behind.

add_executable(test_dtype_arith test_dtype_arith.cc)
target_link_libraries(test_dtype_arith PRIVATE detnccl_abi detnccl_options GTest::gtest_main)
gtest_discover_tests(test_dtype_arith)

foreach(suite collectives p2p api failures nonblocking corrupt)
  add_executable(test_hostnccl_${suite} test_hostnccl_${suite}.cc)
  target_link_libraries(test_hostnccl_${suite} PRIVATE hostnccl detnccl_abi detnccl_options GTest::gtest_main
                                                       Threads::Threads ${CMAKE_DL_LIBS})
  if(DETNCCL_REAL_NCCL_LIBRARY)
    # The API test compares error strings with the real NCCL's (dlopen'ed privately, never linked).
    target_compile_definitions(test_hostnccl_${suite} PRIVATE DETNCCL_REAL_NCCL_LIBRARY="${DETNCCL_REAL_NCCL_LIBRARY}")
  endif()
  gtest_discover_tests(test_hostnccl_${suite} DISCOVERY_TIMEOUT 30
                       PROPERTIES TIMEOUT 300 RESOURCE_LOCK hostnccl_shm FIXTURES_REQUIRED hostnccl_suite)
endforeach()

add_test(NAME hostnccl_leaves_no_shared_memory
         COMMAND sh -c "if ls /dev/shm/hostnccl-* >/dev/null 2>&1; then ls -l /dev/shm/hostnccl-*; exit 1; fi")
set_tests_properties(hostnccl_leaves_no_shared_memory PROPERTIES FIXTURES_CLEANUP hostnccl_suite
                                                                 RESOURCE_LOCK hostnccl_shm)

# The HOSTNCCL_* table (hostnccl/settings.h, header-only) and docs/hostnccl.md kept in step with it.
add_executable(test_hostnccl_settings test_hostnccl_settings.cc)
target_link_libraries(test_hostnccl_settings PRIVATE detnccl_abi detnccl_options GTest::gtest_main)
target_compile_definitions(test_hostnccl_settings PRIVATE DETNCCL_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
gtest_discover_tests(test_hostnccl_settings)

if(DETNCCL_HAVE_CUDA)
  # Staging of CUDA buffers (pinned host memory in stream order, grouped inputs read at ncclGroupEnd) against the
  # stand-in driver (fake_cuda_driver.cc); hostnccl looks the driver up only in CUDA builds.
  add_executable(test_hostnccl_staging test_hostnccl_staging.cc)
  target_link_libraries(test_hostnccl_staging PRIVATE hostnccl detnccl_abi GTest::gtest_main ${CMAKE_DL_LIBS})
  target_compile_definitions(test_hostnccl_staging PRIVATE DETNCCL_FAKE_CUDA_DRIVER="$<TARGET_FILE:fake_cuda_driver>")
  add_dependencies(test_hostnccl_staging fake_cuda_driver)
  gtest_discover_tests(test_hostnccl_staging DISCOVERY_TIMEOUT 30
                       PROPERTIES TIMEOUT 60 RESOURCE_LOCK hostnccl_shm FIXTURES_REQUIRED hostnccl_suite)
endif()
