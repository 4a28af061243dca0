// The portable XXH3 (hash/xxh3_portable.h) and the CUDA pipeline's decomposition (hash/tree_shape.h,
// hash/device_emulation.h), built for the CPU and compared with libxxhash and with the host fingerprints: how the
// GPU code is known to be right on machines without a GPU.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "hash/device_emulation.h"
#include "hash/fingerprint.h"
#include "hash/reference_fingerprint.h"
#include "hash/tree_shape.h"
#include "hash/xxh3_portable.h"

namespace {

namespace hash = detnccl::hash;
namespace xxh3 = detnccl::hash::xxh3;
using hash::kFanout;
using hash::kLeafBytes;

std::vector<std::uint8_t> random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = static_cast<std::uint8_t>(rng());
  return v;
}

// Lengths where XXH3 changes path or shape: the short ranges, stripes, blocks and the leaf size.
std::vector<std::size_t> interesting_lengths() {
  std::vector<std::size_t> lengths;
  for (std::size_t n = 0; n <= 2 * xxh3::kBlockBytes + 70; ++n) lengths.push_back(n);
  for (std::size_t n : {kLeafBytes - 65, kLeafBytes - 64, kLeafBytes - 63, kLeafBytes - 1, kLeafBytes, kLeafBytes + 1,
                        2 * kLeafBytes + 3, std::size_t{100'003}}) {
    lengths.push_back(n);
  }
  for (std::size_t n = 2 * xxh3::kBlockBytes; n < kLeafBytes; n += 61) lengths.push_back(n);
  return lengths;
}

TEST(PortableXxh3, EqualsLibxxhashForEveryInterestingLength) {
  const auto data = random_bytes(100'003 + 8, 1);
  for (std::size_t len : interesting_lengths()) {
    ASSERT_EQ(xxh3::hash(data.data(), len), XXH3_64bits(data.data(), len)) << len << " bytes";
    // At an odd address too: the portable reads must not assume alignment.
    ASSERT_EQ(xxh3::hash(data.data() + 5, len), XXH3_64bits(data.data() + 5, len)) << len << " bytes at +5";
  }
}

TEST(PortableXxh3, EqualsLibxxhashWithSeedsForRandomLengths) {
  const auto data = random_bytes(70'000, 2);
  std::mt19937_64 rng(2);
  const std::uint64_t fixed_seeds[] = {1, 0xffffffffffffffffULL, 0x8000000000000000ULL, 16384};
  for (int trial = 0; trial < 600; ++trial) {
    const std::size_t len = trial < 300 ? rng() % 300 : rng() % 70'000;
    const std::uint64_t seed = trial % 5 == 4 ? rng() : fixed_seeds[trial % 4];
    ASSERT_EQ(xxh3::hash(data.data(), len, seed), XXH3_64bits_withSeed(data.data(), len, seed))
        << len << " bytes, seed " << seed;
  }
}

TEST(PortableXxh3, SealingStepEqualsLibxxhash) {
  for (std::uint64_t bytes : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{kLeafBytes}, ~std::uint64_t{0}}) {
    const std::uint64_t root = 0x0123456789abcdefULL ^ bytes;
    EXPECT_EQ(hash::seal_root(root, bytes), XXH3_64bits_withSeed(&root, 8, bytes));
  }
}

// The cooperative (warp) decomposition must not depend on how many threads share a lane.
template <unsigned kGroups>
void expect_cooperative_matches(const std::vector<std::uint8_t>& data, std::size_t len, std::size_t misalign) {
  ASSERT_EQ(xxh3::hash_long_cooperatively_on_host<kGroups>(data.data() + misalign, len),
            XXH3_64bits(data.data() + misalign, len))
      << len << " bytes at +" << misalign << ", " << kGroups << " threads per lane";
}

TEST(CooperativeXxh3, EqualsLibxxhashForEveryInterestingLongLength) {
  const auto data = random_bytes(100'003 + 16, 3);  // the longest interesting length, plus room to misalign
  for (std::size_t len : interesting_lengths()) {
    if (len <= xxh3::kMidsizeMax) continue;
    expect_cooperative_matches<4>(data, len, 0);  // the kernel's shape: a warp, 4 threads per lane
    if (len % 7 == 0) expect_cooperative_matches<4>(data, len, 3);
  }
}

TEST(CooperativeXxh3, AnyTeamShapeGivesTheSameHash) {
  const auto data = random_bytes(2 * kLeafBytes + 16, 4);
  for (std::size_t len : {std::size_t{241}, std::size_t{1024}, std::size_t{1025}, std::size_t{5000}, kLeafBytes,
                          kLeafBytes + 1, 2 * kLeafBytes}) {
    expect_cooperative_matches<1>(data, len, 0);
    expect_cooperative_matches<2>(data, len, 1);
    expect_cooperative_matches<8>(data, len, 0);
    expect_cooperative_matches<16>(data, len, 6);
  }
}

TEST(TreePlan, HasThePassesTheDefinitionImplies) {
  // 2048*2048 + 1 leaves (64 GiB + 1 leaf): 4194305 leaf digests -> 2049 -> 2 -> 1, four passes.
  const std::uint64_t leaves = kFanout * kFanout + 1;
  const hash::TreePlan big = hash::plan_tree(leaves * kLeafBytes, 0);
  ASSERT_EQ(big.pass_count, 4U);
  EXPECT_EQ(big.passes[0].chunks, leaves);
  EXPECT_EQ(big.passes[1].chunks, 2049U);
  EXPECT_EQ(big.passes[2].chunks, 2U);
  EXPECT_EQ(big.passes[3].chunks, 1U);
  EXPECT_TRUE(big.passes[3].seals);
  EXPECT_FALSE(big.passes[2].seals);
  EXPECT_EQ(hash::chunk_of(big.passes[1], 2048).length, 8U);  // the lone last digest of level 1 is still hashed
  EXPECT_EQ(hash::scratch_digests(big), leaves + 2049);

  const hash::TreePlan one_leaf = hash::plan_tree(kLeafBytes, 0);
  EXPECT_EQ(one_leaf.pass_count, 1U);
  EXPECT_EQ(hash::scratch_digests(one_leaf), 0U);
  const hash::TreePlan empty = hash::plan_tree(0, 0);
  ASSERT_EQ(empty.pass_count, 1U);
  EXPECT_EQ(empty.passes[0].chunks, 1U);
  EXPECT_EQ(hash::plan_tree(0, kLeafBytes).segments, 0U);
  EXPECT_EQ(hash::plan_tree(0, kLeafBytes).pass_count, 0U);

  // Segments of 2049 leaves over 2050 leaves: the last segment is one leaf, passed through by the digest passes.
  const hash::TreePlan segmented = hash::plan_tree(2050 * kLeafBytes, 2049 * kLeafBytes);
  ASSERT_EQ(segmented.pass_count, 3U);
  EXPECT_EQ(segmented.passes[1].chunks, 3U);  // 2 groups for the full segment, 1 for the short one
  EXPECT_TRUE(hash::chunk_of(segmented.passes[1], 2).pass_through);
  EXPECT_FALSE(hash::chunk_of(segmented.passes[1], 1).pass_through);
  EXPECT_EQ(segmented.passes[2].chunks, 2U);
  EXPECT_TRUE(hash::chunk_of(segmented.passes[2], 1).pass_through);
}

class DevicePipeline : public testing::TestWithParam<std::size_t> {};

TEST_P(DevicePipeline, FingerprintEqualsTheHostOneAtAnyAlignment) {
  const std::size_t bytes = GetParam();
  const auto data = random_bytes(bytes + 8, static_cast<std::uint32_t>(bytes) + 7);
  const std::uint64_t expected = hash::fingerprint(data.data(), bytes);
  EXPECT_EQ(hash::emulation::fingerprint(data.data(), bytes), expected);
  EXPECT_EQ(hash::emulation::fingerprint(data.data() + 3, bytes), hash::fingerprint(data.data() + 3, bytes));
}

INSTANTIATE_TEST_SUITE_P(BoundarySizes, DevicePipeline,
                         testing::Values(0, 1, kLeafBytes - 1, kLeafBytes, kLeafBytes + 1, 5 * kLeafBytes + 100,
                                         kFanout* kLeafBytes, (kFanout + 1) * kLeafBytes));

TEST(DevicePipeline, SegmentDigestsEqualTheHostOnes) {
  const std::size_t bytes = 2050 * kLeafBytes - 3;
  const auto data = random_bytes(bytes, 21);
  for (std::size_t segment : {kLeafBytes, 3 * kLeafBytes, 2049 * kLeafBytes, 4096 * kLeafBytes}) {
    EXPECT_EQ(hash::emulation::segment_digests(data.data(), bytes, segment),
              hash::segment_digests(data.data(), bytes, segment))
        << segment << "-byte segments";
  }
  EXPECT_TRUE(hash::emulation::segment_digests(data.data(), 0, kLeafBytes).empty());
}

TEST(ReferenceFingerprint, WithThePortableXxh3EqualsTheHostFingerprint) {
  // The GPU check uses this pair as its CPU reference where libxxhash is absent.
  auto portable = [](const std::uint8_t* p, std::uint64_t n, std::uint64_t seed) { return xxh3::hash(p, n, seed); };
  const auto data = random_bytes((kFanout + 1) * kLeafBytes, 22);
  for (std::size_t bytes : {std::size_t{0}, std::size_t{7}, kLeafBytes + 1, (kFanout + 1) * kLeafBytes}) {
    EXPECT_EQ(hash::reference::fingerprint(data.data(), bytes, portable), hash::fingerprint(data.data(), bytes));
  }
  EXPECT_EQ(hash::reference::segment_digests(data.data(), 5 * kLeafBytes + 1, 2 * kLeafBytes, portable),
            hash::segment_digests(data.data(), 5 * kLeafBytes + 1, 2 * kLeafBytes));
}

}  // namespace
