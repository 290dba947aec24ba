// Tests of the sampler: greedy ties, each filter on a hand-made distribution, penalties,
// seeded reproducibility, and empirical frequencies against the computed probabilities.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <vector>

#include "engine/scheduler_test_util.h"

namespace shardlm {
namespace sampler_test {

using scheduler_test_util::WholeDistribution;

std::vector<TokenLogit> Cands(const std::vector<float>& logits) {
  std::vector<TokenLogit> cands;
  for (size_t i = 0; i < logits.size(); ++i) cands.push_back({TokenId(i), logits[i]});
  return cands;
}

std::vector<TokenId> Ids(const std::vector<TokenLogit>& cands) {
  std::vector<TokenId> ids;
  for (const TokenLogit& cand : cands) ids.push_back(cand.id);
  return ids;
}

TEST(SamplerTest, GreedyTakesArgmaxLowestIdOnTies) {
  SamplingParams params = WholeDistribution(0.0f, 1);
  Sampler sampler(params, 6);
  std::vector<float> logits = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f, 3.0f};
  EXPECT_EQ(sampler.Sample(logits).id, 1);
  EXPECT_EQ(Sampler::Argmax(logits), 1);
  params.temperature = -1.0f;  // negative also means greedy
  Sampler negative(params, 6);
  EXPECT_EQ(negative.Sample(logits).id, 1);
}

// Argmax reads a row in lanes: it must pick what a strict left-to-right scan picks, on rows
// of every length around the lane count, with ties, signed zeros, infinities and NaNs.
TEST(SamplerTest, ArgmaxIsTheFirstLargestAsAStrictScanFindsIt) {
  auto scan = [](const std::vector<float>& row) {
    size_t best = 0;
    for (size_t i = 1; i < row.size(); ++i) {
      if (row[i] > row[best]) best = i;
    }
    return TokenId(best);
  };
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float values[] = {0.0f, -0.0f, 1.0f, 2.5f, -3.0f, inf, -inf, nan};
  Rng rng(5);
  for (int n = 1; n <= 70; ++n) {
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<float> row(static_cast<size_t>(n));
      for (float& v : row) v = values[rng.Next() % std::size(values)];
      ASSERT_EQ(Sampler::Argmax(row), scan(row)) << "n " << n << " trial " << trial;
    }
  }
  std::vector<float> big(151936);
  for (float& v : big) v = float(rng.Next() % 1000) / 7.0f;
  EXPECT_EQ(Sampler::Argmax(big), scan(big));
}

TEST(SamplerTest, TopKKeepsTheKLargestInOrder) {
  std::vector<TokenLogit> cands = Cands({1.0f, 5.0f, 3.0f, 5.0f, 0.0f});
  Sampler::TopK(cands, 3);
  EXPECT_EQ(Ids(cands), (std::vector<TokenId>{1, 3, 2}));
  std::vector<TokenLogit> all = Cands({1.0f, 2.0f});
  Sampler::TopK(all, 0);  // off
  EXPECT_EQ(all.size(), 2u);
}

TEST(SamplerTest, TopPKeepsShortestPrefixReachingP) {
  // probabilities 0.5, 0.25, 0.125, 0.125 (logits are their logs)
  std::vector<float> logits = {std::log(0.125f), std::log(0.5f), std::log(0.25f), std::log(0.125f)};
  std::vector<TokenLogit> cands = Cands(logits);
  Sampler::TopP(cands, 0.7f);
  EXPECT_EQ(Ids(cands), (std::vector<TokenId>{1, 2}));
  cands = Cands(logits);
  Sampler::TopP(cands, 0.4f);
  EXPECT_EQ(Ids(cands), (std::vector<TokenId>{1}));
  cands = Cands(logits);
  Sampler::TopP(cands, 1.0f);
  EXPECT_EQ(cands.size(), 4u);
}

TEST(SamplerTest, TopPOnLargeVocabEqualsFullSortPrefix) {
  // 150k tokens, flat and peaked: the partial sorts must give the full sort's prefix.
  for (float scale : {0.1f, 8.0f}) {
    Rng rng(5);
    std::vector<float> logits(150000);
    for (float& logit : logits) logit = float(rng.NextDouble()) * scale;
    std::vector<TokenLogit> cands = Cands(logits);
    Sampler::TopP(cands, 0.9f);
    std::vector<TokenLogit> want = Cands(logits);
    std::sort(want.begin(), want.end(), [](const TokenLogit& a, const TokenLogit& b) {
      return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
    });
    double total = 0.0, cum = 0.0;
    for (float logit : logits) total += std::exp(double(logit));
    size_t keep = 0;
    while (keep < want.size() && cum < 0.9 - 1e-9)
      cum += std::exp(double(want[keep++].logit)) / total;
    ASSERT_NEAR(double(cands.size()), double(keep), 1.0) << "scale " << scale;
    for (size_t i = 0; i < std::min(cands.size(), keep); ++i) ASSERT_EQ(cands[i].id, want[i].id);
  }
}

TEST(SamplerTest, MinPDropsTokensBelowFractionOfMax) {
  std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.1f), std::log(0.04f)};
  std::vector<TokenLogit> cands = Cands(logits);
  Sampler::MinP(cands, 0.2f);  // keep p >= 0.1
  EXPECT_EQ(Ids(cands), (std::vector<TokenId>{0, 1, 2}));
  cands = Cands(logits);
  Sampler::MinP(cands, 0.9f);
  EXPECT_EQ(Ids(cands), (std::vector<TokenId>{0}));
}

TEST(SamplerTest, SoftmaxAppliesTemperature) {
  std::vector<TokenLogit> cands = Cands({0.0f, std::log(3.0f)});
  std::vector<double> probs = Sampler::Softmax(cands, 1.0f);
  EXPECT_NEAR(probs[0], 0.25, 1e-6);
  EXPECT_NEAR(probs[1], 0.75, 1e-6);
  probs = Sampler::Softmax(cands, 0.5f);  // p ∝ 1 : 9
  EXPECT_NEAR(probs[1], 0.9, 1e-6);
}

TEST(SamplerTest, PenaltiesChangeOnlyTokensInWindow) {
  SamplingParams params = WholeDistribution(0.0f, 1);
  params.repeat_penalty = 2.0f;
  params.presence_penalty = 0.5f;
  params.frequency_penalty = 0.25f;
  params.repeat_last_n = 3;
  Sampler sampler(params, 5);
  for (TokenId id : {4, 0, 1, 1}) sampler.Accept(id);  // window: 0, 1, 1 (4 is outside)
  std::vector<TokenLogit> cands = Cands({2.0f, -2.0f, 1.0f, 0.0f, 3.0f});
  sampler.ApplyPenalties(cands);
  EXPECT_FLOAT_EQ(cands[0].logit, 2.0f / 2 - 0.25f - 0.5f);
  EXPECT_FLOAT_EQ(cands[1].logit, -2.0f * 2 - 2 * 0.25f - 0.5f);
  EXPECT_FLOAT_EQ(cands[2].logit, 1.0f);
  EXPECT_FLOAT_EQ(cands[3].logit, 0.0f);
  EXPECT_FLOAT_EQ(cands[4].logit, 3.0f);
}

TEST(SamplerTest, RepeatPenaltyCanChangeGreedyChoice) {
  SamplingParams params = WholeDistribution(0.0f, 1);
  params.repeat_penalty = 1.5f;
  Sampler sampler(params, 3);
  std::vector<float> logits = {1.0f, 1.2f, 0.0f};
  EXPECT_EQ(sampler.Sample(logits).id, 1);
  sampler.Accept(1);
  EXPECT_EQ(sampler.Sample(logits).id, 0);  // 1.2 / 1.5 = 0.8 < 1.0
}

std::vector<TokenId> SampleSequence(const SamplingParams& params, int n) {
  std::vector<float> logits(64);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(float(i)) * 2.0f;
  Sampler sampler(params, int32_t(logits.size()));
  std::vector<TokenId> ids;
  for (int i = 0; i < n; ++i) ids.push_back(sampler.Sample(logits).id);
  return ids;
}

TEST(SamplerTest, SameSeedSameSequenceDifferentSeedsDiffer) {
  SamplingParams params;
  params.top_k = 0;
  params.seed = 42;
  std::vector<TokenId> a = SampleSequence(params, 200);
  EXPECT_EQ(a, SampleSequence(params, 200));
  params.seed = 43;
  EXPECT_NE(a, SampleSequence(params, 200));
}

TEST(SamplerTest, RngIsPlatformIndependent) {
  // First outputs of xoshiro256** seeded through splitmix64 from 0: fixed forever, so a
  // seed reproduces the same tokens on every platform and library.
  Rng rng(0);
  const uint64_t first = rng.Next();
  Rng again(0);
  EXPECT_EQ(first, again.Next());
  EXPECT_EQ(first, 0x99ec5f36cb75f2b4ull);
  double u = Rng(7).NextDouble();
  EXPECT_GE(u, 0.0);
  EXPECT_LT(u, 1.0);
}

TEST(SamplerTest, DrawFollowsCumulativeMass) {
  std::vector<double> probs = {0.2, 0.5, 0.3};
  EXPECT_EQ(Sampler::Draw(probs, 0.0), 0u);
  EXPECT_EQ(Sampler::Draw(probs, 0.19), 0u);
  EXPECT_EQ(Sampler::Draw(probs, 0.21), 1u);
  EXPECT_EQ(Sampler::Draw(probs, 0.71), 2u);
  EXPECT_EQ(Sampler::Draw(probs, 0.9999999), 2u);
}

TEST(SamplerTest, EmpiricalFrequenciesMatchProbabilities) {
  // Temperature 0.7 over five tokens, 200k draws: each frequency within 5 sigma.
  const std::vector<float> logits = {0.0f, 1.0f, -0.5f, 2.0f, 0.3f};
  SamplingParams params = WholeDistribution(0.7f, 123);
  Sampler sampler(params, 5);
  const std::vector<double> probs = Sampler::Softmax(Cands(logits), 0.7f);
  const int n_draws = 200000;
  std::vector<int> counts(5, 0);
  for (int i = 0; i < n_draws; ++i) ++counts[sampler.Sample(logits).id];
  for (size_t i = 0; i < probs.size(); ++i) {
    const double sigma = std::sqrt(probs[i] * (1 - probs[i]) / n_draws);
    EXPECT_NEAR(double(counts[i]) / n_draws, probs[i], 5 * sigma) << "token " << i;
  }
}

TEST(SamplerTest, FiltersRestrictWhatCanBeDrawn) {
  const std::vector<float> logits = {0.0f, 3.0f, 2.5f, 2.9f, -1.0f, 1.0f};
  SamplingParams params = WholeDistribution(1.5f, 9);
  params.top_k = 2;
  Sampler sampler(params, 6);
  std::map<TokenId, int> seen;
  for (int i = 0; i < 2000; ++i) ++seen[sampler.Sample(logits).id];
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_TRUE(seen.count(1) && seen.count(3));
}

TEST(SamplerTest, LogprobsOfChosenAndTopAlternatives) {
  const std::vector<float> logits = {std::log(0.1f), std::log(0.6f), std::log(0.3f)};
  SamplingParams params = WholeDistribution(0.0f, 1);
  params.n_logprobs = 2;
  Sampler sampler(params, 3);
  SampledToken token = sampler.Sample(logits, /*want_logprobs=*/true);
  EXPECT_EQ(token.id, 1);
  EXPECT_NEAR(token.logprob, std::log(0.6), 1e-6);
  ASSERT_EQ(token.top.size(), 2u);
  EXPECT_EQ(token.top[0].id, 1);
  EXPECT_EQ(token.top[1].id, 2);
  EXPECT_NEAR(token.top[1].logprob, std::log(0.3), 1e-6);
}

TEST(SamplerTest, AdjustmentsMaskAndBiasButLogprobsStayTheModels) {
  const std::vector<float> logits = {std::log(0.1f), std::log(0.6f), std::log(0.3f)};
  SamplingParams params = WholeDistribution(0.0f, 1);
  Sampler sampler(params, 3);
  const std::vector<uint64_t> not_1 = {0b101};
  LogitAdjustments mask{.allowed = not_1};
  SampledToken token = sampler.Sample(logits, /*want_logprobs=*/true, mask);
  EXPECT_EQ(token.id, 2);  // the best allowed one
  EXPECT_NEAR(token.logprob, std::log(0.3), 1e-6);
  const std::vector<std::pair<TokenId, float>> bias = {{0, 3.0f}};
  EXPECT_EQ(sampler.Sample(logits, false, {.bias = bias}).id, 0);
  EXPECT_EQ(sampler.Sample(logits, false, {.bias = bias, .allowed = not_1}).id, 0);
  const std::vector<std::pair<TokenId, float>> ban = {{0, -100.0f}, {2, -100.0f}};
  const std::vector<uint64_t> not_1_or_2 = {0b001};
  EXPECT_EQ(sampler.Sample(logits, false, {.bias = ban, .allowed = not_1_or_2}).id, 0);

  // Sampled: only allowed tokens are ever drawn, in the biased proportions.
  Sampler seeded(WholeDistribution(1.0f, 5), 3);
  std::map<TokenId, int> seen;
  for (int i = 0; i < 4000; ++i) ++seen[seeded.Sample(logits, false, mask).id];
  EXPECT_EQ(seen.count(1), 0u);
  EXPECT_NEAR(seen[0] / 4000.0, 0.25, 0.03);  // 0.1 / (0.1 + 0.3)
}

TEST(SamplerTest, ValidateRejectsNonsense) {
  SamplingParams params;
  EXPECT_TRUE(params.Validate().ok());
  params.top_p = 1.5f;
  EXPECT_FALSE(params.Validate().ok());
  params = SamplingParams();
  params.repeat_penalty = 0.0f;
  EXPECT_FALSE(params.Validate().ok());
  params = SamplingParams();
  params.min_p = -0.1f;
  EXPECT_FALSE(params.Validate().ok());
}

}  // namespace sampler_test
}  // namespace shardlm
