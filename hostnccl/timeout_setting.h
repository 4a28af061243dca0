/* hostnccl: HOSTNCCL_TIMEOUT_S, read the same way by the library (libnccl.so.2, config.h) and by the bootstrap helper
 * of hostnccl-run (launcher/bootstrap.h): the settings table's reader (settings.h) with its default. Header-only, so
 * that the helper needs no link dependency on the library.
 */
#ifndef DETNCCL_HOSTNCCL_TIMEOUT_SETTING_H
#define DETNCCL_HOSTNCCL_TIMEOUT_SETTING_H

#include <string>

#include "hostnccl/settings.h"

namespace hostnccl {

/* Reads HOSTNCCL_TIMEOUT_S into *seconds: kDefaultTimeoutSeconds when unset or empty, else a finite number >= 0
 * (0 means wait forever; more than kMaxTimeoutSeconds counts as kMaxTimeoutSeconds). On a malformed value returns
 * false, leaves *seconds alone and puts "HOSTNCCL_TIMEOUT_S='<value>' is not valid: ..." into *error. */
inline bool read_timeout_seconds(double* seconds, std::string* error) {
  double value = kDefaultTimeoutSeconds;
  if (!read_setting<Setting::kTimeoutS>(&value, error)) return false;
  *seconds = value;
  return true;
}

}  // namespace hostnccl

#endif  // DETNCCL_HOSTNCCL_TIMEOUT_SETTING_H
