// Scheduler: the checks of a request before it is queued (token ids, the context, pins
// against a bounded pool, logit bias, what an embedding request may ask); each failure an
// error that names the bad field (see scheduler.h).
#include <cmath>

#include "engine/scheduler.h"
#include "engine/scheduler_impl.h"

namespace shardlm {

Status Scheduler::CheckRequest(const EngineRequest& request) const {
  const int n_prompt = int(request.prompt.size());
  if (n_prompt == 0) return InvalidArgument("the prompt is empty (no tokens)");
  const int32_t n_vocab = config_.n_vocab;
  for (TokenId id : request.prompt) {
    if (id < 0 || id >= n_vocab) {
      return InvalidArgument("prompt token id {} is outside the vocabulary [0, {})", id, n_vocab);
    }
  }
  SHARDLM_TRY(CheckPromptOutputs(request));
  // An embedding's prompt may fill the context: nothing is generated after it.
  if (request.kind == RequestKind::kEmbedding && n_prompt > options_.n_ctx) {
    return OutOfRange(
        "context_length_exceeded: the input has {} tokens but a sequence holds {} positions "
        "(raise --ctx-size)",
        n_prompt, options_.n_ctx);
  }
  if (request.kind == RequestKind::kGenerate && n_prompt + 1 > options_.n_ctx) {
    return OutOfRange(
        "context_length_exceeded: the prompt has {} tokens but a sequence holds {} positions "
        "(prompt + at least 1 generated token must fit; raise --ctx-size)",
        n_prompt, options_.n_ctx);
  }
  if (request.max_tokens < -1) {
    return InvalidArgument("max_tokens must be >= 0 (or -1 for no limit), got {}",
                           request.max_tokens);
  }
  for (TokenId id : request.rendered_specials) {
    if (id < 0 || id >= n_vocab) {
      return InvalidArgument("rendered special token id {} is outside the vocabulary [0, {})", id,
                             n_vocab);
    }
  }
  if (request.pin_prefix < 0) {
    return InvalidArgument("pin_prefix {} is negative", request.pin_prefix);
  }
  for (const auto& [begin, end] : request.pins) {
    if (begin < 0 || begin >= end || end > options_.n_ctx) {
      return InvalidArgument("pin [{}, {}) is not a range of positions inside [0, {})", begin, end,
                             options_.n_ctx);
    }
  }
  if (state_->pager != nullptr && !request.pins.empty()) {
    const PagerConfig& pool = state_->pager->config();
    const int pinned = state_->pager->PinnedPages(request.pins);
    if (pinned + pool.min_pool_pages() > pool.pool_pages()) {
      return InvalidArgument(
          "pins: {} pinned pages of {} positions with --kv-sink {} and --kv-tail {} need {} "
          "pages, --kv-pool {} holds {}",
          pinned, pool.page_tokens, pool.pool.sink_tokens, pool.pool.tail_tokens,
          pinned + pool.min_pool_pages(), pool.pool.pool_tokens, pool.pool_pages());
    }
  }
  for (const auto& [id, bias] : request.logit_bias) {
    if (id < 0 || id >= n_vocab || !std::isfinite(bias)) {
      return InvalidArgument(
          "logit_bias: token {} (bias {}) is outside the vocabulary [0, {}) "
          "or not a finite number",
          id, bias, n_vocab);
    }
  }
  return request.sampling.Validate();
}

Status Scheduler::CheckPromptOutputs(const EngineRequest& request) const {
  if (request.kind >= RequestKind::kSentinel) {
    return InvalidArgument("unknown request kind {}", int(request.kind));
  }
  if (request.kind != RequestKind::kEmbedding) return Status::Ok();
  if (!info_.embeddings) {
    return Unsupported(
        "this server computes no embeddings: start it with --embeddings (the model then "
        "serves /v1/embeddings beside completions)");
  }
  if (request.want_prompt_logprobs) {
    return InvalidArgument("an embedding request has no prompt logprobs (it computes no logits)");
  }
  return Status::Ok();
}

}  // namespace shardlm
