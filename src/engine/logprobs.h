// Logprobs: the log-softmax figures the OpenAI `logprobs` fields report — the log of the
// softmax normaliser of a logits row, and the n most likely tokens with their
// log-probabilities.
//
// Goals: cheap enough to ask for on every token of every stream (a 152K-entry vocabulary
// row costs a few tens of microseconds, not milliseconds): one pass for the maximum, one
// for the sum of exponentials with an exp of our own that the compiler vectorises, one
// for the top n with a small insertion list (no copy or sort of the row). The same
// figures for the same row on every run and whatever shares the batch (pure functions of
// the row). Accuracy: the exp is within 2 ulp of exp(x) in float, the sum is accumulated in
// double per block, so a log-probability is within about 1e-6 of the exact value.
// Non-goals: the sampler's own softmax over filtered candidates (sampler.h).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/sampler.h"

namespace shardlm {

// log Σ exp(logits[i]); -inf for an empty row.
double LogSumExp(std::span<const float> logits);

// The n most likely tokens (by logit descending, then id ascending) with logit − lse,
// where lse = LogSumExp(logits). n is clamped to [0, logits.size()].
std::vector<TokenLogprob> TopLogprobs(std::span<const float> logits, int32_t n, double lse);

}  // namespace shardlm
