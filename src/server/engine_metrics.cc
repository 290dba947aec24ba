// Engine metrics (engine_metrics.h): EngineStats as Prometheus text.
#include "server/engine_metrics.h"

#include <fmt/format.h>

#include <cstdint>

namespace shardlm::server {

std::string EngineMetricsText(const EngineStats& s) {
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, int64_t value) {
    out += fmt::format("# HELP shardlm_{0} {1}\n# TYPE shardlm_{0} {2}\nshardlm_{0} {3}\n", name,
                       help, type, value);
  };
  metric("requests_total", "counter", "Requests submitted to the engine.", s.requests_total);
  metric("prompt_tokens_total", "counter", "Prompt tokens submitted.", s.prompt_tokens_total);
  metric("generated_tokens_total", "counter", "Tokens generated.", s.generated_tokens_total);
  metric("queue_length", "gauge", "Requests waiting for a slot.", s.queue_length);
  metric("slots_busy", "gauge", "Slots running a request.", s.slots_busy);
  metric("slots_total", "gauge", "Slots (--parallel).", s.slots_total);
  metric("kv_pages_used", "gauge", "KV pages in use.", s.kv_pages_used);
  metric("kv_pages_total", "gauge", "KV pages in the pool.", s.kv_pages_total);
  metric("kv_pages_retained", "gauge", "KV pages only idle slots hold (their last sequence).",
         s.kv_pages_retained);
  metric("prompt_tokens_cached_total", "counter",
         "Prompt tokens served from the prefix cache (memory + disk).", s.prompt_tokens_cached);
  metric("prompt_tokens_memory_total", "counter",
         "Prompt tokens served from cached pages in memory.", s.prompt_tokens_memory);
  metric("prompt_tokens_disk_total", "counter", "Prompt tokens served from pages read from disk.",
         s.prompt_tokens_disk);
  metric("prompt_tokens_computed_total", "counter", "Prompt tokens computed (prefilled).",
         s.prompt_tokens_computed);
  metric("prefix_cache_lookup_blocks_total", "counter", "Full prompt blocks looked up.",
         s.prefix_cache_lookup_blocks);
  metric("prefix_cache_hit_blocks_total", "counter", "Prompt blocks served from the cache.",
         s.prefix_cache_hit_blocks);
  metric("kv_pool_reselects_total", "counter",
         "Times a sequence's resident KV pages were chosen again by score (--kv-pool).",
         s.kv_pool_reselects);
  metric("kv_pool_pages_mapped_total", "counter",
         "KV pages the engine placed in the stages' frames (--kv-pool).", s.kv_pool_pages_mapped);
  metric("kv_pool_pages_evicted_total", "counter",
         "KV pages the engine moved out of the stages' frames (--kv-pool).",
         s.kv_pool_pages_evicted);
  metric("kv_pool_pinned_pages", "gauge",
         "KV pages running requests pin resident (the pin extension field, --kv-pool).",
         s.kv_pool_pinned_pages);
  metric("kv_pool_select_seconds_total", "counter",
         "Seconds the engine spent choosing resident KV pages and their moves (--kv-pool; the "
         "page scoring runs in the stages' forward passes).",
         s.kv_pool_select_seconds);
  metric("prefix_cache_pages", "gauge", "KV pages held by the prefix cache.", s.prefix_cache_pages);
  metric("prefix_cache_evicted_pages_total", "counter", "Cached pages evicted to make room.",
         s.prefix_cache_evicted_pages);
  metric("kv_disk_bytes_read_total", "counter", "Cache file bytes read (--kv-cache-dir).",
         s.kv_disk_bytes_read);
  metric("kv_disk_bytes_written_total", "counter", "Cache file bytes written.",
         s.kv_disk_bytes_written);
  metric("kv_disk_files", "gauge", "Cache files of this model and split on disk.", s.kv_disk_files);
  metric("kv_disk_bytes", "gauge", "Bytes of those cache files.", s.kv_disk_bytes);
  metric("kv_disk_evicted_files_total", "counter", "Cache files evicted to stay under the budget.",
         s.kv_disk_evicted_files);
  metric("kv_disk_corrupt_files_total", "counter",
         "Cache files that failed validation (discarded; the prompt was computed).",
         s.kv_disk_corrupt_files);
  metric("kv_disk_write_errors_total", "counter", "Cache file writes that failed.",
         s.kv_disk_write_errors);
  metric("kv_disk_dropped_writes_total", "counter",
         "Pages not persisted (write queue full, disk full, stage down).",
         s.kv_disk_dropped_writes + s.kv_disk_export_errors);
  metric("prefill_worker_up", "gauge", "1 while the prefill worker serves (--prefill-worker).",
         s.prefill_worker_up);
  metric("prefill_worker_handoffs_total", "counter",
         "Prompts the prefill worker computed and handed to the decode stage.",
         s.prefill_worker_handoffs);
  metric("prefill_worker_tokens_total", "counter", "Prompt tokens the prefill worker computed.",
         s.prefill_worker_tokens);
  metric("prefill_worker_state_bytes_total", "counter",
         "Bytes of recurrent and window state copied at handoffs (KV pages are shared: never "
         "copied).",
         s.prefill_worker_state_bytes);
  metric("prefill_worker_failed_requests_total", "counter",
         "Requests that failed because the prefill worker was lost while computing them.",
         s.prefill_worker_failed_requests);
  return out;
}

}  // namespace shardlm::server
