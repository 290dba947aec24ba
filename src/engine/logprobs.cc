// Log-softmax figures for the `logprobs` fields. See logprobs.h.
#include "engine/logprobs.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

namespace shardlm {
namespace {

// exp(x) for x <= 0 (logit − max): 2^k · e^r with k = round(x / ln 2) and |r| <= ln 2 / 2,
// e^r by its Taylor polynomial to degree 7 (the next term is below 2e-9 of the result).
// Branch-free and libm-free so the block loop below vectorises. x below −87 (−inf
// included) is clamped to −87 first, on the bits (for a non-positive float, a larger
// magnitude is a larger unsigned bit pattern), because a float compare-and-select would
// stop GCC from vectorising; exp(−87) ≈ 1.6e-38 does not change a sum whose largest term is 1.
inline float ExpNonPositive(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // ln 2 split so k · kLn2Hi is exact
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 · 2^23: adding it rounds to an integer
  constexpr uint32_t kLowest = std::bit_cast<uint32_t>(-87.0f);
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  x = std::bit_cast<float>(bits > kLowest ? kLowest : bits);
  const float shifted = x * kLog2e + kRound;
  const float k = shifted - kRound;
  const int32_t ki = std::bit_cast<int32_t>(shifted) - std::bit_cast<int32_t>(kRound);
  const float r = (x - k * kLn2Hi) - k * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return p * std::bit_cast<float>((ki + 127) << 23);
}

// Σ exp(row[j] − max) over one block, in float lanes (each sums kBlock / kLanes terms <= 1).
// Compiled twice, for AVX2 and for the baseline, and picked when the program loads; AVX2
// alone has no fused multiply-add, so both clones do the same float operations in the
// same order and give the same sum bitwise on every machine.
constexpr size_t kBlock = 512;
constexpr size_t kLanes = 8;
__attribute__((target_clones("avx2", "default"))) double BlockSum(const float* __restrict row,
                                                                  size_t n, float max_logit) {
  float terms[kBlock];
  for (size_t j = 0; j < n; ++j) terms[j] = ExpNonPositive(row[j] - max_logit);
  float lanes[kLanes] = {};
  size_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (size_t l = 0; l < kLanes; ++l) lanes[l] += terms[j + l];
  }
  double sum = 0.0;
  for (; j < n; ++j) sum += terms[j];
  for (float lane : lanes) sum += lane;
  return sum;
}

bool Likelier(const TokenLogprob& a, const TokenLogprob& b) {
  if (a.logprob != b.logprob) return a.logprob > b.logprob;
  return a.id < b.id;
}

}  // namespace

double LogSumExp(std::span<const float> logits) {
  if (logits.empty()) return -std::numeric_limits<double>::infinity();
  float max_logit = -std::numeric_limits<float>::infinity();
  for (float logit : logits) max_logit = std::max(max_logit, logit);
  if (!std::isfinite(max_logit)) return max_logit;
  double sum = 0.0;
  for (size_t i = 0; i < logits.size(); i += kBlock) {
    sum += BlockSum(logits.data() + i, std::min(kBlock, logits.size() - i), max_logit);
  }
  return double(max_logit) + std::log(sum);
}

std::vector<TokenLogprob> TopLogprobs(std::span<const float> logits, int32_t n, double lse) {
  const size_t keep = std::min(logits.size(), size_t(std::max(n, 0)));
  std::vector<TokenLogprob> top;  // sorted by Likelier, at most `keep` long; logit for now
  if (keep == 0) return top;
  top.reserve(keep + 1);
  for (size_t i = 0; i < logits.size(); ++i) {
    const TokenLogprob cand{TokenId(i), logits[i]};
    if (top.size() == keep && !Likelier(cand, top.back())) continue;
    top.insert(std::upper_bound(top.begin(), top.end(), cand, Likelier), cand);
    if (top.size() > keep) top.pop_back();
  }
  for (TokenLogprob& t : top) t.logprob = float(double(t.logprob) - lse);
  return top;
}

}  // namespace shardlm
