# The LD_PRELOAD shim: exported symbols, transparency over the real NCCL and over hostnccl.
add_executable(test_interpose test_interpose.cc)
target_link_libraries(test_interpose PRIVATE detnccl_abi detnccl_options detnccl_config GTest::gtest_main)
target_compile_definitions(test_interpose PRIVATE
  DETNCCL_SHIM_PATH="$<TARGET_FILE:detnccl>"
  DETNCCL_ABI_TABLE_H="${PROJECT_SOURCE_DIR}/abi/nccl_api_table.h")
add_dependencies(test_interpose detnccl)

if(DETNCCL_REAL_NCCL_LIBRARY)
  # The probe links the real libnccl.so.2 by path (no GPU needed for the calls it makes).
  add_executable(interpose_probe_real interpose_probe.cc)
  target_link_libraries(interpose_probe_real PRIVATE detnccl_abi ${DETNCCL_REAL_NCCL_LIBRARY})
  get_filename_component(real_nccl_dir ${DETNCCL_REAL_NCCL_LIBRARY} DIRECTORY)
  set_target_properties(interpose_probe_real PROPERTIES BUILD_RPATH ${real_nccl_dir})
  target_compile_definitions(test_interpose PRIVATE
    DETNCCL_PROBE_REAL="$<TARGET_FILE:interpose_probe_real>" DETNCCL_REAL_NCCL_LIBRARY="${DETNCCL_REAL_NCCL_LIBRARY}")
  add_dependencies(test_interpose interpose_probe_real)
endif()
if(TARGET hostnccl)
  add_executable(interpose_probe_host interpose_probe.cc)
  target_link_libraries(interpose_probe_host PRIVATE detnccl_abi hostnccl)
  target_compile_definitions(test_interpose PRIVATE DETNCCL_PROBE_HOST="$<TARGET_FILE:interpose_probe_host>")
  add_dependencies(test_interpose interpose_probe_host)
endif()
gtest_discover_tests(test_interpose PROPERTIES RESOURCE_LOCK hostnccl_shm FIXTURES_REQUIRED hostnccl_suite)

# End-to-end tracing over hostnccl: trace_job under hostnccl-run with the shim preloaded.
if(TARGET hostnccl AND TARGET hostnccl-run)
  add_executable(trace_job trace_job.cc)
  target_link_libraries(trace_job PRIVATE detnccl_abi detnccl_options detnccl_bootstrap hostnccl ${CMAKE_DL_LIBS})
  add_executable(trace_threads_job trace_threads_job.cc)
  target_link_libraries(trace_threads_job PRIVATE detnccl_abi detnccl_options hostnccl Threads::Threads)
  add_executable(api_tour_job api_tour_job.cc)
  target_link_libraries(api_tour_job PRIVATE detnccl_abi detnccl_options detnccl_bootstrap hostnccl)
  add_executable(late_split_job late_split_job.cc)
  target_link_libraries(late_split_job PRIVATE detnccl_abi detnccl_options detnccl_bootstrap hostnccl)
  add_library(simulate_end_stub SHARED simulate_end_stub.cc)
  target_link_libraries(simulate_end_stub PRIVATE detnccl_abi ${CMAKE_DL_LIBS})
  add_executable(test_shim_trace test_shim_trace.cc)
  target_link_libraries(test_shim_trace PRIVATE detnccl_abi detnccl_options detnccl_hash detnccl_records
                                                GTest::gtest_main)
  target_compile_definitions(test_shim_trace PRIVATE
    DETNCCL_SHIM_PATH="$<TARGET_FILE:detnccl>" DETNCCL_TRACE_JOB="$<TARGET_FILE:trace_job>"
    DETNCCL_LAUNCHER="$<TARGET_FILE:hostnccl-run>" DETNCCL_THREADS_JOB="$<TARGET_FILE:trace_threads_job>"
    DETNCCL_API_TOUR_JOB="$<TARGET_FILE:api_tour_job>" DETNCCL_LATE_SPLIT_JOB="$<TARGET_FILE:late_split_job>"
    DETNCCL_HOSTNCCL_LIBRARY="$<TARGET_FILE:hostnccl>" DETNCCL_STEP_HELPER_JOB="${CMAKE_CURRENT_SOURCE_DIR}/step_helper_job.py"
    DETNCCL_PYTHON_HELPER_DIR="${PROJECT_SOURCE_DIR}/interpose/python")
  target_compile_definitions(test_shim_trace PRIVATE DETNCCL_SIMULATE_END_STUB="$<TARGET_FILE:simulate_end_stub>")
  add_dependencies(test_shim_trace detnccl trace_job trace_threads_job api_tour_job late_split_job hostnccl-run
                   detnccl-cli simulate_end_stub)
  target_compile_definitions(test_shim_trace PRIVATE DETNCCL_CLI="$<TARGET_FILE:detnccl-cli>")
  gtest_discover_tests(test_shim_trace DISCOVERY_TIMEOUT 30
                       PROPERTIES TIMEOUT 300 RESOURCE_LOCK hostnccl_shm FIXTURES_REQUIRED hostnccl_suite)

  # The shim over a process's life: fork() and the tracer's own failures (test_shim_process.cc).
  add_executable(shim_process_job shim_process_job.cc)
  target_link_libraries(shim_process_job PRIVATE detnccl_abi detnccl_options detnccl_bootstrap hostnccl ${CMAKE_DL_LIBS})
  add_executable(test_shim_process test_shim_process.cc)
  target_link_libraries(test_shim_process PRIVATE detnccl_records detnccl_options GTest::gtest_main)
  # The stand-in CUDA driver (fake_cuda_driver, tests/CMakeLists.txt) fails to say where buffers live.
  target_compile_definitions(test_shim_process PRIVATE
    DETNCCL_SHIM_PATH="$<TARGET_FILE:detnccl>" DETNCCL_SHIM_PROCESS_JOB="$<TARGET_FILE:shim_process_job>"
    DETNCCL_FAKE_CUDA_DRIVER="$<TARGET_FILE:fake_cuda_driver>")
  # A build with device code needs a driver of its CUDA runtime's major release (cuda/driver_version.h).
  if(DETNCCL_HAVE_CUDA)
    target_compile_definitions(test_shim_process PRIVATE DETNCCL_TEST_HAVE_CUDA=1)
  endif()
  add_dependencies(test_shim_process detnccl shim_process_job fake_cuda_driver)
  gtest_discover_tests(test_shim_process DISCOVERY_TIMEOUT 30
                       PROPERTIES TIMEOUT 300 RESOURCE_LOCK hostnccl_shm FIXTURES_REQUIRED hostnccl_suite)
endif()
