// KeySummaries: the q·k bound holds for every stored key, a summary depends only on the
// stored rows (a rewrite rebuilds it), and the recall the `qk` selection exists for: a
// needle key among thousands of random ones keeps its page in the best 1/16 of the pages.
#include "kv/key_summaries.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <span>
#include <vector>

#include "pool_config.h"
#include "tensor/type_traits.h"

namespace shardlm {
namespace key_summaries_test {

struct Fixture {
  std::unique_ptr<PagePool> pool;
  std::unique_ptr<KeySummaries> summaries;
  Fixture(int n_pages, int head_dim, KvType kv_type) {
    pool = std::move(PagePool::Create(kv_test::PoolConfig(n_pages, 64, 2, 2, head_dim, kv_type)))
               .value();
    summaries = std::move(KeySummaries::Create(pool->config(), n_pages)).value();
  }
  // Stores `key` at (page, layer, head, offset) as the forward pass does, and summarizes it.
  void Write(PageId page, int layer, int head, int offset, const float* key) {
    KvStoreRow(pool->config().kv_type, key, pool->KeyRow(page, layer, head, offset),
               pool->config().head_dim);
    summaries->Update(page, pool->page_data(page), *pool, layer, head, offset);
  }
  std::vector<float> Stored(PageId page, int layer, int head, int offset) const {
    std::vector<float> row(size_t(pool->config().head_dim));
    GetTypeTraits(KvElementType(pool->config().kv_type))
        ->dequantize_row(pool->KeyRow(page, layer, head, offset), row.data(), int64_t(row.size()));
    return row;
  }
};

std::vector<float> Gaussian(std::mt19937& rng, int n, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng);
  return v;
}

float Dot(const std::vector<float>& a, const std::vector<float>& b) {
  float s = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

TEST(KeySummaries, TheBoundIsNeverBelowAStoredKeysScore) {
  for (KvType kv_type : {KvType::kF32, KvType::kF16, KvType::kQ8_0, KvType::kQ4_0, KvType::kQ4_1,
                         KvType::kQ5_0, KvType::kQ5_1, KvType::kIq4Nl}) {
    Fixture f(3, 64, kv_type);
    std::mt19937 rng(7);
    for (int offset = 0; offset < 40; ++offset) {
      f.Write(1, 1, 0, offset, Gaussian(rng, 64).data());
    }
    EXPECT_EQ(f.summaries->summarized(1, 1, 0), 40);
    EXPECT_EQ(f.summaries->summarized(1, 0, 0), 0);
    for (int trial = 0; trial < 20; ++trial) {
      const std::vector<float> q = Gaussian(rng, 64);
      const float bound = f.summaries->UpperBound(1, 1, 0, q.data());
      for (int offset = 0; offset < 40; ++offset) {
        // The bound sums exact per-channel maxima; a dot product rounds differently, so
        // allow its rounding.
        EXPECT_GE(bound + 1e-3f * std::abs(bound), Dot(q, f.Stored(1, 1, 0, offset)))
            << KvTypeName(kv_type) << " offset " << offset;
      }
    }
    EXPECT_EQ(f.summaries->UpperBound(2, 1, 0, Gaussian(rng, 64).data()),
              -std::numeric_limits<float>::infinity());
  }
}

TEST(KeySummaries, ARewriteFromAnEarlierPositionEqualsAFreshWrite) {
  Fixture rewritten(2, 32, KvType::kF16);
  Fixture fresh(2, 32, KvType::kF16);
  std::mt19937 rng(11);
  std::vector<std::vector<float>> first, second;
  for (int i = 0; i < 30; ++i) first.push_back(Gaussian(rng, 32, 3.0f));
  for (int i = 0; i < 30; ++i) second.push_back(Gaussian(rng, 32, 0.1f));
  for (int i = 0; i < 30; ++i) rewritten.Write(0, 0, 1, i, first[size_t(i)].data());
  // The sequence goes back to position 10 and continues differently.
  for (int i = 10; i < 20; ++i) rewritten.Write(0, 0, 1, i, second[size_t(i)].data());
  for (int i = 0; i < 10; ++i) fresh.Write(0, 0, 1, i, first[size_t(i)].data());
  for (int i = 10; i < 20; ++i) fresh.Write(0, 0, 1, i, second[size_t(i)].data());
  EXPECT_EQ(rewritten.summaries->summarized(0, 0, 1), 20);
  for (int trial = 0; trial < 10; ++trial) {
    const std::vector<float> q = Gaussian(rng, 32);
    EXPECT_EQ(rewritten.summaries->UpperBound(0, 0, 1, q.data()),
              fresh.summaries->UpperBound(0, 0, 1, q.data()));
  }
  // Rebuilt from the page's bytes (an imported page): the same summary again.
  Fixture imported(2, 32, KvType::kF16);
  std::memcpy(imported.pool->page_data(1), fresh.pool->page_data(0), fresh.pool->page_bytes());
  imported.summaries->Rebuild(1, imported.pool->page_data(1), *imported.pool, 20);
  const std::vector<float> q = Gaussian(rng, 32);
  EXPECT_EQ(imported.summaries->UpperBound(1, 0, 1, q.data()),
            fresh.summaries->UpperBound(0, 0, 1, q.data()));
  imported.summaries->Copy(1, 0);
  EXPECT_EQ(imported.summaries->UpperBound(0, 0, 1, q.data()),
            fresh.summaries->UpperBound(0, 0, 1, q.data()));
  imported.summaries->Forget(0);
  EXPECT_EQ(imported.summaries->summarized(0, 0, 1), 0);
}

// Needle recall: 64 pages of 64 random keys (4096 positions); one key in a random page
// before the last 8 matches the query that comes later. The `qk` ranking keeps the best 4
// pages (1/16 residency); `lru` keeps the 4 most recent. Over seeded trials the needle's
// page must be among the qk pages at least 95% of the time.
// Summaries laid over given memory (a region a prefill worker shares) are the same summaries:
// two views of one memory see each other's updates, and a memory too small is refused.
TEST(KeySummaries, SummariesOverGivenMemoryAreSharedByEveryViewOfIt) {
  Fixture f(4, 32, KvType::kF16);
  const PagePoolConfig& shape = f.pool->config();
  std::vector<float> memory((KeySummaries::Bytes(shape, 4) + sizeof(float) - 1) / sizeof(float));
  const std::span<uint8_t> bytes(reinterpret_cast<uint8_t*>(memory.data()),
                                 KeySummaries::Bytes(shape, 4));
  auto writer = KeySummaries::CreateOn(shape, 4, bytes);
  auto reader = KeySummaries::CreateOn(shape, 4, bytes);
  ASSERT_TRUE(writer.ok() && reader.ok());
  std::mt19937 rng(3);
  const std::vector<float> q = Gaussian(rng, 32);
  EXPECT_EQ(reader.value()->UpperBound(2, 1, 1, q.data()), -INFINITY);
  for (int offset = 0; offset < 10; ++offset) {
    const std::vector<float> key = Gaussian(rng, 32);
    f.Write(2, 1, 1, offset, key.data());
    writer.value()->Update(2, f.pool->page_data(2), *f.pool, 1, 1, offset);
  }
  EXPECT_EQ(reader.value()->summarized(2, 1, 1), 10);
  EXPECT_EQ(reader.value()->UpperBound(2, 1, 1, q.data()),
            f.summaries->UpperBound(2, 1, 1, q.data()));
  EXPECT_EQ(KeySummaries::CreateOn(shape, 4, bytes.first(bytes.size() - 1)).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(KeySummaries, QkKeepsANeedlePageAtOneSixteenthResidency) {
  constexpr int kPages = 64;
  constexpr int kKept = kPages / 16;
  constexpr int kDim = 128;
  constexpr int kTrials = 100;
  int qk_hits = 0;
  int lru_hits = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    std::mt19937 rng(1000 + uint32_t(trial));
    Fixture f(kPages, kDim, KvType::kF16);
    const std::vector<float> q = Gaussian(rng, kDim);
    const int needle_page = std::uniform_int_distribution<int>(1, kPages - 9)(rng);
    const int needle_offset = std::uniform_int_distribution<int>(0, 63)(rng);
    // The needle scores as a key attention picks out: q·k of 2.5 standard deviations of
    // q·k per channel, for every channel (about 28 times a random key's spread at dim 128).
    float norm = 0.0f;
    for (float x : q) norm += x * x;
    norm = std::sqrt(norm / kDim);
    for (int page = 0; page < kPages; ++page) {
      for (int offset = 0; offset < 64; ++offset) {
        std::vector<float> key = Gaussian(rng, kDim);
        if (page == needle_page && offset == needle_offset) {
          for (int c = 0; c < kDim; ++c) key[size_t(c)] = 2.5f * q[size_t(c)] / norm;
        }
        f.Write(page, 0, 0, offset, key.data());
      }
    }
    std::vector<std::pair<float, int>> ranked;
    for (int page = 0; page < kPages; ++page) {
      ranked.push_back({f.summaries->UpperBound(page, 0, 0, q.data()), page});
    }
    std::sort(ranked.begin(), ranked.end(), std::greater<>());
    for (int k = 0; k < kKept; ++k) qk_hits += ranked[size_t(k)].second == needle_page;
    lru_hits += needle_page >= kPages - kKept;
  }
  std::printf("needle recall at 1/16 residency over %d trials: qk %d%%, lru %d%%\n", kTrials,
              qk_hits * 100 / kTrials, lru_hits * 100 / kTrials);
  EXPECT_GE(qk_hits, kTrials * 95 / 100);
  EXPECT_EQ(lru_hits, 0);
}

}  // namespace key_summaries_test
}  // namespace shardlm
