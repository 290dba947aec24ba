// PromptOutputs: what a request asks of its prompt's positions besides their KV — the rows
// the last stage gives for prompt positions, and what the request makes of them:
//  - an embedding (RequestKind::kEmbedding): every prompt position's embedding row (the
//    final hidden state after the output norm), averaged over the positions;
//  - prompt log-probabilities (EngineRequest::want_prompt_logprobs): the logits row of
//    position p gives the log-probability of prompt token p + 1 and its top alternatives.
//
// Goals: the scheduler asks, per prompt position, which rows to request
// (WantsEmbedding, WantsPromptLogits) and hands the rows back as its batches are collected;
// nothing here depends on how the prompt was chunked or what shared its batches. The mean
// is a double sum in position order divided by the count, then rounded to float once, so it
// is bitwise the same for any chunking (rows arrive in position order: batches are
// collected in submission order, and a prompt's chunks are submitted in order).
// Non-goals: the logits row sampled after the prompt (ActiveRequest), batching, KV.
//
// Thread safety: none; the engine thread owns it (inside its ActiveRequest).
// Lifetime: a value; the request it was made from is only read by the constructor.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/engine.h"

namespace shardlm {

class PromptOutputs {
 public:
  explicit PromptOutputs(const EngineRequest& request);

  // Whether the last stage must give rows for prompt positions at all: then every prompt
  // position is computed (a prefix-cache hit would skip rows the request needs).
  bool any() const { return embedding_ || prompt_logprobs_; }
  bool WantsEmbedding(int position) const { return embedding_ && position < n_prompt_; }
  // The logits of the last prompt position predict the first generated token, not a
  // prompt token: they are the request's sampling row, never asked for here.
  bool WantsPromptLogits(int position) const {
    return prompt_logprobs_ && position < n_prompt_ - 1;
  }

  // Embedding rows of positions [first, first + n): n × n_embd floats. Positions come in
  // order from 0 (CHECKed).
  void AddEmbeddingRows(int first, int n, std::span<const float> rows);
  // Logits rows of positions [first, first + n): n × n_vocab floats; positions in order
  // from 0 (CHECKed), each below n_prompt − 1.
  void AddPromptLogits(int first, int n, std::span<const float> rows);

  // Every position's rows have come.
  bool complete() const;
  // The mean of the embedding rows (n_embd floats); empty before complete().
  std::vector<float> MeanEmbedding() const;
  // One event per prompt token after the first: token, logprob, top alternatives.
  const std::vector<TokenEvent>& prompt_logprobs() const { return logprobs_; }

 private:
  std::vector<TokenId> prompt_;
  int n_prompt_ = 0;
  bool embedding_ = false;
  bool prompt_logprobs_ = false;
  int32_t n_top_ = 0;                 // alternatives per prompt token
  std::vector<double> sum_;           // [n_embd] Σ embedding rows, in position order
  int n_summed_ = 0;                  // positions [0, n) are in sum_
  std::vector<TokenEvent> logprobs_;  // [positions done]: prompt token position + 1
};

}  // namespace shardlm
