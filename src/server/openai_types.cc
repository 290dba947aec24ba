// OpenAI request parsing: typed, validated requests. See openai_types.h.
#include "server/openai_types.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "server/json_limits.h"
#include "server/request_parser.h"

namespace shardlm::server {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

Status ParseStop(const Parser& p, std::vector<std::string>* stop) {
  const Json* v = p.Find("stop");
  if (!v) return Status::Ok();
  auto add = [&](const std::string& s) {
    if (s.size() > kMaxStopStringBytes) {
      return p.Fail("stop", fmt::format("a stop string of {} bytes: at most {}", s.size(),
                                        kMaxStopStringBytes));
    }
    if (!s.empty()) stop->push_back(s);
    return Status::Ok();
  };
  if (v->is_string()) return add(v->get<std::string>());
  if (!v->is_array()) return p.Fail("stop", "expected a string or an array of strings");
  if (v->size() > kMaxStopStrings) {
    return p.Fail("stop", fmt::format("at most {} stop strings", kMaxStopStrings));
  }
  for (const Json& s : *v) {
    if (!s.is_string()) return p.Fail("stop", "expected an array of strings");
    SHARDLM_TRY(add(s.get<std::string>()));
  }
  return Status::Ok();
}

Status ParseSampling(const Parser& p, GenerationOptions* o) {
  SamplingParams& s = o->sampling;
  SHARDLM_TRY(p.Float("temperature", 0.0, 2.0, &s.temperature));
  SHARDLM_TRY(p.Float("top_p", 0.0, 1.0, &s.top_p));
  SHARDLM_TRY(p.Float("min_p", 0.0, 1.0, &s.min_p));
  SHARDLM_TRY(p.Float("presence_penalty", -2.0, 2.0, &s.presence_penalty));
  SHARDLM_TRY(p.Float("frequency_penalty", -2.0, 2.0, &s.frequency_penalty));
  SHARDLM_TRY(p.Float("repeat_penalty", 0.0, 10.0, &s.repeat_penalty));
  int64_t top_k = s.top_k;
  SHARDLM_TRY(p.Int("top_k", -1, kInt32Max, &top_k));
  s.top_k = static_cast<int32_t>(top_k);
  int64_t seed = -1;
  SHARDLM_TRY(p.Int("seed", std::numeric_limits<int64_t>::min(),
                    std::numeric_limits<int64_t>::max(), &seed));
  if (p.Find("seed")) {
    s.seed = static_cast<uint64_t>(seed);
    o->seed_given = true;
  }
  Status st = s.Validate();
  if (!st.ok()) return p.Fail("sampling", st.message());
  return Status::Ok();
}

// "pin": [[begin, end], ...], at most kMaxPins ranges of positions, begin < end.
Status ParsePins(const Parser& p, GenerationOptions* o) {
  const Json* v = p.Find("pin");
  if (!v) return Status::Ok();
  if (!v->is_array() || v->size() > kMaxPins) {
    return p.Fail("pin",
                  fmt::format("expected an array of at most {} [begin, end] ranges", kMaxPins));
  }
  for (size_t i = 0; i < v->size(); ++i) {
    const Json& range = (*v)[i];
    const std::string name = fmt::format("pin[{}]", i);
    if (!range.is_array() || range.size() != 2) return p.Fail(name, "expected [begin, end]");
    int64_t begin = 0, end = 0;
    SHARDLM_TRY(p.IntValue(name, range[0], 0, kInt32Max, &begin));
    SHARDLM_TRY(p.IntValue(name, range[1], 0, kInt32Max, &end));
    if (begin >= end) return p.Fail(name, "expected begin < end");
    o->pins.emplace_back(int32_t(begin), int32_t(end));
  }
  return Status::Ok();
}

// {"token id": bias}, at most kMaxLogitBias entries, each bias in [-100, 100].
Status ParseLogitBias(const Parser& p, GenerationOptions* o) {
  const Json* v = p.Find("logit_bias");
  if (!v) return Status::Ok();
  if (!v->is_object()) return p.Fail("logit_bias", "expected an object of token id → bias");
  if (v->size() > kMaxLogitBias) {
    return p.Fail("logit_bias", fmt::format("at most {} entries", kMaxLogitBias));
  }
  for (const auto& [key, bias] : v->items()) {
    int32_t id = -1;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || end != key.data() + key.size() || id < 0) {
      return p.Fail("logit_bias", fmt::format("'{}' is not a token id", key));
    }
    if (!bias.is_number() || !std::isfinite(bias.get<double>()) || bias.get<double>() < -100 ||
        bias.get<double>() > 100) {
      return p.Fail("logit_bias", fmt::format("the bias of token {} is not a number in "
                                              "[-100, 100]",
                                              id));
    }
    o->logit_bias.emplace_back(id, bias.get<float>());
  }
  return Status::Ok();
}

// {"type":"text"} | {"type":"json_object"} |
// {"type":"json_schema","json_schema":{"name":N,"schema":{...},"strict":B}}.
Status ParseResponseFormat(const Parser& p, GenerationOptions* o) {
  const Json* v = p.Find("response_format");
  if (!v) return Status::Ok();
  if (!v->is_object()) return p.Fail("response_format", "expected an object");
  return ParseFormat(p, {.where = "response_format", .nested = true, .name_fields = false}, *v,
                     &o->response_format);
}

}  // namespace

Status ParseFormat(const Parser& p, const FormatShape& shape, const Json& format,
                   ResponseFormat* rf) {
  auto param = [&](const char* field) {
    return shape.name_fields ? shape.where + "." + field : shape.where;
  };
  auto type = format.find("type");
  if (type == format.end() || !type->is_string()) {
    return p.Fail(param("type"), "needs a 'type': text, json_object or json_schema");
  }
  const std::string t = type->get<std::string>();
  if (t == "text" || t == "json_object") {
    rf->type = t == "text" ? ResponseFormat::Type::kText : ResponseFormat::Type::kJsonObject;
    return Status::Ok();
  }
  if (t != "json_schema") {
    return p.Fail(param("type"),
                  fmt::format("unknown type '{}' (text, json_object or json_schema)", t));
  }
  rf->type = ResponseFormat::Type::kJsonSchema;
  const Json* fields = &format;
  if (shape.nested) {
    auto js = format.find("json_schema");
    if (js == format.end() || !js->is_object()) {
      return p.Fail(param("json_schema"), "json_schema needs a 'json_schema' object");
    }
    fields = &*js;
  }
  if (auto name = fields->find("name"); name != fields->end() && !name->is_null()) {
    if (!name->is_string()) return p.Fail(param("name"), "expected a string");
    rf->name = name->get<std::string>();
  }
  if (auto strict = fields->find("strict"); strict != fields->end() && !strict->is_null()) {
    if (!strict->is_boolean()) return p.Fail(param("strict"), "expected a boolean");
    rf->strict = strict->get<bool>();
  }
  auto schema = fields->find("schema");
  if (schema == fields->end() || !schema->is_object()) {
    return p.Fail(param("schema"), "a json_schema format needs a JSON Schema object 'schema'");
  }
  rf->schema = *schema;
  return Status::Ok();
}

Status ParseToolChoiceValue(const Parser& p, const Json& choice,
                            const Json* (*function_name)(const Json& object),
                            const char* object_shape, ToolChoice* tc) {
  if (choice.is_string()) {
    const std::string mode = choice.get<std::string>();
    if (mode == "auto") {
      tc->mode = ToolChoice::Mode::kAuto;
    } else if (mode == "none") {
      tc->mode = ToolChoice::Mode::kNone;
    } else if (mode == "required") {
      tc->mode = ToolChoice::Mode::kRequired;
    } else {
      return p.Fail("tool_choice",
                    fmt::format("expected auto, none, required or {}", object_shape));
    }
    return Status::Ok();
  }
  if (!choice.is_object()) return p.Fail("tool_choice", "expected a string or an object");
  const Json* name = function_name(choice);
  if (!name || !name->is_string()) {
    return p.Fail("tool_choice", fmt::format("an object must name a function: {}", object_shape));
  }
  tc->mode = ToolChoice::Mode::kFunction;
  tc->function = name->get<std::string>();
  return Status::Ok();
}

Result<Json> ConvertTools(const Parser& p, const ToolShape& shape) {
  Json chat_tools = Json::array();
  const Json* tools = p.Find("tools");
  if (!tools) return chat_tools;
  if (!tools->is_array()) return p.Fail("tools", "expected an array");
  for (size_t i = 0; i < tools->size(); ++i) {
    const Json& tool = (*tools)[i];
    const std::string name = fmt::format("tools[{}]", i);
    if (!tool.is_object()) return p.Fail(name, "expected an object");
    const std::string type = tool.value("type", shape.default_type);
    if (type != shape.type) {
      return p.Fail(name + ".type", fmt::format("'{}' tools are not supported: this server runs "
                                                "no built-in tools, only {}",
                                                type, shape.kinds));
    }
    auto fn_name = tool.find("name");
    if (fn_name == tool.end() || !fn_name->is_string()) {
      return p.Fail(name + ".name", "expected a string");
    }
    Json fn = Json{{"name", *fn_name}};
    if (auto d = tool.find("description"); d != tool.end() && !d->is_null()) {
      if (!d->is_string()) return p.Fail(name + ".description", "expected a string");
      fn["description"] = *d;
    }
    auto schema = tool.find(shape.schema_key);
    if (schema != tool.end() && !schema->is_null()) {
      if (!schema->is_object()) {
        return p.Fail(name + "." + shape.schema_key, "expected a JSON Schema object");
      }
      fn["parameters"] = *schema;
    } else if (shape.schema_required) {
      return p.Fail(name + "." + shape.schema_key, "expected a JSON Schema object");
    }
    if (auto strict = tool.find("strict"); strict != tool.end() && !strict->is_null()) {
      fn["strict"] = *strict;
    }
    chat_tools.push_back(Json{{"type", "function"}, {"function", std::move(fn)}});
  }
  return chat_tools;
}

Status ParseCommon(const Parser& p, GenerationOptions* o) {
  SHARDLM_TRY(p.String("model", &o->model));
  SHARDLM_TRY(p.Bool("stream", &o->stream));
  if (const Json* so = p.Find("stream_options")) {
    if (!so->is_object()) return p.Fail("stream_options", "expected an object");
    Parser sp{*so, p.param};
    SHARDLM_TRY(sp.Bool("include_usage", &o->include_usage));
  }
  int64_t max_tokens = -1;
  SHARDLM_TRY(p.Int("max_tokens", -1, kInt32Max, &max_tokens));
  SHARDLM_TRY(p.Int("max_completion_tokens", -1, kInt32Max, &max_tokens));
  o->max_tokens = static_cast<int32_t>(max_tokens);
  int64_t n = 1;
  SHARDLM_TRY(p.Int("n", 1, kInt32Max, &n));
  if (n != 1) return p.Fail("n", "only n = 1 is supported");
  SHARDLM_TRY(ParseStop(p, &o->stop));
  SHARDLM_TRY(p.Bool("ignore_eos", &o->ignore_eos));
  SHARDLM_TRY(ParseLogitBias(p, o));
  SHARDLM_TRY(ParsePins(p, o));
  SHARDLM_TRY(ParseResponseFormat(p, o));
  return ParseSampling(p, o);
}

namespace {

// Content as a template takes it: a string. Null (and, for the assistant, missing) is "";
// an array of text parts ("text", or the Responses API's "input_text" / "output_text") is
// their texts joined; a refusal part is its text; other parts (images, audio, files) are
// refused: the models served take text only. A tool's result may also be any other JSON
// value (structured output of a tool), which the template gets as its JSON text.
Status NormalizeContent(const Parser& p, const std::string& name, bool tool, Json& content) {
  if (content.is_null()) content = "";
  if (content.is_string()) return Status::Ok();
  const bool parts = content.is_array() && std::all_of(content.begin(), content.end(), [](auto& x) {
                       return x.is_object() && x.contains("type");
                     });
  if (!parts) {
    if (!tool) return p.Fail(name, "expected a string or an array of content parts");
    content = content.dump(-1, ' ', false, Json::error_handler_t::replace);
    return Status::Ok();
  }
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const std::string field = fmt::format("{}[{}]", name, i);
    const Json& type = part["type"];
    const char* key = type == "text" || type == "input_text" || type == "output_text" ? "text"
                      : type == "refusal"                                             ? "refusal"
                                                                                      : nullptr;
    if (!key) {
      return p.Fail(field, fmt::format("{} parts are not supported: the model takes text only",
                                       type.is_string() ? type.get<std::string>() : type.dump()));
    }
    auto t = part.find(key);
    if (t == part.end() || !t->is_string()) {
      return p.Fail(field, fmt::format("a {} part needs '{}'", key, key));
    }
    text += t->get<std::string>();
  }
  content = text;
  return Status::Ok();
}

Status CheckToolCalls(const Parser& p, const std::string& name, Json& calls) {
  if (!calls.is_array()) return p.Fail(name, "expected an array");
  for (size_t i = 0; i < calls.size(); ++i) {
    Json& call = calls[i];
    if (!call.is_object()) return p.Fail(name, "expected objects");
    auto fn = call.find("function");
    if (fn == call.end() || !fn->is_object()) return p.Fail(name, "needs 'function'");
    auto fname = fn->find("name");
    if (fname == fn->end() || !fname->is_string()) return p.Fail(name, "needs function.name");
    // Templates expect arguments as an object (Qwen, Llama): parse a JSON text into one,
    // under the same limits as the body (it becomes part of what the template walks). Text
    // that is not JSON stays a string; JSON past a limit is refused; none is {}.
    auto args = fn->find("arguments");
    if (args == fn->end() || args->is_null()) {
      (*fn)["arguments"] = Json::object();
      continue;
    }
    if (!args->is_string()) continue;
    const std::string field = fmt::format("{}[{}].function.arguments", name, i);
    Result<Json> parsed =
        ParseJsonWithLimits(args->get<std::string>(), field, JsonLimits{}, p.budget.get());
    if (parsed.ok()) {
      *args = std::move(parsed).value();
    } else if (parsed.status().code() != StatusCode::kInvalidData) {
      if (p.param) *p.param = field;
      return parsed.status();
    }
  }
  return Status::Ok();
}

// A message as chat templates expect it (what llama.cpp and transformers hand them): role
// system | user | assistant | tool (developer is system), content a string
// (NormalizeContent), optional fields that are null left out (clients echo an assistant
// message back with "tool_calls": null, "refusal": null, ...; templates test whether a key
// is defined, and then iterate or print None), tool-call arguments as objects.
Status NormalizeMessage(const Parser& p, size_t i, Json& msg) {
  const std::string name = fmt::format("messages[{}]", i);
  if (!msg.is_object()) return p.Fail(name, "expected an object");
  auto role = msg.find("role");
  if (role == msg.end() || !role->is_string()) return p.Fail(name + ".role", "missing");
  const std::string r = role->get<std::string>();
  if (r != "system" && r != "user" && r != "assistant" && r != "tool" && r != "developer") {
    return p.Fail(name + ".role", "unknown role '" + r + "'");
  }
  if (r == "developer") *role = "system";
  for (auto it = msg.begin(); it != msg.end();) {
    it = it->is_null() && it.key() != "content" ? msg.erase(it) : std::next(it);
  }
  auto content = msg.find("content");
  if (content == msg.end()) {
    if (r != "assistant") return p.Fail(name + ".content", "missing");
    msg["content"] = "";
  } else {
    SHARDLM_TRY(NormalizeContent(p, name + ".content", r == "tool", *content));
  }
  auto calls = msg.find("tool_calls");
  if (calls != msg.end()) SHARDLM_TRY(CheckToolCalls(p, name + ".tool_calls", *calls));
  for (const char* key : {"name", "tool_call_id", "reasoning_content"}) {
    auto it = msg.find(key);
    if (it != msg.end() && !it->is_string()) return p.Fail(name + "." + key, "expected a string");
  }
  return Status::Ok();
}

// "auto" | "none" | "required" | {"type":"function","function":{"name":N}}; a required or
// named tool needs `tools`, and the name must be one of them.
Status ParseToolChoice(const Parser& p, const Json& choice, ChatCompletionRequest* r) {
  SHARDLM_TRY(ParseToolChoiceValue(
      p, choice,
      [](const Json& object) -> const Json* {
        auto fn = object.find("function");
        if (fn == object.end() || !fn->is_object()) return nullptr;
        auto name = fn->find("name");
        return name == fn->end() ? nullptr : &*name;
      },
      "{\"type\":\"function\",\"function\":{\"name\":...}}", &r->tool_choice));
  return CheckToolChoice(p, "tool_choice", *r);
}

Status ParseTools(const Parser& p, ChatCompletionRequest* r) {
  if (const Json* tools = p.Find("tools")) {
    if (!tools->is_array()) return p.Fail("tools", "expected an array");
    for (const Json& tool : *tools) {
      if (!tool.is_object() || !tool.contains("function") || !tool["function"].is_object() ||
          !tool["function"].contains("name") || !tool["function"]["name"].is_string()) {
        return p.Fail("tools", "each tool needs function.name");
      }
    }
    if (!tools->empty()) r->tools = *tools;
  }
  if (const Json* choice = p.Find("tool_choice")) {
    SHARDLM_TRY(ParseToolChoice(p, *choice, r));
  }
  if (r->tool_choice.mode == ToolChoice::Mode::kNone) r->tools = nullptr;
  return Status::Ok();
}

}  // namespace

Status CheckObject(const Json& body, std::string* param) {
  if (body.is_object()) return Status::Ok();
  if (param) *param = "";
  return InvalidArgument("the request body must be a JSON object");
}

Status CheckToolChoice(const Parser& p, const std::string& name, const ChatCompletionRequest& r) {
  const ToolChoice& tc = r.tool_choice;
  if (tc.mode != ToolChoice::Mode::kRequired && tc.mode != ToolChoice::Mode::kFunction) {
    return Status::Ok();
  }
  if (r.tools.is_null()) return p.Fail(name, "a tool is required but 'tools' is empty");
  if (tc.mode == ToolChoice::Mode::kFunction) {
    for (const Json& tool : r.tools) {
      if (tool["function"]["name"] == tc.function) return Status::Ok();
    }
    return p.Fail(name, fmt::format("no tool is named '{}'", tc.function));
  }
  return Status::Ok();
}

namespace {

Result<ChatCompletionRequest> ParseChat(const Json& body, std::string* param) {
  SHARDLM_TRY(CheckObject(body, param));
  Parser p{body, param};
  ChatCompletionRequest r;
  SHARDLM_TRY(ParseCommon(p, &r.options));
  const Json* messages = p.Find("messages");
  if (!messages || !messages->is_array() || messages->empty()) {
    return p.Fail("messages", "expected a non-empty array");
  }
  r.messages = *messages;
  for (size_t i = 0; i < r.messages.size(); ++i) {
    SHARDLM_TRY(NormalizeMessage(p, i, r.messages[i]));
  }
  SHARDLM_TRY(ParseTools(p, &r));
  if (const Json* lp = p.Find("logprobs")) {
    if (!lp->is_boolean()) return p.Fail("logprobs", "expected a boolean");
    r.options.logprobs = lp->get<bool>();
  }
  int64_t top = 0;
  SHARDLM_TRY(p.Int("top_logprobs", 0, kMaxTopLogprobs, &top));
  r.options.top_logprobs = static_cast<int32_t>(top);
  if (const Json* kw = p.Find("chat_template_kwargs")) {
    if (!kw->is_object()) return p.Fail("chat_template_kwargs", "expected an object");
    r.chat_template_kwargs = *kw;
  }
  return r;
}

Status ParsePrompt(const Parser& p, CompletionRequest* r) {
  const Json* prompt = p.Find("prompt");
  if (!prompt) return p.Fail("prompt", "missing");
  if (prompt->is_string()) {
    r->prompt = prompt->get<std::string>();
    return Status::Ok();
  }
  // A one-element array of a string or of a token array is one prompt too.
  const Json* v = prompt;
  if (v->is_array() && !v->empty() && ((*v)[0].is_string() || (*v)[0].is_array())) {
    if (v->size() > 1) {
      return p.Fail("prompt", fmt::format("{} prompts in one request: send one request per "
                                          "prompt (several choices per request are not served)",
                                          v->size()));
    }
    v = &(*v)[0];
    if (v->is_string()) {
      r->prompt = v->get<std::string>();
      return Status::Ok();
    }
  }
  if (!v->is_array() || v->empty()) {
    return p.Fail("prompt", "expected a string or a non-empty array of token ids");
  }
  for (const Json& t : *v) {
    int64_t id = 0;
    SHARDLM_TRY(p.IntValue("prompt", t, 0, kInt32Max, &id));
    r->prompt_tokens.push_back(static_cast<TokenId>(id));
  }
  r->has_prompt_tokens = true;
  return Status::Ok();
}

Result<CompletionRequest> ParseCompletion(const Json& body, std::string* param) {
  SHARDLM_TRY(CheckObject(body, param));
  Parser p{body, param};
  CompletionRequest r;
  SHARDLM_TRY(ParseCommon(p, &r.options));
  // The legacy API's default length (chat's is "until done"); -1 asks for that here too.
  if (!p.Find("max_tokens") && !p.Find("max_completion_tokens")) {
    r.options.max_tokens = kDefaultCompletionMaxTokens;
  }
  SHARDLM_TRY(ParsePrompt(p, &r));
  SHARDLM_TRY(p.Bool("echo", &r.echo));
  // Legacy completions: logprobs is the number of alternatives (0..5).
  int64_t lp = -1;
  SHARDLM_TRY(p.Int("logprobs", 0, kMaxTopLogprobs, &lp));
  if (lp >= 0) {
    r.options.logprobs = true;
    r.options.top_logprobs = static_cast<int32_t>(lp);
  }
  return r;
}

}  // namespace

Result<ChatCompletionRequest> ChatCompletionRequestFromJSON(const Json& body, std::string* param) {
  return GuardParse([&] { return ParseChat(body, param); }, param);
}

Result<CompletionRequest> CompletionRequestFromJSON(const Json& body, std::string* param) {
  return GuardParse([&] { return ParseCompletion(body, param); }, param);
}

Result<TokenizeRequest> TokenizeRequestFromJSON(const Json& body, std::string* param) {
  return GuardParse(
      [&]() -> Result<TokenizeRequest> {
        SHARDLM_TRY(CheckObject(body, param));
        Parser p{body, param};
        TokenizeRequest r;
        if (!p.Find("content")) return p.Fail("content", "missing");
        SHARDLM_TRY(p.String("content", &r.content));
        SHARDLM_TRY(p.Bool("add_special", &r.add_special));
        SHARDLM_TRY(p.Bool("parse_special", &r.parse_special));
        return r;
      },
      param);
}

Result<DetokenizeRequest> DetokenizeRequestFromJSON(const Json& body, std::string* param) {
  return GuardParse(
      [&]() -> Result<DetokenizeRequest> {
        SHARDLM_TRY(CheckObject(body, param));
        Parser p{body, param};
        const Json* tokens = p.Find("tokens");
        if (!tokens || !tokens->is_array()) return p.Fail("tokens", "expected an array");
        DetokenizeRequest r;
        for (const Json& t : *tokens) {
          int64_t id = 0;
          SHARDLM_TRY(p.IntValue("tokens", t, 0, kInt32Max, &id));
          r.tokens.push_back(static_cast<TokenId>(id));
        }
        return r;
      },
      param);
}

Result<Json> ParseBody(const std::string& body) {
  SHARDLM_ASSIGN_OR_RETURN(Json j, ParseJsonWithLimits(body, "", JsonLimits{}));
  if (!j.is_object()) return InvalidArgument("the request body must be a JSON object");
  return j;
}

Json ErrorJSON(const ApiError& error) {
  Json e = Json::object();
  e["message"] = error.message;
  e["type"] = error.type;
  e["param"] = error.param.empty() ? Json(nullptr) : Json(error.param);
  e["code"] = error.code.empty() ? Json(nullptr) : Json(error.code);
  return Json{{"error", e}};
}

}  // namespace shardlm::server
