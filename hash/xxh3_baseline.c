/* hash/: XXH3-64 for the build's baseline target (SSE2 on x86-64); see xxh3_variants.h. */
#include "hash/xxh3_variants.h"

#define XXH_INLINE_ALL /* header-only: every xxHash function is static to this file */
#include <xxhash.h>

uint64_t detnccl_xxh3_64_baseline(const void* data, size_t bytes, uint64_t seed) {
  return XXH3_64bits_withSeed(data, bytes, seed);
}

uint64_t detnccl_xxh3_64_seed_secret_baseline(const void* data, size_t bytes, const void* secret, uint64_t seed) {
  return XXH3_64bits_withSecretandSeed(data, bytes, secret, XXH3_SECRET_DEFAULT_SIZE, seed);
}

void detnccl_xxh3_secret_from_seed(void* secret, uint64_t seed) { XXH3_generateSecret_fromSeed(secret, seed); }
