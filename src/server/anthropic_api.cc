// Anthropic's Messages request mapped onto a chat request. See anthropic_api.h.
#include "server/anthropic_api.h"

#include <fmt/format.h>

#include <limits>

#include "server/request_parser.h"

namespace shardlm::server {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

Status StringField(const Parser& p, const std::string& name, const Json& obj, const char* key,
                   std::string* out) {
  auto v = obj.find(key);
  if (v == obj.end() || !v->is_string()) {
    return p.Fail(fmt::format("{}.{}", name, key), "expected a string");
  }
  *out = v->get<std::string>();
  return Status::Ok();
}

std::string BlockType(const Json& block) {
  auto t = block.find("type");
  return t != block.end() && t->is_string() ? t->get<std::string>() : "";
}

// Blocks this server cannot take, refused by name.
Status RefuseBlock(const Parser& p, const std::string& name, const std::string& type) {
  if (type == "image" || type == "document" || type == "search_result") {
    return p.Fail(name + ".type", fmt::format("'{}' blocks are not supported: this server runs "
                                              "text-only models",
                                              type));
  }
  if (type == "server_tool_use" || type.ends_with("_tool_result") || type == "mcp_tool_use") {
    return p.Fail(name + ".type", fmt::format("'{}' blocks are not supported: this server runs "
                                              "no server tools",
                                              type));
  }
  return p.Fail(name + ".type", fmt::format("unknown block type '{}'", type));
}

// A string, or text blocks (joined): system prompts and tool results.
Status TextOf(const Parser& p, const std::string& name, const Json& content, std::string* text) {
  if (content.is_string()) {
    *text = content.get<std::string>();
    return Status::Ok();
  }
  if (!content.is_array()) return p.Fail(name, "expected a string or an array of blocks");
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string block_name = fmt::format("{}[{}]", name, i);
    if (!content[i].is_object()) return p.Fail(block_name, "expected an object");
    const std::string type = BlockType(content[i]);
    if (type != "text") return RefuseBlock(p, block_name, type);
    std::string piece;
    SHARDLM_TRY(StringField(p, block_name, content[i], "text", &piece));
    *text += piece;
  }
  return Status::Ok();
}

// Calls visit(block_name, block, type) for each content block, in order, after checking
// that it is an object; the first error stops it.
template <typename Visit>
Status ForEachBlock(const Parser& p, const std::string& name, const Json& blocks, Visit visit) {
  for (size_t i = 0; i < blocks.size(); ++i) {
    const Json& block = blocks[i];
    const std::string block_name = fmt::format("{}[{}]", name, i);
    if (!block.is_object()) return p.Fail(block_name, "expected an object");
    SHARDLM_TRY(visit(block_name, block, BlockType(block)));
  }
  return Status::Ok();
}

// A user turn: text blocks join into one user message; each tool_result becomes a tool
// message, in block order.
Status AddUser(const Parser& p, const std::string& name, const Json& blocks, Json* messages) {
  std::string text;
  bool has_text = false;
  auto flush_text = [&] {
    if (has_text) messages->push_back(Json{{"role", "user"}, {"content", text}});
    text.clear();
    has_text = false;
  };
  SHARDLM_TRY(ForEachBlock(
      p, name, blocks,
      [&](const std::string& block_name, const Json& block, const std::string& type) -> Status {
        if (type == "text") {
          std::string piece;
          SHARDLM_TRY(StringField(p, block_name, block, "text", &piece));
          text += piece;
          has_text = true;
        } else if (type == "tool_result") {
          flush_text();
          std::string id, result;
          SHARDLM_TRY(StringField(p, block_name, block, "tool_use_id", &id));
          auto content = block.find("content");
          if (content != block.end() && !content->is_null()) {
            SHARDLM_TRY(TextOf(p, block_name + ".content", *content, &result));
          }
          auto is_error = block.find("is_error");
          if (is_error != block.end() && !is_error->is_null() && !is_error->is_boolean()) {
            return p.Fail(block_name + ".is_error", "expected a boolean");
          }
          // The template has no field for a failed call: the model reads it in the text.
          if (is_error != block.end() && is_error->is_boolean() && is_error->get<bool>()) {
            result = "Error: " + result;
          }
          messages->push_back(Json{{"role", "tool"}, {"tool_call_id", id}, {"content", result}});
        } else {
          return RefuseBlock(p, block_name, type);
        }
        return Status::Ok();
      }));
  flush_text();
  return Status::Ok();
}

// An assistant turn: one assistant message with its text, reasoning and tool calls.
Status AddAssistant(const Parser& p, const std::string& name, const Json& blocks, Json* messages) {
  std::string text, reasoning;
  Json calls = Json::array();
  SHARDLM_TRY(ForEachBlock(
      p, name, blocks,
      [&](const std::string& block_name, const Json& block, const std::string& type) -> Status {
        if (type == "text") {
          std::string piece;
          SHARDLM_TRY(StringField(p, block_name, block, "text", &piece));
          text += piece;
        } else if (type == "thinking") {
          std::string piece;
          SHARDLM_TRY(StringField(p, block_name, block, "thinking", &piece));
          reasoning += piece;
        } else if (type == "redacted_thinking") {
          return Status::Ok();  // encrypted by another server: nothing a template could show
        } else if (type == "tool_use") {
          std::string id, fn;
          SHARDLM_TRY(StringField(p, block_name, block, "id", &id));
          SHARDLM_TRY(StringField(p, block_name, block, "name", &fn));
          auto input = block.find("input");
          if (input == block.end() || !input->is_object()) {
            return p.Fail(block_name + ".input", "expected an object");
          }
          calls.push_back(Json{{"id", id},
                               {"type", "function"},
                               {"function", Json{{"name", fn}, {"arguments", *input}}}});
        } else {
          return RefuseBlock(p, block_name, type);
        }
        return Status::Ok();
      }));
  // A turn of tool calls alone has "" for content, not null: templates such as Qwen3's search
  // the content for </think> and fail on null.
  Json message = Json{{"role", "assistant"}, {"content", text}};
  if (!reasoning.empty()) message["reasoning_content"] = reasoning;
  if (!calls.empty()) message["tool_calls"] = std::move(calls);
  messages->push_back(std::move(message));
  return Status::Ok();
}

Status ParseMessages(const Parser& p, ChatCompletionRequest* r) {
  Json messages = Json::array();
  if (const Json* system = p.Find("system")) {
    std::string text;
    SHARDLM_TRY(TextOf(p, "system", *system, &text));
    messages.push_back(Json{{"role", "system"}, {"content", text}});
  }
  const Json* turns = p.Find("messages");
  if (!turns || !turns->is_array() || turns->empty()) {
    return p.Fail("messages", "expected a non-empty array");
  }
  for (size_t i = 0; i < turns->size(); ++i) {
    const Json& turn = (*turns)[i];
    const std::string name = fmt::format("messages[{}]", i);
    if (!turn.is_object()) return p.Fail(name, "expected an object");
    std::string role;
    SHARDLM_TRY(StringField(p, name, turn, "role", &role));
    if (role != "user" && role != "assistant") {
      return p.Fail(name + ".role", fmt::format("unknown role '{}' (user or assistant)", role));
    }
    auto content = turn.find("content");
    if (content == turn.end()) return p.Fail(name + ".content", "missing");
    if (content->is_string()) {
      messages.push_back(Json{{"role", role}, {"content", *content}});
      continue;
    }
    if (!content->is_array()) {
      return p.Fail(name + ".content", "expected a string or an array of blocks");
    }
    SHARDLM_TRY(role == "user" ? AddUser(p, name + ".content", *content, &messages)
                               : AddAssistant(p, name + ".content", *content, &messages));
  }
  r->messages = std::move(messages);
  return Status::Ok();
}

// {name, description, input_schema} → {"type":"function","function":{name, description,
// parameters}}; typed tools other than "custom" are Anthropic's own (bash, web search, ...).
Status ParseTools(const Parser& p, ChatCompletionRequest* r) {
  SHARDLM_ASSIGN_OR_RETURN(Json chat_tools, ConvertTools(p, {.type = "custom",
                                                             .default_type = "custom",
                                                             .schema_key = "input_schema",
                                                             .schema_required = true,
                                                             .kinds = "custom ones"}));
  if (!chat_tools.empty()) r->tools = std::move(chat_tools);
  return Status::Ok();
}

// {type: auto|any|tool|none, name}.
Status ParseToolChoice(const Parser& p, ChatCompletionRequest* r) {
  const Json* choice = p.Find("tool_choice");
  if (!choice) return Status::Ok();
  if (!choice->is_object()) return p.Fail("tool_choice", "expected an object");
  const std::string type = choice->value("type", "");
  ToolChoice& tc = r->tool_choice;
  if (type == "auto") {
    tc.mode = ToolChoice::Mode::kAuto;
  } else if (type == "any") {
    tc.mode = ToolChoice::Mode::kRequired;
  } else if (type == "none") {
    tc.mode = ToolChoice::Mode::kNone;
  } else if (type == "tool") {
    tc.mode = ToolChoice::Mode::kFunction;
    SHARDLM_TRY(StringField(p, "tool_choice", *choice, "name", &tc.function));
  } else {
    return p.Fail("tool_choice.type",
                  fmt::format("unknown type '{}' (auto, any, tool, none)", type));
  }
  SHARDLM_TRY(CheckToolChoice(p, "tool_choice", *r));
  if (tc.mode == ToolChoice::Mode::kNone) r->tools = nullptr;
  return Status::Ok();
}

Status ParseStopSequences(const Parser& p, GenerationOptions* o) {
  const Json* stops = p.Find("stop_sequences");
  if (!stops) return Status::Ok();
  if (!stops->is_array()) return p.Fail("stop_sequences", "expected an array of strings");
  if (stops->size() > kMaxStopStrings) {
    return p.Fail("stop_sequences", fmt::format("at most {} stop sequences", kMaxStopStrings));
  }
  for (const Json& s : *stops) {
    if (!s.is_string()) return p.Fail("stop_sequences", "expected an array of strings");
    const std::string& stop = s.get_ref<const std::string&>();
    if (stop.size() > kMaxStopStringBytes) {
      return p.Fail("stop_sequences", fmt::format("a stop sequence of {} bytes: at most {}",
                                                  stop.size(), kMaxStopStringBytes));
    }
    if (!stop.empty()) o->stop.push_back(stop);
  }
  return Status::Ok();
}

// thinking: {type: enabled, budget_tokens} | {type: adaptive} | {type: disabled} → the
// template's enable_thinking. The budget is checked, not enforced: max_tokens bounds the
// whole output.
Status ParseThinking(const Parser& p, ChatCompletionRequest* r) {
  const Json* thinking = p.Find("thinking");
  if (!thinking) return Status::Ok();
  if (!thinking->is_object()) return p.Fail("thinking", "expected an object");
  const std::string type = thinking->value("type", "");
  if (type != "enabled" && type != "adaptive" && type != "disabled") {
    return p.Fail("thinking.type",
                  fmt::format("unknown type '{}' (enabled, adaptive, disabled)", type));
  }
  if (auto budget = thinking->find("budget_tokens");
      budget != thinking->end() && !budget->is_null()) {
    int64_t tokens = 0;
    SHARDLM_TRY(p.IntValue("thinking.budget_tokens", *budget, 0, kInt32Max, &tokens));
  }
  r->chat_template_kwargs["enable_thinking"] = type != "disabled";
  return Status::Ok();
}

Result<ChatCompletionRequest> Parse(const Json& body, bool needs_max_tokens, std::string* param) {
  SHARDLM_TRY(CheckObject(body, param));
  Parser p{body, param};
  ChatCompletionRequest r;
  SHARDLM_TRY(ParseCommon(p, &r.options));
  if (needs_max_tokens) {
    if (!p.Find("max_tokens")) return p.Fail("max_tokens", "missing (it is required)");
    int64_t max_tokens = 0;
    SHARDLM_TRY(p.Int("max_tokens", 1, kInt32Max, &max_tokens));
  }
  SHARDLM_TRY(ParseStopSequences(p, &r.options));
  if (p.Find("mcp_servers")) return p.Fail("mcp_servers", "MCP servers are not supported");
  if (const Json* metadata = p.Find("metadata"); metadata && !metadata->is_object()) {
    return p.Fail("metadata", "expected an object");
  }
  SHARDLM_TRY(ParseMessages(p, &r));
  SHARDLM_TRY(ParseTools(p, &r));
  SHARDLM_TRY(ParseToolChoice(p, &r));
  SHARDLM_TRY(ParseThinking(p, &r));
  return r;
}

}  // namespace

Result<ChatCompletionRequest> MessagesRequestFromJSON(const Json& body, std::string* param) {
  return GuardParse([&] { return Parse(body, /*needs_max_tokens=*/true, param); }, param);
}

Result<ChatCompletionRequest> CountTokensRequestFromJSON(const Json& body, std::string* param) {
  return GuardParse([&] { return Parse(body, /*needs_max_tokens=*/false, param); }, param);
}

}  // namespace shardlm::server
