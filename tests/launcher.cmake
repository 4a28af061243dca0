# hostnccl-run and the unique-id bootstrap helper (launcher/). The tests run the launcher binary itself.
add_executable(test_launcher test_launcher.cc)
target_link_libraries(test_launcher PRIVATE hostnccl_launcher_core detnccl_bootstrap detnccl_options
                                            GTest::gtest_main)
# The scripts' tests copy scripts/demo.sh and scripts/test.sh from the source tree.
target_compile_definitions(test_launcher PRIVATE HOSTNCCL_RUN_PATH="$<TARGET_FILE:hostnccl-run>"
                                                 DETNCCL_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
add_dependencies(test_launcher hostnccl-run)

# An NCCL job over hostnccl for the launcher to run, once the hostnccl library exists.
if(TARGET hostnccl)
  add_executable(launcher_allreduce_job launcher_allreduce_job.cc)
  target_link_libraries(launcher_allreduce_job PRIVATE detnccl_bootstrap detnccl_posix hostnccl detnccl_options)
  target_compile_definitions(test_launcher PRIVATE LAUNCHER_ALLREDUCE_JOB_PATH="$<TARGET_FILE:launcher_allreduce_job>")
  add_dependencies(test_launcher launcher_allreduce_job)
endif()

gtest_discover_tests(test_launcher PROPERTIES TIMEOUT 120 RESOURCE_LOCK hostnccl_shm FIXTURES_REQUIRED hostnccl_suite)
