// Sampler implementation: the filter chain, the PRNG and the draw (see sampler.h).
#include "engine/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "base/check.h"
#include "engine/logprobs.h"

namespace shardlm {
namespace {

// Candidates are ordered by logit (descending), then id (ascending): a total order, so
// std::sort and std::partial_sort give the same result on every standard library.
bool Before(const TokenLogit& a, const TokenLogit& b) {
  if (a.logit != b.logit) return a.logit > b.logit;
  return a.id < b.id;
}

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

Status SamplingParams::Validate() const {
  if (!(top_p >= 0.0f && top_p <= 1.0f)) {
    return InvalidArgument("top_p must be in [0, 1], got {}", top_p);
  }
  if (!(min_p >= 0.0f && min_p <= 1.0f)) {
    return InvalidArgument("min_p must be in [0, 1], got {}", min_p);
  }
  if (!(repeat_penalty > 0.0f)) {
    return InvalidArgument("repeat_penalty must be > 0 (1 disables it), got {}", repeat_penalty);
  }
  if (repeat_last_n < -1) {
    return InvalidArgument("repeat_last_n must be >= -1 (-1: whole history), got {}",
                           repeat_last_n);
  }
  if (!std::isfinite(temperature) || !std::isfinite(presence_penalty) ||
      !std::isfinite(frequency_penalty)) {
    return InvalidArgument("temperature and penalties must be finite numbers");
  }
  if (n_logprobs < 0 || n_logprobs > 1000) {
    return InvalidArgument("n_logprobs must be in [0, 1000], got {}", n_logprobs);
  }
  return Status::Ok();
}

Rng::Rng(uint64_t seed) {
  uint64_t state = seed;
  for (uint64_t& word : s_) word = SplitMix64(state);
}

uint64_t Rng::Next() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

double Rng::NextDouble() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

Sampler::Sampler(const SamplingParams& params, int32_t n_vocab)
    : params_(params), n_vocab_(n_vocab), rng_(params.seed) {
  SHARDLM_CHECK(n_vocab > 0);
}

void Sampler::Accept(TokenId id) {
  SHARDLM_DCHECK(id >= 0 && id < n_vocab_);
  history_.push_back(id);
  // Keep the window plus slack, so trimming is amortized O(1) per token.
  const int32_t window = params_.repeat_last_n;
  if (window >= 0 && history_.size() > 2 * static_cast<size_t>(window) + 64) {
    history_.erase(history_.begin(), history_.end() - window);
  }
}

bool Sampler::PenaltiesActive() const {
  const bool any = params_.repeat_penalty != 1.0f || params_.presence_penalty != 0.0f ||
                   params_.frequency_penalty != 0.0f;
  return any && params_.repeat_last_n != 0 && !history_.empty();
}

void Sampler::ApplyPenalties(std::vector<TokenLogit>& cands) const {
  if (!PenaltiesActive()) return;
  size_t window = history_.size();
  if (params_.repeat_last_n > 0) window = std::min(window, size_t(params_.repeat_last_n));
  std::unordered_map<TokenId, int> counts;
  for (size_t i = history_.size() - window; i < history_.size(); ++i) ++counts[history_[i]];
  for (TokenLogit& cand : cands) {
    auto it = counts.find(cand.id);
    if (it == counts.end()) continue;
    // As llama.cpp: a positive logit shrinks, a negative one grows more negative.
    if (cand.logit <= 0) {
      cand.logit *= params_.repeat_penalty;
    } else {
      cand.logit /= params_.repeat_penalty;
    }
    cand.logit -= float(it->second) * params_.frequency_penalty + params_.presence_penalty;
  }
}

void Sampler::TopK(std::vector<TokenLogit>& cands, int32_t k) {
  if (k <= 0 || size_t(k) >= cands.size()) return;
  std::partial_sort(cands.begin(), cands.begin() + k, cands.end(), Before);
  cands.resize(k);
}

void Sampler::TopP(std::vector<TokenLogit>& cands, float p) {
  if (p >= 1.0f || cands.size() <= 1) return;
  float max_logit = -std::numeric_limits<float>::infinity();
  for (const TokenLogit& cand : cands) max_logit = std::max(max_logit, cand.logit);
  double total = 0.0;
  for (const TokenLogit& cand : cands) total += std::exp(double(cand.logit) - max_logit);
  // Keep the shortest prefix (in Before order) whose mass reaches p, at least one token.
  // Sort only as much of the head as that needs: a trained model puts most of its mass in
  // a few tokens, and sorting a 150k vocabulary every step would cost milliseconds.
  constexpr size_t kFirstSort = 256;
  size_t sorted = std::min(cands.size(), kFirstSort);
  for (;;) {
    std::partial_sort(cands.begin(), cands.begin() + sorted, cands.end(), Before);
    double cum = 0.0;
    for (size_t i = 0; i < sorted; ++i) {
      cum += std::exp(double(cands[i].logit) - max_logit) / total;
      if (cum >= p) {
        cands.resize(i + 1);
        return;
      }
    }
    if (sorted == cands.size()) return;  // rounding kept the mass below p: keep all
    sorted = std::min(cands.size(), sorted * 8);
  }
}

void Sampler::MinP(std::vector<TokenLogit>& cands, float p) {
  if (p <= 0.0f || cands.size() <= 1) return;
  float max_logit = -std::numeric_limits<float>::infinity();
  for (const TokenLogit& cand : cands) max_logit = std::max(max_logit, cand.logit);
  // prob(i) >= p * prob(max)  <=>  logit(i) >= max_logit + log(p)
  const float threshold = max_logit + std::log(p);
  std::erase_if(cands, [&](const TokenLogit& cand) { return cand.logit < threshold; });
}

std::vector<double> Sampler::Softmax(const std::vector<TokenLogit>& cands, float temperature) {
  std::vector<double> probs(cands.size());
  if (cands.empty()) return probs;
  float max_logit = cands[0].logit;
  for (const TokenLogit& cand : cands) max_logit = std::max(max_logit, cand.logit);
  const double inv_temp = 1.0 / temperature;
  double sum = 0.0;
  for (size_t i = 0; i < cands.size(); ++i) {
    probs[i] = std::exp((double(cands[i].logit) - max_logit) * inv_temp);
    sum += probs[i];
  }
  for (double& prob : probs) prob /= sum;
  return probs;
}

size_t Sampler::Draw(const std::vector<double>& probs, double u) {
  SHARDLM_CHECK(!probs.empty());
  double total = 0.0;
  for (double prob : probs) total += prob;
  const double target = u * total;
  double cum = 0.0;
  for (size_t i = 0; i < probs.size(); ++i) {
    cum += probs[i];
    if (target < cum) return i;
  }
  return probs.size() - 1;  // rounding left target == total
}

// The id a strict scan (`logits[i] > logits[best]`) picks: the first of the largest values,
// NaNs never chosen unless at id 0 (nothing compares greater than it). A 152K-entry row is
// read once per token of every greedy stream, on the engine thread between batches, so it
// is read in chunks whose maximum comes from independent lanes (vector max instructions:
// `v > m ? v : m` keeps m for a NaN v, as the scan skips NaNs) rather than one chain of
// compares; the first chunk holding the largest value is then scanned for its first
// position (== matches -0 and +0, as the scan's > does not tell them apart).
TokenId Sampler::Argmax(std::span<const float> logits) {
  SHARDLM_CHECK(!logits.empty());
  const float* x = logits.data();
  const size_t n = logits.size();
  if (std::isnan(x[0])) return 0;
  constexpr size_t kLanes = 16;
  constexpr size_t kChunk = 16 * kLanes;
  constexpr float kLowest = -std::numeric_limits<float>::infinity();
  float best = x[0];
  size_t best_chunk = 0;
  for (size_t start = 0; start < n; start += kChunk) {
    const size_t end = std::min(n, start + kChunk);
    float m = kLowest;
    size_t i = start;
    if (end - start == kChunk) {
      float lanes[kLanes];
      std::fill(lanes, lanes + kLanes, kLowest);
      for (; i < end; i += kLanes) {
        for (size_t l = 0; l < kLanes; ++l) lanes[l] = x[i + l] > lanes[l] ? x[i + l] : lanes[l];
      }
      for (float lane : lanes) m = lane > m ? lane : m;
    }
    for (; i < end; ++i) m = x[i] > m ? x[i] : m;
    if (m > best) {
      best = m;
      best_chunk = start;
    }
  }
  size_t first = best_chunk;
  while (!(x[first] == best)) ++first;
  return TokenId(first);
}

void Sampler::Candidates(std::span<const float> logits, const LogitAdjustments& adjust,
                         std::vector<TokenLogit>& cands) const {
  cands.clear();
  if (adjust.allowed.empty()) {
    cands.resize(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) cands[i] = {TokenId(i), logits[i]};
  } else {
    SHARDLM_CHECK(adjust.allowed.size() == (logits.size() + 63) / 64);
    for (size_t w = 0; w < adjust.allowed.size(); ++w) {
      for (uint64_t bits = adjust.allowed[w]; bits != 0; bits &= bits - 1) {
        const size_t id = w * 64 + size_t(std::countr_zero(bits));
        if (id < logits.size()) cands.push_back({TokenId(id), logits[id]});
      }
    }
  }
  // Both lists are in id order: one merge adds the biases.
  size_t c = 0;
  for (const auto& [id, bias] : adjust.bias) {
    while (c < cands.size() && cands[c].id < id) ++c;
    if (c < cands.size() && cands[c].id == id) cands[c].logit += bias;
  }
}

TokenId Sampler::SampleFiltered(std::span<const float> logits, const LogitAdjustments& adjust) {
  std::vector<TokenLogit> cands;
  Candidates(logits, adjust, cands);
  SHARDLM_CHECK(!cands.empty());
  ApplyPenalties(cands);
  if (greedy()) {
    return std::min_element(cands.begin(), cands.end(), Before)->id;
  }
  TopK(cands, params_.top_k);
  TopP(cands, params_.top_p);
  MinP(cands, params_.min_p);
  const std::vector<double> probs = Softmax(cands, params_.temperature);
  return cands[Draw(probs, rng_.NextDouble())].id;
}

SampledToken Sampler::Sample(std::span<const float> logits, bool want_logprobs,
                             const LogitAdjustments& adjust) {
  SHARDLM_CHECK(logits.size() == size_t(n_vocab_));
  SampledToken out;
  const bool plain_greedy = greedy() && !PenaltiesActive() && adjust.empty();
  out.id = plain_greedy ? Argmax(logits) : SampleFiltered(logits, adjust);
  if (want_logprobs) FillLogprobs(logits, out);
  return out;
}

void Sampler::FillLogprobs(std::span<const float> logits, SampledToken& out) const {
  const double lse = LogSumExp(logits);
  out.logprob = float(double(logits[out.id]) - lse);
  if (params_.n_logprobs > 0) out.top = TopLogprobs(logits, params_.n_logprobs, lse);
}

}  // namespace shardlm
