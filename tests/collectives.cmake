# collectives: deterministic reductions over hostnccl (forked ranks). The multi-rank tests share hostnccl's
# "hostnccl_shm" resource and fixture, so the leftover-segment check covers them too.
if(TARGET hostnccl AND TARGET detnccl_collectives)
  add_executable(test_collectives test_collectives.cc)
  target_link_libraries(test_collectives PRIVATE detnccl_collectives hostnccl detnccl_abi detnccl_options
                                                 GTest::gtest_main Threads::Threads)
  gtest_discover_tests(test_collectives DISCOVERY_TIMEOUT 30
                       PROPERTIES TIMEOUT 300 RESOURCE_LOCK hostnccl_shm FIXTURES_REQUIRED hostnccl_suite)
endif()
