// OpenAI API types: typed requests parsed from JSON into structs (FromJSON → Result<T>), the
// typed results a response is built from (openai_objects.h builds the objects we send back),
// and OpenAI's error object.
//
// Goals: every field a client may send is checked here once, at the parse boundary: a
// wrong type or an out-of-range value is an error that names the parameter; unknown
// fields are ignored (clients send many we do not use); no nlohmann exception escapes.
// The engine only ever sees the typed structs.
// Non-goals: HTTP (http_server.h), chat templates and parsing of the model's output
// (chat_format.h), n > 1, turning response_format and tool_choice into grammars
// (output_constraint.h).
//
// Thread safety: free functions and plain values.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/stop_matcher.h"

namespace shardlm::server {

using Json = nlohmann::ordered_json;

// The most stop strings and top_logprobs a request may ask for (OpenAI's own limits).
inline constexpr size_t kMaxStopStrings = 4;
inline constexpr int32_t kMaxTopLogprobs = 20;
// The deepest JSON nesting a request may have: tool schemas need a dozen levels; walking
// thousands recursively (templates, tojson) would overflow a handler thread's stack.
inline constexpr int kMaxJsonDepth = 64;
// JSON values in one request, body and tool-call arguments together (json_limits.h): room
// for a prompt of a million token ids, while a body of tiny values cannot cost gigabytes.
inline constexpr size_t kMaxJsonValues = size_t{1} << 20;
// The longest stop string a request may give: what the stop matcher takes.
inline constexpr size_t kMaxStopStringBytes = StopMatcher::kMaxStopStringBytes;

// `response_format`: what the output must be. text: anything; json_object: one JSON object;
// json_schema: a value valid against `schema` (OpenAI's strict subset when `strict`).
struct ResponseFormat {
  enum class Type { kText, kJsonObject, kJsonSchema, kSentinel };
  Type type = Type::kText;
  std::string name;     // json_schema.name
  Json schema;          // json_schema.schema (an object)
  bool strict = false;  // json_schema.strict
};

// `tool_choice`: whether the model must call a tool. kFunction names one of `tools`.
struct ToolChoice {
  enum class Mode { kAuto, kNone, kRequired, kFunction, kSentinel };
  Mode mode = Mode::kAuto;
  std::string function;  // kFunction
};

// The most logit_bias entries a request may give (OpenAI's limit).
inline constexpr size_t kMaxLogitBias = 300;

// What both endpoints share: how to sample, when to stop, what to report.
struct GenerationOptions {
  std::string model;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  int32_t max_tokens = -1;     // -1: until EOG or the context is full
  std::vector<std::string> stop;
  SamplingParams sampling;
  bool seed_given = false;
  bool logprobs = false;
  int32_t top_logprobs = 0;
  bool ignore_eos = false;
  // Token id → added to its logit, in [-100, 100] (-100 bans it, 100 all but forces it).
  // Ids are checked against the vocabulary by the server, which knows it.
  std::vector<std::pair<TokenId, float>> logit_bias;
  ResponseFormat response_format;
  // shardlm's extension "pin": [[begin, end], ...]: prompt position ranges kept resident
  // under a bounded KV pool (`--kv-pool`), at most kMaxPins; ranges are checked against the
  // context by the engine.
  std::vector<std::pair<int32_t, int32_t>> pins;
};

inline constexpr size_t kMaxPins = 64;

// POST /v1/chat/completions. `messages` is normalized for chat templates: roles checked
// (developer becomes system), every content a string (null and a missing assistant content
// are "", text parts joined, a tool's structured result its JSON text), optional fields
// that are null left out, tool-call arguments objects (openai_types.cc NormalizeMessage).
struct ChatCompletionRequest {
  GenerationOptions options;
  Json messages = Json::array();
  Json tools;  // null when none (or tool_choice none)
  ToolChoice tool_choice;
  Json chat_template_kwargs = Json::object();
};

// The legacy completions API's max_tokens when a request gives none (OpenAI's).
inline constexpr int32_t kDefaultCompletionMaxTokens = 16;

// POST /v1/completions: a prompt as text or as token ids (one prompt: an array of several is
// refused by name). max_tokens defaults to kDefaultCompletionMaxTokens.
struct CompletionRequest {
  GenerationOptions options;
  std::string prompt;
  std::vector<TokenId> prompt_tokens;
  bool has_prompt_tokens = false;
  bool echo = false;
};

// POST /tokenize and /detokenize.
struct TokenizeRequest {
  std::string content;
  bool add_special = false;
  bool parse_special = true;
};
struct DetokenizeRequest {
  std::vector<TokenId> tokens;
};

// A parse error names the offending parameter in `*param` when given.
Result<ChatCompletionRequest> ChatCompletionRequestFromJSON(const Json& body,
                                                            std::string* param = nullptr);
Result<CompletionRequest> CompletionRequestFromJSON(const Json& body, std::string* param = nullptr);
Result<TokenizeRequest> TokenizeRequestFromJSON(const Json& body, std::string* param = nullptr);
Result<DetokenizeRequest> DetokenizeRequestFromJSON(const Json& body, std::string* param = nullptr);

// Parses a request body under the JSON limits (json_limits.h); invalid JSON, a body too deep
// or with too many values, or a non-object is an error naming the field (nothing thrown).
Result<Json> ParseBody(const std::string& body);

// OpenAI's error object: {"error":{"message","type","param","code"}}.
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" → null
  std::string code;   // "" → null
};
Json ErrorJSON(const ApiError& error);

// One tool call parsed from the model's output.
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON text, as OpenAI sends it
};

// Per-token log-probabilities for the response.
struct TokenLogprobInfo {
  std::string token;
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;
  // False for a prompt's first token (nothing before it predicts it): its logprob and its
  // alternatives are null.
  bool has_logprob = true;
};

// What a finished chat completion carries.
struct ChatResult {
  std::string content;
  std::string reasoning_content;
  std::vector<ToolCall> tool_calls;
  std::string finish_reason = "stop";
  std::optional<std::vector<TokenLogprobInfo>> logprobs;
};

// Identity of one response (shared by all its chunks).
struct ResponseMeta {
  std::string id;       // chatcmpl-... / cmpl-...
  int64_t created = 0;  // unix seconds
  std::string model;
};

}  // namespace shardlm::server
