# records: RecordWriter::append per meta record, with and without pages populated ahead (bench_record_writer).
add_executable(bench_record_writer bench_record_writer.cc)
target_link_libraries(bench_record_writer PRIVATE detnccl_records CLI11::CLI11 detnccl_options)
