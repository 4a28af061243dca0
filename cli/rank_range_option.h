// detnccl command: the --ranks A-B option of a split diff or check (`--partial`, then `detnccl merge`).
#ifndef DETNCCL_CLI_RANK_RANGE_OPTION_H
#define DETNCCL_CLI_RANK_RANGE_OPTION_H

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>

#include "cli/analysis/run_diff.h"
#include "cli/commands.h"

namespace detnccl::cli {

// "A-B" or "A" (decimal ranks that fit in 32 bits, A <= B) as a range; throws BadArguments otherwise.
inline analysis::RankRange parse_rank_range(const std::string& text) {
  const auto number = [&](std::string_view digits, std::uint32_t& value) {
    const auto [stop, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    return !digits.empty() && stop == digits.data() + digits.size() && error == std::errc();
  };
  const std::size_t dash = text.find('-');
  analysis::RankRange range;
  const std::string_view view(text);
  const bool parsed = dash == std::string::npos
                          ? number(view, range.first) && number(view, range.last)
                          : number(view.substr(0, dash), range.first) && number(view.substr(dash + 1), range.last);
  if (!parsed || range.first > range.last) {
    throw BadArguments("--ranks '" + text.substr(0, 80) +
                       "' is not a rank range: A-B (0 <= A <= B < 2^32, both included) or one rank A");
  }
  return range;
}

}  // namespace detnccl::cli

#endif  // DETNCCL_CLI_RANK_RANGE_OPTION_H
