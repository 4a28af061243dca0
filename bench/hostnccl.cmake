# hostnccl's AllReduce throughput beside memcpy (4 ranks as forked processes). Needs the hostnccl library.
if(TARGET hostnccl)
  add_executable(bench_hostnccl_allreduce bench_hostnccl_allreduce.cc)
  target_link_libraries(bench_hostnccl_allreduce PRIVATE hostnccl detnccl_bootstrap benchmark::benchmark
                                                         detnccl_options)
endif()
