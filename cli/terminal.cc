// detnccl command: colour and progress (see terminal.h).
#include "cli/terminal.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace detnccl::cli {

Style Style::for_stdout() {
  Style style;
  const char* no_color = std::getenv("NO_COLOR");
  style.enabled_ = isatty(STDOUT_FILENO) == 1 && (no_color == nullptr || *no_color == '\0');
  return style;
}

std::string Style::wrap(std::string_view code, std::string_view text) const {
  if (!enabled_) return std::string(text);
  // RATIONALE: appended piece by piece; GCC 12 warns falsely (-Wrestrict) about chained operator+ here.
  std::string out;
  out.reserve(code.size() + text.size() + 4);
  out.append(code);
  out.append(text);
  out.append("\033[0m");
  return out;
}

bool stderr_shares_stdout() {
  struct stat out {};
  struct stat err {};
  if (fstat(STDOUT_FILENO, &out) != 0 || fstat(STDERR_FILENO, &err) != 0) return false;
  return out.st_dev == err.st_dev && out.st_ino == err.st_ino;
}

Progress::Progress(std::string what, std::size_t total, std::string unit, const std::atomic<std::size_t>& done,
                   double delay_seconds)
    : what_(std::move(what)), total_(total), unit_(std::move(unit)), done_(done), delay_seconds_(delay_seconds) {
  thread_ = std::thread([this] { loop(); });
}

Progress::~Progress() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Progress::loop() {
  const bool terminal = isatty(STDERR_FILENO) == 1;
  std::unique_lock<std::mutex> lock(mutex_);
  if (wake_.wait_for(lock, std::chrono::duration<double>(delay_seconds_), [this] { return stop_; })) return;
  // RATIONALE: off a terminal (a CI log), one line every few seconds is enough and keeps logs readable.
  const auto period = terminal ? std::chrono::milliseconds(500) : std::chrono::milliseconds(5000);
  do {
    if (total_ > 0) {
      std::fprintf(stderr, "%s%s: %zu/%zu %s%s", terminal ? "\r" : "", what_.c_str(), done_.load(), total_,
                   unit_.c_str(), terminal ? "" : "\n");
    } else {
      std::fprintf(stderr, "%s%s: %zu %s%s", terminal ? "\r" : "", what_.c_str(), done_.load(), unit_.c_str(),
                   terminal ? "" : "\n");
    }
    std::fflush(stderr);
    printed_ = true;
  } while (!wake_.wait_for(lock, period, [this] { return stop_; }));
  if (printed_ && terminal) std::fprintf(stderr, "\r\033[K");
}

std::string TextTable::render() const {
  std::vector<std::size_t> widths;
  for (const Column& column : columns_) widths.push_back(column.width);
  for (const auto& row : rows_) {
    for (std::size_t i = 0; i < row.size() && i < widths.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows_) {
    std::string line;
    for (std::size_t i = 0; i < columns_.size(); ++i) {
      const std::string& cell = i < row.size() ? row[i] : std::string();
      const std::string padding(widths[i] - cell.size(), ' ');
      line.append(columns_[i].before);
      if (columns_[i].right) line.append(padding);
      line.append(cell);
      if (!columns_[i].right) line.append(padding);
    }
    line.erase(line.find_last_not_of(' ') + 1);
    out.append(line);
    out.push_back('\n');
  }
  return out;
}

}  // namespace detnccl::cli
