// Props: what the server tells a client about itself beyond the OpenAI routes — the JSON
// of `GET /props` (model, context, slots and the placement: which layers run where) and
// the stage list `/v1/models` carries in its model entry's "meta".
//
// Goals: one place that turns EngineInfo into JSON, so /props and /v1/models agree; byte
// counts as plain integers (a client divides them as it likes).
// Non-goals: live figures (those are /metrics), llama.cpp's generation defaults.
//
// Thread safety: pure functions over values.
#pragma once

#include <vector>

#include "engine/engine.h"
#include "server/openai_types.h"

namespace shardlm::server {

// [{index, layers: [begin, end], device, remote, threads, weight_bytes, kv_bytes, first,
//   last}], in pipeline order; layers is the half-open range [begin, end).
Json StagesJSON(const std::vector<StageInfo>& stages);

// {model, architecture, n_ctx, n_vocab, n_parallel, total_slots, stages}.
Json PropsJSON(const EngineInfo& info);

}  // namespace shardlm::server
