# numerics/: magnitudes of differences, the reordering bound, replay's computing core (pure unit tests), and replay's
# orders checked bit for bit against hostnccl's own AllReduce and collectives/' deterministic one (threads over
# hostnccl), plus HOSTNCCL_CORRUPT's fault.
if(TARGET hostnccl AND TARGET detnccl_collectives)
  add_executable(test_numerics test_numerics.cc)
  target_link_libraries(test_numerics PRIVATE detnccl_numerics detnccl_collectives hostnccl detnccl_abi detnccl_options
                                              GTest::gtest_main Threads::Threads)
  gtest_discover_tests(test_numerics DISCOVERY_TIMEOUT 30
                       PROPERTIES TIMEOUT 300 RESOURCE_LOCK hostnccl_shm FIXTURES_REQUIRED hostnccl_suite)
endif()
