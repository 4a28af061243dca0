# Tests of config/: every DETNCCL_* variable, valid and invalid values, and docs/configuration.md kept in step.
add_executable(test_config test_config.cc)
target_link_libraries(test_config PRIVATE detnccl_config detnccl_options GTest::gtest_main)
target_compile_definitions(test_config PRIVATE DETNCCL_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
gtest_discover_tests(test_config)
