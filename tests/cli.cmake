# The `detnccl` command: its analysis on synthetic logs (test_cli_analysis), and the binary end to end on logs the
# shim wrote over hostnccl (test_cli).
add_executable(test_cli_analysis test_cli_analysis.cc)
target_link_libraries(test_cli_analysis PRIVATE detnccl_analysis detnccl_records detnccl_config detnccl_options
                                                GTest::gtest_main)
gtest_discover_tests(test_cli_analysis)

if(TARGET hostnccl AND TARGET hostnccl-run AND TARGET trace_job)
  add_executable(test_cli test_cli.cc)
  target_link_libraries(test_cli PRIVATE detnccl_records nlohmann_json::nlohmann_json detnccl_options
                                         GTest::gtest_main)
  target_compile_definitions(test_cli PRIVATE
    DETNCCL_SHIM_PATH="$<TARGET_FILE:detnccl>" DETNCCL_TRACE_JOB="$<TARGET_FILE:trace_job>"
    DETNCCL_LAUNCHER="$<TARGET_FILE:hostnccl-run>" DETNCCL_CLI="$<TARGET_FILE:detnccl-cli>"
    DETNCCL_SOURCE_DIR="${PROJECT_SOURCE_DIR}" DETNCCL_CMAKE_VERSION="${PROJECT_VERSION}")
  add_dependencies(test_cli detnccl trace_job hostnccl-run detnccl-cli detnccl-fingerprint)
  gtest_discover_tests(test_cli DISCOVERY_TIMEOUT 30
                       PROPERTIES TIMEOUT 300 RESOURCE_LOCK hostnccl_shm FIXTURES_REQUIRED hostnccl_suite)

  # `detnccl run` end to end: around and inside hostnccl-run, its exit statuses, PYTHONPATH, and a tree installed
  # with `cmake --install` into a temporary prefix (so it needs everything that is installed built), where a PyTorch
  # job (DETNCCL_TEST_PYTHON, autostep.cmake) gets its steps from its optimizer.
  add_executable(test_run_command test_run_command.cc)
  target_link_libraries(test_run_command PRIVATE detnccl_abi detnccl_options detnccl_hash detnccl_records
                                                 GTest::gtest_main)
  target_compile_definitions(test_run_command PRIVATE
    DETNCCL_SHIM_PATH="$<TARGET_FILE:detnccl>" DETNCCL_TRACE_JOB="$<TARGET_FILE:trace_job>"
    DETNCCL_LAUNCHER="$<TARGET_FILE:hostnccl-run>" DETNCCL_CLI="$<TARGET_FILE:detnccl-cli>"
    DETNCCL_CMAKE_COMMAND="${CMAKE_COMMAND}" DETNCCL_BINARY_DIR="${PROJECT_BINARY_DIR}"
    DETNCCL_INSTALL_LIBDIR="${CMAKE_INSTALL_LIBDIR}"
    DETNCCL_AUTOSTEP_DIR="${PROJECT_BINARY_DIR}/share/detnccl/python/autostep"
    DETNCCL_TEST_PYTHON="${DETNCCL_TEST_PYTHON}" DETNCCL_AUTOSTEP_JOB="${CMAKE_CURRENT_SOURCE_DIR}/autostep_job.py")
  add_dependencies(test_run_command detnccl trace_job hostnccl hostnccl-run detnccl-cli detnccl-fingerprint)
  gtest_discover_tests(test_run_command DISCOVERY_TIMEOUT 30
                       PROPERTIES TIMEOUT 300 RESOURCE_LOCK hostnccl_shm FIXTURES_REQUIRED hostnccl_suite
                                  ENVIRONMENT LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/lsan-torch.supp:print_suppressions=0)
endif()
