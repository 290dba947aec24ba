// chat.completion and text_completion output, whole and streamed. See openai_output.h.
#include "server/openai_output.h"

#include <optional>
#include <span>
#include <vector>

namespace shardlm::server {
namespace {

const char* FinishReasonText(const GenerationResult& result, bool chat) {
  if (result.finish == FinishReason::kLength) return "length";
  if (chat && !result.tool_calls.empty()) return "tool_calls";
  return "stop";
}

}  // namespace

ChatCompletionFormatter::ChatCompletionFormatter(ResponseMeta meta,
                                                 const GenerationOptions& options)
    : OutputFormatter(std::move(meta)),
      logprobs_(options.logprobs),
      include_usage_(options.include_usage) {}

// The role chunk waits for the first token, as it always has.
void ChatCompletionFormatter::StreamStart(std::string* /*sse*/) {}

void ChatCompletionFormatter::StreamDelta(const OutputDelta& delta, const TokenLogprobInfo* logprob,
                                          std::string* sse) {
  if (!role_sent_) {
    *sse += SseMessage(ChatChunkJSON(meta(), Json{{"role", "assistant"}, {"content", ""}}, ""));
    role_sent_ = true;
  }
  if (!delta.reasoning.empty()) {
    *sse += SseMessage(ChatChunkJSON(meta(), Json{{"reasoning_content", delta.reasoning}}, ""));
  }
  if (!delta.content.empty() || logprob) {
    const Json lp = logprob ? ChatLogprobsJSON({*logprob}) : Json(nullptr);
    *sse += SseMessage(ChatChunkJSON(meta(), Json{{"content", delta.content}}, "", lp));
  }
  for (const ToolCall& call : delta.tool_calls) {
    Json calls = Json::array({ToolCallJSON(call, tool_calls_sent_++)});
    *sse += SseMessage(ChatChunkJSON(meta(), Json{{"tool_calls", calls}}, ""));
  }
}

void ChatCompletionFormatter::StreamEnd(const OutputDelta& last, const GenerationResult& result,
                                        std::string* sse) {
  StreamDelta(last, nullptr, sse);
  *sse += SseMessage(ChatChunkJSON(meta(), Json::object(), FinishReasonText(result, true)));
  if (include_usage_) {
    *sse += SseMessage(UsageChunkJSON(meta(), "chat.completion.chunk", result.usage));
  }
  *sse += "data: [DONE]\n\n";
}

void ChatCompletionFormatter::StreamError(const ApiError& error, std::string* sse) {
  *sse += SseMessage(ErrorJSON(error));
}

Json ChatCompletionFormatter::Whole(const GenerationResult& result) {
  ChatResult chat;
  chat.content = result.content;
  chat.reasoning_content = result.reasoning;
  chat.tool_calls = result.tool_calls;
  chat.finish_reason = FinishReasonText(result, true);
  if (logprobs_) chat.logprobs = result.logprobs;
  return ChatCompletionJSON(meta(), chat, result.usage);
}

TextCompletionFormatter::TextCompletionFormatter(ResponseMeta meta,
                                                 const GenerationOptions& options,
                                                 std::string echo_prefix)
    : OutputFormatter(std::move(meta)),
      logprobs_(options.logprobs),
      include_usage_(options.include_usage),
      echo_prefix_(std::move(echo_prefix)) {}

// The echoed prompt waits for the first token, as it always has.
void TextCompletionFormatter::StreamStart(std::string* /*sse*/) {}

void TextCompletionFormatter::StreamEcho(std::string* sse) {
  if (echo_sent_) return;
  echo_sent_ = true;
  if (!echo_prefix_.empty()) *sse += SseMessage(CompletionChunkJSON(meta(), echo_prefix_, ""));
}

void TextCompletionFormatter::StreamPromptLogprobs(std::span<const TokenLogprobInfo> prompt,
                                                   std::string* sse) {
  echo_sent_ = true;
  *sse += SseMessage(CompletionChunkJSON(meta(), echo_prefix_, "", CompletionLogprobsJSON(prompt)));
}

void TextCompletionFormatter::StreamDelta(const OutputDelta& delta, const TokenLogprobInfo* logprob,
                                          std::string* sse) {
  StreamEcho(sse);
  // A token whose bytes are held back (part of a UTF-8 character or of a possible stop
  // string) still gets its chunk when logprobs were asked for: one entry per token.
  if (delta.content.empty() && !logprob) return;
  const Json lp = logprob ? CompletionLogprobsJSON(std::span(logprob, 1)) : Json(nullptr);
  *sse += SseMessage(CompletionChunkJSON(meta(), delta.content, "", lp));
}

void TextCompletionFormatter::StreamEnd(const OutputDelta& last, const GenerationResult& result,
                                        std::string* sse) {
  StreamEcho(sse);
  *sse += SseMessage(CompletionChunkJSON(meta(), last.content, FinishReasonText(result, false)));
  if (include_usage_) *sse += SseMessage(UsageChunkJSON(meta(), "text_completion", result.usage));
  *sse += "data: [DONE]\n\n";
}

void TextCompletionFormatter::StreamError(const ApiError& error, std::string* sse) {
  *sse += SseMessage(ErrorJSON(error));
}

Json TextCompletionFormatter::Whole(const GenerationResult& result) {
  std::optional<std::vector<TokenLogprobInfo>> lp;
  if (logprobs_) {
    lp = result.prompt_logprobs;
    lp->insert(lp->end(), result.logprobs.begin(), result.logprobs.end());
  }
  return CompletionJSON(meta(), echo_prefix_ + result.content, FinishReasonText(result, false),
                        result.usage, lp);
}

}  // namespace shardlm::server
