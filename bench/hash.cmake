# hash: host fingerprint throughput (bench_fingerprint), and the GPU check program (bench/gpu/) when CUDA is found.
add_executable(bench_fingerprint bench_fingerprint.cc)
target_link_libraries(bench_fingerprint PRIVATE detnccl_hash PkgConfig::XXHASH CLI11::CLI11 detnccl_options)

if(DETNCCL_HAVE_CUDA)
  # Also built standalone on the GPU machine by bench/gpu/run.sh (bench/gpu/CMakeLists.txt), without libxxhash.
  add_executable(gpu_fingerprint_check gpu/fingerprint_check.cu)
  target_link_libraries(gpu_fingerprint_check PRIVATE detnccl_hash_cuda detnccl_options)
  if(DETNCCL_BUILD_TESTS)
    # Everything but the kernels, on the CPU: the check's own reference and emulation agree on every case it uses.
    add_test(NAME gpu_fingerprint_check_dry_run COMMAND gpu_fingerprint_check --dry-run)
  endif()
endif()
