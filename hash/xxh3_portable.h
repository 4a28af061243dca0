// XXH3_64bits written out step by step so that the same code runs on the host and in CUDA device code.
//
// This is the definition of XXH3 (xxHash 0.8, "XXH3_64bits" and "XXH3_64bits_withSeed" with the default secret)
// split into the pieces a GPU needs: the short-input paths (0-240 bytes), and for longer inputs the stripes of
// 64 bytes, the 8 accumulator lanes, the scramble after every 1 KiB block, the last stripe and the final merge.
// Nothing here calls libxxhash; tests/test_hash_portable.cc checks every piece against it.
//
// Why a cooperative form exists (see CooperativeThread): inside one 1 KiB block, what a stripe adds to an
// accumulator lane does not depend on the accumulator (data word of the partner lane plus a 32x32-bit product of
// data and secret), so the 16 stripes of a block may be summed by several threads in any order; only the scramble
// between blocks is sequential, and it is per lane. A warp of 32 threads therefore splits each block 4 ways per
// lane, adds the 4 partial sums, and applies the scrambles itself: the result is bitwise XXH3.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cuda/host_device.h"

#if !defined(__CUDA_ARCH__)
#include <bit>
static_assert(std::endian::native == std::endian::little, "detnccl hashing assumes a little-endian host");
#endif

namespace detnccl::hash::xxh3 {

inline constexpr std::size_t kSecretBytes = 192;
inline constexpr std::size_t kStripeBytes = 64;
inline constexpr unsigned kLanes = 8;  // accumulators, one 8-byte word of each stripe per lane
inline constexpr unsigned kStripesPerBlock = (kSecretBytes - kStripeBytes) / 8;  // 16
inline constexpr std::size_t kBlockBytes = kStripeBytes * kStripesPerBlock;      // 1024
inline constexpr std::size_t kMidsizeMax = 240;  // longest input hashed without accumulators

inline constexpr std::uint64_t kPrime32_1 = 0x9E3779B1U;
inline constexpr std::uint64_t kPrime32_2 = 0x85EBCA77U;
inline constexpr std::uint64_t kPrime32_3 = 0xC2B2AE3DU;
inline constexpr std::uint64_t kPrime64_1 = 0x9E3779B185EBCA87ULL;
inline constexpr std::uint64_t kPrime64_2 = 0xC2B2AE3D27D4EB4FULL;
inline constexpr std::uint64_t kPrime64_3 = 0x165667B19E3779F9ULL;
inline constexpr std::uint64_t kPrime64_4 = 0x85EBCA77C2B2AE63ULL;
inline constexpr std::uint64_t kPrime64_5 = 0x27D4EB2F165667C5ULL;

// Offsets into the secret fixed by the XXH3 definition.
inline constexpr std::size_t kScrambleKeyOffset = kSecretBytes - kStripeBytes;        // 128
inline constexpr std::size_t kLastStripeKeyOffset = kSecretBytes - kStripeBytes - 7;  // 121
inline constexpr std::size_t kMergeKeyOffset = 11;
inline constexpr std::size_t kMidsizeStartOffset = 3;
inline constexpr std::size_t kMidsizeLastOffset = 136 - 17;

// The default 192-byte secret of XXH3 (a constant of the algorithm's specification).
#define DETNCCL_XXH3_DEFAULT_SECRET                                                                                 \
  0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c, 0xde, 0xd4, 0x6d, \
      0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f, 0xcb, 0x79, 0xe6, 0x4e, 0xcc,   \
      0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21, 0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24,   \
      0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c, 0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88,   \
      0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3, 0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef,   \
      0x46, 0xa9, 0xde, 0xac, 0xd8, 0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7,   \
      0x0b, 0x4f, 0x1d, 0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73,   \
      0x64, 0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb, 0x17,   \
      0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e, 0x2b, 0x16, 0xbe,   \
      0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce, 0x45, 0xcb, 0x3a, 0x8f, 0x95,   \
      0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e

inline constexpr std::uint8_t kHostSecret[kSecretBytes] = {DETNCCL_XXH3_DEFAULT_SECRET};
#if defined(__CUDACC__)
// RATIONALE: device code cannot read a host array; each CUDA translation unit gets its own constant-memory copy
// (internal linkage, so no relocatable device code is needed).
static __constant__ std::uint8_t kDeviceSecret[kSecretBytes] = {DETNCCL_XXH3_DEFAULT_SECRET};
#endif

// The default secret, readable from the side (host or device) that calls it.
DETNCCL_HOST_DEVICE inline const std::uint8_t* default_secret() {
#if defined(__CUDA_ARCH__)
  return kDeviceSecret;
#else
  return kHostSecret;
#endif
}

// Reads 8 little-endian bytes at any address. On the device the widest load the address allows is used, so an
// 8-byte-aligned buffer costs one load per word and an unaligned one stays correct.
DETNCCL_HOST_DEVICE inline std::uint64_t read_le64(const std::uint8_t* p) {
#if defined(__CUDA_ARCH__)
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  if ((address & 7U) == 0) return *reinterpret_cast<const std::uint64_t*>(p);
  if ((address & 3U) == 0) {
    const auto* w = reinterpret_cast<const std::uint32_t*>(p);
    return static_cast<std::uint64_t>(w[0]) | (static_cast<std::uint64_t>(w[1]) << 32);
  }
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
#else
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
#endif
}

// Reads 4 little-endian bytes at any address.
DETNCCL_HOST_DEVICE inline std::uint32_t read_le32(const std::uint8_t* p) {
#if defined(__CUDA_ARCH__)
  if ((reinterpret_cast<std::uintptr_t>(p) & 3U) == 0) return *reinterpret_cast<const std::uint32_t*>(p);
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
         (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
#else
  std::uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
#endif
}

// Writes v as 8 little-endian bytes (how digests are laid out before they are hashed again).
DETNCCL_HOST_DEVICE inline void write_le64(std::uint8_t* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}

DETNCCL_HOST_DEVICE inline std::uint64_t rotl64(std::uint64_t v, int r) { return (v << r) | (v >> (64 - r)); }

DETNCCL_HOST_DEVICE inline std::uint32_t swap32(std::uint32_t v) {
  return ((v << 24) & 0xff000000U) | ((v << 8) & 0x00ff0000U) | ((v >> 8) & 0x0000ff00U) | ((v >> 24) & 0xffU);
}

DETNCCL_HOST_DEVICE inline std::uint64_t swap64(std::uint64_t v) {
  return (static_cast<std::uint64_t>(swap32(static_cast<std::uint32_t>(v))) << 32) |
         swap32(static_cast<std::uint32_t>(v >> 32));
}

// The 128-bit product of a and b, its two halves xor-ed together.
DETNCCL_HOST_DEVICE inline std::uint64_t mul128_fold64(std::uint64_t a, std::uint64_t b) {
#if defined(__CUDA_ARCH__)
  return (a * b) ^ __umul64hi(a, b);
#else
  __extension__ using Uint128 = unsigned __int128;
  const Uint128 product = static_cast<Uint128>(a) * b;
  return static_cast<std::uint64_t>(product) ^ static_cast<std::uint64_t>(product >> 64);
#endif
}

// XXH3's fast final mix.
DETNCCL_HOST_DEVICE inline std::uint64_t avalanche(std::uint64_t h) {
  h ^= h >> 37;
  h *= 0x165667919E3779F9ULL;
  h ^= h >> 32;
  return h;
}

// XXH3's stronger final mix for 4-8 byte inputs.
DETNCCL_HOST_DEVICE inline std::uint64_t rrmxmx(std::uint64_t h, std::uint64_t len) {
  h ^= rotl64(h, 49) ^ rotl64(h, 24);
  h *= 0x9FB21C651E98DF25ULL;
  h ^= (h >> 35) + len;
  h *= 0x9FB21C651E98DF25ULL;
  return h ^ (h >> 28);
}

// XXH64's final mix, which XXH3 uses for 0-3 byte inputs.
DETNCCL_HOST_DEVICE inline std::uint64_t xxh64_avalanche(std::uint64_t h) {
  h ^= h >> 33;
  h *= kPrime64_2;
  h ^= h >> 29;
  h *= kPrime64_3;
  h ^= h >> 32;
  return h;
}

DETNCCL_HOST_DEVICE inline std::uint64_t mix16(const std::uint8_t* in, const std::uint8_t* secret, std::uint64_t seed) {
  return mul128_fold64(read_le64(in) ^ (read_le64(secret) + seed), read_le64(in + 8) ^ (read_le64(secret + 8) - seed));
}

// XXH3_64bits_withSeed of an input of at most 240 bytes (these lengths use the default secret plus the seed).
DETNCCL_HOST_DEVICE inline std::uint64_t hash_short(const std::uint8_t* in, std::size_t len, std::uint64_t seed) {
  const std::uint8_t* secret = default_secret();
  if (len == 0) return xxh64_avalanche(seed ^ (read_le64(secret + 56) ^ read_le64(secret + 64)));
  if (len <= 3) {
    const std::uint32_t combined = (static_cast<std::uint32_t>(in[0]) << 16) |
                                   (static_cast<std::uint32_t>(in[len >> 1]) << 24) |
                                   static_cast<std::uint32_t>(in[len - 1]) | (static_cast<std::uint32_t>(len) << 8);
    const std::uint64_t bitflip = (read_le32(secret) ^ read_le32(secret + 4)) + seed;
    return xxh64_avalanche(combined ^ bitflip);
  }
  if (len <= 8) {
    seed ^= static_cast<std::uint64_t>(swap32(static_cast<std::uint32_t>(seed))) << 32;
    const std::uint64_t input64 = read_le32(in + len - 4) + (static_cast<std::uint64_t>(read_le32(in)) << 32);
    const std::uint64_t bitflip = (read_le64(secret + 8) ^ read_le64(secret + 16)) - seed;
    return rrmxmx(input64 ^ bitflip, len);
  }
  if (len <= 16) {
    const std::uint64_t lo = read_le64(in) ^ ((read_le64(secret + 24) ^ read_le64(secret + 32)) + seed);
    const std::uint64_t hi = read_le64(in + len - 8) ^ ((read_le64(secret + 40) ^ read_le64(secret + 48)) - seed);
    return avalanche(len + swap64(lo) + hi + mul128_fold64(lo, hi));
  }
  std::uint64_t acc = len * kPrime64_1;
  if (len <= 128) {
    // Pairs of 16-byte reads from both ends, innermost pair first in the definition's order of additions.
    if (len > 32) {
      if (len > 64) {
        if (len > 96) {
          acc += mix16(in + 48, secret + 96, seed);
          acc += mix16(in + len - 64, secret + 112, seed);
        }
        acc += mix16(in + 32, secret + 64, seed);
        acc += mix16(in + len - 48, secret + 80, seed);
      }
      acc += mix16(in + 16, secret + 32, seed);
      acc += mix16(in + len - 32, secret + 48, seed);
    }
    acc += mix16(in, secret, seed);
    acc += mix16(in + len - 16, secret + 16, seed);
    return avalanche(acc);
  }
  const std::size_t rounds = len / 16;
  for (std::size_t i = 0; i < 8; ++i) acc += mix16(in + 16 * i, secret + 16 * i, seed);
  acc = avalanche(acc);
  for (std::size_t i = 8; i < rounds; ++i) acc += mix16(in + 16 * i, secret + 16 * (i - 8) + kMidsizeStartOffset, seed);
  acc += mix16(in + len - 16, secret + kMidsizeLastOffset, seed);
  return avalanche(acc);
}

// ------------------------------------------------------------------------------------------------------------
// Long inputs (more than 240 bytes): 8 accumulator lanes over stripes of 64 bytes.

// Initial value of accumulator `lane`.
DETNCCL_HOST_DEVICE inline std::uint64_t initial_accumulator(unsigned lane) {
  switch (lane) {
    case 0:
      return kPrime32_3;
    case 1:
      return kPrime64_1;
    case 2:
      return kPrime64_2;
    case 3:
      return kPrime64_3;
    case 4:
      return kPrime64_4;
    case 5:
      return kPrime32_2;
    case 6:
      return kPrime64_5;
    default:
      return kPrime32_1;
  }
}

// What one stripe adds to lane L, apart from the partner's data word: (data ^ key) low half times high half.
DETNCCL_HOST_DEVICE inline std::uint64_t stripe_product(std::uint64_t data_word, std::uint64_t key_word) {
  const std::uint64_t keyed = data_word ^ key_word;
  return (keyed & 0xffffffffULL) * (keyed >> 32);
}

// The per-lane scramble applied after each full 1 KiB block.
DETNCCL_HOST_DEVICE inline std::uint64_t scramble(std::uint64_t acc, std::uint64_t key_word) {
  acc ^= acc >> 47;
  acc ^= key_word;
  return acc * kPrime32_1;
}

// Folds the 8 accumulators into the 64-bit hash of a `len`-byte input.
DETNCCL_HOST_DEVICE inline std::uint64_t merge_accumulators(const std::uint64_t (&acc)[kLanes],
                                                            const std::uint8_t* secret, std::uint64_t len) {
  const std::uint8_t* key = secret + kMergeKeyOffset;
  std::uint64_t result = len * kPrime64_1;
  for (unsigned i = 0; i < 4; ++i) {
    result += mul128_fold64(acc[2 * i] ^ read_le64(key + 16 * i), acc[2 * i + 1] ^ read_le64(key + 16 * i + 8));
  }
  return avalanche(result);
}

// How a long input is cut: `full_blocks` blocks of 16 stripes, each followed by a scramble, then
// `stripes_in_last_block` (0-15) stripes without scramble, then the last 64 bytes of the input (which may overlap
// what came before) as one more stripe with its own key.
struct LongInputShape {
  std::size_t full_blocks;
  unsigned stripes_in_last_block;
};

// The shape of a long input of `len` (> 240) bytes.
DETNCCL_HOST_DEVICE inline LongInputShape long_input_shape(std::size_t len) {
  const std::size_t full_blocks = (len - 1) / kBlockBytes;
  return {full_blocks, static_cast<unsigned>(((len - 1) - full_blocks * kBlockBytes) / kStripeBytes)};
}

// Adds stripe `stripe` of the block at `block` (keys from `secret + 8 * stripe`) to all 8 lanes.
DETNCCL_HOST_DEVICE inline void accumulate_stripe(std::uint64_t (&acc)[kLanes], const std::uint8_t* data,
                                                  const std::uint8_t* key) {
  for (unsigned lane = 0; lane < kLanes; ++lane) {
    const std::uint64_t word = read_le64(data + 8 * lane);
    acc[lane ^ 1U] += word;  // each lane also receives its partner's raw data word
    acc[lane] += stripe_product(word, read_le64(key + 8 * lane));
  }
}

// XXH3 of a long input with a 192-byte secret, one stripe after the other (the reference order).
DETNCCL_HOST_DEVICE inline std::uint64_t hash_long_sequential(const std::uint8_t* in, std::size_t len,
                                                              const std::uint8_t* secret) {
  std::uint64_t acc[kLanes];
  for (unsigned lane = 0; lane < kLanes; ++lane) acc[lane] = initial_accumulator(lane);
  const LongInputShape shape = long_input_shape(len);
  for (std::size_t block = 0; block < shape.full_blocks; ++block) {
    for (unsigned s = 0; s < kStripesPerBlock; ++s) {
      accumulate_stripe(acc, in + block * kBlockBytes + s * kStripeBytes, secret + 8 * s);
    }
    for (unsigned lane = 0; lane < kLanes; ++lane) {
      acc[lane] = scramble(acc[lane], read_le64(secret + kScrambleKeyOffset + 8 * lane));
    }
  }
  for (unsigned s = 0; s < shape.stripes_in_last_block; ++s) {
    accumulate_stripe(acc, in + shape.full_blocks * kBlockBytes + s * kStripeBytes, secret + 8 * s);
  }
  accumulate_stripe(acc, in + len - kStripeBytes, secret + kLastStripeKeyOffset);
  return merge_accumulators(acc, secret, len);
}

// The secret XXH3_64bits_withSeed uses for long inputs: the default one with the seed added to the first and
// subtracted from the second word of every 16 bytes.
DETNCCL_HOST_DEVICE inline void derive_seeded_secret(std::uint8_t (&out)[kSecretBytes], std::uint64_t seed) {
  const std::uint8_t* base = default_secret();
  for (std::size_t i = 0; i < kSecretBytes; i += 16) {
    write_le64(out + i, read_le64(base + i) + seed);
    write_le64(out + i + 8, read_le64(base + i + 8) - seed);
  }
}

// XXH3_64bits_withSeed(in, len, seed); seed 0 gives XXH3_64bits(in, len).
DETNCCL_HOST_DEVICE inline std::uint64_t hash(const void* input, std::size_t len, std::uint64_t seed = 0) {
  const auto* in = static_cast<const std::uint8_t*>(input);
  if (len <= kMidsizeMax) return hash_short(in, len, seed);
  if (seed == 0) return hash_long_sequential(in, len, default_secret());
  std::uint8_t secret[kSecretBytes];
  derive_seeded_secret(secret, seed);
  return hash_long_sequential(in, len, secret);
}

// ------------------------------------------------------------------------------------------------------------
// The cooperative form of the long-input loop (default secret), used by the CUDA kernel.

// Sums over one thread's share of the stripes of a block, for its lane: raw data words (which belong to the
// partner lane, lane ^ 1) and stripe products (which belong to this lane).
struct LanePartial {
  std::uint64_t data_sum;
  std::uint64_t product_sum;
};

// What a block adds to lane L, given the total of the lane's products and the total of the partner lane's data
// words over all threads that share the block.
DETNCCL_HOST_DEVICE inline std::uint64_t block_addend(std::uint64_t product_total, std::uint64_t partner_data_total) {
  return product_total + partner_data_total;
}

// One thread of a team of 8 * kGroups threads hashing one long input together: thread `rank` owns lane
// rank % 8 and, inside every block, the stripes group, group + kGroups, ... where group = rank / 8. It holds the
// secret words it needs in registers so the inner loop reads nothing but data.
template <unsigned kGroups>
struct CooperativeThread {
  static_assert(kStripesPerBlock % kGroups == 0, "the groups must split a block evenly");
  static constexpr unsigned kTeamSize = kLanes * kGroups;
  static constexpr unsigned kStripesPerThread = kStripesPerBlock / kGroups;

  unsigned lane;
  unsigned group;
  std::uint64_t stripe_keys[kStripesPerThread];
  std::uint64_t scramble_key;
  std::uint64_t last_stripe_key;

  // Thread `rank` (0 .. kTeamSize - 1) of the team, with the default secret.
  DETNCCL_HOST_DEVICE explicit CooperativeThread(unsigned rank) : lane(rank % kLanes), group(rank / kLanes) {
    const std::uint8_t* secret = default_secret();
    for (unsigned k = 0; k < kStripesPerThread; ++k) {
      stripe_keys[k] = read_le64(secret + 8 * (group + k * kGroups) + 8 * lane);
    }
    scramble_key = read_le64(secret + kScrambleKeyOffset + 8 * lane);
    last_stripe_key = read_le64(secret + kLastStripeKeyOffset + 8 * lane);
  }

  // This thread's sums over the first `stripes` stripes of the block starting at `block`.
  DETNCCL_HOST_DEVICE LanePartial accumulate_block(const std::uint8_t* block, unsigned stripes) const {
    LanePartial sums{0, 0};
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (unsigned k = 0; k < kStripesPerThread; ++k) {
      const unsigned stripe = group + k * kGroups;
      if (stripe < stripes) {
        const std::uint64_t word = read_le64(block + stripe * kStripeBytes + 8 * lane);
        sums.data_sum += word;
        sums.product_sum += stripe_product(word, stripe_keys[k]);
      }
    }
    return sums;
  }

  // What the input's last stripe (its last 64 bytes, at `last_stripe`) adds to this thread's lane.
  DETNCCL_HOST_DEVICE std::uint64_t last_stripe_addend(const std::uint8_t* last_stripe) const {
    const std::uint64_t own = read_le64(last_stripe + 8 * lane);
    const std::uint64_t partner = read_le64(last_stripe + 8 * (lane ^ 1U));
    return stripe_product(own, last_stripe_key) + partner;
  }
};

}  // namespace detnccl::hash::xxh3

namespace detnccl::hash::xxh3 {

// XXH3_64bits of a long input (> 240 bytes) computed the way the CUDA kernel computes it, by a team of
// 8 * kGroups threads emulated one after the other: per block, each thread's partial sums, then per lane the sum
// over the team (the kernel's warp shuffles), then the lane's scramble; finally the merge. It mirrors
// warp_hash() in hash/fingerprint_cuda.cu line for line, so that tests on the CPU cover the kernel's arithmetic.
template <unsigned kGroups>
std::uint64_t hash_long_cooperatively_on_host(const std::uint8_t* in, std::size_t len) {
  using Thread = CooperativeThread<kGroups>;
  constexpr unsigned kTeam = Thread::kTeamSize;
  // The team's block total for each rank, as the warp's xor-shuffles would leave it in every thread.
  auto team_addends = [&](const std::uint8_t* block, unsigned stripes, std::uint64_t(&addend)[kLanes]) {
    std::uint64_t product_total[kLanes] = {};
    std::uint64_t data_total[kLanes] = {};
    for (unsigned rank = 0; rank < kTeam; ++rank) {
      const Thread me(rank);
      const LanePartial part = me.accumulate_block(block, stripes);
      product_total[me.lane] += part.product_sum;
      data_total[me.lane] += part.data_sum;
    }
    for (unsigned lane = 0; lane < kLanes; ++lane)
      addend[lane] = block_addend(product_total[lane], data_total[lane ^ 1U]);
  };
  std::uint64_t acc[kLanes];
  for (unsigned lane = 0; lane < kLanes; ++lane) acc[lane] = initial_accumulator(lane);
  const LongInputShape shape = long_input_shape(len);
  std::uint64_t addend[kLanes];
  for (std::size_t block = 0; block < shape.full_blocks; ++block) {
    team_addends(in + block * kBlockBytes, kStripesPerBlock, addend);
    for (unsigned lane = 0; lane < kLanes; ++lane)
      acc[lane] = scramble(acc[lane] + addend[lane], Thread(lane).scramble_key);
  }
  team_addends(in + shape.full_blocks * kBlockBytes, shape.stripes_in_last_block, addend);
  for (unsigned lane = 0; lane < kLanes; ++lane) {
    acc[lane] += addend[lane] + Thread(lane).last_stripe_addend(in + len - kStripeBytes);
  }
  return merge_accumulators(acc, default_secret(), len);
}

}  // namespace detnccl::hash::xxh3
