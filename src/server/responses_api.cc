// The Responses API request mapped onto a chat request. See responses_api.h.
#include "server/responses_api.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "server/json_limits.h"
#include "server/request_parser.h"

namespace shardlm::server {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// Builds the chat messages from the Responses items, in order.
class MessageBuilder {
 public:
  explicit MessageBuilder(const Parser& p) : p_(p) {}

  Status Add(const std::string& name, const Json& item);
  Json Take() { return std::move(messages_); }

 private:
  Status AddMessage(const std::string& name, const Json& item);
  Status AddFunctionCall(const std::string& name, const Json& item);
  Status AddFunctionOutput(const std::string& name, const Json& item);
  Status AddReasoning(const std::string& name, const Json& item);
  // A new assistant message, carrying the reasoning read since the last one.
  Json& NewAssistant(Json content);
  Status Text(const std::string& name, const Json& content, std::string* text) const;
  Status StringField(const std::string& name, const Json& item, const char* key,
                     std::string* out) const;

  const Parser& p_;
  Json messages_ = Json::array();
  std::string reasoning_;  // from reasoning items, for the next assistant message
};

Status MessageBuilder::StringField(const std::string& name, const Json& item, const char* key,
                                   std::string* out) const {
  auto v = item.find(key);
  if (v == item.end() || !v->is_string()) {
    return p_.Fail(fmt::format("{}.{}", name, key), "expected a string");
  }
  *out = v->get<std::string>();
  return Status::Ok();
}

// A string, or parts: input_text, output_text and summary/reasoning text are text; refusal is
// its refusal text; images, files and audio are refused (the models are text-only).
Status MessageBuilder::Text(const std::string& name, const Json& content, std::string* text) const {
  if (content.is_string()) {
    *text = content.get<std::string>();
    return Status::Ok();
  }
  if (!content.is_array()) return p_.Fail(name, "expected a string or an array of parts");
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const std::string part_name = fmt::format("{}[{}]", name, i);
    if (!part.is_object()) return p_.Fail(part_name, "expected an object");
    auto type = part.find("type");
    if (type == part.end() || !type->is_string()) return p_.Fail(part_name + ".type", "missing");
    const std::string t = type->get<std::string>();
    if (t == "input_text" || t == "output_text" || t == "text" || t == "summary_text" ||
        t == "reasoning_text") {
      std::string piece;
      SHARDLM_TRY(StringField(part_name, part, "text", &piece));
      *text += piece;
    } else if (t == "refusal") {
      std::string piece;
      SHARDLM_TRY(StringField(part_name, part, "refusal", &piece));
      *text += piece;
    } else if (t == "input_image" || t == "input_file" || t == "input_audio") {
      return p_.Fail(part_name + ".type",
                     fmt::format("'{}' content is not supported: this server runs text-only "
                                 "models",
                                 t));
    } else {
      return p_.Fail(part_name + ".type", fmt::format("unknown content type '{}'", t));
    }
  }
  return Status::Ok();
}

Json& MessageBuilder::NewAssistant(Json content) {
  messages_.push_back(Json{{"role", "assistant"}, {"content", std::move(content)}});
  Json& message = messages_.back();
  if (!reasoning_.empty()) {
    message["reasoning_content"] = std::move(reasoning_);
    reasoning_.clear();
  }
  return message;
}

Status MessageBuilder::AddMessage(const std::string& name, const Json& item) {
  std::string role;
  SHARDLM_TRY(StringField(name, item, "role", &role));
  if (role != "user" && role != "assistant" && role != "system" && role != "developer") {
    return p_.Fail(name + ".role",
                   fmt::format("unknown role '{}' (user, assistant, system, developer)", role));
  }
  auto content = item.find("content");
  if (content == item.end()) return p_.Fail(name + ".content", "missing");
  std::string text;
  SHARDLM_TRY(Text(name + ".content", *content, &text));
  if (role != "assistant") {
    messages_.push_back(Json{{"role", role == "developer" ? "system" : role}, {"content", text}});
    return Status::Ok();
  }
  NewAssistant(text);
  return Status::Ok();
}

Status MessageBuilder::AddFunctionCall(const std::string& name, const Json& item) {
  std::string call_id, fn_name, arguments;
  SHARDLM_TRY(StringField(name, item, "call_id", &call_id));
  SHARDLM_TRY(StringField(name, item, "name", &fn_name));
  SHARDLM_TRY(StringField(name, item, "arguments", &arguments));
  // Templates expect arguments as an object: a JSON text becomes one, read under the same
  // limits as the body; text that is not JSON stays a string.
  Json args = arguments;
  Result<Json> parsed =
      ParseJsonWithLimits(arguments, name + ".arguments", JsonLimits{}, p_.budget.get());
  if (parsed.ok()) {
    args = std::move(parsed).value();
  } else if (parsed.status().code() != StatusCode::kInvalidData) {
    if (p_.param) *p_.param = name + ".arguments";
    return parsed.status();
  }
  // The calls of one turn go into one assistant message, after its text: a call joins the
  // last message when that is the assistant's and no reasoning came between them. A message
  // of calls alone has "" for content, not null: templates such as Qwen3's search the
  // content for </think> and fail on null.
  const bool joins =
      !messages_.empty() && messages_.back()["role"] == "assistant" && reasoning_.empty();
  Json& message = joins ? messages_.back() : NewAssistant("");
  if (!message.contains("tool_calls")) message["tool_calls"] = Json::array();
  message["tool_calls"].push_back(
      Json{{"id", call_id},
           {"type", "function"},
           {"function", Json{{"name", fn_name}, {"arguments", std::move(args)}}}});
  return Status::Ok();
}

Status MessageBuilder::AddFunctionOutput(const std::string& name, const Json& item) {
  std::string call_id, output;
  SHARDLM_TRY(StringField(name, item, "call_id", &call_id));
  auto out = item.find("output");
  if (out == item.end()) return p_.Fail(name + ".output", "missing");
  SHARDLM_TRY(Text(name + ".output", *out, &output));
  messages_.push_back(Json{{"role", "tool"}, {"tool_call_id", call_id}, {"content", output}});
  return Status::Ok();
}

// The reasoning text: `content` (reasoning_text parts) when given, else the summary's texts.
Status MessageBuilder::AddReasoning(const std::string& name, const Json& item) {
  std::string text;
  auto content = item.find("content");
  if (content != item.end() && !content->is_null() && !content->empty()) {
    SHARDLM_TRY(Text(name + ".content", *content, &text));
  } else if (auto summary = item.find("summary"); summary != item.end() && !summary->is_null()) {
    SHARDLM_TRY(Text(name + ".summary", *summary, &text));
  }
  reasoning_ += text;
  return Status::Ok();
}

Status MessageBuilder::Add(const std::string& name, const Json& item) {
  if (!item.is_object()) return p_.Fail(name, "expected an object");
  std::string type = "message";  // an item with a role and no type is a message
  if (auto t = item.find("type"); t != item.end() && !t->is_null()) {
    if (!t->is_string()) return p_.Fail(name + ".type", "expected a string");
    type = t->get<std::string>();
  }
  if (type == "message") return AddMessage(name, item);
  if (type == "function_call") return AddFunctionCall(name, item);
  if (type == "function_call_output") return AddFunctionOutput(name, item);
  if (type == "reasoning") return AddReasoning(name, item);
  return p_.Fail(name + ".type", fmt::format("items of type '{}' are not supported (message, "
                                             "function_call, function_call_output, reasoning, "
                                             "item_reference)",
                                             type));
}

// The request's `input` as items: a string is one user message; an item_reference is the
// stored item it names.
Status InputItems(const Parser& p, const ResponseStore* store, Json* items) {
  const Json* input = p.Find("input");
  if (!input) return p.Fail("input", "missing");
  if (input->is_string()) {
    items->push_back(Json{{"type", "message"}, {"role", "user"}, {"content", *input}});
    return Status::Ok();
  }
  if (!input->is_array()) return p.Fail("input", "expected a string or an array of items");
  for (size_t i = 0; i < input->size(); ++i) {
    const Json& item = (*input)[i];
    if (!item.is_object() || item.value("type", "") != "item_reference") {
      items->push_back(item);
      continue;
    }
    const std::string name = fmt::format("input[{}].id", i);
    auto id = item.find("id");
    if (id == item.end() || !id->is_string()) return p.Fail(name, "expected a string");
    std::optional<Json> stored = store ? store->Item(id->get<std::string>()) : std::nullopt;
    if (!stored) {
      return p.Fail(name, fmt::format("no stored item '{}': this server keeps recent responses "
                                      "in memory only (not across restarts); send the item "
                                      "itself, or set store: false to have clients do so",
                                      id->get<std::string>()));
    }
    items->push_back(std::move(*stored));
  }
  return Status::Ok();
}

// {"type":"function","name","description","parameters","strict"} → chat's
// {"type":"function","function":{...}}.
Status ParseTools(const Parser& p, ResponsesRequest* r) {
  SHARDLM_ASSIGN_OR_RETURN(Json chat_tools, ConvertTools(p, {.type = "function",
                                                             .default_type = "",
                                                             .schema_key = "parameters",
                                                             .schema_required = false,
                                                             .kinds = "function tools"}));
  if (!chat_tools.empty()) r->chat.tools = std::move(chat_tools);
  if (const Json* tools = p.Find("tools")) r->echo["tools"] = *tools;
  return Status::Ok();
}

// "auto" | "none" | "required" | {"type":"function","name":N}.
Status ParseToolChoice(const Parser& p, ResponsesRequest* r) {
  const Json* choice = p.Find("tool_choice");
  if (choice) {
    SHARDLM_TRY(ParseToolChoiceValue(
        p, *choice,
        [](const Json& object) -> const Json* {
          if (object.value("type", "") != "function") return nullptr;
          auto name = object.find("name");
          return name == object.end() ? nullptr : &*name;
        },
        "{\"type\":\"function\",\"name\":...}", &r->chat.tool_choice));
  }
  SHARDLM_TRY(CheckToolChoice(p, "tool_choice", r->chat));
  if (choice) r->echo["tool_choice"] = *choice;
  if (r->chat.tool_choice.mode == ToolChoice::Mode::kNone) r->chat.tools = nullptr;
  return Status::Ok();
}

// text.format: {"type":"text"} | {"type":"json_object"} |
// {"type":"json_schema","name","schema","strict"}.
Status ParseTextFormat(const Parser& p, ResponsesRequest* r) {
  const Json* text = p.Find("text");
  if (!text) return Status::Ok();
  if (!text->is_object()) return p.Fail("text", "expected an object");
  r->echo["text"] = *text;
  Parser tp{*text, p.param};
  const Json* format = tp.Find("format");
  if (!format) return Status::Ok();
  if (!format->is_object()) return p.Fail("text.format", "expected an object");
  return ParseFormat(p, {.where = "text.format", .nested = false, .name_fields = true}, *format,
                     &r->chat.options.response_format);
}

// reasoning.effort: "none" turns the template's thinking off; any other effort turns it on
// and is passed on as reasoning_effort (templates that know levels read it).
Status ParseReasoning(const Parser& p, ResponsesRequest* r) {
  const Json* reasoning = p.Find("reasoning");
  if (!reasoning) return Status::Ok();
  if (!reasoning->is_object()) return p.Fail("reasoning", "expected an object");
  r->echo["reasoning"] = *reasoning;
  auto effort = reasoning->find("effort");
  if (effort == reasoning->end() || effort->is_null()) return Status::Ok();
  if (!effort->is_string()) return p.Fail("reasoning.effort", "expected a string");
  const std::string e = effort->get<std::string>();
  Json& kwargs = r->chat.chat_template_kwargs;
  kwargs["enable_thinking"] = e != "none";
  if (e != "none") kwargs["reasoning_effort"] = e;
  return Status::Ok();
}

// Things this server does not do, refused by name rather than ignored.
Status RefuseUnsupported(const Parser& p) {
  bool background = false;
  SHARDLM_TRY(p.Bool("background", &background));
  if (background) return p.Fail("background", "background responses are not supported");
  if (p.Find("conversation")) {
    return p.Fail("conversation",
                  "conversations are not supported: send the input items, or "
                  "previous_response_id");
  }
  if (p.Find("prompt")) return p.Fail("prompt", "stored prompts are not supported");
  int64_t top_logprobs = 0;
  SHARDLM_TRY(p.Int("top_logprobs", 0, kMaxTopLogprobs, &top_logprobs));
  if (top_logprobs > 0) {
    return p.Fail("top_logprobs",
                  "logprobs are not supported on /v1/responses (they are on "
                  "/v1/chat/completions)");
  }
  return Status::Ok();
}

// A sampling setting as a response reports it: the float the sampler uses, to 6 digits (0.8f
// is 0.800000011920929 as a double).
Json Reported(float value) { return std::round(static_cast<double>(value) * 1e6) / 1e6; }

// The settings the response repeats: as sent, else what this server used (the sampler's
// defaults) or OpenAI's defaults.
void EchoDefaults(const Parser& p, ResponsesRequest* r) {
  Json& e = r->echo;
  auto take = [&](const char* key, Json fallback) {
    const Json* v = p.Find(key);
    e[key] = v ? *v : std::move(fallback);
  };
  take("instructions", nullptr);
  take("max_output_tokens", nullptr);
  take("parallel_tool_calls", true);
  take("previous_response_id", nullptr);
  if (!e.contains("reasoning")) e["reasoning"] = Json{{"effort", nullptr}, {"summary", nullptr}};
  e["store"] = r->store;
  take("temperature", Reported(r->chat.options.sampling.temperature));
  if (!e.contains("text")) e["text"] = Json{{"format", Json{{"type", "text"}}}};
  if (!e.contains("tool_choice")) e["tool_choice"] = "auto";
  if (!e.contains("tools")) e["tools"] = Json::array();
  take("top_p", Reported(r->chat.options.sampling.top_p));
  take("truncation", "disabled");
  take("user", nullptr);
  take("metadata", Json::object());
}

Status ParseSettings(const Parser& p, ResponsesRequest* r) {
  SHARDLM_TRY(RefuseUnsupported(p));
  GenerationOptions& o = r->chat.options;
  SHARDLM_TRY(ParseCommon(p, &o));
  int64_t max_output = -1;
  SHARDLM_TRY(p.Int("max_output_tokens", 1, kInt32Max, &max_output));
  if (max_output > 0) o.max_tokens = static_cast<int32_t>(max_output);
  SHARDLM_TRY(p.Bool("store", &r->store));
  bool parallel_tool_calls = true;  // echoed only: calls are taken as the model writes them
  SHARDLM_TRY(p.Bool("parallel_tool_calls", &parallel_tool_calls));
  if (const Json* metadata = p.Find("metadata"); metadata && !metadata->is_object()) {
    return p.Fail("metadata", "expected an object");
  }
  for (const char* key : {"truncation", "user"}) {
    std::string echoed_only;
    SHARDLM_TRY(p.String(key, &echoed_only));
  }
  SHARDLM_TRY(p.String("previous_response_id", &r->previous_response_id));
  if (const Json* kw = p.Find("chat_template_kwargs")) {
    if (!kw->is_object()) return p.Fail("chat_template_kwargs", "expected an object");
    r->chat.chat_template_kwargs = *kw;
  }
  SHARDLM_TRY(ParseReasoning(p, r));
  SHARDLM_TRY(ParseTextFormat(p, r));
  SHARDLM_TRY(ParseTools(p, r));
  return ParseToolChoice(p, r);
}

Status ParseConversation(const Parser& p, const ResponseStore* store, ResponsesRequest* r) {
  SHARDLM_TRY(InputItems(p, store, &r->input_items));
  MessageBuilder messages(p);
  std::string instructions;
  SHARDLM_TRY(p.String("instructions", &instructions));
  if (!instructions.empty()) {
    SHARDLM_TRY(messages.Add("instructions", Json{{"role", "system"}, {"content", instructions}}));
  }
  if (!r->previous_response_id.empty()) {
    Result<Json> history = store
                               ? store->Conversation(r->previous_response_id)
                               : Result<Json>(NotFound("responses are not stored on this server"));
    if (!history.ok()) {
      return p.Fail("previous_response_id",
                    history.status().message() +
                        ": this server keeps recent responses in memory only (not across "
                        "restarts); send the whole conversation as input instead");
    }
    for (const Json& item : history.value()) {
      SHARDLM_TRY(messages.Add("previous_response_id", item));
    }
  }
  for (size_t i = 0; i < r->input_items.size(); ++i) {
    SHARDLM_TRY(messages.Add(fmt::format("input[{}]", i), r->input_items[i]));
  }
  r->chat.messages = messages.Take();
  if (r->chat.messages.empty()) return p.Fail("input", "expected at least one item");
  return Status::Ok();
}

Result<ResponsesRequest> Parse(const Json& body, const ResponseStore* store, std::string* param) {
  SHARDLM_TRY(CheckObject(body, param));
  Parser p{body, param};
  ResponsesRequest r;
  SHARDLM_TRY(ParseSettings(p, &r));
  SHARDLM_TRY(ParseConversation(p, store, &r));
  EchoDefaults(p, &r);
  return r;
}

}  // namespace

Result<ResponsesRequest> ResponsesRequestFromJSON(const Json& body, const ResponseStore* store,
                                                  std::string* param) {
  return GuardParse([&] { return Parse(body, store, param); }, param);
}

}  // namespace shardlm::server
