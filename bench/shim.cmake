# The shim's per-call cost (runs its modes in child processes with the shim preloaded).
if(TARGET hostnccl)
  add_executable(bench_shim bench_shim.cc)
  target_link_libraries(bench_shim PRIVATE detnccl_abi detnccl_options hostnccl)
  target_compile_definitions(bench_shim PRIVATE DETNCCL_SHIM_PATH="$<TARGET_FILE:detnccl>")
  add_dependencies(bench_shim detnccl)
endif()

if(DETNCCL_HAVE_CUDA)
  # The shim's device fingerprints on a GPU; also built standalone on the GPU machine by bench/gpu/run.sh.
  add_executable(gpu_shim_check gpu/shim_check.cu)
  target_link_libraries(gpu_shim_check PRIVATE detnccl_device_fingerprints detnccl_cuda_driver detnccl_options
                                               ${CMAKE_DL_LIBS} Threads::Threads)
  if(DETNCCL_BUILD_TESTS)
    # Without a GPU: the unavailable path (no driver loaded, none loaded by us) and the plan arithmetic.
    add_test(NAME gpu_shim_check_dry_run COMMAND gpu_shim_check --dry-run)
  endif()
endif()
