// Counter-based random numbers for the training example: value i of stream s is a pure function of (seed, s, i),
// so any rank can produce any sample, or any weight, without replaying a generator, and every run and every
// standard library gives the same bits (std::uniform_real_distribution is implementation-defined).
#pragma once

#include <cstdint>

namespace train {

// SplitMix64's finaliser: a bijective mix of 64 bits with full avalanche.
constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The i-th 64-bit value of stream `stream` of generator `seed`.
constexpr std::uint64_t random_bits(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) noexcept {
  return mix64(mix64(seed ^ mix64(stream)) + index);
}

// The i-th value of stream `stream`, uniform in [-1, 1): the top 24 bits give every float of the grid exactly.
constexpr float random_symmetric(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) noexcept {
  const auto top24 = static_cast<std::int32_t>(random_bits(seed, stream, index) >> 40);
  return static_cast<float>(top24 - (1 << 23)) * (1.0f / static_cast<float>(1 << 23));
}

}  // namespace train
