// ActiveRequest implementation: sample → emit → finish rules, usage and the log line (see
// scheduler_request.h).
#include "engine/scheduler_request.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "base/check.h"

namespace shardlm {
namespace {

double Ms(SchedulerClock::time_point from, SchedulerClock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

}  // namespace

ActiveRequest::ActiveRequest(RequestId id, EngineRequest request, RequestCallbacks callbacks,
                             const Tokenizer& tokenizer, int32_t n_vocab,
                             SchedulerClock::time_point submitted,
                             std::unique_ptr<grammar::TokenMatcher> matcher)
    : id_(id),
      request_(std::move(request)),
      callbacks_(std::move(callbacks)),
      tokenizer_(tokenizer),
      sampler_(request_.sampling, n_vocab),
      matcher_(std::move(matcher)),
      decoder_(tokenizer, /*render_special=*/false, request_.rendered_specials),
      stop_(request_.stop),
      prompt_outputs_(request_),
      submitted_(submitted) {
  SHARDLM_CHECK((matcher_ != nullptr) == (request_.grammar != nullptr));
  if (matcher_) mask_.resize(grammar::MaskWords(n_vocab));
  // One entry per id, in id order (the sampler merges them with its candidates).
  bias_ = request_.logit_bias;
  std::sort(bias_.begin(), bias_.end());
  size_t kept = 0;
  for (size_t i = 0; i < bias_.size(); ++i) {
    if (kept > 0 && bias_[kept - 1].first == bias_[i].first) {
      bias_[kept - 1].second += bias_[i].second;
    } else {
      bias_[kept++] = bias_[i];
    }
  }
  bias_.resize(kept);
  // The prompt is the start of the penalty window.
  for (TokenId id : request_.prompt) sampler_.Accept(id);
}

void ActiveRequest::MarkAdmitted() { admitted_ = SchedulerClock::now(); }

void ActiveRequest::SetCached(int n, int n_disk) {
  SHARDLM_CHECK(n_prefilled_ == 0 && n >= 0 && n < n_prompt() && n_disk >= 0 && n_disk <= n);
  n_prefilled_ = n;
  n_cached_ = n;
  n_cached_disk_ = n_disk;
}

TokenId ActiveRequest::TokenAt(int pos) const {
  if (pos < n_prompt()) return request_.prompt[pos];
  return generated_[size_t(pos - n_prompt())];
}

bool ActiveRequest::PrepareMask() {
  if (matcher_->FillMask(mask_) > 0) return true;
  error_ = InvalidArgument(
      "the output constraint allows no token after {} generated tokens: the vocabulary "
      "cannot write what the grammar needs next",
      n_generated_);
  return false;
}

std::optional<FinishReason> ActiveRequest::OnLogits(std::span<const float> logits, int n_kv_tokens,
                                                    int n_ctx) {
  if (callbacks_.on_logits) {
    Status status = callbacks_.on_logits(logits);
    if (!status.ok()) {
      error_ = std::move(status);
      return FinishReason::kError;
    }
  }
  LogitAdjustments adjust;
  adjust.bias = bias_;
  if (matcher_) {
    if (!PrepareMask()) return FinishReason::kError;
    adjust.allowed = mask_;
  }
  SampledToken token = sampler_.Sample(logits, request_.want_logprobs, adjust);
  // The mask holds only tokens the matcher accepts; should that ever break, the request
  // fails rather than the engine.
  if (matcher_ && !matcher_->Accept(token.id)) {
    error_ = Status(StatusCode::kInternal,
                    fmt::format("the sampled token {} is outside the grammar's mask", token.id));
    return FinishReason::kError;
  }
  sampler_.Accept(token.id);
  ++n_generated_;
  generated_.push_back(token.id);
  last_token_ = token.id;
  if (!first_token_) first_token_ = SchedulerClock::now();
  // A grammar lets end-of-generation through only once its output is complete.
  const bool eog_ends = !request_.ignore_eos || matcher_ != nullptr;
  if (eog_ends && tokenizer_.IsEog(token.id)) return FinishReason::kStop;

  TokenEvent event;
  event.token = token.id;
  event.text = stop_.Push(decoder_.Push(token.id));
  if (request_.want_logprobs) {
    event.logprob = token.logprob;
    event.top = std::move(token.top);
  }
  if (callbacks_.on_token && !callbacks_.on_token(event)) return FinishReason::kCancelled;
  if (stop_.stopped()) return FinishReason::kStop;
  if (matcher_ && matcher_->IsComplete()) return FinishReason::kStop;
  if (request_.max_tokens >= 0 && n_generated_ >= request_.max_tokens) {
    return FinishReason::kLength;
  }
  // The token just sampled would go to position n_kv_tokens, which must exist.
  if (n_kv_tokens >= n_ctx) return FinishReason::kLength;
  return std::nullopt;
}

void ActiveRequest::OnPrefilled(int n_written) const {
  if (callbacks_.on_prefill) callbacks_.on_prefill(std::min(n_written, n_prompt()), n_prompt());
}

std::optional<FinishReason> ActiveRequest::OnPromptDone() {
  SHARDLM_CHECK(prompt_outputs_.complete());
  if (request_.want_prompt_logprobs && callbacks_.on_prompt_logprobs &&
      !callbacks_.on_prompt_logprobs(prompt_outputs_.prompt_logprobs())) {
    return FinishReason::kCancelled;
  }
  if (request_.kind == RequestKind::kEmbedding) return FinishReason::kStop;
  if (!samples()) return FinishReason::kLength;
  return std::nullopt;
}

std::string ActiveRequest::ReleaseHeldText(FinishReason& reason) {
  if (stop_.stopped()) return "";
  // Bytes of an unfinished character may still complete a stop string.
  std::string text = stop_.Push(decoder_.Flush());
  if (stop_.stopped()) {
    if (reason != FinishReason::kCancelled) reason = FinishReason::kStop;
    return text;
  }
  return text + stop_.Flush();
}

RequestUsage ActiveRequest::Usage(SchedulerClock::time_point now) const {
  RequestUsage usage;
  usage.prompt_tokens = n_prompt();
  usage.completion_tokens = n_generated_;
  usage.cached_tokens = n_cached_;
  usage.cached_disk_tokens = n_cached_disk_;
  usage.kv_page_ins = page_ins_;
  usage.prefill_worker = prefill_worker_;
  usage.handoff_ms = handoff_ms_;
  usage.kv_pins = pins_;
  const SchedulerClock::time_point admitted = admitted_.value_or(now);
  usage.queue_ms = Ms(submitted_, admitted);
  const SchedulerClock::time_point first = first_token_.value_or(now);
  usage.prefill_ms = Ms(admitted, first);
  usage.decode_ms = first_token_ ? Ms(*first_token_, now) : 0.0;
  return usage;
}

void ActiveRequest::Finish(FinishReason reason, Status error, bool log) {
  FinishEvent event;
  event.text = ReleaseHeldText(reason);
  event.reason = reason;
  if (reason == FinishReason::kStop) event.stop_sequence = stop_.matched();
  event.error = std::move(error);
  event.usage = Usage(SchedulerClock::now());
  if (reason == FinishReason::kStop) event.embedding = prompt_outputs_.MeanEmbedding();
  if (log) Log(event);
  if (callbacks_.on_finish) callbacks_.on_finish(event);
}

void ActiveRequest::Log(const FinishEvent& event) const {
  const RequestUsage& u = event.usage;
  const double ttft_ms = u.queue_ms + u.prefill_ms;
  const double decode_tps = u.decode_ms > 0 && u.completion_tokens > 1
                                ? (u.completion_tokens - 1) * 1000.0 / u.decode_ms
                                : 0.0;
  char handoff[64] = "";
  if (u.prefill_worker)
    std::snprintf(handoff, sizeof(handoff), " prefill=worker handoff_ms=%.2f", u.handoff_ms);
  std::fprintf(stderr,
               "request id=%" PRIu64
               " finish=%s prompt_tokens=%d completion_tokens=%d cached_tokens=%d"
               " cached_disk=%d kv_page_ins=%" PRId64
               " queue_ms=%.1f prefill_ms=%.1f decode_ms=%.1f ttft_ms=%.1f "
               "decode_tok_s=%.2f%s%s%s%s\n",
               id_, FinishReasonName(event.reason), u.prompt_tokens, u.completion_tokens,
               u.cached_tokens, u.cached_disk_tokens, u.kv_page_ins, u.queue_ms, u.prefill_ms,
               u.decode_ms, ttft_ms, decode_tps, handoff, event.error.ok() ? "" : " error=\"",
               event.error.message().c_str(), event.error.ok() ? "" : "\"");
}

}  // namespace shardlm
