# The GPU validation (bench/gpu/run.sh, docs/gpu-validation.md): the job it runs under the shim, and the script's
# dry run as a test. CUDA builds only; the check programs themselves are in hash.cmake, shim.cmake and
# collectives.cmake.
if(DETNCCL_HAVE_CUDA AND TARGET hostnccl)
  # Linked against hostnccl only for the soname libnccl.so.2: run.sh picks the NCCL at run time (LD_LIBRARY_PATH),
  # the real one (PyTorch's) or hostnccl.
  add_executable(gpu_traced_job gpu/traced_job.cc)
  target_link_libraries(gpu_traced_job PRIVATE detnccl_abi detnccl_options hostnccl CUDA::cudart_static)
  if(DETNCCL_BUILD_TESTS)
    # Every part's CPU side: the check programs' dry runs, the traced job over hostnccl with host buffers (shim, log,
    # `detnccl dump` and the comparison), 4 ranks through hostnccl, and the PyTorch script's syntax.
    add_test(NAME gpu_run_dry_run COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/run.sh --dry-run --build-dir ${CMAKE_BINARY_DIR})
    set_tests_properties(gpu_run_dry_run PROPERTIES TIMEOUT 300 ENVIRONMENT "OUT=${CMAKE_CURRENT_BINARY_DIR}/gpu-dry-run")
  endif()
endif()
