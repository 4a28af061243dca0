/* hostnccl: the one table of HOSTNCCL_* environment variables, read by the library (libnccl.so.2) and by
 * hostnccl-run's bootstrap helper. Header-only, so that the helper and the launcher need no link dependency on the
 * library.
 *
 * Every HOSTNCCL_* variable is one row; read_setting<Setting::kX>() is the only code that reads one (with the row's
 * kind, so a variable has exactly one parser), and the table in docs/hostnccl.md is checked against the rows
 * (tests/test_hostnccl_settings.cc). Adding a variable: a row here (and a kind below if none fits), then call
 * read_setting for it where it is used; the test asks for sample values of the new row.
 *
 * Row: X(id, name, kind, default_text, accepted_text, description)
 *   id             the enumerator in hostnccl::Setting
 *   name           the variable's name (always HOSTNCCL_...)
 *   kind           how the value is parsed: a struct in hostnccl::setting_kinds (its Value is what it yields)
 *   default_text   what applies when it is unset or empty, in words (docs/hostnccl.md)
 *   accepted_text  what a malformed value's message asks for: "NAME='value' is not valid: use <accepted_text>"
 *   description    the docs/hostnccl.md table's meaning column
 *
 * An empty value means the same as an unset variable.
 */
#ifndef DETNCCL_HOSTNCCL_SETTINGS_H
#define DETNCCL_HOSTNCCL_SETTINGS_H

#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "hostnccl/shm_names.h"

#define HOSTNCCL_SETTINGS(X)                                                                                          \
  X(kTimeoutS, "HOSTNCCL_TIMEOUT_S", seconds, "60", "a number of seconds >= 0 (0 waits forever)",                     \
    "seconds a call may go without any progress before failing with `ncclSystemError` (0: wait forever; a finite "    \
    "number >= 0, above 10^9 counts as 10^9). A group uses the largest timeout of its communicators. hostnccl-run's " \
    "bootstrap helper reads it the same way for how long ranks wait for the unique id (`docs/launcher.md`).")         \
  X(kReduceOrder, "HOSTNCCL_REDUCE_ORDER", reduce_order, "`arrival`", "'arrival' or 'rank'",                          \
    "`arrival`: contributions are added in the order the ranks arrive; `rank`: in rank order 0..n-1.")                \
  X(kSlotBytes, "HOSTNCCL_SLOT_BYTES", buffer_bytes, "4194304", "a byte count from 4096 to 2^40",                     \
    "staging slot per rank for collectives (>= 4096, rounded down to 64 bytes).")                                     \
  X(kRingBytes, "HOSTNCCL_RING_BYTES", buffer_bytes, "1048576", "a byte count from 4096 to 2^40",                     \
    "ring buffer per ordered rank pair for send/recv (>= 4096).")                                                     \
  X(kJobTag, "HOSTNCCL_JOB_TAG", job_tag, "unset",                                                                    \
    "1 to 32 characters from 0-9 and a-z (hostnccl-run sets it per job)",                                             \
    "a tag put into the names of the job's shared memory (1 to 32 characters from `0-9a-z`); `hostnccl-run` sets a "  \
    "fresh one per job (see Shared memory). Read by `ncclGetUniqueId` (and `ncclCommInitAll`), which fail with "      \
    "`ncclInvalidArgument` on an invalid tag.")                                                                       \
  X(kIdFile, "HOSTNCCL_ID_FILE", path, "unset", "a file path that all ranks share",                                   \
    "the file through which the ranks of a job share the unique id; `hostnccl-run` sets it (`docs/launcher.md`). "    \
    "Read by hostnccl-run's bootstrap helper, not by the library.")                                                   \
  X(kCorrupt, "HOSTNCCL_CORRUPT", corruption, "unset",                                                                \
    "rank:R,call:S,element:E,factor:F (each key once, any order; R, S, E whole numbers >= 0, F a finite number)",     \
    "a test fault (see Fault injection): `rank:R,call:S,element:E,factor:F` multiplies element E of the output of "   \
    "the process's call number S (0-based, counting its traced calls: the shim's `seq`) by F after the reduction, "   \
    "on communicator rank R; integers get F added. Reductions only (AllReduce, ReduceScatter, Reduce at the root).")

namespace hostnccl {

// One enumerator per row of HOSTNCCL_SETTINGS, in table order.
enum class Setting : std::uint8_t {
#define HOSTNCCL_SETTING_ENUMERATOR(id, name, kind, default_text, accepted_text, description) id,
  HOSTNCCL_SETTINGS(HOSTNCCL_SETTING_ENUMERATOR)
#undef HOSTNCCL_SETTING_ENUMERATOR
};

// What the table says about one variable.
struct SettingInfo {
  Setting id;
  const char* name;
  const char* default_text;
  const char* accepted_text;
  const char* description;
};

// Every HOSTNCCL_* variable, in table order (indexed by Setting).
inline constexpr SettingInfo kSettings[] = {
#define HOSTNCCL_SETTING_INFO(id, name, kind, default_text, accepted_text, description) \
  {Setting::id, name, default_text, accepted_text, description},
    HOSTNCCL_SETTINGS(HOSTNCCL_SETTING_INFO)
#undef HOSTNCCL_SETTING_INFO
};

// The table row of one variable.
constexpr const SettingInfo& setting_info(Setting id) { return kSettings[static_cast<std::size_t>(id)]; }

// HOSTNCCL_REDUCE_ORDER: the order contributions are added in.
enum class ReduceOrder : int { kArrival = 0, kRank = 1 };

inline constexpr double kDefaultTimeoutSeconds = 60.0;
// The longest wait honoured (about 31 years); a longer one waits this long (as hostnccl-run's --timeout does).
inline constexpr double kMaxTimeoutSeconds = 1e9;
// Slot and ring sizes: at least this, at most 2^40, rounded down to 64 bytes (slots stay cache-line aligned).
inline constexpr std::size_t kMinBufferBytes = 4096;
static_assert(kMaxJobTagLength == 32, "HOSTNCCL_JOB_TAG's accepted_text says 32 characters");

// HOSTNCCL_CORRUPT: the one element a test fault changes (docs/hostnccl.md, Fault injection).
struct Corruption {
  bool enabled = false;
  int rank = 0;               // the communicator rank whose output changes
  std::uint64_t call = 0;     // the process's traced call number (0-based), as the shim's seq
  std::uint64_t element = 0;  // the element of that rank's output
  double factor = 1;          // floating: multiplied by it; integers: it is added (truncated toward zero)
  bool operator==(const Corruption&) const = default;
};

// The kinds of value (the table's kind column): parse(text, out) reads a non-empty value into *out, or returns false
// and leaves *out alone.
namespace setting_kinds {

struct seconds {  // a finite number >= 0; above kMaxTimeoutSeconds counts as kMaxTimeoutSeconds
  using Value = double;
  static bool parse(const char* text, double* out) {
    char* end = nullptr;
    const double value = std::strtod(text, &end);
    if (end == text || *end != '\0' || !std::isfinite(value) || value < 0) return false;
    *out = std::fmin(value, kMaxTimeoutSeconds);
    return true;
  }
};

struct reduce_order {  // "arrival" or "rank" (exactly)
  using Value = ReduceOrder;
  static bool parse(const char* text, ReduceOrder* out) {
    const std::string_view value = text;
    if (value != "arrival" && value != "rank") return false;
    *out = value == "rank" ? ReduceOrder::kRank : ReduceOrder::kArrival;
    return true;
  }
};

struct buffer_bytes {  // decimal, kMinBufferBytes to 2^40, rounded down to 64
  using Value = std::size_t;
  static bool parse(const char* text, std::size_t* out) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long value = std::strtoull(text, &end, 10);
    if (errno != 0 || *end != '\0' || text[0] == '-' || value < kMinBufferBytes || value > (1ull << 40)) return false;
    *out = static_cast<std::size_t>(value) & ~std::size_t{63};
    return true;
  }
};

struct job_tag {  // is_valid_job_tag (shm_names.h); the view points into the environment
  using Value = std::string_view;
  static bool parse(const char* text, std::string_view* out) {
    if (!is_valid_job_tag(text)) return false;
    *out = text;
    return true;
  }
};

struct corruption {  // rank:R,call:S,element:E,factor:F: each key once, in any order
  using Value = Corruption;
  static bool parse(const char* text, Corruption* out) {
    Corruption value;
    value.enabled = true;
    bool seen[4] = {false, false, false, false};
    std::string_view rest = text;
    while (!rest.empty()) {
      const std::size_t comma = rest.find(',');
      const std::string_view item = rest.substr(0, comma);
      rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
      if (comma != std::string_view::npos && rest.empty()) return false;  // a trailing comma
      const std::size_t colon = item.find(':');
      if (colon == std::string_view::npos) return false;
      const std::string key(item.substr(0, colon)), number(item.substr(colon + 1));
      if (number.empty()) return false;
      char* end = nullptr;
      errno = 0;
      if (key == "factor") {
        const double factor = std::strtod(number.c_str(), &end);
        if (*end != '\0' || !std::isfinite(factor) || seen[3]) return false;
        value.factor = factor;
        seen[3] = true;
        continue;
      }
      const int index = key == "rank" ? 0 : key == "call" ? 1 : key == "element" ? 2 : -1;
      if (index < 0 || seen[index] || number[0] == '-' || number[0] == '+') return false;
      const unsigned long long whole = std::strtoull(number.c_str(), &end, 10);
      if (errno != 0 || *end != '\0' || (index == 0 && whole > 0x7FFFFFFFull)) return false;
      seen[index] = true;
      if (index == 0) value.rank = static_cast<int>(whole);
      if (index == 1) value.call = whole;
      if (index == 2) value.element = whole;
    }
    if (!(seen[0] && seen[1] && seen[2] && seen[3])) return false;
    *out = value;
    return true;
  }
};

struct path {  // any non-empty text
  using Value = std::string;
  static bool parse(const char* text, std::string* out) {
    *out = text;
    return true;
  }
};

}  // namespace setting_kinds

// The kind of each row.
template <Setting id>
struct SettingKind;
#define HOSTNCCL_SETTING_KIND(id, name, kind, default_text, accepted_text, description) \
  template <>                                                                           \
  struct SettingKind<Setting::id> {                                                     \
    using type = setting_kinds::kind;                                                   \
  };
HOSTNCCL_SETTINGS(HOSTNCCL_SETTING_KIND)
#undef HOSTNCCL_SETTING_KIND

/* Reads variable `id` from the environment with its row's kind. Unset or empty: returns true and leaves *value alone
 * (the caller's default). Malformed: returns false, leaves *value alone and puts
 * "NAME='<value>' is not valid: use <accepted_text>" into *error. */
template <Setting id>
bool read_setting(typename SettingKind<id>::type::Value* value, std::string* error) {
  const SettingInfo& info = setting_info(id);
  const char* text = std::getenv(info.name);
  if (text == nullptr || *text == '\0') return true;
  if (SettingKind<id>::type::parse(text, value)) return true;
  *error = std::string(info.name) + "='" + text + "' is not valid: use " + info.accepted_text;
  return false;
}

// The names other code refers to.
inline constexpr const char* kTimeoutVariable = setting_info(Setting::kTimeoutS).name;
inline constexpr const char* kJobTagVariable = setting_info(Setting::kJobTag).name;

}  // namespace hostnccl

#endif  // DETNCCL_HOSTNCCL_SETTINGS_H
