// detnccl command: what the command does for a human at a terminal — colour on stdout (only on a terminal, and
// never when NO_COLOR is set), progress lines on stderr for commands that run longer than a moment, and text tables
// whose columns stay in line whatever the numbers.
#ifndef DETNCCL_CLI_TERMINAL_H
#define DETNCCL_CLI_TERMINAL_H

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace detnccl::cli {

// ANSI colours for stdout, or nothing.
class Style {
 public:
  // Colour when stdout is a terminal and NO_COLOR is unset or empty.
  static Style for_stdout();

  // The text wrapped in the colour's escape codes, or the text itself when colour is off.
  std::string bad(std::string_view text) const { return wrap("\033[1;31m", text); }
  std::string good(std::string_view text) const { return wrap("\033[1;32m", text); }
  std::string warn(std::string_view text) const { return wrap("\033[1;33m", text); }
  std::string bold(std::string_view text) const { return wrap("\033[1m", text); }
  std::string dim(std::string_view text) const { return wrap("\033[2m", text); }

 private:
  std::string wrap(std::string_view code, std::string_view text) const;
  bool enabled_ = false;
};

// Whether stderr and stdout are one file (the same terminal, or `2>&1`): a progress line on stderr would then land
// in the middle of what stdout prints, so a command that streams its output shows none.
bool stderr_shares_stdout();

// Prints "<what>: <done>/<total> <unit>" on stderr every half second once `delay` has passed, until destroyed;
// nothing at all when the work finishes sooner. On a terminal the line is rewritten in place.
class Progress {
 public:
  Progress(std::string what, std::size_t total, std::string unit, const std::atomic<std::size_t>& done,
           double delay_seconds = 1.5);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

 private:
  void loop();
  std::string what_;
  std::size_t total_;
  std::string unit_;
  const std::atomic<std::size_t>& done_;
  double delay_seconds_;
  bool printed_ = false;
  bool stop_ = false;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::thread thread_;
};

// Rows of cells in columns as wide as their widest cell, never narrower than the width each column is given, so
// that a large number (a rank above 999999, 10^12 calls, a long step range) widens its column for every row rather
// than pushing its own row out of line. Cells must hold no escape codes (they would count as width).
class TextTable {
 public:
  struct Column {
    std::size_t width = 0;      // the narrowest the column may be
    bool right = false;         // right-aligned (numbers), else left-aligned
    std::string before = "  ";  // printed before the cell: the gap, or a label ("  rank ")
  };
  explicit TextTable(std::vector<Column> columns) : columns_(std::move(columns)) {}

  // A row: one cell per column (missing cells are empty).
  void add_row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }

  // Every row, one line each ending in '\n', without trailing spaces.
  std::string render() const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace detnccl::cli

#endif  // DETNCCL_CLI_TERMINAL_H
