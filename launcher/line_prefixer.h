// hostnccl-run: turns one child stream (a rank's stdout or stderr) into whole lines that start with "[rank R] ".
#ifndef DETNCCL_LAUNCHER_LINE_PREFIXER_H
#define DETNCCL_LAUNCHER_LINE_PREFIXER_H

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace detnccl::launcher {

// Splits a byte stream into lines and hands each complete line, prefixed, to a sink. Bytes after the last newline
// wait for the rest of their line. A partial line longer than `max_pending_bytes` is emitted early (with a newline
// added) so that a child printing without newlines cannot grow the launcher's memory without bound.
class LinePrefixer {
 public:
  // Receives text ready to write: one or more whole lines, each starting with the prefix and ending with '\n'.
  using Sink = std::function<void(std::string_view)>;

  // Lines get `prefix` in front (e.g. "[rank 3] ") and go to `sink`.
  LinePrefixer(std::string prefix, Sink sink, std::size_t max_pending_bytes = 64 * 1024);

  // Adds bytes read from the child; every line completed by them is emitted in one sink call.
  void consume(std::string_view bytes);

  // Emits a trailing partial line, if any, with a newline added (called once the stream has ended).
  void finish();

  // The number of bytes held back as the start of an unfinished line.
  std::size_t pending_bytes() const { return pending_.size(); }

 private:
  std::string prefix_;
  Sink sink_;
  std::size_t max_pending_bytes_;
  std::string pending_;  // the unfinished line (without prefix)
};

}  // namespace detnccl::launcher

#endif  // DETNCCL_LAUNCHER_LINE_PREFIXER_H
