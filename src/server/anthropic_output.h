// Anthropic Messages output (POST /v1/messages): the message object and its SSE stream, written
// from the session's API-neutral pieces (output_formatter.h), and Anthropic's error shape for
// every answer on the /v1/messages routes.
//
// A message's content blocks, in the order the model wrote them: `thinking` (the <think> text;
// signature "": this server signs nothing), `text`, `tool_use` (input: the call's arguments as
// an object). stop_reason: max_tokens when the limit (or the context) cut the output,
// tool_use when the model called a tool, stop_sequence (with the matched string) when a stop
// sequence ended it, else end_turn. usage: input_tokens are the prompt tokens computed,
// cache_read_input_tokens those served from the prefix cache (their sum is the prompt), no
// cache writes are billed (cache_creation_input_tokens 0).
// A stream: message_start (usage counts the whole prompt as input until the end), ping, per
// block content_block_start, content_block_delta (thinking_delta, text_delta,
// input_json_delta), content_block_stop, then message_delta (stop_reason, stop_sequence, the
// final usage) and message_stop; a failure mid-way is an `error` event.
//
// Goals: what the @anthropic-ai/sdk types and its MessageStream accept.
// Non-goals: request parsing (anthropic_api.h), citations, signatures.
//
// Thread safety: one formatter per session (output_formatter.h); the rest are pure functions.
#pragma once

#include <string>
#include <string_view>

#include "server/output_formatter.h"

namespace shardlm::server {

// The routes that answer in Anthropic's shape: /v1/messages and what is under it.
bool IsAnthropicPath(std::string_view path);
// Anthropic's error type for an HTTP status (400 invalid_request_error, 401
// authentication_error, 403 permission_error, 404 not_found_error, 409 conflict_error, 413
// request_too_large, 429 rate_limit_error, 408/504 timeout_error, 500 api_error, 503
// overloaded_error; any other 4xx invalid_request_error, 5xx api_error).
const char* AnthropicErrorType(int http_status);
// {"type":"error","error":{"type","message"}}, the type from the HTTP status.
Json AnthropicErrorJSON(const ApiError& error);

class AnthropicFormatter : public ItemFormatter {
 public:
  // `meta.id` is the message id ("msg_…"); `prompt_tokens` is the prompt's length.
  AnthropicFormatter(ResponseMeta meta, int32_t prompt_tokens);
  void StreamStart(std::string* sse) override;
  void StreamEnd(const OutputDelta& last, const GenerationResult& result,
                 std::string* sse) override;
  void StreamError(const ApiError& error, std::string* sse) override;
  Json Whole(const GenerationResult& result) override;

 private:
  enum class Open { kNone, kThinking, kText };
  void AddReasoning(const std::string& text, std::string* sse) override;
  void AddText(const std::string& text, std::string* sse) override;
  void AddToolCall(const ToolCall& call, std::string* sse) override;
  // Appends to the open block of `kind`, opening it (and closing another) first.
  void AddToBlock(Open kind, const std::string& text, std::string* sse);
  void Close(std::string* sse);

  int32_t prompt_tokens_;
  Json content_ = Json::array();  // finished blocks
  Open open_ = Open::kNone;
  std::string open_text_;
};

}  // namespace shardlm::server
