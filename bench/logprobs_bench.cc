// logprobs_bench: the cost of the `logprobs` fields per token on a Qwen3-sized vocabulary
// row (151936 logits), against the straightforward computation in the same run.
//
// Goals: the figure that tells whether asking for logprobs slows batched decoding (it runs
// once per token of every stream that asks, on the engine thread). Cases: "reference" (a
// double exp per entry, twice, plus a copy and partial sort of the row for the top 5: what
// the sampler did before logprobs.h) and "logprobs" (LogSumExp + TopLogprobs). Each case
// runs several rounds and reports the median. One JSON object per line, then the ratio.
// Non-goals: the sampler's filters (top-k/top-p), tokenizing the pieces.
//
// Usage: logprobs_bench [rounds]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "engine/logprobs.h"

namespace shardlm {
namespace {

constexpr size_t kVocab = 151936;
constexpr int32_t kTop = 5;

double ReferenceLogSumExp(const std::vector<float>& row) {
  const float max_logit = *std::max_element(row.begin(), row.end());
  double sum = 0.0;
  for (float x : row) sum += std::exp(double(x) - double(max_logit));
  return double(max_logit) + std::log(sum);
}

double Reference(const std::vector<float>& row) {
  const double lse = ReferenceLogSumExp(row);
  std::vector<TokenLogprob> cands(row.size());
  for (size_t i = 0; i < row.size(); ++i) cands[i] = {TokenId(i), row[i]};
  std::partial_sort(cands.begin(), cands.begin() + kTop, cands.end(),
                    [](const TokenLogprob& a, const TokenLogprob& b) {
                      return a.logprob != b.logprob ? a.logprob > b.logprob : a.id < b.id;
                    });
  return lse + ReferenceLogSumExp(row) + cands[0].logprob;  // the old code summed twice
}

double Ours(const std::vector<float>& row) {
  const double lse = LogSumExp(row);
  return lse + TopLogprobs(row, kTop, lse)[0].logprob;
}

volatile double g_sink = 0.0;  // keeps the results alive

template <typename Fn>
double MedianMs(Fn fn, const std::vector<float>& row, int rounds) {
  std::vector<double> ms;
  for (int r = 0; r < rounds; ++r) {
    const auto start = std::chrono::steady_clock::now();
    g_sink = g_sink + fn(row);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace
}  // namespace shardlm

int main(int argc, char** argv) {
  using namespace shardlm;
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 200;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> row(kVocab);
  for (float& x : row) x = normal(rng);
  // Interleaved rounds of both cases, so machine noise hits both alike.
  std::vector<double> reference, ours;
  for (int i = 0; i < 5; ++i) {
    reference.push_back(MedianMs(Reference, row, rounds / 5 + 1));
    ours.push_back(MedianMs(Ours, row, rounds / 5 + 1));
  }
  std::sort(reference.begin(), reference.end());
  std::sort(ours.begin(), ours.end());
  const double ref_ms = reference[reference.size() / 2];
  const double ours_ms = ours[ours.size() / 2];
  std::printf(
      "{\"bench\":\"logprobs\",\"case\":\"reference\",\"vocab\":%zu,\"top\":%d,\"ms\":%.4f}\n",
      kVocab, kTop, ref_ms);
  std::printf(
      "{\"bench\":\"logprobs\",\"case\":\"logprobs\",\"vocab\":%zu,\"top\":%d,\"ms\":%.4f}\n",
      kVocab, kTop, ours_ms);
  std::printf("{\"bench\":\"logprobs\",\"speedup\":%.2f}\n", ref_ms / ours_ms);
  return 0;
}
