// Anthropic Messages output and error shape. See anthropic_output.h.
#include "server/anthropic_output.h"

#include "server/json_limits.h"
#include "server/openai_objects.h"

namespace shardlm::server {
namespace {

constexpr std::string_view kMessagesPath = "/v1/messages";

// A tool call's arguments as the object tool_use.input must be: a JSON object as is; anything
// else (text that is not JSON, another value) kept under "arguments" rather than dropped.
Json InputObject(const std::string& arguments) {
  Result<Json> parsed = ParseJsonWithLimits(arguments, "arguments", JsonLimits{});
  if (parsed.ok() && parsed->is_object()) return std::move(parsed).value();
  return Json{{"arguments", parsed.ok() ? std::move(parsed).value() : Json(arguments)}};
}

Json ToolUseBlock(const ToolCall& call) {
  return Json{{"type", "tool_use"},
              {"id", call.id},
              {"name", call.name},
              {"input", InputObject(call.arguments)}};
}

const char* StopReason(const GenerationResult& result) {
  if (result.finish == FinishReason::kLength) return "max_tokens";
  if (!result.tool_calls.empty()) return "tool_use";
  if (!result.stop_sequence.empty()) return "stop_sequence";
  return "end_turn";
}

Json StopSequence(const GenerationResult& result) {
  if (StopReason(result) != std::string_view("stop_sequence")) return nullptr;
  return result.stop_sequence;
}

Json MessageUsageJSON(const RequestUsage& u) {
  return Json{{"input_tokens", u.prompt_tokens - u.cached_tokens},
              {"cache_creation_input_tokens", 0},
              {"cache_read_input_tokens", u.cached_tokens},
              {"output_tokens", u.completion_tokens}};
}

}  // namespace

bool IsAnthropicPath(std::string_view path) {
  return path.starts_with(kMessagesPath) &&
         (path.size() == kMessagesPath.size() || path[kMessagesPath.size()] == '/');
}

const char* AnthropicErrorType(int http_status) {
  switch (http_status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 408:
    case 504:
      return "timeout_error";
    case 409:
      return "conflict_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
    case 529:
      return "overloaded_error";
    default:
      return http_status < 500 ? "invalid_request_error" : "api_error";
  }
}

Json AnthropicErrorJSON(const ApiError& error) {
  return Json{
      {"type", "error"},
      {"error", Json{{"type", AnthropicErrorType(error.http_status)}, {"message", error.message}}}};
}

AnthropicFormatter::AnthropicFormatter(ResponseMeta meta, int32_t prompt_tokens)
    : ItemFormatter(std::move(meta)), prompt_tokens_(prompt_tokens) {}

void AnthropicFormatter::StreamStart(std::string* sse) {
  // The cached part of the prompt is known only at the end: message_delta's usage corrects it.
  RequestUsage usage;
  usage.prompt_tokens = prompt_tokens_;
  Json message = Json{{"id", meta().id},          {"type", "message"},
                      {"role", "assistant"},      {"model", meta().model},
                      {"content", Json::array()}, {"stop_reason", nullptr},
                      {"stop_sequence", nullptr}, {"usage", MessageUsageJSON(usage)}};
  *sse += SseEvent("message_start", Json{{"type", "message_start"}, {"message", message}});
  *sse += SseEvent("ping", Json{{"type", "ping"}});
}

void AnthropicFormatter::AddToBlock(Open kind, const std::string& text, std::string* sse) {
  const bool thinking = kind == Open::kThinking;
  if (open_ != kind) Close(sse);
  // The block's index: after the one Close just finished, if any.
  const int index = static_cast<int>(content_.size());
  if (open_ != kind) {
    open_ = kind;
    const Json block = thinking ? Json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}
                                : Json{{"type", "text"}, {"text", ""}};
    *sse +=
        SseEvent("content_block_start",
                 Json{{"type", "content_block_start"}, {"index", index}, {"content_block", block}});
  }
  open_text_ += text;
  const Json delta = thinking ? Json{{"type", "thinking_delta"}, {"thinking", text}}
                              : Json{{"type", "text_delta"}, {"text", text}};
  *sse += SseEvent("content_block_delta",
                   Json{{"type", "content_block_delta"}, {"index", index}, {"delta", delta}});
}

void AnthropicFormatter::AddToolCall(const ToolCall& call, std::string* sse) {
  Close(sse);
  const int index = static_cast<int>(content_.size());
  Json block = ToolUseBlock(call);
  Json start = block;
  start["input"] = Json::object();  // the input comes as input_json_delta
  *sse +=
      SseEvent("content_block_start",
               Json{{"type", "content_block_start"}, {"index", index}, {"content_block", start}});
  *sse += SseEvent("content_block_delta",
                   Json{{"type", "content_block_delta"},
                        {"index", index},
                        {"delta", Json{{"type", "input_json_delta"},
                                       {"partial_json", DumpJson(block["input"])}}}});
  *sse += SseEvent("content_block_stop", Json{{"type", "content_block_stop"}, {"index", index}});
  content_.push_back(std::move(block));
}

void AnthropicFormatter::Close(std::string* sse) {
  if (open_ == Open::kNone) return;
  const int index = static_cast<int>(content_.size());
  if (open_ == Open::kThinking) {
    content_.push_back(Json{{"type", "thinking"}, {"thinking", open_text_}, {"signature", ""}});
  } else {
    content_.push_back(Json{{"type", "text"}, {"text", open_text_}});
  }
  *sse += SseEvent("content_block_stop", Json{{"type", "content_block_stop"}, {"index", index}});
  open_ = Open::kNone;
  open_text_.clear();
}

void AnthropicFormatter::AddReasoning(const std::string& text, std::string* sse) {
  AddToBlock(Open::kThinking, text, sse);
}

void AnthropicFormatter::AddText(const std::string& text, std::string* sse) {
  AddToBlock(Open::kText, text, sse);
}

void AnthropicFormatter::StreamEnd(const OutputDelta& last, const GenerationResult& result,
                                   std::string* sse) {
  Add(last, sse);
  Close(sse);
  Json delta = Json{
      {"type", "message_delta"},
      {"delta", Json{{"stop_reason", StopReason(result)}, {"stop_sequence", StopSequence(result)}}},
      {"usage", MessageUsageJSON(result.usage)}};
  AddPinned(result.usage, delta);
  *sse += SseEvent("message_delta", delta);
  *sse += SseEvent("message_stop", Json{{"type", "message_stop"}});
}

void AnthropicFormatter::StreamError(const ApiError& error, std::string* sse) {
  *sse += SseEvent("error", AnthropicErrorJSON(error));
}

Json AnthropicFormatter::Whole(const GenerationResult& result) {
  // The same blocks a stream builds, from the whole output at once.
  std::string unused_events;
  AddAll(result, &unused_events);
  Close(&unused_events);
  Json message = Json{{"id", meta().id},
                      {"type", "message"},
                      {"role", "assistant"},
                      {"model", meta().model},
                      {"content", content_},
                      {"stop_reason", StopReason(result)},
                      {"stop_sequence", StopSequence(result)},
                      {"usage", MessageUsageJSON(result.usage)}};
  AddPinned(result.usage, message);
  return message;
}

}  // namespace shardlm::server
