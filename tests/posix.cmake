# posix/: the shared POSIX helpers (file descriptors, write/read loops, getrandom, atomic file replacement).
add_executable(test_posix test_posix.cc)
target_link_libraries(test_posix PRIVATE detnccl_posix detnccl_options GTest::gtest_main)
gtest_discover_tests(test_posix PROPERTIES TIMEOUT 60)
