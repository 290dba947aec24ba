// The Responses API's output (POST /v1/responses): the response object and its SSE stream,
// written from the session's API-neutral pieces (output_formatter.h).
//
// The output items, in the order the model wrote them: a `reasoning` item for <think> text
// (its text both as the item's reasoning_text content and as its summary: clients show one or
// the other), a `message` item with one output_text part, a `function_call` item per tool call.
// A stream: response.created, response.in_progress, then per item output_item.added, its part
// and text events (reasoning_summary_part/_text and content_part/reasoning_text for reasoning;
// content_part and output_text for a message; function_call_arguments for a call),
// output_item.done, and last response.completed, or response.incomplete when max_output_tokens
// (or the context) cut it. A failure mid-way is response.failed, then an `error` event. Every
// event carries its sequence_number. A whole response is the same items.
//
// Goals: what the openai SDK's types and stream helpers and the Vercel AI SDK accept; a finished
// response kept in the ResponseStore when the request allows it.
// Non-goals: request parsing (responses_api.h), logprobs, annotations.
//
// Thread safety: one formatter per session (output_formatter.h); the store is shared.
#pragma once

#include <string>
#include <string_view>

#include "server/output_formatter.h"
#include "server/response_store.h"

namespace shardlm::server {

struct ResponsesOutputOptions {
  Json echo = Json::object();  // the request settings a response repeats (ResponsesRequest)
  // Where the finished response is kept (nullptr: store false), with what it was given.
  ResponseStore* store = nullptr;
  Json input_items = Json::array();
  std::string previous_response_id;
};

class ResponsesFormatter : public ItemFormatter {
 public:
  // `meta.id` is the response id ("resp_…"); item ids are made from it.
  ResponsesFormatter(ResponseMeta meta, ResponsesOutputOptions options);
  void StreamStart(std::string* sse) override;
  void StreamEnd(const OutputDelta& last, const GenerationResult& result,
                 std::string* sse) override;
  void StreamError(const ApiError& error, std::string* sse) override;
  Json Whole(const GenerationResult& result) override;

 private:
  enum class Open { kNone, kReasoning, kMessage };
  // Appends one event: {"type", "sequence_number", ...fields}.
  void Emit(std::string_view type, Json fields, std::string* sse);
  void AddReasoning(const std::string& text, std::string* sse) override;
  void AddText(const std::string& text, std::string* sse) override;
  void AddToolCall(const ToolCall& call, std::string* sse) override;
  // Ends the open reasoning or message item; `status` for a message ("completed" or
  // "incomplete").
  void Close(std::string_view status, std::string* sse);
  std::string NextItemId(std::string_view prefix);
  Json Response(std::string_view status, const GenerationResult* result) const;
  void Keep() const;

  ResponsesOutputOptions options_;
  Json output_ = Json::array();  // finished items
  int sequence_ = 0;
  int items_made_ = 0;
  Open open_ = Open::kNone;
  std::string open_id_;
  std::string open_text_;
};

}  // namespace shardlm::server
