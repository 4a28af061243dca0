// Built instead of device_backend.cu when CUDA is not available: device buffers are refused with a clear message.
#include "collectives/backend.h"

namespace detnccl::collectives {
namespace {
constexpr const char* kNoCuda = "this detnccl was built without CUDA (DETNCCL_CUDA=OFF or no toolkit)";
}

std::unique_ptr<Backend> make_device_backend(const ElementSpec&, cudaStream_t, int, std::string* error) {
  if (error != nullptr) *error = kNoCuda;
  return nullptr;
}

bool preload_device_kernels(int, std::string* error) {
  if (error != nullptr) *error = kNoCuda;
  return false;
}

bool device_allocate(std::size_t, void** pointer, std::string* error) {
  *pointer = nullptr;
  if (error != nullptr) *error = kNoCuda;
  return false;
}

void device_free(void*) {}

bool stream_is_capturing(cudaStream_t, bool* capturing, std::string* error) {
  *capturing = false;
  if (error != nullptr) *error = kNoCuda;
  return false;
}

bool device_event_create(void** event, std::string* error) {
  *event = nullptr;
  if (error != nullptr) *error = kNoCuda;
  return false;
}

void device_event_destroy(void*) {}

bool device_event_record(void*, cudaStream_t, std::string* error) {
  if (error != nullptr) *error = kNoCuda;
  return false;
}

bool device_stream_wait(cudaStream_t, void*, std::string* error) {
  if (error != nullptr) *error = kNoCuda;
  return false;
}

}  // namespace detnccl::collectives
