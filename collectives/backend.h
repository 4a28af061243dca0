/* detnccl collectives: where the element work of a deterministic reduction runs (CPU loops or CUDA kernels).
 *
 * The algorithms (mixed_radix.cc, one_shot.cc) decide which data moves where and in which order partial results
 * are combined; a Backend applies collectives/element_reducer.h to arrays. Both backends implement exactly the same
 * functions on the same element types, so they produce the same bits.
 *
 * Arrays hold T (the call's datatype) or Acc (its accumulator type, see ElementSpec); counts are in elements.
 */
#ifndef DETNCCL_COLLECTIVES_BACKEND_H
#define DETNCCL_COLLECTIVES_BACKEND_H

#include <cstddef>
#include <memory>
#include <string>

#include "abi/nccl_abi.h"
#include "collectives/element_reducer.h"

namespace detnccl::collectives {

class Backend {
 public:
  virtual ~Backend() = default;

  /* dst[i] = load(src[i]) for i < count: a rank's own input (T) as a contribution (Acc). dst may equal src when
   * Acc is T. */
  virtual ncclResult_t load(void* dst, const void* src, std::size_t count) = 0;

  /* dst[i] = combine(...combine(combine(in_0[i], in_1[i]), in_2[i])..., in_{radix-1}[i]) for i < count, where
   * in_q is `own` when q == own_index, and otherwise the array at first + slot(q) * stride elements, with
   * slot(q) = q for q < own_index and q - 1 above it (own_index < 0: every input is in the strided arrays). All
   * arrays hold Acc; dst may be the same array as one input (each element is read before it is written). */
  virtual ncclResult_t fold(void* dst, const void* first, std::size_t stride, int radix, int own_index, const void* own,
                            std::size_t count) = 0;

  /* dst[i] = finish(src[i]): a final partial result (Acc) as the output datatype (T). dst may equal src. */
  virtual ncclResult_t finish(void* dst, const void* src, std::size_t count) = 0;

  /* One sentence about the last failure. */
  virtual std::string last_error() const = 0;
};

/* The CPU backend. A kPreMulSum scalar must already be in spec.scalar_bits. */
std::unique_ptr<Backend> make_host_backend(const ElementSpec& spec);

/* The CUDA backend: kernels on `stream` (a default stream: `default_stream_device`'s, when >= 0), no host
 * synchronisation. Returns nullptr with *error set when this build has no CUDA. */
std::unique_ptr<Backend> make_device_backend(const ElementSpec& spec, cudaStream_t stream, int default_stream_device,
                                             std::string* error);

/* Loads every kernel the CUDA backend launches into `device`'s primary context, once per device (later calls return
 * at once), leaving the thread's current context as it was. RATIONALE: with lazy loading (the default since CUDA 12.2)
 * the first launch would load them, which may wait for the device's queued work — NCCL kernels that wait for this
 * rank's peers (cuda/kernel_preload.h). Call it when a communicator of `device` is created, outside any capture;
 * make_device_backend does it too, as a fallback. Returns false with *error set on failure or without CUDA. */
bool preload_device_kernels(int device, std::string* error);

/* Device memory for scratch, and whether `stream` is being captured into a CUDA graph (allocation is not allowed
 * then). Each returns false with *error set on failure or without CUDA. */
bool device_allocate(std::size_t bytes, void** pointer, std::string* error);
void device_free(void* pointer);
bool stream_is_capturing(cudaStream_t stream, bool* capturing, std::string* error);

/* Stream order between calls of one communicator made on different streams (Workspace keeps the event). NCCL orders
 * a communicator's operations whatever their streams; deterministic mode's kernels share the communicator's scratch,
 * so a call on another stream than the last one first waits for the last one's end. Each returns false with *error
 * set on failure or without CUDA. */
bool device_event_create(void** event, std::string* error);
void device_event_destroy(void* event);
bool device_event_record(void* event, cudaStream_t stream, std::string* error);
bool device_stream_wait(cudaStream_t stream, void* event, std::string* error);

}  // namespace detnccl::collectives

#endif  // DETNCCL_COLLECTIVES_BACKEND_H
