// POST /v1/embeddings: OpenAI's request and response over the Engine's embedding requests
// (RequestKind::kEmbedding), whose inputs run through embedding_runner.h.
//
// Request: `input` is a string, an array of strings, an array of token ids, or an array of
// such arrays (at most kMaxEmbeddingInputs inputs, none empty); `encoding_format` "float"
// (default) or "base64" (the little-endian float32 bytes, which OpenAI's clients ask for
// unless told otherwise, and decode); `model` and `user` are accepted and ignored. Text is
// tokenized as a completion prompt is (special tokens added and parsed); token ids are used
// as given. `dimensions` is a 400 whatever its value: the vectors are the model's full
// hidden size, and cutting those of a model not trained for shortening would change what
// they mean.
// Response: {"object":"list","data":[{"object":"embedding","index":i,"embedding":...}],
// "model","usage":{"prompt_tokens","total_tokens"}}, each vector the engine's mean of the
// final hidden state over the input's positions, L2-normalised (a zero vector stays zero).
//
// Goals: every input is checked (vocabulary, context length) before any is submitted, and
// an error names the parameter (`input[3]`); an engine failure fails the request (500, or
// 503 for a down stage).
// Non-goals: other poolings (cls, last), normalisations other than L2, token budgets per
// request beyond the context.
//
// Thread safety: free functions; RunEmbeddings blocks its handler thread while engine
// callbacks run on the engine's thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "server/openai_types.h"

namespace shardlm::server {

// OpenAI's own limit on the inputs of one request.
inline constexpr size_t kMaxEmbeddingInputs = 2048;

struct EmbeddingInput {
  std::string param;  // the request parameter it came from: "input" or "input[i]"
  bool is_tokens = false;
  std::string text = {};             // !is_tokens
  std::vector<TokenId> tokens = {};  // is_tokens
};

enum class EmbeddingEncoding { kFloat, kBase64, kSentinel };

struct EmbeddingsRequest {
  std::string model;
  std::vector<EmbeddingInput> inputs;
  EmbeddingEncoding encoding = EmbeddingEncoding::kFloat;
};

// A parse error names the offending parameter in `*param` when given.
Result<EmbeddingsRequest> EmbeddingsRequestFromJSON(const Json& body, std::string* param = nullptr);

// The 400 of the route on an engine that computes no embeddings, saying how to enable it.
ApiError EmbeddingsDisabledError();

// `v` scaled to unit Euclidean length (sum of squares in double); a zero vector unchanged.
std::vector<float> L2Normalized(std::span<const float> v);
// The float32 values' little-endian bytes in standard base64 (with padding).
std::string Base64Floats(std::span<const float> v);

// The response object for `vectors` (already normalised), in input order.
Json EmbeddingsJSON(const std::string& model, const std::vector<std::vector<float>>& vectors,
                    EmbeddingEncoding encoding, int64_t prompt_tokens);

using EmbeddingsLog = std::function<void(const std::string&)>;

// Tokenizes and checks `request`, runs every input through `engine`, and answers the
// response JSON or an error; nullopt when `client_gone` (asked every `poll` while waiting)
// said the client left (every input was cancelled). `id` names the request in the log line.
// An engine without embeddings refuses the inputs (a 400 with its message); the route
// answers EmbeddingsDisabledError before it gets here.
std::optional<std::variant<Json, ApiError>> RunEmbeddings(Engine& engine,
                                                          const EmbeddingsRequest& request,
                                                          const std::string& id,
                                                          const EmbeddingsLog& log,
                                                          std::chrono::milliseconds poll,
                                                          const std::function<bool()>& client_gone);

}  // namespace shardlm::server
