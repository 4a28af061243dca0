/* hash/: the per-vector-unit builds of XXH3-64 behind hash/xxh3_host.h (C, so that the AVX2 build's code can never
   stand in, through an inline function merged at link time, for code that must run on any x86-64). Tests call each
   variant the processor supports; everything else calls detnccl::hash::xxh3_64. */
#ifndef DETNCCL_HASH_XXH3_VARIANTS_H
#define DETNCCL_HASH_XXH3_VARIANTS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* XXH3_64bits_withSeed compiled for the x86-64 baseline (SSE2), or for the build's own target off x86-64. */
uint64_t detnccl_xxh3_64_baseline(const void* data, size_t bytes, uint64_t seed);

/* XXH3_64bits_withSecretandSeed for the baseline target: with the secret XXH3_generateSecret_fromSeed makes of seed
   (XXH3_SECRET_DEFAULT_SIZE bytes), it equals XXH3_64bits_withSeed(data, bytes, seed). */
uint64_t detnccl_xxh3_64_seed_secret_baseline(const void* data, size_t bytes, const void* secret, uint64_t seed);

/* XXH3_generateSecret_fromSeed: the 192-byte secret XXH3_64bits_withSeed derives from seed for inputs over 240 bytes.
 */
void detnccl_xxh3_secret_from_seed(void* secret, uint64_t seed);

#if defined(__x86_64__)
/* XXH3_64bits_withSeed compiled with AVX2: call only where the processor supports AVX2. */
uint64_t detnccl_xxh3_64_avx2(const void* data, size_t bytes, uint64_t seed);

/* detnccl_xxh3_64_seed_secret_baseline compiled with AVX2: call only where the processor supports AVX2. */
uint64_t detnccl_xxh3_64_seed_secret_avx2(const void* data, size_t bytes, const void* secret, uint64_t seed);
#endif

#ifdef __cplusplus
}
#endif

#endif /* DETNCCL_HASH_XXH3_VARIANTS_H */
