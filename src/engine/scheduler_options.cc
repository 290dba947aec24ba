// SchedulerOptions: their validation and what they make of the KV pool, the pager and the
// pipeline (see scheduler.h).
#include "engine/scheduler.h"

namespace shardlm {

Status SchedulerOptions::Validate() const {
  if (n_parallel < 1 || n_ctx < 2 || n_batch < 1 || max_queue < 0 || threads < 0 ||
      page_tokens < 1 || prefill_chunk < 0 || cache_pages < 0 || prompt_logit_rows < 1) {
    return InvalidArgument(
        "bad scheduler options: parallel {} (>= 1), ctx-size {} (>= 2), batch {} (>= 1), "
        "max-queue {} (>= 0), threads {} (>= 0), page tokens {} (>= 1), prefill chunk {} "
        "(>= 0), cache pages {} (>= 0), prompt logit rows {} (>= 1)",
        n_parallel, n_ctx, n_batch, max_queue, threads, page_tokens, prefill_chunk, cache_pages,
        prompt_logit_rows);
  }
  if (slot_save_budget == 0 || slot_io_wait.count() < 0) {
    return InvalidArgument("bad slot options: save budget {} bytes (> 0), io wait {} ms (>= 0)",
                           slot_save_budget, slot_io_wait.count());
  }
  if (!kv_cache_dir.empty() && !prefix_cache) {
    return InvalidArgument(
        "the disk tier of the prefix cache (--kv-cache-dir) needs the memory prefix cache: "
        "drop --no-prefix-cache");
  }
  if (n_batch < n_parallel) {
    return InvalidArgument(
        "the batch size ({}) must be at least --parallel ({}): every running sequence "
        "decodes one token per step",
        n_batch, n_parallel);
  }
  if (kv_pool.pool_tokens < 0) {
    return InvalidArgument("--kv-pool {} must be positive", kv_pool.pool_tokens);
  }
  if (bounded_kv()) SHARDLM_TRY(Pager().Validate());
  if (disagg_min_tokens < 1) {
    return InvalidArgument("--disagg-min-tokens {} must be at least 1", disagg_min_tokens);
  }
  return Status::Ok();
}

bool SchedulerOptions::bounded_kv() const {
  const int pages_per_seq = (n_ctx + page_tokens - 1) / page_tokens;
  return kv_pool.bounded() && (kv_pool.pool_tokens + page_tokens - 1) / page_tokens < pages_per_seq;
}

PagerConfig SchedulerOptions::Pager() const {
  PagerConfig config;
  config.n_pages = Kv().n_pages;
  config.page_tokens = page_tokens;
  config.n_slots = n_parallel;
  config.pool = kv_pool;
  return config;
}

KvGeometry SchedulerOptions::Kv() const {
  const int pages_per_seq = (n_ctx + page_tokens - 1) / page_tokens;
  KvGeometry kv;
  kv.n_pages = n_parallel * pages_per_seq + cache_pages;
  kv.page_tokens = page_tokens;
  kv.kv_type = kv_type;
  kv.window_kv = window_kv;
  kv.max_batch_tokens = n_batch;
  if (bounded_kv()) {
    // Every slot's resident set in frames; the other pages in each stage's tier.
    kv.n_frames = n_parallel * ((kv_pool.pool_tokens + page_tokens - 1) / page_tokens);
    kv.tier = kv_tier;
    kv.key_summaries = kv_pool.select == PageSelect::kQk;
  }
  return kv;
}

PipelineOptions SchedulerOptions::ToPipelineOptions() const {
  PipelineOptions pipeline;
  pipeline.placement = placement;
  pipeline.threads = threads;
  pipeline.kv = Kv();
  // One row to sample per running sequence, plus the prompt rows of prompt logprobs.
  pipeline.max_logit_rows = n_parallel + prompt_logit_rows;
  pipeline.max_embedding_rows = embeddings ? n_batch : 0;
  pipeline.share_kv = !prefill_worker.empty();
  return pipeline;
}

}  // namespace shardlm
