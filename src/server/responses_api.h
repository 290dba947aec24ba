// POST /v1/responses (OpenAI's Responses API) as the server's chat request: the typed request,
// parsed and checked at the boundary, mapped onto a ChatCompletionRequest that the model's chat
// template renders like any chat, so the engine, prefix cache and slots serve it unchanged.
//
// Mapping: `instructions` → a system message first; `input` (a string, or items) → messages:
// a `message` item (roles user, assistant, system, developer; content a string or
// input_text/output_text parts) → that message; `reasoning` items → the next assistant
// message's reasoning_content; `function_call` items → tool_calls of an assistant message
// (one message for the calls of one turn); `function_call_output` → a tool message;
// `item_reference` → the stored item it names (response_store.h); `previous_response_id` →
// the stored conversation first. `tools` (function tools) and `tool_choice` → OpenAI chat
// shape; `text.format` → response_format; `max_output_tokens` → max_tokens;
// `reasoning.effort` → the template's enable_thinking ("none": off) and reasoning_effort.
// Sampling fields are chat's (temperature, top_p, ...).
//
// Goals: every field checked, errors naming it (`input[2].content[0].type`); unknown fields
// ignored; what this server cannot do is a 400 that says so: images, files and audio (the
// models are text-only), built-in tools (web_search, file_search, ...), background responses,
// conversations, stored prompts, logprobs.
// Non-goals: the response's shape (responses_output.h), HTTP.
//
// Thread safety: pure functions (the store is read under its own lock).
#pragma once

#include <string>

#include "base/status.h"
#include "server/openai_types.h"
#include "server/response_store.h"

namespace shardlm::server {

struct ResponsesRequest {
  ChatCompletionRequest chat;
  // This request's own input as items, references resolved: what a stored response keeps.
  Json input_items = Json::array();
  std::string previous_response_id;  // "" when none
  bool store = true;                 // keep the response for later references
  // The settings a response object repeats back: instructions, max_output_tokens,
  // parallel_tool_calls, previous_response_id, reasoning, store, temperature, text,
  // tool_choice, tools, top_p, truncation, user, metadata (as sent, or their defaults).
  Json echo = Json::object();
};

// `store` resolves previous_response_id and item_reference; nullptr: none is kept, so both
// are 400s.
Result<ResponsesRequest> ResponsesRequestFromJSON(const Json& body, const ResponseStore* store,
                                                  std::string* param = nullptr);

}  // namespace shardlm::server
