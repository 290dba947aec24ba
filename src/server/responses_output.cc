// The Responses API's response object and event stream. See responses_output.h.
#include "server/responses_output.h"

#include <fmt/format.h>

#include "server/openai_objects.h"

namespace shardlm::server {
namespace {

Json ResponseUsageJSON(const RequestUsage& u, int32_t reasoning_tokens) {
  return Json{{"input_tokens", u.prompt_tokens},
              {"input_tokens_details", Json{{"cached_tokens", u.cached_tokens}}},
              {"output_tokens", u.completion_tokens},
              {"output_tokens_details", Json{{"reasoning_tokens", reasoning_tokens}}},
              {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

Json OutputText(const std::string& text) {
  return Json{{"type", "output_text"}, {"annotations", Json::array()}, {"text", text}};
}

Json ReasoningItem(const std::string& id, const std::string& text) {
  Json summary = Json::array(), content = Json::array();
  if (!text.empty()) {
    summary.push_back(Json{{"type", "summary_text"}, {"text", text}});
    content.push_back(Json{{"type", "reasoning_text"}, {"text", text}});
  }
  return Json{{"id", id}, {"type", "reasoning"}, {"summary", summary}, {"content", content}};
}

Json MessageItem(const std::string& id, std::string_view status, const Json& content) {
  return Json{{"id", id},
              {"type", "message"},
              {"status", status},
              {"content", content},
              {"role", "assistant"}};
}

Json FunctionCallItem(const std::string& id, std::string_view status, const ToolCall& call,
                      const std::string& arguments) {
  return Json{{"id", id},           {"type", "function_call"},
              {"status", status},   {"arguments", arguments},
              {"call_id", call.id}, {"name", call.name}};
}

}  // namespace

ResponsesFormatter::ResponsesFormatter(ResponseMeta meta, ResponsesOutputOptions options)
    : ItemFormatter(std::move(meta)), options_(std::move(options)) {}

std::string ResponsesFormatter::NextItemId(std::string_view prefix) {
  // "resp_0a1b…" → "msg_0a1b…_2": unique across responses, so stored items never collide.
  const std::string& id = meta().id;
  const size_t tail = id.find('_');
  return fmt::format("{}_{}_{}", prefix, tail == std::string::npos ? id : id.substr(tail + 1),
                     items_made_++);
}

void ResponsesFormatter::Emit(std::string_view type, Json fields, std::string* sse) {
  Json event = Json{{"type", type}, {"sequence_number", sequence_++}};
  for (auto& [key, value] : fields.items()) event[key] = std::move(value);
  *sse += SseEvent(type, event);
}

Json ResponsesFormatter::Response(std::string_view status, const GenerationResult* result) const {
  const Json& e = options_.echo;
  auto echoed = [&](const char* key) { return e.contains(key) ? e[key] : Json(nullptr); };
  Json r = Json{{"id", meta().id},
                {"object", "response"},
                {"created_at", meta().created},
                {"status", status},
                {"background", false},
                {"error", nullptr},
                {"incomplete_details", nullptr}};
  if (status == "incomplete") r["incomplete_details"] = Json{{"reason", "max_output_tokens"}};
  for (const char* key : {"instructions", "max_output_tokens"}) r[key] = echoed(key);
  r["model"] = meta().model;
  r["output"] = output_;
  for (const char* key : {"parallel_tool_calls", "previous_response_id", "reasoning", "store",
                          "temperature", "text", "tool_choice", "tools", "top_p", "truncation"}) {
    r[key] = echoed(key);
  }
  r["usage"] = result ? ResponseUsageJSON(result->usage, result->reasoning_tokens) : Json(nullptr);
  if (result) AddPinned(result->usage, r);
  r["user"] = echoed("user");
  r["metadata"] = echoed("metadata");
  return r;
}

void ResponsesFormatter::StreamStart(std::string* sse) {
  Emit("response.created", Json{{"response", Response("in_progress", nullptr)}}, sse);
  Emit("response.in_progress", Json{{"response", Response("in_progress", nullptr)}}, sse);
}

void ResponsesFormatter::AddReasoning(const std::string& text, std::string* sse) {
  if (open_ != Open::kReasoning) Close("completed", sse);
  // The item's place: after the one Close just finished, if any.
  const int index = static_cast<int>(output_.size());
  if (open_ != Open::kReasoning) {
    open_ = Open::kReasoning;
    open_id_ = NextItemId("rs");
    Emit("response.output_item.added",
         Json{{"output_index", index}, {"item", ReasoningItem(open_id_, "")}}, sse);
    Emit("response.reasoning_summary_part.added",
         Json{{"item_id", open_id_},
              {"output_index", index},
              {"summary_index", 0},
              {"part", Json{{"type", "summary_text"}, {"text", ""}}}},
         sse);
    Emit("response.content_part.added",
         Json{{"item_id", open_id_},
              {"output_index", index},
              {"content_index", 0},
              {"part", Json{{"type", "reasoning_text"}, {"text", ""}}}},
         sse);
  }
  open_text_ += text;
  Emit("response.reasoning_summary_text.delta",
       Json{{"item_id", open_id_}, {"output_index", index}, {"summary_index", 0}, {"delta", text}},
       sse);
  Emit("response.reasoning_text.delta",
       Json{{"item_id", open_id_}, {"output_index", index}, {"content_index", 0}, {"delta", text}},
       sse);
}

void ResponsesFormatter::AddText(const std::string& text, std::string* sse) {
  if (open_ != Open::kMessage) Close("completed", sse);
  // The item's place: after the one Close just finished, if any.
  const int index = static_cast<int>(output_.size());
  if (open_ != Open::kMessage) {
    open_ = Open::kMessage;
    open_id_ = NextItemId("msg");
    Emit("response.output_item.added",
         Json{{"output_index", index},
              {"item", MessageItem(open_id_, "in_progress", Json::array())}},
         sse);
    Emit("response.content_part.added",
         Json{{"item_id", open_id_},
              {"output_index", index},
              {"content_index", 0},
              {"part", OutputText("")}},
         sse);
  }
  open_text_ += text;
  Emit("response.output_text.delta",
       Json{{"item_id", open_id_},
            {"output_index", index},
            {"content_index", 0},
            {"delta", text},
            {"logprobs", Json::array()}},
       sse);
}

void ResponsesFormatter::AddToolCall(const ToolCall& call, std::string* sse) {
  Close("completed", sse);
  const int index = static_cast<int>(output_.size());
  const std::string id = NextItemId("fc");
  Emit("response.output_item.added",
       Json{{"output_index", index}, {"item", FunctionCallItem(id, "in_progress", call, "")}}, sse);
  Emit("response.function_call_arguments.delta",
       Json{{"item_id", id}, {"output_index", index}, {"delta", call.arguments}}, sse);
  Emit("response.function_call_arguments.done",
       Json{{"item_id", id},
            {"output_index", index},
            {"name", call.name},
            {"arguments", call.arguments}},
       sse);
  output_.push_back(FunctionCallItem(id, "completed", call, call.arguments));
  Emit("response.output_item.done", Json{{"output_index", index}, {"item", output_.back()}}, sse);
}

void ResponsesFormatter::Close(std::string_view status, std::string* sse) {
  const int index = static_cast<int>(output_.size());
  if (open_ == Open::kReasoning) {
    Emit("response.reasoning_text.done",
         Json{{"item_id", open_id_},
              {"output_index", index},
              {"content_index", 0},
              {"text", open_text_}},
         sse);
    Emit("response.content_part.done",
         Json{{"item_id", open_id_},
              {"output_index", index},
              {"content_index", 0},
              {"part", Json{{"type", "reasoning_text"}, {"text", open_text_}}}},
         sse);
    Emit("response.reasoning_summary_text.done",
         Json{{"item_id", open_id_},
              {"output_index", index},
              {"summary_index", 0},
              {"text", open_text_}},
         sse);
    Emit("response.reasoning_summary_part.done",
         Json{{"item_id", open_id_},
              {"output_index", index},
              {"summary_index", 0},
              {"part", Json{{"type", "summary_text"}, {"text", open_text_}}}},
         sse);
    output_.push_back(ReasoningItem(open_id_, open_text_));
  } else if (open_ == Open::kMessage) {
    Emit("response.output_text.done",
         Json{{"item_id", open_id_},
              {"output_index", index},
              {"content_index", 0},
              {"text", open_text_},
              {"logprobs", Json::array()}},
         sse);
    Emit("response.content_part.done",
         Json{{"item_id", open_id_},
              {"output_index", index},
              {"content_index", 0},
              {"part", OutputText(open_text_)}},
         sse);
    output_.push_back(MessageItem(open_id_, status, Json::array({OutputText(open_text_)})));
  } else {
    return;
  }
  Emit("response.output_item.done", Json{{"output_index", index}, {"item", output_.back()}}, sse);
  open_ = Open::kNone;
  open_text_.clear();
}

void ResponsesFormatter::StreamEnd(const OutputDelta& last, const GenerationResult& result,
                                   std::string* sse) {
  Add(last, sse);
  const bool cut = result.finish == FinishReason::kLength;
  Close(cut ? "incomplete" : "completed", sse);
  const char* status = cut ? "incomplete" : "completed";
  Emit(cut ? "response.incomplete" : "response.completed",
       Json{{"response", Response(status, &result)}}, sse);
  Keep();
}

void ResponsesFormatter::StreamError(const ApiError& error, std::string* sse) {
  Close("incomplete", sse);
  const std::string code = error.code.empty() ? error.type : error.code;
  Json response = Response("failed", nullptr);
  response["error"] = Json{{"code", code}, {"message", error.message}};
  Emit("response.failed", Json{{"response", response}}, sse);
  // The openai SDK reads code/message/param at the top; the Vercel AI SDK reads an `error`
  // object; both see a failed stream.
  const Json param = error.param.empty() ? Json(nullptr) : Json(error.param);
  Emit("error",
       Json{{"code", code},
            {"message", error.message},
            {"param", param},
            {"error", Json{{"type", error.type},
                           {"code", code},
                           {"message", error.message},
                           {"param", param}}}},
       sse);
}

Json ResponsesFormatter::Whole(const GenerationResult& result) {
  // The same items a stream builds, from the whole output at once.
  std::string unused_events;
  AddAll(result, &unused_events);
  const bool cut = result.finish == FinishReason::kLength;
  Close(cut ? "incomplete" : "completed", &unused_events);
  Keep();
  return Response(cut ? "incomplete" : "completed", &result);
}

void ResponsesFormatter::Keep() const {
  if (!options_.store) return;
  options_.store->Put(meta().id, options_.previous_response_id, options_.input_items, output_);
}

}  // namespace shardlm::server
