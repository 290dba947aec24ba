// Pipeline metrics: the counters of a split model's pipeline as Prometheus text, for
// GET /metrics (ServerOptions::metrics_extra): batches and tokens through the stages, the
// bytes of hidden rows handed from one stage to the next (n_embd × 4 per token and
// boundary), the most batches in flight at once (above 1: stages overlap), failed batches.
//
// Goals: names and types in the style of the server's own metrics (shardlm_ prefix).
// Non-goals: per-stage busy time (the Engine interface does not expose stage stats yet).
//
// Thread safety: a pure function.
#pragma once

#include <string>

#include "runtime/pipeline.h"

namespace shardlm::server {

std::string PipelineMetricsText(const PipelineCounters& counters);

}  // namespace shardlm::server
