// Engine metrics: what the engine's counters (EngineStats: requests, tokens, slots, KV pages,
// the prefix cache and its disk tier, the bounded pool, the prefill worker) say, as Prometheus
// text for GET /metrics, one gauge or counter per figure with its help line.
//
// Goals: names and types in one style (the shardlm_ prefix, _total on counters), next to the
// figures they describe. Non-goals: the latency histograms (latency_histograms.h), the
// pipeline's per-stage figures (pipeline_metrics.h), HTTP response counts (the server's own).
//
// Thread safety: a pure function.
#pragma once

#include <string>

#include "engine/engine.h"

namespace shardlm::server {

std::string EngineMetricsText(const EngineStats& stats);

}  // namespace shardlm::server
