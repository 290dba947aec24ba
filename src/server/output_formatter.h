// OutputFormatter: how one API writes what the engine generated. The CompletionSession turns
// engine events into API-neutral pieces (content text, reasoning text, whole tool calls, a
// token's logprobs, the prompt's logprobs when asked for, then the end: finish reason,
// matched stop string, usage); a formatter per API turns those into its response object or
// its SSE events: chat.completion(.chunk) and text_completion (openai_output.h), OpenAI
// Responses (responses_output.h), Anthropic Messages (anthropic_output.h).
//
// Goals: the engine, the output parsing and the session's threading are written once; an API
// is one formatter; the bytes each API writes depend only on the pieces and the formatter.
// Non-goals: request parsing (each API's *_api.h), HTTP (http_server.h).
//
// Thread safety: a formatter belongs to one session and is called from its handler thread
// only. Lifetime: owned by the session.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/chat_format.h"
#include "server/openai_types.h"

namespace shardlm::server {

// Everything a request generated, accumulated by the session in both modes.
struct GenerationResult {
  std::string content;
  std::string reasoning;
  std::vector<ToolCall> tool_calls;
  std::vector<TokenLogprobInfo> logprobs;  // one per token, when the request asked for them
  // One per prompt token when the request asked for the prompt's logprobs (the first has
  // none: nothing before it predicts it).
  std::vector<TokenLogprobInfo> prompt_logprobs;
  // The end (valid once the engine finished): kStop, kLength or kCancelled (errors never
  // reach a formatter's result).
  FinishReason finish = FinishReason::kStop;
  std::string stop_sequence;     // the stop string that ended the output, "" if none
  int32_t reasoning_tokens = 0;  // generated tokens spent inside <think>…</think>, tags included
  RequestUsage usage;
};

class OutputFormatter {
 public:
  explicit OutputFormatter(ResponseMeta meta) : meta_(std::move(meta)) {}
  virtual ~OutputFormatter() = default;
  const ResponseMeta& meta() const { return meta_; }

  // Streaming. StreamStart runs once before any other call (the stream is open; nothing was
  // generated yet). StreamDelta runs once per generated token with what that token added
  // (possibly nothing: a tag, held-back text), and the token's logprobs when asked for.
  // StreamEnd gets the text the engine released at the end and the whole result (`last`
  // already included); StreamError replaces it when the request failed mid-way. Each
  // appends its SSE text to `sse`.
  virtual void StreamStart(std::string* sse) = 0;
  // The prompt's logprobs (PreparedRequest::prompt_logprobs), once, before any StreamDelta.
  // Only an API that echoes the prompt asks for them, so the others write nothing.
  virtual void StreamPromptLogprobs(std::span<const TokenLogprobInfo> /*prompt*/,
                                    std::string* /*sse*/) {}
  virtual void StreamDelta(const OutputDelta& delta, const TokenLogprobInfo* logprob,
                           std::string* sse) = 0;
  virtual void StreamEnd(const OutputDelta& last, const GenerationResult& result,
                         std::string* sse) = 0;
  virtual void StreamError(const ApiError& error, std::string* sse) = 0;
  // Not streaming: the response object for the whole result.
  virtual Json Whole(const GenerationResult& result) = 0;

 private:
  ResponseMeta meta_;
};

// An output made of items, as Anthropic's content blocks and the Responses API's output
// items are: a delta's reasoning, its text and each tool call go to an item of their kind,
// in that order, and the subclass says how each is added (opening and closing items as the
// kind changes). Logprobs have no place in these outputs.
class ItemFormatter : public OutputFormatter {
 public:
  using OutputFormatter::OutputFormatter;
  void StreamDelta(const OutputDelta& delta, const TokenLogprobInfo* /*logprob*/,
                   std::string* sse) final {
    Add(delta, sse);
  }

 protected:
  void Add(const OutputDelta& delta, std::string* sse) {
    if (!delta.reasoning.empty()) AddReasoning(delta.reasoning, sse);
    if (!delta.content.empty()) AddText(delta.content, sse);
    for (const ToolCall& call : delta.tool_calls) AddToolCall(call, sse);
  }
  // The whole output of `result` added as one delta: how Whole() builds the same items a
  // stream builds (the events appended to `sse` are not sent then).
  void AddAll(const GenerationResult& result, std::string* sse) {
    OutputDelta all;
    all.reasoning = result.reasoning;
    all.content = result.content;
    all.tool_calls = result.tool_calls;
    Add(all, sse);
  }
  virtual void AddReasoning(const std::string& text, std::string* sse) = 0;
  virtual void AddText(const std::string& text, std::string* sse) = 0;
  virtual void AddToolCall(const ToolCall& call, std::string* sse) = 0;
};

// JSON as the server writes it (compact, invalid UTF-8 replaced).
std::string DumpJson(const Json& j);
// One SSE event: "data: {json}\n\n", or with an event name "event: NAME\ndata: {json}\n\n".
std::string SseMessage(const Json& j);
std::string SseEvent(std::string_view name, const Json& j);

}  // namespace shardlm::server
