#include "cache/block_hash.h"

#include <gtest/gtest.h>

#include <numeric>
#include <unordered_set>
#include <vector>

namespace shardlm {
namespace {

constexpr Fingerprint128 kModel{0x0123456789abcdefULL, 0xfedcba9876543210ULL};

std::vector<int32_t> Iota(int n, int32_t first = 0) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

TEST(BlockHash, SameTokensAndModelGiveTheSameChain) {
  const auto tokens = Iota(10);
  EXPECT_EQ(ChainBlockHashes(tokens, 4, kModel), ChainBlockHashes(Iota(10), 4, kModel));
}

TEST(BlockHash, PartialLastBlockHasNoHash) {
  EXPECT_EQ(ChainBlockHashes(Iota(11), 4, kModel).size(), 2u);
  EXPECT_EQ(ChainBlockHashes(Iota(12), 4, kModel).size(), 3u);
  EXPECT_TRUE(ChainBlockHashes(Iota(3), 4, kModel).empty());
}

TEST(BlockHash, ChainMatchesTheDefinition) {
  const auto tokens = Iota(8, 100);
  const auto chain = ChainBlockHashes(tokens, 4, kModel);
  ASSERT_EQ(chain.size(), 2u);
  const BlockHash h0 = ChainBlockHash(kRootBlockHash, std::span(tokens).first(4), kModel);
  EXPECT_EQ(chain[0], h0);
  EXPECT_EQ(chain[1], ChainBlockHash(h0, std::span(tokens).subspan(4, 4), kModel));
}

TEST(BlockHash, OneChangedTokenChangesItsBlockAndEveryLaterOne) {
  const auto base = ChainBlockHashes(Iota(20), 4, kModel);
  for (int changed = 0; changed < 20; ++changed) {
    auto tokens = Iota(20);
    tokens[changed] += 1;
    const auto chain = ChainBlockHashes(tokens, 4, kModel);
    for (int block = 0; block < 5; ++block) {
      if (block < changed / 4) {
        EXPECT_EQ(chain[block], base[block]) << "token " << changed << " block " << block;
      } else {
        EXPECT_NE(chain[block], base[block]) << "token " << changed << " block " << block;
      }
    }
  }
}

TEST(BlockHash, AnotherModelChangesEveryHash) {
  const auto a = ChainBlockHashes(Iota(12), 4, kModel);
  const auto b = ChainBlockHashes(Iota(12), 4, Fingerprint128{kModel.hi, kModel.lo ^ 1});
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NE(a[i], b[i]) << i;
}

TEST(BlockHash, TheSameBlockAfterAnotherPrefixHashesDifferently) {
  // Blocks [0 1 2 3][4 5 6 7] and [9 9 9 9][4 5 6 7]: the second blocks differ.
  auto other = Iota(8);
  for (int i = 0; i < 4; ++i) other[i] = 9;
  EXPECT_NE(ChainBlockHashes(Iota(8), 4, kModel)[1], ChainBlockHashes(other, 4, kModel)[1]);
}

TEST(BlockHash, DistinctAcrossManyBlocks) {
  const auto chain = ChainBlockHashes(Iota(4096), 1, kModel);
  std::unordered_set<BlockHash> seen(chain.begin(), chain.end());
  EXPECT_EQ(seen.size(), chain.size());
}

TEST(BlockHash, HexRoundTrip) {
  const BlockHash h{0x00ff00ff12345678ULL, 0xabcdef0000000001ULL};
  EXPECT_EQ(h.ToHex(), "00ff00ff12345678abcdef0000000001");
  EXPECT_EQ(BlockHashFromHex(h.ToHex()), h);
  EXPECT_EQ(BlockHashFromHex("00FF00FF12345678ABCDEF0000000001"), h);
  EXPECT_FALSE(BlockHashFromHex("00ff00ff12345678abcdef000000000"));    // 31 digits
  EXPECT_FALSE(BlockHashFromHex("00ff00ff12345678abcdef00000000011"));  // 33 digits
  EXPECT_FALSE(BlockHashFromHex("00ff00ff12345678abcdef000000000g"));
}

TEST(BlockHash, StableAcrossVersionsAndMachines) {
  // Keys files on disk: a change here orphans every user's cache. The value was computed
  // separately with XXH3_128bits over the 48 bytes: 16 zero bytes (root), 0 1 2 3 as
  // little-endian int32, then the fingerprint hi = 1 and lo = 2 as little-endian uint64.
  const BlockHash h = ChainBlockHash(kRootBlockHash, Iota(4), Fingerprint128{1, 2});
  EXPECT_EQ(h.ToHex(), "9804e5afa7ac94a07cf2d4fdb44d446e");
}

}  // namespace
}  // namespace shardlm
