// POST /v1/messages and /v1/messages/count_tokens (Anthropic's Messages API) as the server's
// chat request: typed, checked at the boundary, and mapped onto a ChatCompletionRequest that
// the model's chat template renders like any chat, so the engine, prefix cache and slots serve
// it unchanged.
//
// Mapping: `system` (a string or text blocks) → a system message first; `messages` (user and
// assistant, content a string or blocks): text blocks → the message's text; a user's
// tool_result blocks → tool messages (in block order with its text), is_error marked in the
// text; an assistant's thinking blocks → reasoning_content (redacted_thinking is dropped: its
// text is encrypted), tool_use blocks → tool_calls (input as arguments). `tools` {name,
// description, input_schema} → function tools; `tool_choice` auto|any|tool|none → auto,
// required, the named function, none; `stop_sequences` → stop; `max_tokens` (required for
// /v1/messages); `thinking` {type: enabled|adaptive|disabled} → the template's
// enable_thinking; temperature, top_p, top_k as chat's sampling.
//
// Goals: every field checked, errors naming it (`messages[1].content[0].tool_use_id`); unknown
// fields ignored; what this server cannot do is a 400 that says so: image and document blocks
// (text-only models), server tools (web search, code execution, ...), MCP servers.
// Non-goals: the response's shape (anthropic_output.h), HTTP.
//
// Thread safety: pure functions.
#pragma once

#include <string>

#include "base/status.h"
#include "server/openai_types.h"

namespace shardlm::server {

// POST /v1/messages: max_tokens is required.
Result<ChatCompletionRequest> MessagesRequestFromJSON(const Json& body,
                                                      std::string* param = nullptr);
// POST /v1/messages/count_tokens: the same request, without max_tokens.
Result<ChatCompletionRequest> CountTokensRequestFromJSON(const Json& body,
                                                         std::string* param = nullptr);

}  // namespace shardlm::server
