// Host fingerprints (hash/fingerprint.h, hash/parallel_fingerprint.h) against values derived without them: every
// unseeded XXH3 in the expected values comes from the `xxhsum -H3` program run on files this test writes (leaves
// and groups of digests), and only the final seeded step uses libxxhash (xxhsum cannot seed).
#include <gtest/gtest.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "hash/fingerprint.h"
#include "hash/parallel_fingerprint.h"
#include "hash/xxh3_host.h"
#include "hash/xxh3_variants.h"

namespace {

namespace fs = std::filesystem;
using detnccl::hash::kFanout;
using detnccl::hash::kLeafBytes;

std::vector<std::uint8_t> random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = static_cast<std::uint8_t>(rng());
  return v;
}

// A directory that disappears with the test.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "detnccl-test-hash-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() { fs::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_file(const fs::path& path, const std::uint8_t* data, std::size_t bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

// XXH3_64bits of each byte string, computed by the xxhsum program. Missing xxhsum is a failure, not a skip:
// these are the independent values the suite exists to compare with (Debian package `xxhash`).
std::vector<std::uint64_t> xxhsum(const std::vector<std::vector<std::uint8_t>>& inputs) {
  const std::string program = DETNCCL_XXHSUM;
  if (::access(program.c_str(), X_OK) != 0) {
    throw std::runtime_error("xxhsum not found (CMake found '" + program + "'): install the Debian package xxhash");
  }
  TempDir dir;
  std::vector<std::uint64_t> digests;
  constexpr std::size_t kFilesPerCall = 256;  // keeps the command line short
  for (std::size_t first = 0; first < inputs.size(); first += kFilesPerCall) {
    std::string command = program + " -H3";
    std::vector<std::string> names;
    for (std::size_t i = first; i < std::min(inputs.size(), first + kFilesPerCall); ++i) {
      names.push_back((dir.path() / ("in" + std::to_string(i))).string());
      write_file(names.back(), inputs[i].data(), inputs[i].size());
      command += " '" + names.back() + "'";
    }
    FILE* pipe = ::popen(command.c_str(), "r");
    if (pipe == nullptr) throw std::runtime_error("cannot run " + command);
    std::map<std::string, std::uint64_t> by_name;
    char line[4096];
    while (std::fgets(line, sizeof line, pipe) != nullptr) {
      // xxhsum 0.8.1 prints "XXH3 (<file>) = <16 hex>" for -H3.
      const std::string text(line);
      const auto open = text.find(" (");
      const auto close = text.rfind(") = ");
      if (open == std::string::npos || close == std::string::npos) throw std::runtime_error("xxhsum said: " + text);
      by_name[text.substr(open + 2, close - open - 2)] = std::stoull(text.substr(close + 4), nullptr, 16);
    }
    if (::pclose(pipe) != 0) throw std::runtime_error("xxhsum failed: " + command);
    for (const auto& name : names) {
      if (!by_name.contains(name)) throw std::runtime_error("xxhsum printed nothing for " + name);
      digests.push_back(by_name[name]);
    }
  }
  return digests;
}

std::vector<std::uint8_t> little_endian(const std::uint64_t* digests, std::size_t count) {
  std::vector<std::uint8_t> bytes(8 * count);
  for (std::size_t i = 0; i < 8 * count; ++i) bytes[i] = static_cast<std::uint8_t>(digests[i / 8] >> (8 * (i % 8)));
  return bytes;
}

// The definition of docs/fingerprint.md evaluated with xxhsum, level by level.
std::uint64_t fingerprint_via_xxhsum(const std::uint8_t* data, std::size_t bytes) {
  std::vector<std::vector<std::uint8_t>> leaves;
  std::size_t offset = 0;
  do {
    const std::size_t length = std::min(kLeafBytes, bytes - offset);
    leaves.emplace_back(data + offset, data + offset + length);
    offset += length;
  } while (offset < bytes);
  std::vector<std::uint64_t> level = xxhsum(leaves);
  while (level.size() > 1) {
    std::vector<std::vector<std::uint8_t>> groups;
    for (std::size_t first = 0; first < level.size(); first += kFanout) {
      groups.push_back(little_endian(&level[first], std::min(kFanout, level.size() - first)));
    }
    level = xxhsum(groups);
  }
  const std::vector<std::uint8_t> root = little_endian(level.data(), 1);
  return XXH3_64bits_withSeed(root.data(), root.size(), bytes);
}

TEST(HashConstants, MatchTheDocumentedDefinition) {
  EXPECT_EQ(detnccl::hash::kFingerprintVersion, 1U);
  EXPECT_EQ(kLeafBytes, 16384U);
  EXPECT_EQ(kFanout, 2048U);
}

TEST(Xxhsum, AgreesWithLibxxhashOnAKnownInput) {
  // Guards the parser above: a wrong reading of xxhsum's output would make every comparison meaningless.
  const std::vector<std::uint8_t> abc = {'a', 'b', 'c'};
  EXPECT_EQ(xxhsum({abc, {}}), (std::vector<std::uint64_t>{0x78af5f94892f3950ULL, 0x2d06800538d394c2ULL}));
}

class FingerprintSize : public testing::TestWithParam<std::size_t> {};

TEST_P(FingerprintSize, MatchesTheDefinitionComputedWithXxhsum) {
  const std::size_t bytes = GetParam();
  const auto data = random_bytes(bytes + 8, static_cast<std::uint32_t>(bytes));
  EXPECT_EQ(detnccl::hash::fingerprint(data.data(), bytes), fingerprint_via_xxhsum(data.data(), bytes));
}

TEST_P(FingerprintSize, DoesNotDependOnAlignmentOrThreadCount) {
  const std::size_t bytes = GetParam();
  const auto data = random_bytes(bytes + 8, static_cast<std::uint32_t>(bytes));
  const std::uint64_t aligned = detnccl::hash::fingerprint(data.data(), bytes);
  std::vector<std::uint8_t> shifted(bytes + 16);
  for (std::size_t misalign : {1, 3, 7}) {
    std::copy_n(data.begin(), bytes, shifted.begin() + static_cast<std::ptrdiff_t>(misalign));
    EXPECT_EQ(detnccl::hash::fingerprint(shifted.data() + misalign, bytes), aligned) << "misaligned by " << misalign;
  }
  detnccl::hash::ParallelFingerprinter three_threads(3, 0);
  EXPECT_EQ(three_threads.fingerprint(data.data() + 0, bytes), aligned);
  EXPECT_EQ(three_threads.fingerprint(shifted.data() + 7, bytes), aligned);
}

INSTANTIATE_TEST_SUITE_P(BoundarySizes, FingerprintSize,
                         testing::Values(0, 1, kLeafBytes - 1, kLeafBytes, kLeafBytes + 1, 3 * kLeafBytes + 5,
                                         kFanout* kLeafBytes, kFanout* kLeafBytes + 1, (kFanout + 1) * kLeafBytes));

TEST(Fingerprint, OfAnUnalignedSliceMatchesXxhsumOfThatSlice) {
  const auto data = random_bytes(5 * kLeafBytes, 11);
  for (std::size_t start : {1, 5, 8, 4093}) {
    const std::size_t bytes = 2 * kLeafBytes + 77;
    EXPECT_EQ(detnccl::hash::fingerprint(data.data() + start, bytes),
              fingerprint_via_xxhsum(data.data() + start, bytes));
  }
}

TEST(DigestTree, ReducesThreeLevelsAsDefined) {
  // More than kFanout^2 leaf digests need three levels above the leaves: 2048*2048 + 1 digests -> 2049 group
  // digests (the last group holds a single digest) -> 2 -> 1. Expected values spelled out level by level.
  const std::size_t count = kFanout * kFanout + 1;
  std::vector<std::uint64_t> digests(count);
  std::mt19937_64 rng(3);
  for (auto& d : digests) d = rng();
  std::vector<std::uint64_t> level1;
  for (std::size_t g = 0; g < kFanout + 1; ++g) {
    const std::size_t n = std::min(kFanout, count - g * kFanout);
    level1.push_back(XXH3_64bits(&digests[g * kFanout], 8 * n));
  }
  ASSERT_EQ(level1.size(), 2049U);
  const std::uint64_t level2[2] = {XXH3_64bits(level1.data(), 8 * kFanout), XXH3_64bits(&level1[kFanout], 8)};
  const std::uint64_t root = XXH3_64bits(level2, sizeof level2);
  EXPECT_EQ(detnccl::hash::reduce_digests(digests), root);
  const std::uint64_t bytes = std::uint64_t{count} * kLeafBytes;
  EXPECT_EQ(detnccl::hash::fingerprint_from_leaf_digests(digests, bytes), XXH3_64bits_withSeed(&root, 8, bytes));

  // Exactly kFanout^2 digests: two levels, the second a single group of 2048.
  digests.pop_back();
  EXPECT_EQ(detnccl::hash::reduce_digests(digests), XXH3_64bits(level1.data(), 8 * kFanout));
}

TEST(DigestTree, SingleDigestIsItsOwnRootAndEmptyTreeIsAnError) {
  EXPECT_EQ(detnccl::hash::reduce_digests(std::vector<std::uint64_t>{0x1234}), 0x1234U);
  detnccl::hash::DigestTree empty;
  EXPECT_THROW(empty.finish(), std::logic_error);
}

// Each edit must change the fingerprint: these are the changes xor or sum checksums cannot see.
TEST(Fingerprint, SeesPermutationsBitFlipsAndBytesMovedAcrossLeaves) {
  const std::size_t bytes = 4 * kLeafBytes + 100;
  const auto original = random_bytes(bytes, 5);
  const std::uint64_t base = detnccl::hash::fingerprint(original.data(), bytes);
  auto changed = [&](auto edit) {
    auto copy = original;
    edit(copy);
    EXPECT_NE(copy, original);
    return detnccl::hash::fingerprint(copy.data(), bytes) != base;
  };
  auto swap_words = [](std::vector<std::uint8_t>& v, std::size_t a, std::size_t b) {
    std::swap_ranges(v.begin() + static_cast<std::ptrdiff_t>(a), v.begin() + static_cast<std::ptrdiff_t>(a + 8),
                     v.begin() + static_cast<std::ptrdiff_t>(b));
  };
  EXPECT_TRUE(changed([&](auto& v) { swap_words(v, 64, 128); })) << "swap of two words inside a leaf";
  EXPECT_TRUE(changed([&](auto& v) { swap_words(v, 8, 2 * kLeafBytes + 8); })) << "swap of words of two leaves";
  EXPECT_TRUE(changed([&](auto& v) { std::swap_ranges(v.begin(), v.begin() + kLeafBytes, v.begin() + kLeafBytes); }))
      << "swap of two whole leaves";
  EXPECT_TRUE(changed([&](auto& v) { v[3 * kLeafBytes + 17] ^= 0x10; })) << "one bit flipped";
  EXPECT_TRUE(changed([&](auto& v) { v[bytes - 1] ^= 0x80; })) << "one bit flipped in the short last leaf";
  EXPECT_TRUE(changed([&](auto& v) {
    // Shift 8 bytes that straddle the first leaf boundary by one byte: same bytes, same leaf sums otherwise.
    std::rotate(v.begin() + kLeafBytes - 4, v.begin() + kLeafBytes - 3, v.begin() + kLeafBytes + 4);
  })) << "bytes moved across a leaf boundary";
  // The length is part of the fingerprint even where the leaf bytes would agree.
  const std::vector<std::uint8_t> zeros(2 * kLeafBytes, 0);
  EXPECT_NE(detnccl::hash::fingerprint(zeros.data(), kLeafBytes),
            detnccl::hash::fingerprint(zeros.data(), kLeafBytes - 1));
}

TEST(SegmentDigests, AreFingerprintsOfEachSliceComputedWithXxhsum) {
  const std::size_t bytes = 5 * kLeafBytes + 100;
  const std::size_t segment = 2 * kLeafBytes;
  const auto data = random_bytes(bytes, 9);
  const std::vector<std::uint64_t> expected = {fingerprint_via_xxhsum(data.data(), segment),
                                               fingerprint_via_xxhsum(data.data() + segment, segment),
                                               fingerprint_via_xxhsum(data.data() + 2 * segment, kLeafBytes + 100)};
  EXPECT_EQ(detnccl::hash::segment_digests(data.data(), bytes, segment), expected);
  detnccl::hash::ParallelFingerprinter two_threads(2, 0);
  EXPECT_EQ(two_threads.segment_digests(data.data(), bytes, segment), expected);
}

TEST(SegmentDigests, LocateTheChangedSegment) {
  const std::size_t bytes = 8 * kLeafBytes;
  auto data = random_bytes(bytes, 10);
  const auto before = detnccl::hash::segment_digests(data.data(), bytes, kLeafBytes);
  data[5 * kLeafBytes + 3] ^= 1;
  const auto after = detnccl::hash::segment_digests(data.data(), bytes, kLeafBytes);
  ASSERT_EQ(before.size(), 8U);
  for (std::size_t k = 0; k < before.size(); ++k) EXPECT_EQ(before[k] != after[k], k == 5) << "segment " << k;
}

TEST(SegmentDigests, OneSegmentCoveringTheBufferIsTheFingerprint) {
  const auto data = random_bytes(3 * kLeafBytes + 1, 12);
  const auto digests = detnccl::hash::segment_digests(data.data(), data.size(), 4 * kLeafBytes);
  EXPECT_EQ(digests, std::vector<std::uint64_t>{detnccl::hash::fingerprint(data.data(), data.size())});
  EXPECT_TRUE(detnccl::hash::segment_digests(nullptr, 0, kLeafBytes).empty());
}

TEST(SegmentDigests, RejectSizesThatAreNotWholeLeaves) {
  const std::vector<std::uint8_t> data(100);
  for (std::size_t bad : {std::size_t{0}, std::size_t{1000}, kLeafBytes + 1}) {
    try {
      detnccl::hash::segment_digests(data.data(), data.size(), bad);
      ADD_FAILURE() << "accepted segment size " << bad;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("multiple of 16384"), std::string::npos) << e.what();
    }
  }
  detnccl::hash::ParallelFingerprinter pool(2, 0);
  EXPECT_THROW(pool.segment_digests(data.data(), data.size(), 0), std::invalid_argument);
}

TEST(StreamingFingerprint, EqualsTheOneShotFingerprintForAnyPieces) {
  std::mt19937 rng(4);
  for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, kLeafBytes, 3 * kLeafBytes + 7, 2 * kLeafBytes}) {
    const auto data = random_bytes(bytes, 13);
    for (int trial = 0; trial < 4; ++trial) {
      detnccl::hash::StreamingFingerprint stream;
      for (std::size_t offset = 0; offset < bytes;) {
        const std::size_t piece = std::min<std::size_t>(bytes - offset, rng() % (trial == 0 ? 64 : 3 * kLeafBytes));
        stream.update(data.data() + offset, piece);
        offset += piece;
      }
      EXPECT_EQ(stream.bytes(), bytes);
      EXPECT_EQ(stream.finish(), detnccl::hash::fingerprint(data.data(), bytes)) << bytes << " bytes, trial " << trial;
    }
  }
}

TEST(ParallelFingerprinter, DefaultThresholdKeepsSmallBuffersOnTheCaller) {
  detnccl::hash::ParallelFingerprinter pool;
  EXPECT_GE(pool.threads(), 1U);
  const auto data = random_bytes(kLeafBytes * 300 + 9, 14);
  EXPECT_EQ(pool.fingerprint(data.data(), data.size()), detnccl::hash::fingerprint(data.data(), data.size()));
  detnccl::hash::ParallelFingerprinter one_thread(1, 0);
  EXPECT_EQ(one_thread.fingerprint(data.data(), data.size()), detnccl::hash::fingerprint(data.data(), data.size()));
}

TEST(FormatDigest, IsSixteenLowercaseHexDigits) {
  EXPECT_EQ(detnccl::hash::format_digest(0x1aULL), "000000000000001a");
  EXPECT_EQ(detnccl::hash::format_digest(0xFEDCBA9876543210ULL), "fedcba9876543210");
}

// detnccl's own XXH3 build (hash/xxh3_host.h, header-only xxHash, dispatched by processor) against Debian's
// libxxhash, an independently compiled library: every variant this processor can run, the lengths where XXH3 changes
// path (0-16, 17-128, 129-240, stripes, blocks, the leaf size and beyond), unaligned starts, unseeded and seeded.
std::vector<std::size_t> xxh3_interesting_lengths() {
  std::vector<std::size_t> lengths;
  for (std::size_t n = 0; n <= 2118; ++n) lengths.push_back(n);
  for (std::size_t n : {kLeafBytes - 1, kLeafBytes, kLeafBytes + 1, 3 * kLeafBytes + 5, std::size_t{1} << 20}) {
    lengths.push_back(n);
  }
  return lengths;
}

TEST(HostXxh3, EveryVariantThisProcessorRunsEqualsLibxxhash) {
  using Variant = std::uint64_t (*)(const void*, std::size_t, std::uint64_t);
  std::vector<std::pair<const char*, Variant>> variants = {{"baseline", &detnccl_xxh3_64_baseline}};
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2")) variants.emplace_back("avx2", &detnccl_xxh3_64_avx2);
#endif
  const auto data = random_bytes((std::size_t{1} << 20) + 8, 21);
  std::mt19937_64 rng(22);
  for (const auto& [name, variant] : variants) {
    for (std::size_t n : xxh3_interesting_lengths()) {
      for (std::size_t misalign : {std::size_t{0}, std::size_t{3}}) {
        const std::uint8_t* in = data.data() + misalign;
        ASSERT_EQ(variant(in, n, 0), XXH3_64bits(in, n)) << name << ", " << n << " bytes at +" << misalign;
        const std::uint64_t seed = rng();
        ASSERT_EQ(variant(in, n, seed), XXH3_64bits_withSeed(in, n, seed)) << name << ", " << n << " bytes, seeded";
      }
    }
  }
}

// A seed's secret, derived once, gives what the seeded form gives, in every variant and through the dispatch.
TEST(HostXxh3, TheSecretOfASeedGivesTheSeededHash) {
  using Variant = std::uint64_t (*)(const void*, std::size_t, const void*, std::uint64_t);
  std::vector<std::pair<const char*, Variant>> variants = {{"baseline", &detnccl_xxh3_64_seed_secret_baseline}};
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2")) variants.emplace_back("avx2", &detnccl_xxh3_64_seed_secret_avx2);
#endif
  const auto data = random_bytes((std::size_t{1} << 20) + 8, 24);
  std::mt19937_64 rng(25);
  for (std::size_t n : xxh3_interesting_lengths()) {
    const std::uint8_t* in = data.data() + 3;
    for (const std::uint64_t seed : {std::uint64_t{0}, rng()}) {
      detnccl::hash::Xxh3SeedSecret secret;
      detnccl::hash::xxh3_seed_secret(seed, secret);
      const std::uint64_t expected = XXH3_64bits_withSeed(in, n, seed);
      ASSERT_EQ(detnccl::hash::xxh3_64(in, n, secret), expected) << n << " bytes, seed " << seed;
      for (const auto& [name, variant] : variants) {
        ASSERT_EQ(variant(in, n, secret.secret, seed), expected) << name << ", " << n << " bytes, seed " << seed;
      }
    }
  }
}

TEST(HostXxh3, DispatchedFunctionEqualsLibxxhash) {
  const auto data = random_bytes(3 * kLeafBytes + 5, 23);
  for (std::size_t n : {std::size_t{0}, std::size_t{7}, std::size_t{200}, std::size_t{1000}, kLeafBytes, data.size()}) {
    EXPECT_EQ(detnccl::hash::xxh3_64(data.data(), n), XXH3_64bits(data.data(), n)) << n;
    EXPECT_EQ(detnccl::hash::xxh3_64(data.data(), n, n * 31 + 1), XXH3_64bits_withSeed(data.data(), n, n * 31 + 1))
        << n;
  }
}

TEST(HostXxh3, UsesAvx2ExactlyWhereTheProcessorHasIt) {
#if defined(__x86_64__)
  const std::string expected = __builtin_cpu_supports("avx2") ? "avx2" : "sse2";
#else
  const std::string expected = "native";
#endif
  EXPECT_EQ(detnccl::hash::xxh3_vector_unit(), expected);
}

}  // namespace
