# Fault tests (test_faults.cc) and the soak test (test_soak.cc): the shim preloaded into jobs over hostnccl
# (test_faults_job, soak_job) that meet a killed rank, a full disk, hostile log locations and environments, many
# threads, and a long mixed workload. See docs/reliability.md for the promise each test proves.
if(TARGET hostnccl AND TARGET detnccl AND TARGET detnccl-cli)
  add_executable(test_faults_job test_faults_job.cc)
  target_link_libraries(test_faults_job PRIVATE detnccl_abi detnccl_options detnccl_bootstrap hostnccl Threads::Threads)

  add_executable(test_faults test_faults.cc)
  target_link_libraries(test_faults PRIVATE detnccl_records detnccl_hash nlohmann_json::nlohmann_json detnccl_options
                                            GTest::gtest_main)
  target_compile_definitions(test_faults PRIVATE
    DETNCCL_SHIM_PATH="$<TARGET_FILE:detnccl>" DETNCCL_FAULTS_JOB="$<TARGET_FILE:test_faults_job>"
    DETNCCL_CLI="$<TARGET_FILE:detnccl-cli>")
  add_dependencies(test_faults detnccl test_faults_job detnccl-cli)
  gtest_discover_tests(test_faults DISCOVERY_TIMEOUT 30
                       PROPERTIES TIMEOUT 300 RESOURCE_LOCK hostnccl_shm FIXTURES_REQUIRED hostnccl_suite)
endif()

if(TARGET hostnccl AND TARGET hostnccl-run AND TARGET detnccl AND TARGET detnccl-cli)
  add_executable(soak_job soak_job.cc)
  target_link_libraries(soak_job PRIVATE detnccl_abi detnccl_options detnccl_bootstrap hostnccl ${CMAKE_DL_LIBS})
  add_executable(test_soak test_soak.cc)
  # Under sanitizers the soak is shorter and its memory is not asserted flat (the allocator's quarantine grows).
  if(DETNCCL_SANITIZE)
    set(soak_sanitized 1)
  else()
    set(soak_sanitized 0)
  endif()
  target_link_libraries(test_soak PRIVATE nlohmann_json::nlohmann_json detnccl_abi detnccl_options GTest::gtest_main)
  target_compile_definitions(test_soak PRIVATE
    DETNCCL_SHIM_PATH="$<TARGET_FILE:detnccl>" DETNCCL_SOAK_JOB="$<TARGET_FILE:soak_job>"
    DETNCCL_LAUNCHER="$<TARGET_FILE:hostnccl-run>" DETNCCL_CLI="$<TARGET_FILE:detnccl-cli>"
    DETNCCL_SOAK_SANITIZED=${soak_sanitized})
  add_dependencies(test_soak detnccl soak_job hostnccl-run detnccl-cli)
  gtest_discover_tests(test_soak DISCOVERY_TIMEOUT 30
                       PROPERTIES TIMEOUT 900 LABELS soak RESOURCE_LOCK hostnccl_shm FIXTURES_REQUIRED hostnccl_suite)
endif()
