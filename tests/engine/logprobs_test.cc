// Logprobs: LogSumExp against a double-precision reference over rows like a model's
// (152K entries, wide and narrow spreads, -inf entries), and TopLogprobs against a full
// sort in the (logit descending, id ascending) order, ties and bounds included.
#include "engine/logprobs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace shardlm {
namespace logprobs_test {

double ReferenceLogSumExp(const std::vector<float>& row) {
  const float max_logit = *std::max_element(row.begin(), row.end());
  double sum = 0.0;
  for (float x : row) sum += std::exp(double(x) - double(max_logit));
  return double(max_logit) + std::log(sum);
}

std::vector<float> RandomRow(size_t n, float spread, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, spread);
  std::vector<float> row(n);
  for (float& x : row) x = normal(rng);
  return row;
}

TEST(LogprobsTest, LogSumExpMatchesTheReference) {
  for (float spread : {0.01f, 1.0f, 3.0f, 30.0f}) {
    for (size_t n : {size_t(1), size_t(7), size_t(512), size_t(1000), size_t(151936)}) {
      const std::vector<float> row = RandomRow(n, spread, uint32_t(n) + uint32_t(spread * 100));
      EXPECT_NEAR(LogSumExp(row), ReferenceLogSumExp(row), 2e-6)
          << "n " << n << " spread " << spread;
    }
  }
}

TEST(LogprobsTest, LogSumExpOfSpecialRows) {
  EXPECT_EQ(LogSumExp({}), -std::numeric_limits<double>::infinity());
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> row = {-inf, 2.0f, -inf, 2.0f};
  EXPECT_NEAR(LogSumExp(row), 2.0 + std::log(2.0), 1e-6);
  row = {-200.0f, 0.0f};  // exp(-200) underflows: the sum is 1
  EXPECT_NEAR(LogSumExp(row), 0.0, 1e-7);
  row = {1e4f, 1e4f - 1.0f};  // large logits do not overflow
  EXPECT_NEAR(LogSumExp(row), 1e4 + std::log1p(std::exp(-1.0)), 1e-3);
}

TEST(LogprobsTest, TopLogprobsAreTheFullSortsFirstEntries) {
  std::vector<float> row = RandomRow(151936, 3.0f, 7);
  row[100] = row[200] = row[50] = 40.0f;  // ties: lower id first
  const double lse = LogSumExp(row);
  std::vector<TokenLogprob> all;
  for (size_t i = 0; i < row.size(); ++i) all.push_back({TokenId(i), row[i]});
  std::sort(all.begin(), all.end(), [](const TokenLogprob& a, const TokenLogprob& b) {
    return a.logprob != b.logprob ? a.logprob > b.logprob : a.id < b.id;
  });
  for (int32_t n : {1, 3, 20}) {
    const std::vector<TokenLogprob> top = TopLogprobs(row, n, lse);
    ASSERT_EQ(top.size(), size_t(n));
    for (int32_t i = 0; i < n; ++i) {
      EXPECT_EQ(top[i].id, all[i].id) << i;
      EXPECT_EQ(top[i].logprob, float(double(all[i].logprob) - lse)) << i;
    }
  }
  EXPECT_EQ(TopLogprobs(row, 3, lse)[0].id, 50);
  EXPECT_EQ(TopLogprobs(row, 3, lse)[2].id, 200);
  EXPECT_TRUE(TopLogprobs(row, 0, lse).empty());
  EXPECT_TRUE(TopLogprobs(row, -1, lse).empty());
  const std::vector<float> small = {1.0f, 3.0f};
  const std::vector<TokenLogprob> both = TopLogprobs(small, 5, LogSumExp(small));
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[0].id, 1);
  EXPECT_NEAR(std::exp(both[0].logprob) + std::exp(both[1].logprob), 1.0, 1e-6);
}

}  // namespace logprobs_test
}  // namespace shardlm
