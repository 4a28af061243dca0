/* hostnccl: HOSTNCCL_TIMEOUT_S, read the same way by the library (libnccl.so.2, config.h) and by the bootstrap helper
 * of hostnccl-run (launcher/bootstrap.h). Header-only, so that the helper needs no link dependency on the library.
 */
#ifndef DETNCCL_HOSTNCCL_TIMEOUT_SETTING_H
#define DETNCCL_HOSTNCCL_TIMEOUT_SETTING_H

#include <cmath>
#include <cstdlib>
#include <string>

namespace hostnccl {

// The environment variable: how many seconds to wait (for progress, for the unique id) before failing; 0 waits forever.
inline constexpr const char* kTimeoutVariable = "HOSTNCCL_TIMEOUT_S";
inline constexpr double kDefaultTimeoutSeconds = 60.0;
// The longest wait honoured (about 31 years); a longer one waits this long (as hostnccl-run's --timeout does).
inline constexpr double kMaxTimeoutSeconds = 1e9;

/* Reads HOSTNCCL_TIMEOUT_S into *seconds: kDefaultTimeoutSeconds when unset or empty, else a finite number >= 0
 * (0 means wait forever; more than kMaxTimeoutSeconds counts as kMaxTimeoutSeconds). On a malformed value returns
 * false, leaves *seconds alone and puts "HOSTNCCL_TIMEOUT_S='<value>' is not valid: ..." into *error. */
inline bool read_timeout_seconds(double* seconds, std::string* error) {
  const char* text = std::getenv(kTimeoutVariable);
  if (text == nullptr || *text == '\0') {
    *seconds = kDefaultTimeoutSeconds;
    return true;
  }
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  if (end == text || *end != '\0' || !std::isfinite(value) || value < 0) {
    *error =
        std::string(kTimeoutVariable) + "='" + text + "' is not valid: use a number of seconds >= 0 (0 waits forever)";
    return false;
  }
  *seconds = std::fmin(value, kMaxTimeoutSeconds);
  return true;
}

}  // namespace hostnccl

#endif  // DETNCCL_HOSTNCCL_TIMEOUT_SETTING_H
