// Sampler: turns one row of logits into one token, plus the log-probabilities a caller
// (the OpenAI `logprobs` field) asks for.
//
// Goals: llama.cpp's default chain and parameter meanings (penalties → top-k → top-p →
// min-p → temperature → softmax → draw), greedy when temperature <= 0 (argmax, lowest id
// wins ties); a seeded PRNG of our own (xoshiro256**, seeded through splitmix64) and a draw
// written here, so the same seed gives the same tokens on every platform and standard
// library (std::*_distribution outputs are implementation-defined); a total order on
// candidates (logit, then id) so no sort depends on the library's algorithm.
// Per request adjustments (LogitAdjustments): logit_bias added to the raw logits before the
// chain, and a token mask (a grammar's) that leaves only the allowed tokens as candidates.
// Non-goals: the grammar itself (grammar/), DRY, XTC, mirostat, typical-p.
//
// Thread safety: a Sampler belongs to one sequence and one thread. Lifetime: plain value;
// copying it copies the RNG state and the penalty window (a fork of the sequence).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "tokenizer/tokenizer.h"

namespace shardlm {

struct SamplingParams {
  float temperature = 0.8f;        // <= 0: greedy
  int32_t top_k = 40;              // <= 0: off
  float top_p = 0.95f;             // >= 1: off
  float min_p = 0.05f;             // <= 0: off
  float repeat_penalty = 1.0f;     // 1: off; logit > 0 is divided by it, logit <= 0 multiplied
  int32_t repeat_last_n = 64;      // penalty window in tokens; 0: off, -1: whole history
  float presence_penalty = 0.0f;   // subtracted once from every token seen in the window
  float frequency_penalty = 0.0f;  // subtracted once per occurrence in the window
  uint64_t seed = 0;
  int32_t n_logprobs = 0;  // top alternatives to report (0: only the chosen token's)

  // A clear message for values outside their meaning (negative penalty, top_p > 1, ...).
  Status Validate() const;
};

// One candidate token with its (possibly adjusted) logit.
struct TokenLogit {
  TokenId id;
  float logit;
};

struct TokenLogprob {
  TokenId id;
  float logprob;
};

// What a request changes before a token is chosen: `bias` (sorted by id, ids unique and
// < n_vocab) is added to the raw logits before penalties and filters; `allowed` (bit
// id % 64 of word id / 64, at least one bit set; empty: every token) leaves only those
// tokens as candidates. Neither changes the reported log-probabilities.
struct LogitAdjustments {
  std::span<const std::pair<TokenId, float>> bias = {};
  std::span<const uint64_t> allowed = {};
  bool empty() const { return bias.empty() && allowed.empty(); }
};

// The chosen token, its log-probability under the model's distribution (log-softmax of the
// raw logits, before penalties, filters and temperature, as llama.cpp's server reports
// them), and the n_logprobs most likely alternatives under the same distribution.
struct SampledToken {
  TokenId id = -1;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;
};

// xoshiro256** (Blackman & Vigna), seeded by splitmix64: 256 bits of state, fast, and the
// same stream everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t Next();
  double NextDouble();  // uniform in [0, 1), 53 random bits

 private:
  uint64_t s_[4];
};

class Sampler {
 public:
  // `params` must be valid (Validate()); n_vocab bounds the ids Accept takes.
  Sampler(const SamplingParams& params, int32_t n_vocab);

  const SamplingParams& params() const { return params_; }
  bool greedy() const { return params_.temperature <= 0.0f; }

  // Chooses the next token from logits[n_vocab], adjusted by `adjust`. `want_logprobs`
  // fills logprob and top (of the unadjusted logits).
  SampledToken Sample(std::span<const float> logits, bool want_logprobs = false,
                      const LogitAdjustments& adjust = {});
  // Records a token of the sequence (prompt or generated) for the penalty window.
  void Accept(TokenId id);
  // Forgets the penalty window (a new sequence); the RNG stream continues.
  void ResetHistory() { history_.clear(); }

  // The chain's stages, public for tests. Each keeps at least one candidate.
  void ApplyPenalties(std::vector<TokenLogit>& cands) const;
  static void TopK(std::vector<TokenLogit>& cands, int32_t k);
  static void TopP(std::vector<TokenLogit>& cands, float p);
  static void MinP(std::vector<TokenLogit>& cands, float p);
  // Softmax of cands' logits / temperature, in cands' order.
  static std::vector<double> Softmax(const std::vector<TokenLogit>& cands, float temperature);
  // Index i with probability probs[i] / sum(probs), given u uniform in [0, 1).
  static size_t Draw(const std::vector<double>& probs, double u);
  // Argmax, lowest id among equal maxima.
  static TokenId Argmax(std::span<const float> logits);

 private:
  TokenId SampleFiltered(std::span<const float> logits, const LogitAdjustments& adjust);
  // The candidates `adjust` leaves, in id order, biased.
  void Candidates(std::span<const float> logits, const LogitAdjustments& adjust,
                  std::vector<TokenLogit>& cands) const;
  bool PenaltiesActive() const;
  void FillLogprobs(std::span<const float> logits, SampledToken& out) const;

  SamplingParams params_;
  int32_t n_vocab_;
  Rng rng_;
  std::vector<TokenId> history_;  // oldest first; trimmed to the window when it grows
};

}  // namespace shardlm
