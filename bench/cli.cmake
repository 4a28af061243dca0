# cli: throughput of `detnccl diff` and `check` on synthetic runs (records per second, peak RSS, ratio to a bare read).
add_executable(bench_diff bench_diff.cc)
target_link_libraries(bench_diff PRIVATE detnccl_analysis detnccl_records CLI11::CLI11 detnccl_options)

# The headline case: two runs of 2,432 ranks x 800 steps at DETNCCL_TRACE=steps, one planted divergence, diff's time.
add_executable(bench_scale bench_scale.cc)
target_link_libraries(bench_scale PRIVATE detnccl_analysis detnccl_records CLI11::CLI11 detnccl_options)

# What numbering steps from the call pattern costs per call (steps/), against computing the call's signature alone.
add_executable(bench_steps bench_steps.cc)
target_link_libraries(bench_steps PRIVATE detnccl_steps CLI11::CLI11 detnccl_options)
