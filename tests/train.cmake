# The training example (examples/train): its pieces (buckets, checkpoint format, gradient, perturbation choice) and
# the program itself under hostnccl-run, with and without the shim.
if(TARGET train AND TARGET hostnccl-run AND TARGET detnccl)
  add_executable(test_train test_train.cc)
  target_link_libraries(test_train PRIVATE train_core detnccl_abi detnccl_hash detnccl_records detnccl_analysis
                                           detnccl_options GTest::gtest_main)
  target_compile_definitions(test_train PRIVATE
    TRAIN_PATH="$<TARGET_FILE:train>" HOSTNCCL_RUN_PATH="$<TARGET_FILE:hostnccl-run>"
    DETNCCL_SHIM_PATH="$<TARGET_FILE:detnccl>")
  add_dependencies(test_train train hostnccl-run detnccl)
  gtest_discover_tests(test_train DISCOVERY_TIMEOUT 30
                       PROPERTIES TIMEOUT 120 RESOURCE_LOCK hostnccl_shm FIXTURES_REQUIRED hostnccl_suite)
endif()
