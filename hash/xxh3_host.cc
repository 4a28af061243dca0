#include "hash/xxh3_host.h"

#include "hash/xxh3_variants.h"

namespace detnccl::hash {
namespace {

using Xxh3Function = std::uint64_t (*)(const void*, std::size_t, std::uint64_t);
using Xxh3SecretFunction = std::uint64_t (*)(const void*, std::size_t, const void*, std::uint64_t);

struct Xxh3Choice {
  Xxh3Function function;
  const char* vector_unit;
  Xxh3SecretFunction with_secret;
};

Xxh3Choice choose_xxh3() noexcept {
#if defined(__x86_64__)
  // RATIONALE: __builtin_cpu_supports also checks that the operating system saves the AVX registers.
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) return {&detnccl_xxh3_64_avx2, "avx2", &detnccl_xxh3_64_seed_secret_avx2};
  return {&detnccl_xxh3_64_baseline, "sse2", &detnccl_xxh3_64_seed_secret_baseline};
#else
  return {&detnccl_xxh3_64_baseline, "native", &detnccl_xxh3_64_seed_secret_baseline};
#endif
}

const Xxh3Choice& xxh3_choice() noexcept {
  static const Xxh3Choice choice = choose_xxh3();
  return choice;
}

}  // namespace

std::uint64_t xxh3_64(const void* data, std::size_t bytes) noexcept { return xxh3_choice().function(data, bytes, 0); }

std::uint64_t xxh3_64(const void* data, std::size_t bytes, std::uint64_t seed) noexcept {
  return xxh3_choice().function(data, bytes, seed);
}

void xxh3_seed_secret(std::uint64_t seed, Xxh3SeedSecret& out) noexcept {
  out.seed = seed;
  detnccl_xxh3_secret_from_seed(out.secret, seed);
}

std::uint64_t xxh3_64(const void* data, std::size_t bytes, const Xxh3SeedSecret& seed) noexcept {
  return xxh3_choice().with_secret(data, bytes, seed.secret, seed.seed);
}

const char* xxh3_vector_unit() noexcept { return xxh3_choice().vector_unit; }

}  // namespace detnccl::hash
