/* hash/: XXH3-64 compiled with -mavx2 (hash/CMakeLists.txt); see xxh3_variants.h. Nothing else belongs in this file:
   all of it may use AVX2 instructions. */
#include "hash/xxh3_variants.h"

#if !defined(__AVX2__)
#error "hash/xxh3_avx2.c must be compiled with -mavx2"
#endif

#define XXH_INLINE_ALL /* header-only: every xxHash function is static to this file */
#include <xxhash.h>

uint64_t detnccl_xxh3_64_avx2(const void* data, size_t bytes, uint64_t seed) {
  return XXH3_64bits_withSeed(data, bytes, seed);
}

uint64_t detnccl_xxh3_64_seed_secret_avx2(const void* data, size_t bytes, const void* secret, uint64_t seed) {
  return XXH3_64bits_withSecretandSeed(data, bytes, secret, XXH3_SECRET_DEFAULT_SIZE, seed);
}
