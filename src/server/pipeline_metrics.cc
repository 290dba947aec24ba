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

// A metric family with a sample per stage: its name, type, help and the stage's value
// (integers print as integers).
struct StageMetric {
  const char* name;
  const char* type;
  const char* help;
  double (*value)(const StageStats&);
  bool integral = true;
};

const StageMetric kStageMetrics[] = {
    {"stage_batches_total", "counter", "Batches a stage computed.",
     [](const StageStats& s) { return double(s.batches); }},
    {"stage_tokens_total", "counter", "Tokens a stage computed.",
     [](const StageStats& s) { return double(s.tokens); }},
    {"stage_busy_seconds_total", "counter",
     "Seconds a stage spent computing (its share of wall time: how busy it is).",
     [](const StageStats& s) { return s.busy_seconds; }, false},
    {"stage_bytes_in_total", "counter", "Activation bytes a stage received.",
     [](const StageStats& s) { return double(s.bytes_in); }},
    {"stage_bytes_out_total", "counter", "Hidden-row or logits bytes a stage produced.",
     [](const StageStats& s) { return double(s.bytes_out); }},
    // Bounded KV pool (--kv-pool); 0 without one.
    {"stage_kv_resident_pages", "gauge", "KV pages a stage holds in its pool's frames.",
     [](const StageStats& s) { return double(s.paging.resident_pages); }},
    {"stage_kv_tier_pages", "gauge", "KV pages a stage holds in its tier.",
     [](const StageStats& s) { return double(s.paging.tier_pages); }},
    {"stage_kv_page_ins_total", "counter", "KV pages a stage read back from its tier.",
     [](const StageStats& s) { return double(s.paging.page_ins); }},
    {"stage_kv_page_outs_total", "counter", "KV pages a stage wrote to its tier.",
     [](const StageStats& s) { return double(s.paging.page_outs); }},
    {"stage_kv_paged_bytes_total", "counter",
     "Bytes a stage moved between its frames and its tier.",
     [](const StageStats& s) { return double(s.paging.bytes_paged); }},
    {"stage_kv_paging_seconds_total", "counter",
     "Seconds a stage spent moving pages to and from its tier.",
     [](const StageStats& s) { return s.paging.paging_seconds; }, false},
};

void StageFamily(std::string& out, const StageMetric& m, std::span<const StageInfo> stages,
                 std::span<const StageStats> stats) {
  out += fmt::format("# HELP shardlm_{0} {1}\n# TYPE shardlm_{0} {2}\n", m.name, m.help, m.type);
  const size_t n = std::min(stages.size(), stats.size());
  for (size_t i = 0; i < n; ++i) {
    const double value = m.value(stats[i]);
    out += fmt::format("shardlm_{}{{stage=\"{}\",device=\"{}\"}} ", m.name, stages[i].index,
                       LabelValue(stages[i].device));
    out += m.integral ? fmt::format("{}\n", uint64_t(value)) : fmt::format("{}\n", value);
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
  for (const StageMetric& m : kStageMetrics) StageFamily(out, m, stages, stats);
  return out;
}

}  // namespace shardlm::server
