#include "launcher/line_prefixer.h"

#include <utility>

namespace detnccl::launcher {

LinePrefixer::LinePrefixer(std::string prefix, Sink sink, std::size_t max_pending_bytes)
    : prefix_(std::move(prefix)), sink_(std::move(sink)), max_pending_bytes_(max_pending_bytes) {}

void LinePrefixer::consume(std::string_view bytes) {
  // RATIONALE: all lines completed by one read go out in one sink call (one write(2)), so lines from different
  // ranks interleave only at line boundaries and a chatty rank costs one system call per read, not per line.
  std::string out;
  while (!bytes.empty()) {
    const std::size_t newline = bytes.find('\n');
    if (newline == std::string_view::npos) {
      pending_.append(bytes);
      break;
    }
    out += prefix_;
    out += pending_;
    out.append(bytes.substr(0, newline + 1));
    pending_.clear();
    bytes.remove_prefix(newline + 1);
  }
  if (pending_.size() > max_pending_bytes_) {
    out += prefix_;
    out += pending_;
    out += '\n';
    pending_.clear();
  }
  if (!out.empty()) sink_(out);
}

void LinePrefixer::finish() {
  if (pending_.empty()) return;
  std::string out = prefix_ + pending_ + '\n';
  pending_.clear();
  sink_(out);
}

}  // namespace detnccl::launcher
