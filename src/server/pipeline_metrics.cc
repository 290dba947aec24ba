// Pipeline counters as Prometheus text. See pipeline_metrics.h.
#include "server/pipeline_metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

namespace shardlm::server {
namespace {

// A label value in the text exposition format: backslash, double quote and newline escaped.
std::string LabelValue(const std::string& value) {
  std::string out;
  for (char ch : value) {
    if (ch == '\\') {
      out += "\\\\";
    } else if (ch == '"') {
      out += "\\\"";
    } else if (ch == '\n') {
      out += "\\n";
    } else {
      out += ch;
    }
  }
  return out;
}

// One metric family with a sample per stage.
template <typename Value>
void StageFamily(std::string& out, const char* name, const char* type, const char* help,
                 std::span<const StageInfo> stages, std::span<const StageStats> stats,
                 Value (*value)(const StageStats&)) {
  out += fmt::format("# HELP shardlm_{0} {1}\n# TYPE shardlm_{0} {2}\n", name, help, type);
  const size_t n = std::min(stages.size(), stats.size());
  for (size_t i = 0; i < n; ++i) {
    out += fmt::format("shardlm_{}{{stage=\"{}\",device=\"{}\"}} {}\n", name, stages[i].index,
                       LabelValue(stages[i].device), value(stats[i]));
  }
}

}  // namespace

std::string PipelineMetricsText(const PipelineCounters& c, std::span<const StageInfo> stages,
                                std::span<const StageStats> stats) {
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, uint64_t value) {
    out += fmt::format("# HELP shardlm_{0} {1}\n# TYPE shardlm_{0} {2}\nshardlm_{0} {3}\n", name,
                       help, type, value);
  };
  metric("pipeline_batches_total", "counter", "Batches submitted to the pipeline.", c.batches);
  metric("pipeline_tokens_total", "counter", "Tokens (batch entries) through the pipeline.",
         c.tokens);
  metric("pipeline_bytes_between_stages_total", "counter",
         "Hidden-row bytes handed from a stage to the next.", c.bytes_between);
  metric("pipeline_max_in_flight", "gauge", "Most batches in flight at once (>1: stages overlap).",
         uint64_t(c.max_in_flight));
  metric("pipeline_failed_batches_total", "counter", "Batches that ended with an error.",
         c.failed_batches);
  if (stages.empty() || stats.empty()) return out;
  StageFamily<uint64_t>(out, "stage_batches_total", "counter", "Batches a stage computed.", stages,
                        stats, [](const StageStats& s) { return s.batches; });
  StageFamily<uint64_t>(out, "stage_tokens_total", "counter", "Tokens a stage computed.", stages,
                        stats, [](const StageStats& s) { return s.tokens; });
  StageFamily<double>(out, "stage_busy_seconds_total", "counter",
                      "Seconds a stage spent computing (its share of wall time: how busy it is).",
                      stages, stats, [](const StageStats& s) { return s.busy_seconds; });
  StageFamily<uint64_t>(out, "stage_bytes_in_total", "counter",
                        "Activation bytes a stage received.", stages, stats,
                        [](const StageStats& s) { return s.bytes_in; });
  StageFamily<uint64_t>(out, "stage_bytes_out_total", "counter",
                        "Hidden-row or logits bytes a stage produced.", stages, stats,
                        [](const StageStats& s) { return s.bytes_out; });
  // Bounded KV pool (--kv-pool); 0 without one.
  StageFamily<int64_t>(out, "stage_kv_resident_pages", "gauge",
                       "KV pages a stage holds in its pool's frames (bounded pool).", stages, stats,
                       [](const StageStats& s) { return int64_t(s.paging.resident_pages); });
  StageFamily<int64_t>(out, "stage_kv_tier_pages", "gauge",
                       "KV pages a stage holds in its tier (bounded pool).", stages, stats,
                       [](const StageStats& s) { return s.paging.tier_pages; });
  StageFamily<uint64_t>(out, "stage_kv_page_ins_total", "counter",
                        "KV pages a stage read back from its tier.", stages, stats,
                        [](const StageStats& s) { return s.paging.page_ins; });
  StageFamily<uint64_t>(out, "stage_kv_page_outs_total", "counter",
                        "KV pages a stage wrote to its tier.", stages, stats,
                        [](const StageStats& s) { return s.paging.page_outs; });
  StageFamily<uint64_t>(out, "stage_kv_paged_bytes_total", "counter",
                        "Bytes a stage moved between its frames and its tier.", stages, stats,
                        [](const StageStats& s) { return s.paging.bytes_paged; });
  StageFamily<double>(out, "stage_kv_paging_seconds_total", "counter",
                      "Seconds a stage spent moving pages to and from its tier.", stages, stats,
                      [](const StageStats& s) { return s.paging.paging_seconds; });
  return out;
}

}  // namespace shardlm::server
