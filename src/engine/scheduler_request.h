// ActiveRequest: the generation state of one request the scheduler has admitted into a
// slot — its sampler, its text pipeline (StreamDecoder → StopMatcher), its counters and
// timings — and the rules that decide when it is finished.
//
// Goals: the per-request half of the scheduler, independent of batching: given the logits
// row of its last position it samples one token, emits a TokenEvent (text with stop-string
// holdback, logprobs on request) and says whether generation ends (end-of-generation token
// unless ignore_eos, stop string, max_tokens, full context, client gone), the one finish
// policy of every driver (`serve`, `run`, `bench`); builds the FinishEvent (released text,
// usage, timings) and the request's log line. What it asks of its prompt's positions (an
// embedding, the prompt's logprobs) is its PromptOutputs.
// The sampler is per request and seeded from the request, so a request's tokens never
// depend on what else shares the batch. A constrained request (EngineRequest::grammar)
// carries its grammar matcher: each step's logits are sampled among the tokens the matcher
// allows (its mask is a pure function of the grammar state, so the tokens stay
// deterministic), the matcher moves past the sampled token, and the request ends with
// kStop once the grammar is complete, or kError if no token may follow. logit_bias is
// added to the logits before sampling.
// Non-goals: KV memory (the scheduler's slot owns the block table), batching, threads.
//
// Thread safety: owned and used by the engine thread only. Lifetime: references the
// Tokenizer, which must outlive it; callbacks are moved in and called from here.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "engine/engine.h"
#include "engine/prompt_outputs.h"
#include "engine/sampler.h"
#include "engine/stop_matcher.h"
#include "grammar/token_matcher.h"
#include "tokenizer/tokenizer.h"

namespace shardlm {

using SchedulerClock = std::chrono::steady_clock;

class ActiveRequest {
 public:
  // `matcher` is the request's grammar matcher (set exactly when request.grammar is).
  ActiveRequest(RequestId id, EngineRequest request, RequestCallbacks callbacks,
                const Tokenizer& tokenizer, int32_t n_vocab, SchedulerClock::time_point submitted,
                std::unique_ptr<grammar::TokenMatcher> matcher = nullptr);

  RequestId id() const { return id_; }
  const EngineRequest& request() const { return request_; }
  int n_prompt() const { return int(request_.prompt.size()); }
  int n_prefilled() const { return n_prefilled_; }
  bool prefill_done() const { return n_prefilled_ == n_prompt(); }
  int n_generated() const { return n_generated_; }
  // Leading prompt tokens whose KV came from the prefix cache (usage.cached_tokens).
  int n_cached() const { return n_cached_; }
  // The token at KV position `pos`: a prompt token, or a generated one that was fed back
  // (pos < n_prompt() + n_generated()).
  TokenId TokenAt(int pos) const;
  // The token to feed at position next_position() (valid once prefill is done and at least
  // one token was sampled).
  TokenId last_token() const { return last_token_; }
  int next_position() const { return n_prompt() + n_generated_ - 1; }
  // Whether tokens are sampled after the prompt (an embedding, or a prompt scored with
  // max_tokens 0, samples none).
  bool samples() const {
    return request_.kind == RequestKind::kGenerate && request_.max_tokens != 0;
  }
  PromptOutputs& prompt_outputs() { return prompt_outputs_; }
  const PromptOutputs& prompt_outputs() const { return prompt_outputs_; }

  // The scheduler put the request into a slot (ends its queue time).
  void MarkAdmitted();
  // `n` more prompt tokens were written to the KV.
  void AddPrefilled(int n) { n_prefilled_ += n; }
  // The first `n` prompt tokens are in the KV already (a prefix-cache hit, before any
  // prefill); n < n_prompt(), so the last prompt token is always computed. `n_disk` of them
  // were read from the disk tier.
  void SetCached(int n, int n_disk = 0);
  // Pages a bounded KV pool read back from its tier for this request (its usage).
  void SetPageIns(int64_t n) { page_ins_ = n; }
  // Its prompt was prefilled by the prefill worker, and handed over in `ms`.
  void SetHandoff(double ms) {
    prefill_worker_ = true;
    handoff_ms_ = ms;
  }
  // The ranges the pool keeps resident for it (its usage).
  void SetPins(std::vector<std::pair<int32_t, int32_t>> pins) { pins_ = std::move(pins); }

  // Positions [0, n_written) hold KV, n_written <= n_prompt(): tells on_prefill.
  void OnPrefilled(int n_written) const;
  // Hands `logits` (the row of its last fed position) to on_logits, samples the next token
  // from it, emits it, and returns the finish reason if generation ends here (kError:
  // error() says why).
  // `n_kv_tokens` is how many positions the KV now holds and n_ctx the most it may hold.
  std::optional<FinishReason> OnLogits(std::span<const float> logits, int n_kv_tokens, int n_ctx);
  // Every prompt position's outputs have been collected: hands the prompt's logprobs to the
  // client, and returns the finish reason of a request that samples nothing (kStop for an
  // embedding, kLength for a scored prompt) or of a client gone (kCancelled).
  std::optional<FinishReason> OnPromptDone();
  // Why OnLogits returned kError.
  const Status& error() const { return error_; }

  // Builds the finish event (releasing held-back text unless a stop string matched),
  // writes the log line, calls on_finish. Call exactly once.
  void Finish(FinishReason reason, Status error, bool log);

 private:
  // The grammar's mask for this step into mask_; false (error_ set) when it is empty.
  bool PrepareMask();
  std::string ReleaseHeldText(FinishReason& reason);
  RequestUsage Usage(SchedulerClock::time_point now) const;
  void Log(const FinishEvent& event) const;

  RequestId id_;
  EngineRequest request_;
  RequestCallbacks callbacks_;
  const Tokenizer& tokenizer_;
  Sampler sampler_;
  std::unique_ptr<grammar::TokenMatcher> matcher_;  // null: unconstrained
  std::vector<uint64_t> mask_;                      // [MaskWords(n_vocab)] this step's
  std::vector<std::pair<TokenId, float>> bias_;     // logit_bias, sorted by id, merged
  Status error_;
  StreamDecoder decoder_;
  StopMatcher stop_;
  PromptOutputs prompt_outputs_;
  int n_prefilled_ = 0;
  int n_generated_ = 0;
  int n_cached_ = 0;
  int n_cached_disk_ = 0;
  int64_t page_ins_ = 0;
  bool prefill_worker_ = false;
  double handoff_ms_ = 0;
  std::vector<std::pair<int32_t, int32_t>> pins_;
  std::vector<TokenId> generated_;  // every sampled token, in order
  TokenId last_token_ = -1;
  SchedulerClock::time_point submitted_;
  std::optional<SchedulerClock::time_point> admitted_;
  std::optional<SchedulerClock::time_point> first_token_;
};

}  // namespace shardlm
