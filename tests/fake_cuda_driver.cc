// A stand-in for the CUDA driver (built as libcuda.so.1) that answers only cuPointerGetAttribute, with the status
// FAKE_CUDA_POINTER_STATUS names (default 201, CUDA_ERROR_INVALID_CONTEXT). Preloaded beside the shim, it is the
// driver the shim's buffer lookup finds (interpose/buffer_location.cc looks libcuda.so.1 up, never loads it), so
// tests can make the driver fail to say where a buffer lives. tests/test_shim_process.cc uses it.
#include <cstdlib>

extern "C" __attribute__((visibility("default"))) int cuPointerGetAttribute(void* value, int attribute,
                                                                            unsigned long long pointer) {
  (void)attribute;
  (void)pointer;
  const char* text = std::getenv("FAKE_CUDA_POINTER_STATUS");
  const int status = text != nullptr ? std::atoi(text) : 201;
  if (status == 0) *static_cast<unsigned*>(value) = 2;  // CU_MEMORYTYPE_DEVICE
  return status;
}
