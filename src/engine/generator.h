// Generator: runs one prompt through one model — unsplit, or split into stages across
// devices and processes (config.placement) — and samples a continuation: the
// engine behind `shardlm run`.
//
// Goals: encode the prompt (special-token text parsed unless disabled; BOS as the GGUF
// says), prefill it in chunks of at most n_batch tokens (progress on stderr for long
// prompts), then decode one token per step with the Sampler, streaming text through a
// StreamDecoder (never a broken UTF-8 sequence), stopping at an end-of-generation token,
// at n_predict, or when the context is full; hand every row of logits a token was chosen
// from to an optional recorder; time prefill and decode.
// KV memory is bounded by n_ctx and by what the request needs: the page pool is sized per
// request to min(n_ctx, prompt + n_predict) positions (in every stage).
// Split invariance: the same tokens and logits whatever the placement.
// Non-goals: several sequences at once (the scheduler), prefix reuse; chat templates (the
// caller formats the prompt).
//
// Thread safety: one thread calls Generate at a time. Lifetime: references the Model, the
// Tokenizer and the ThreadPool (its size is the thread count of an unpinned "cpu" stage),
// which must outlive it; each request builds its own pipeline (stages and KV) and frees it
// at the end.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "kv/page_pool.h"
#include "model/model.h"
#include "pipeline/placement.h"
#include "engine/sampler.h"
#include "tensor/thread_pool.h"
#include "tokenizer/tokenizer.h"

namespace shardlm {

struct GeneratorConfig {
  int n_ctx = 4096;   // most positions (prompt + generated) a sequence may hold
  int n_batch = 512;  // most prompt tokens per forward pass
  KvType kv_type = KvType::kF32;
  int page_tokens = kDefaultPageTokens;
  // Placement (placement.h); no devices: one "cpu" stage on the threads given to Create.
  // Its show_progress is GenerateOptions::show_progress, per call.
  PlacementOptions placement = {};
};

struct GenerateOptions {
  int n_predict = 64;         // tokens to generate; < 0: until EOG or the context is full
  bool add_special = true;    // BOS (as the vocab says)
  bool parse_special = true;  // "<|im_start|>" in the prompt becomes that token
  // Keep generating through end-of-generation tokens: they are fed back like any other
  // token (and render as ""), so exactly n_predict tokens come out, as in the fixtures'
  // greedy runs. llama.cpp's --ignore-eos instead forbids them; we keep the model's choice.
  bool ignore_eos = false;
  // Progress on stderr: the stages of a split paging in, and prefill of prompts longer than
  // n_batch.
  bool show_progress = false;
  bool want_logprobs = false;  // fill GenerationResult::logprobs
};

enum class StopReason { kEog, kLength, kContext };
const char* StopReasonName(StopReason reason);

struct GenerationResult {
  std::vector<TokenId> prompt_ids;
  std::vector<TokenId> ids;  // generated, including a final EOG token when it stopped there
  std::vector<SampledToken> logprobs;  // per generated token, when want_logprobs
  std::string text;                    // everything passed to on_text
  StopReason stop = StopReason::kLength;
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
  int decode_passes = 0;  // single-token forward passes
  size_t kv_bytes = 0;    // memory of the request's page pools (every stage)

  double PrefillTokensPerSecond() const;
  double DecodeTokensPerSecond() const;
};

struct GenerateCallbacks {
  // Text as it becomes complete (UTF-8 sequences never split).
  std::function<void(std::string_view text)> on_text;
  // logits[n_vocab] from which generated token t was chosen, t = 0, 1, ... (row 0 is the
  // last prompt position). A non-ok Status stops generation with that error.
  std::function<Status(std::span<const float> logits)> on_logits;
};

class Generator {
 public:
  // The model must hold every layer (first and last stage); `threads` sizes an unpinned
  // "cpu" stage. Errors: a split model binding, bad config values. Placement errors come
  // with the first request (stages are built per request).
  static Result<std::unique_ptr<Generator>> Create(const Model& model, const Tokenizer& tokenizer,
                                                   ThreadPool& threads,
                                                   const GeneratorConfig& config);

  Result<GenerationResult> Generate(std::string_view prompt, const SamplingParams& sampling,
                                    const GenerateOptions& options,
                                    const GenerateCallbacks& callbacks = {});
  // Same, from token ids (no encoding; add_special/parse_special are ignored).
  Result<GenerationResult> GenerateFromIds(std::vector<TokenId> prompt_ids,
                                           const SamplingParams& sampling,
                                           const GenerateOptions& options,
                                           const GenerateCallbacks& callbacks = {});

 private:
  Generator(const Model& model, const Tokenizer& tokenizer, ThreadPool& threads,
            const GeneratorConfig& config);
  struct Run;  // generator.cc: the state of one request
  Result<int> PlanPositions(const std::vector<TokenId>& prompt_ids,
                            const GenerateOptions& options) const;

  const Model& model_;
  const Tokenizer& tokenizer_;
  ThreadPool& threads_;
  GeneratorConfig config_;
};

}  // namespace shardlm
