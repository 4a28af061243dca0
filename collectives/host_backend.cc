// The CPU backend: plain loops over ElementReducer, the reduction kind fixed at compile time per loop.
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>

#include "collectives/backend.h"

namespace detnccl::collectives {
namespace {

// RATIONALE: user host buffers need not be aligned for their type (NCCL does not require it), so elements are
// read and written with memcpy, which compilers turn into plain loads and stores.
template <typename X>
X load_at(const void* base, std::size_t i) {
  X value;
  std::memcpy(&value, static_cast<const unsigned char*>(base) + i * sizeof(X), sizeof(X));
  return value;
}
template <typename X>
void store_at(void* base, std::size_t i, X value) {
  std::memcpy(static_cast<unsigned char*>(base) + i * sizeof(X), &value, sizeof(X));
}

template <typename T, typename Acc>
class HostBackend final : public Backend {
 public:
  using Reducer = ElementReducer<T, Acc>;

  explicit HostBackend(const ElementSpec& spec)
      : reducer_(make_reducer<T, Acc>(spec, scalar_from_bits<T>(spec.scalar_bits))) {}

  ncclResult_t load(void* dst, const void* src, std::size_t count) override {
    for (std::size_t i = 0; i < count; ++i) store_at<Acc>(dst, i, reducer_.load(load_at<T>(src, i)));
    return ncclSuccess;
  }

  ncclResult_t fold(void* dst, const void* first, std::size_t stride, int radix, int own_index, const void* own,
                    std::size_t count) override {
    switch (reducer_.kind) {
      case ReductionKind::kProd:
        fold_with(dst, first, stride, radix, own_index, own, count,
                  [](Acc a, Acc b) { return Reducer::multiply(a, b); });
        break;
      case ReductionKind::kMin:
        fold_with(dst, first, stride, radix, own_index, own, count,
                  [](Acc a, Acc b) { return Reducer::smallest(a, b); });
        break;
      case ReductionKind::kMax:
        fold_with(dst, first, stride, radix, own_index, own, count,
                  [](Acc a, Acc b) { return Reducer::largest(a, b); });
        break;
      default:
        fold_with(dst, first, stride, radix, own_index, own, count, [](Acc a, Acc b) { return Reducer::add(a, b); });
        break;
    }
    return ncclSuccess;
  }

  ncclResult_t finish(void* dst, const void* src, std::size_t count) override {
    // In place with a narrower T the write of element i lands at or below the bytes of element i, already read.
    for (std::size_t i = 0; i < count; ++i) store_at<T>(dst, i, reducer_.finish(load_at<Acc>(src, i)));
    return ncclSuccess;
  }

  std::string last_error() const override { return {}; }

 private:
  // Tiles keep the partial results of a tile in cache while the inputs stream past, one input at a time.
  static constexpr std::size_t kTile = 2048;

  template <typename Combine>
  static void fold_with(void* dst, const void* first, std::size_t stride, int radix, int own_index, const void* own,
                        std::size_t count, Combine combine) {
    const auto input = [&](int q) -> const unsigned char* {
      if (q == own_index) return static_cast<const unsigned char*>(own);
      const std::size_t slot = static_cast<std::size_t>(own_index >= 0 && q > own_index ? q - 1 : q);
      return static_cast<const unsigned char*>(first) + slot * stride * sizeof(Acc);
    };
    Acc partial[kTile];
    for (std::size_t begin = 0; begin < count; begin += kTile) {
      const std::size_t n = count - begin < kTile ? count - begin : kTile;
      const unsigned char* in0 = input(0) + begin * sizeof(Acc);
      for (std::size_t i = 0; i < n; ++i) partial[i] = load_at<Acc>(in0, i);
      for (int q = 1; q < radix; ++q) {
        const unsigned char* in = input(q) + begin * sizeof(Acc);
        for (std::size_t i = 0; i < n; ++i) partial[i] = combine(partial[i], load_at<Acc>(in, i));
      }
      std::memcpy(static_cast<unsigned char*>(dst) + begin * sizeof(Acc), partial, n * sizeof(Acc));
    }
  }

  Reducer reducer_;
};

}  // namespace

std::unique_ptr<Backend> make_host_backend(const ElementSpec& spec) {
  std::unique_ptr<Backend> backend;
  arith::visit_dtype(spec.datatype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (kIsNarrowFloat<T>) {
      if (spec.float_accumulator) {
        backend = std::make_unique<HostBackend<T, float>>(spec);
        return;
      }
    }
    backend = std::make_unique<HostBackend<T, T>>(spec);
  });
  return backend;
}

}  // namespace detnccl::collectives
