#include "hostnccl/config.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "hostnccl/timeout_setting.h"

namespace hostnccl {
namespace {

constexpr std::size_t kMinBufferBytes = 4096;

// Parses a byte size variable; sizes are rounded down to 64 bytes so that slots stay cache-line aligned.
bool read_bytes(const char* name, std::size_t* out, std::string* error) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return true;
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || text[0] == '-' || value < kMinBufferBytes || value > (1ull << 40)) {
    *error = std::string("hostnccl: ") + name + "='" + text + "' is not valid: use a byte count from " +
             std::to_string(kMinBufferBytes) + " to 2^40";
    return false;
  }
  *out = static_cast<std::size_t>(value) & ~std::size_t{63};
  return true;
}

}  // namespace

ncclResult_t read_config(Config* config, std::string* error) {
  *config = Config{};
  if (!read_timeout_seconds(&config->timeout_s, error)) {
    error->insert(0, "hostnccl: ");
    return ncclInvalidArgument;
  }
  if (const char* text = std::getenv("HOSTNCCL_REDUCE_ORDER"); text != nullptr && *text != '\0') {
    if (std::strcmp(text, "arrival") == 0) {
      config->reduce_order = ReduceOrder::kArrival;
    } else if (std::strcmp(text, "rank") == 0) {
      config->reduce_order = ReduceOrder::kRank;
    } else {
      *error = std::string("hostnccl: HOSTNCCL_REDUCE_ORDER='") + text + "' is not valid: use 'arrival' or 'rank'";
      return ncclInvalidArgument;
    }
  }
  if (!read_bytes("HOSTNCCL_SLOT_BYTES", &config->slot_bytes, error)) return ncclInvalidArgument;
  if (!read_bytes("HOSTNCCL_RING_BYTES", &config->ring_bytes, error)) return ncclInvalidArgument;
  return ncclSuccess;
}

}  // namespace hostnccl
