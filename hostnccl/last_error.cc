#include <cstdio>
#include <cstdlib>
#include <string>

#include "hostnccl/comm.h"

namespace hostnccl {
namespace {
// Thread-local, like NCCL's own last-error buffer: the pointer ncclGetLastError returns stays valid and unchanged
// while other threads fail.
thread_local std::string thread_last_error;
}  // namespace

void set_last_error(const std::string& text) {
  thread_last_error = text;
  if (const char* debug = std::getenv("NCCL_DEBUG"); debug != nullptr && *debug != '\0') {
    std::fprintf(stderr, "hostnccl WARN %s\n", text.c_str());
  }
}

const char* last_error() { return thread_last_error.c_str(); }

}  // namespace hostnccl
