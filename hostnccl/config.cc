#include "hostnccl/config.h"

#include "hostnccl/timeout_setting.h"

namespace hostnccl {

ncclResult_t read_config(Config* config, std::string* error) {
  *config = Config{};
  const bool ok = read_timeout_seconds(&config->timeout_s, error) &&
                  read_setting<Setting::kReduceOrder>(&config->reduce_order, error) &&
                  read_setting<Setting::kSlotBytes>(&config->slot_bytes, error) &&
                  read_setting<Setting::kRingBytes>(&config->ring_bytes, error) &&
                  read_setting<Setting::kCorrupt>(&config->corruption, error);
  if (!ok) {
    error->insert(0, "hostnccl: ");
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

}  // namespace hostnccl
