# PyTorch steps with no code change (interpose/python/autostep, docs/python.md): the rule and the torch hooks in
# Python (test_autostep.py), and PyTorch jobs on hostnccl under `detnccl run` (test_autostep.cc). Both run
# DETNCCL_TEST_PYTHON, a Python with Debian's python3-torch; without torch they fail, saying to run
# scripts/install-deps.sh.
set(DETNCCL_TEST_PYTHON /usr/bin/python3 CACHE FILEPATH "The Python, with PyTorch, that runs the PyTorch step tests")
set(autostep_dir ${PROJECT_BINARY_DIR}/share/detnccl/python/autostep)  # the build tree's copy (interpose/)
add_test(NAME autostep_python COMMAND ${DETNCCL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_autostep.py ${autostep_dir})
set_tests_properties(autostep_python PROPERTIES TIMEOUT 120 ENVIRONMENT PYTHONDONTWRITEBYTECODE=1)

if(TARGET hostnccl AND TARGET hostnccl-run)
  add_executable(test_autostep test_autostep.cc)
  target_link_libraries(test_autostep PRIVATE detnccl_abi detnccl_options nlohmann_json::nlohmann_json GTest::gtest_main)
  target_compile_definitions(test_autostep PRIVATE
    DETNCCL_TEST_PYTHON="${DETNCCL_TEST_PYTHON}" DETNCCL_AUTOSTEP_JOB="${CMAKE_CURRENT_SOURCE_DIR}/autostep_job.py"
    DETNCCL_AUTOSTEP_DIR="${autostep_dir}" DETNCCL_PYTHON_HELPER_DIR="${PROJECT_SOURCE_DIR}/interpose/python"
    DETNCCL_HOSTNCCL_LIBRARY="$<TARGET_FILE:hostnccl>" DETNCCL_LAUNCHER="$<TARGET_FILE:hostnccl-run>"
    DETNCCL_CLI="$<TARGET_FILE:detnccl-cli>" DETNCCL_SHIM_PATH="$<TARGET_FILE:detnccl>")
  add_dependencies(test_autostep detnccl hostnccl hostnccl-run detnccl-cli)
  # Under ASan (the asan preset), torch's own leaks at exit are not the shim's: lsan-torch.supp.
  gtest_discover_tests(test_autostep DISCOVERY_TIMEOUT 30
                       PROPERTIES TIMEOUT 300 RESOURCE_LOCK hostnccl_shm FIXTURES_REQUIRED hostnccl_suite
                                  ENVIRONMENT LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/lsan-torch.supp:print_suppressions=0)
endif()
