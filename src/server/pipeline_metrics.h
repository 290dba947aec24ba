// Pipeline metrics: the counters of a split model's pipeline as Prometheus text, for
// GET /metrics (ServerOptions::metrics_extra): batches and tokens through the stages, the
// bytes of hidden rows handed from one stage to the next (n_embd × 4 per token and
// boundary), the most batches in flight at once (above 1: stages overlap), failed batches;
// and per stage (labels stage="i",device="..."): batches, tokens, seconds busy computing,
// activation bytes in and out, so a reader sees which stage bounds the pipeline.
//
// Goals: names and types in the style of the server's own metrics (shardlm_ prefix); label
// values escaped as the text format requires (a unix: device path may hold any byte).
// Non-goals: a remote daemon's own view (its RSS, its busy time): the figures are measured
// around each stage's Run on the server's side.
//
// Thread safety: a pure function.
#pragma once

#include <span>
#include <string>

#include "pipeline/pipeline.h"
#include "pipeline/stage.h"

namespace shardlm::server {

// `stages` and `stats` are in pipeline order; stats beyond stages.size() are ignored.
std::string PipelineMetricsText(const PipelineCounters& counters,
                                std::span<const StageInfo> stages = {},
                                std::span<const StageStats> stats = {});

}  // namespace shardlm::server
