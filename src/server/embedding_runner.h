// The engine round trips of one embeddings request: every input becomes an embedding request
// (RequestKind::kEmbedding) and the caller waits for them all.
//
// Goals: the inputs of one request run concurrently in the engine's slots and batches, beside
// any other request; an input that finds the queue full waits for one of its request's
// earlier inputs to finish (a request may hold more inputs than the queue); a client that
// leaves, or an input that fails, cancels every input still running; an engine failure is
// EngineError's 500 (or 503 for a down stage).
// Non-goals: tokenizing and checking the inputs, normalising, the response (embeddings_api.h).
//
// Thread safety: RunEmbeddingInputs blocks its handler thread; the engine's callbacks touch
// only state shared with them under its own mutex, and may outlive the call (an input
// cancelled on an early return still finishes in the engine).
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <variant>
#include <vector>

#include "engine/engine.h"
#include "server/openai_types.h"

namespace shardlm::server {

// The embedding of each prompt (the engine's, not normalised), in order, or the first error;
// nullopt when `client_gone` (asked every `poll` while waiting) said the client left.
// `params` names each prompt's request parameter for a refusal's error.
std::optional<std::variant<std::vector<std::vector<float>>, ApiError>> RunEmbeddingInputs(
    Engine& engine, const std::vector<std::vector<TokenId>>& prompts,
    const std::vector<std::string>& params, std::chrono::milliseconds poll,
    const std::function<bool()>& client_gone);

}  // namespace shardlm::server
