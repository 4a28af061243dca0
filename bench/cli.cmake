# cli: throughput of `detnccl diff` and `check` on synthetic runs (records per second, peak RSS, ratio to a bare read).
add_executable(bench_diff bench_diff.cc)
target_link_libraries(bench_diff PRIVATE detnccl_analysis detnccl_records CLI11::CLI11 detnccl_options)
