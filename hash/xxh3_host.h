// hash/: XXH3-64 on the host, built into detnccl from xxHash's header (no libxxhash at run time) and dispatched at
// run time to the widest vector unit the processor has.
//
// RATIONALE: libdetnccl.so is preloaded into jobs whose containers may lack libxxhash.so.0; a preload library that
// fails to load is skipped by the loader with one line on stderr, and the job runs without detnccl. Building XXH3 in
// also makes it faster: Debian's libxxhash computes at about 19 GB/s on the development VM, the AVX2 build here at
// about 46 GB/s (bench/results/bench_fingerprint_*).
#pragma once

#include <cstddef>
#include <cstdint>

namespace detnccl::hash {

// XXH3_64bits of `bytes` bytes at `data`: bit for bit what libxxhash's XXH3_64bits returns, on every processor.
std::uint64_t xxh3_64(const void* data, std::size_t bytes) noexcept;

// XXH3_64bits_withSeed of `bytes` bytes at `data` with `seed` (seed 0 is the same as the unseeded form).
std::uint64_t xxh3_64(const void* data, std::size_t bytes, std::uint64_t seed) noexcept;

// A seed with the secret XXH3_64bits_withSeed derives from it for inputs over 240 bytes (xxh3_seed_secret), for
// callers that hash many inputs with few seeds (the log's record checksums).
struct Xxh3SeedSecret {
  std::uint64_t seed = 0;
  alignas(64) unsigned char secret[192] = {};
};

// Sets `out` to `seed` and its secret.
void xxh3_seed_secret(std::uint64_t seed, Xxh3SeedSecret& out) noexcept;

// xxh3_64(data, bytes, seed.seed), bit for bit, without deriving the secret again (faster above 240 bytes).
std::uint64_t xxh3_64(const void* data, std::size_t bytes, const Xxh3SeedSecret& seed) noexcept;

// The vector unit xxh3_64 uses on this processor: "avx2", "sse2" (x86-64 baseline) or "native" (other processors,
// where xxHash picks its vector code at compile time). For benchmark headers and logs.
const char* xxh3_vector_unit() noexcept;

}  // namespace detnccl::hash
