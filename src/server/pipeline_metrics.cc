// Pipeline counters as Prometheus text. See pipeline_metrics.h.
#include "server/pipeline_metrics.h"

#include <fmt/format.h>

#include <cstdint>

namespace shardlm::server {

std::string PipelineMetricsText(const PipelineCounters& c) {
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
  return out;
}

}  // namespace shardlm::server
