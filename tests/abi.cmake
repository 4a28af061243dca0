# ABI agreement with the real nccl.h, when one is found (it needs cuda_runtime.h too, but no CUDA compiler).
if(DETNCCL_REAL_NCCL_INCLUDE_DIR AND DETNCCL_CUDA_INCLUDE_DIR)
  add_executable(test_abi test_abi.cc)
  target_include_directories(test_abi PRIVATE ${DETNCCL_REAL_NCCL_INCLUDE_DIR} ${DETNCCL_CUDA_INCLUDE_DIR})
  target_compile_definitions(test_abi PRIVATE DETNCCL_REAL_NCCL_H="${DETNCCL_REAL_NCCL_INCLUDE_DIR}/nccl.h")
  if(DETNCCL_REAL_NCCL_LIBRARY)
    target_compile_definitions(test_abi PRIVATE DETNCCL_REAL_NCCL_LIBRARY="${DETNCCL_REAL_NCCL_LIBRARY}")
  endif()
  target_link_libraries(test_abi PRIVATE ${CMAKE_DL_LIBS})
  target_link_libraries(test_abi PRIVATE detnccl_abi detnccl_options GTest::gtest_main)
  gtest_discover_tests(test_abi)
else()
  message(STATUS "No real nccl.h found: the ABI agreement test is not built")
endif()

# The op-semantics and datatype tables (abi/traced_ops.h, abi/nccl_datatypes.h) against what is generated from them:
# the shim's describe_* functions (compiled in), the log's op names, the CLI's buffer sizes, the in-place rule.
add_executable(test_traced_ops test_traced_ops.cc ${PROJECT_SOURCE_DIR}/interpose/call_shape.cc)
target_link_libraries(test_traced_ops PRIVATE detnccl_analysis detnccl_records detnccl_config detnccl_abi detnccl_options
                                              GTest::gtest_main)
target_compile_definitions(test_traced_ops PRIVATE DETNCCL_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
gtest_discover_tests(test_traced_ops)
