// OpenAI response objects. See openai_objects.h.
#include "server/openai_objects.h"

#include <utility>

namespace shardlm::server {

Json TimingsJSON(const RequestUsage& u) {
  auto per_second = [](int32_t n, double ms) { return ms > 0 ? n * 1000.0 / ms : 0.0; };
  return Json{{"cache_n", u.cached_tokens},
              {"prompt_n", u.prompt_tokens - u.cached_tokens},
              {"prompt_ms", u.prefill_ms},
              {"prompt_per_second", per_second(u.prompt_tokens - u.cached_tokens, u.prefill_ms)},
              {"predicted_n", u.completion_tokens},
              {"predicted_ms", u.decode_ms},
              {"predicted_per_second", per_second(u.completion_tokens, u.decode_ms)},
              {"queue_ms", u.queue_ms}};
}

void AddPinned(const RequestUsage& u, Json& response) {
  if (u.kv_pins.empty()) return;
  Json pins = Json::array();
  for (const auto& [begin, end] : u.kv_pins) pins.push_back(Json::array({begin, end}));
  response["pin"] = std::move(pins);
}

Json UsageJSON(const RequestUsage& u) {
  return Json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"prompt_tokens_details", Json{{"cached_tokens", u.cached_tokens}}}};
}

namespace {

Json BytesJSON(const std::string& s) {
  Json bytes = Json::array();
  for (unsigned char c : s) bytes.push_back(static_cast<int>(c));
  return bytes;
}

// JSON strings must be valid UTF-8: a lone token piece may not be; replace bad bytes.
std::string ValidUtf8(const std::string& s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = s[i];
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 2;
    if (ok) {
      out.append(s, i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

}  // namespace

Json ChatLogprobsJSON(const std::vector<TokenLogprobInfo>& logprobs) {
  Json content = Json::array();
  for (const TokenLogprobInfo& t : logprobs) {
    Json top = Json::array();
    for (const auto& [tok, lp] : t.top) {
      top.push_back(Json{{"token", ValidUtf8(tok)}, {"logprob", lp}, {"bytes", BytesJSON(tok)}});
    }
    content.push_back(Json{{"token", ValidUtf8(t.token)},
                           {"logprob", t.logprob},
                           {"bytes", BytesJSON(t.token)},
                           {"top_logprobs", top}});
  }
  return Json{{"content", content}};
}

Json ToolCallJSON(const ToolCall& call, std::optional<int> index) {
  Json j = Json::object();
  if (index) j["index"] = *index;
  j["id"] = call.id;
  j["type"] = "function";
  j["function"] = Json{{"name", call.name}, {"arguments", call.arguments}};
  return j;
}

namespace {

// The object that ends a response (a whole reply, or a stream's usage chunk): its choices,
// usage, llama.cpp's timings and the ranges a bounded KV pool pinned.
Json FinalJSON(const ResponseMeta& meta, const char* object, Json choices,
               const RequestUsage& usage) {
  Json response = Json{{"id", meta.id},
                       {"object", object},
                       {"created", meta.created},
                       {"model", meta.model},
                       {"choices", std::move(choices)},
                       {"usage", UsageJSON(usage)},
                       {"timings", TimingsJSON(usage)}};
  AddPinned(usage, response);
  return response;
}

}  // namespace

Json ChatCompletionJSON(const ResponseMeta& meta, const ChatResult& result,
                        const RequestUsage& usage) {
  Json message = Json{{"role", "assistant"}};
  message["content"] =
      result.content.empty() && !result.tool_calls.empty() ? Json(nullptr) : Json(result.content);
  if (!result.reasoning_content.empty()) message["reasoning_content"] = result.reasoning_content;
  if (!result.tool_calls.empty()) {
    Json calls = Json::array();
    for (const ToolCall& c : result.tool_calls) calls.push_back(ToolCallJSON(c));
    message["tool_calls"] = calls;
  }
  Json choice = Json{{"index", 0}, {"message", message}};
  choice["logprobs"] = result.logprobs ? ChatLogprobsJSON(*result.logprobs) : Json(nullptr);
  choice["finish_reason"] = result.finish_reason;
  return FinalJSON(meta, "chat.completion", Json::array({choice}), usage);
}

Json ChatChunkJSON(const ResponseMeta& meta, const Json& delta, const std::string& finish_reason,
                   const Json& logprobs) {
  Json choice = Json{{"index", 0}, {"delta", delta}, {"logprobs", logprobs}};
  choice["finish_reason"] = finish_reason.empty() ? Json(nullptr) : Json(finish_reason);
  return Json{{"id", meta.id},
              {"object", "chat.completion.chunk"},
              {"created", meta.created},
              {"model", meta.model},
              {"choices", Json::array({choice})}};
}

Json UsageChunkJSON(const ResponseMeta& meta, const char* object, const RequestUsage& usage) {
  return FinalJSON(meta, object, Json::array(), usage);
}

Json CompletionJSON(const ResponseMeta& meta, const std::string& text,
                    const std::string& finish_reason, const RequestUsage& usage,
                    const std::optional<std::vector<TokenLogprobInfo>>& logprobs) {
  Json choice = Json{{"index", 0}, {"text", text}};
  choice["logprobs"] = logprobs ? CompletionLogprobsJSON(*logprobs) : Json(nullptr);
  choice["finish_reason"] = finish_reason;
  return FinalJSON(meta, "text_completion", Json::array({choice}), usage);
}

Json CompletionLogprobsJSON(std::span<const TokenLogprobInfo> logprobs) {
  Json tokens = Json::array(), token_logprobs = Json::array(), top = Json::array();
  for (const TokenLogprobInfo& t : logprobs) {
    tokens.push_back(ValidUtf8(t.token));
    if (!t.has_logprob) {
      token_logprobs.push_back(nullptr);
      top.push_back(nullptr);
      continue;
    }
    token_logprobs.push_back(t.logprob);
    Json alts = Json::object();
    // Pieces of partial UTF-8 characters may render alike: the likeliest keeps the key.
    for (const auto& [tok, lp] : t.top) alts.emplace(ValidUtf8(tok), lp);
    top.push_back(alts);
  }
  return Json{{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}};
}

Json CompletionChunkJSON(const ResponseMeta& meta, const std::string& text,
                         const std::string& finish_reason, const Json& logprobs) {
  Json choice = Json{{"index", 0}, {"text", text}, {"logprobs", logprobs}};
  choice["finish_reason"] = finish_reason.empty() ? Json(nullptr) : Json(finish_reason);
  return Json{{"id", meta.id},
              {"object", "text_completion"},
              {"created", meta.created},
              {"model", meta.model},
              {"choices", Json::array({choice})}};
}

}  // namespace shardlm::server
