/* hash/: XXH3-64 for the build's baseline target (SSE2 on x86-64); see xxh3_variants.h. */
#include "hash/xxh3_variants.h"

#define XXH_INLINE_ALL /* header-only: every xxHash function is static to this file */
#include <xxhash.h>

uint64_t detnccl_xxh3_64_baseline(const void* data, size_t bytes, uint64_t seed) {
  return XXH3_64bits_withSeed(data, bytes, seed);
}
