# The shim's per-call cost (runs its modes in child processes with the shim preloaded).
if(TARGET hostnccl)
  add_executable(bench_shim bench_shim.cc)
  target_link_libraries(bench_shim PRIVATE detnccl_abi detnccl_options hostnccl)
  target_compile_definitions(bench_shim PRIVATE DETNCCL_SHIM_PATH="$<TARGET_FILE:detnccl>")
  add_dependencies(bench_shim detnccl)
endif()
