# collectives: deterministic AllReduce against hostnccl's own, 4 and 8 forked ranks (needs the hostnccl library).
if(TARGET hostnccl AND TARGET detnccl_collectives)
  add_executable(bench_deterministic bench_deterministic.cc)
  target_link_libraries(bench_deterministic PRIVATE detnccl_collectives hostnccl detnccl_abi detnccl_options)
endif()

if(DETNCCL_HAVE_CUDA AND TARGET detnccl_collectives)
  # The GPU check: CUDA kernels bitwise equal to the CPU backend, and their throughput. Runs only on a GPU machine;
  # its dry run (CPU side) is a test everywhere.
  add_executable(bench_deterministic_gpu bench_deterministic_gpu.cu)
  target_link_libraries(bench_deterministic_gpu PRIVATE detnccl_collectives detnccl_options CUDA::cudart_static)
  if(DETNCCL_BUILD_TESTS)
    add_test(NAME bench_deterministic_gpu_dry_run COMMAND bench_deterministic_gpu --dry-run)
  endif()
endif()
