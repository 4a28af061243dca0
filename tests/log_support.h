// Tests that run a traced job read its per-rank logs back whole: one helper, shared by test_faults.cc and
// test_shim_process.cc.
#ifndef DETNCCL_TESTS_LOG_SUPPORT_H
#define DETNCCL_TESTS_LOG_SUPPORT_H

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "records/log_reader.h"
#include "records/record_writer.h"

namespace detnccl::test {

// A rank's log, read to its end.
struct Log {
  std::vector<records::CommunicatorRecord> communicators;
  std::vector<records::CallRecord> calls;
  records::LogEnd end;
  std::unique_ptr<records::LogReader> reader;  // owns the memory the spans point into
  std::string error;                           // the log could not be opened
};

inline Log read_log(const std::string& path) {
  Log log;
  auto opened = records::LogReader::open_file(path);
  if (!opened.reader) {
    log.error = opened.error;
    return log;
  }
  records::LogRecord record;
  while (opened.reader->next(record)) {
    if (auto* call = std::get_if<records::CallRecord>(&record.record)) log.calls.push_back(*call);
    if (auto* comm = std::get_if<records::CommunicatorRecord>(&record.record)) log.communicators.push_back(*comm);
  }
  log.end = opened.reader->end();
  log.reader = std::move(opened.reader);
  return log;
}

// DIR/RUN/rank-NNNNN.dnc
inline std::string rank_log(const std::string& run_dir, std::uint32_t rank) {
  return run_dir + "/" + records::rank_log_file_name(rank);
}

}  // namespace detnccl::test

#endif  // DETNCCL_TESTS_LOG_SUPPORT_H
