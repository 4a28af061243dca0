# Tests of steps/ (the iteration numbering of jobs that mark no steps) on call sequences built in the test, and end
# to end: unmarked_job under hostnccl-run with the shim, its logs read back by the CLI (test_steps_job).
add_executable(test_steps test_steps.cc)
target_link_libraries(test_steps PRIVATE detnccl_steps detnccl_config detnccl_options GTest::gtest_main)
gtest_discover_tests(test_steps)

if(TARGET hostnccl AND TARGET hostnccl-run)
  add_executable(unmarked_job unmarked_job.cc)
  target_link_libraries(unmarked_job PRIVATE detnccl_abi detnccl_options detnccl_bootstrap hostnccl ${CMAKE_DL_LIBS})
  add_executable(test_steps_job test_steps_job.cc)
  target_link_libraries(test_steps_job PRIVATE detnccl_records nlohmann_json::nlohmann_json detnccl_options
                                               GTest::gtest_main)
  target_compile_definitions(test_steps_job PRIVATE
    DETNCCL_SHIM_PATH="$<TARGET_FILE:detnccl>" DETNCCL_UNMARKED_JOB="$<TARGET_FILE:unmarked_job>"
    DETNCCL_LAUNCHER="$<TARGET_FILE:hostnccl-run>" DETNCCL_CLI="$<TARGET_FILE:detnccl-cli>")
  add_dependencies(test_steps_job detnccl unmarked_job hostnccl-run detnccl-cli)
  gtest_discover_tests(test_steps_job DISCOVERY_TIMEOUT 30
                       PROPERTIES TIMEOUT 300 RESOURCE_LOCK hostnccl_shm FIXTURES_REQUIRED hostnccl_suite)
endif()
