// Tool-call bodies in their three syntaxes. See output_syntax.h.
#include "server/output_syntax.h"

#include <cctype>

namespace shardlm::server {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view TrimLeft(std::string_view text) {
  while (!text.empty() && IsSpace(text.front())) text.remove_prefix(1);
  return text;
}

// The model's text is as untrusted as a request: the same limits keep a runaway or
// adversarial output from nesting deep enough to hurt whatever walks it.
std::optional<Json> ParseJson(std::string_view text) {
  Result<Json> parsed = ParseJsonWithLimits(text, "", JsonLimits{});
  if (!parsed.ok()) return std::nullopt;
  return std::move(parsed).value();
}

std::string DumpJson(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::optional<ParsedToolCall> ParseJsonBody(std::string_view body) {
  std::optional<Json> call = ParseJson(body);
  if (!call || !call->is_object()) return std::nullopt;
  auto name = call->find("name");
  if (name == call->end() || !name->is_string()) return std::nullopt;
  ParsedToolCall parsed{name->get<std::string>(), "{}", ToolCallSyntax::kJson};
  auto args = call->find("arguments");
  if (args == call->end() || args->is_null()) return parsed;
  // Some models write the arguments as a JSON string: it is passed on as that text.
  parsed.arguments = args->is_string() ? args->get<std::string>() : DumpJson(*args);
  return parsed;
}

// A function or parameter name: not empty, no blanks, no tag brackets.
bool ValidName(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (IsSpace(c) || c == '<' || c == '>') return false;
  }
  return true;
}

// Reads `<TAG=NAME>` at the front of `*text` (after blanks) into `*name`.
bool ReadNamedTag(std::string_view* text, std::string_view tag, std::string* name) {
  std::string_view rest = TrimLeft(*text);
  if (!rest.starts_with(tag)) return false;
  rest.remove_prefix(tag.size());
  const size_t end = rest.find('>');
  if (end == std::string_view::npos || !ValidName(rest.substr(0, end))) return false;
  *name = std::string(rest.substr(0, end));
  *text = rest.substr(end + 1);
  return true;
}

// The properties of tool `name`'s parameter schema (null when the tools do not say).
const Json* ToolProperties(const Json& tools, const std::string& name) {
  if (!tools.is_array()) return nullptr;
  for (const Json& tool : tools) {
    auto function = tool.is_object() ? tool.find("function") : tool.end();
    if (function == tool.end() || !function->is_object()) continue;
    auto tool_name = function->find("name");
    if (tool_name == function->end() || *tool_name != name) continue;
    auto parameters = function->find("parameters");
    if (parameters == function->end() || !parameters->is_object()) return nullptr;
    auto properties = parameters->find("properties");
    return properties != parameters->end() && properties->is_object() ? &*properties : nullptr;
  }
  return nullptr;
}

bool DeclaredString(const Json* properties, const std::string& key) {
  if (!properties) return false;
  auto property = properties->find(key);
  if (property == properties->end() || !property->is_object()) return false;
  auto type = property->find("type");
  return type != property->end() && *type == "string";
}

// A parameter's text as the template wrote it (see the header): a string where the schema
// says so, else JSON, a Python spelling of true, false or null, or a string.
Json ParameterValue(std::string_view text, bool declared_string) {
  if (text.starts_with('\n')) text.remove_prefix(1);
  if (text.ends_with('\n')) text.remove_suffix(1);
  if (declared_string) return std::string(text);
  if (text == "True") return true;
  if (text == "False") return false;
  if (text == "None") return nullptr;
  // A JSON string would drop the quotes the model wrote as part of the value.
  std::optional<Json> value = ParseJson(text);
  if (value && !value->is_string()) return std::move(*value);
  return std::string(text);
}

std::optional<ParsedToolCall> ParseXmlBody(std::string_view body, const Json& tools) {
  ParsedToolCall parsed{"", "", ToolCallSyntax::kXml};
  if (!ReadNamedTag(&body, kFunctionOpen, &parsed.name)) return std::nullopt;
  const Json* properties = ToolProperties(tools, parsed.name);
  Json arguments = Json::object();
  std::string key;
  while (ReadNamedTag(&body, kParameterOpen, &key)) {
    const size_t end = body.find(kParameterClose);
    if (end == std::string_view::npos || arguments.contains(key)) return std::nullopt;
    arguments[key] = ParameterValue(body.substr(0, end), DeclaredString(properties, key));
    body.remove_prefix(end + kParameterClose.size());
  }
  body = TrimLeft(body);
  if (!body.starts_with(kFunctionClose)) return std::nullopt;
  if (!TrimLeft(body.substr(kFunctionClose.size())).empty()) return std::nullopt;
  parsed.arguments = DumpJson(arguments);
  return parsed;
}

// A name Gemma's call:NAME{ syntax can carry: a valid name that holds no brace, colon or
// comma either (it ends at the brace).
bool ValidGemmaName(std::string_view name) {
  return ValidName(name) && name.find_first_of("{}:,\"") == std::string_view::npos;
}

// Reads Gemma 4's argument notation (see the header) into JSON. Every method reads one
// token or value at pos_ and returns false on anything malformed; the limits are those of
// JSON the server parses, so the result is as safe to walk as a request.
class GemmaReader {
 public:
  explicit GemmaReader(std::string_view text) : text_(text) {}

  // The object at the front of the text (after blanks), and nothing but blanks after it.
  std::optional<Json> ReadArguments() {
    Json arguments;
    SkipBlanks();
    if (!Peek('{') || !ReadValue(0, &arguments)) return std::nullopt;
    SkipBlanks();
    if (pos_ != text_.size()) return std::nullopt;
    return arguments;
  }

 private:
  bool Peek(char c) const { return pos_ < text_.size() && text_[pos_] == c; }
  bool At(std::string_view token) const { return text_.substr(pos_).starts_with(token); }
  void SkipBlanks() {
    while (pos_ < text_.size() && IsSpace(text_[pos_])) ++pos_;
  }
  // Consumes `c` after blanks.
  bool Take(char c) {
    SkipBlanks();
    if (!Peek(c)) return false;
    ++pos_;
    return true;
  }

  bool ReadValue(int depth, Json* out) {
    if (++values_ > kMaxJsonValues) return false;
    SkipBlanks();
    if (Peek('{')) return depth < kMaxJsonDepth && ReadObject(depth + 1, out);
    if (Peek('[')) return depth < kMaxJsonDepth && ReadArray(depth + 1, out);
    if (At(kGemmaQuote) || Peek('"')) {
      std::string text;
      if (!ReadString(&text)) return false;
      *out = std::move(text);
      return true;
    }
    return ReadScalar(out);
  }

  bool ReadObject(int depth, Json* out) {
    ++pos_;  // '{'
    *out = Json::object();
    if (Take('}')) return true;
    do {
      std::string key;
      Json value;
      if (!ReadKey(&key) || !Take(':') || !ReadValue(depth, &value)) return false;
      if (out->contains(key)) return false;
      (*out)[key] = std::move(value);
    } while (Take(','));
    return Take('}');
  }

  bool ReadArray(int depth, Json* out) {
    ++pos_;  // '['
    *out = Json::array();
    if (Take(']')) return true;
    do {
      Json value;
      if (!ReadValue(depth, &value)) return false;
      out->push_back(std::move(value));
    } while (Take(','));
    return Take(']');
  }

  // <|"|>raw text<|"|>, or a JSON string as a model may fall back to.
  bool ReadString(std::string* out) {
    if (At(kGemmaQuote)) {
      const size_t begin = pos_ + kGemmaQuote.size();
      const size_t end = text_.find(kGemmaQuote, begin);
      if (end == std::string_view::npos) return false;
      *out = std::string(text_.substr(begin, end - begin));
      pos_ = end + kGemmaQuote.size();
      return true;
    }
    size_t end = pos_ + 1;
    while (end < text_.size() && text_[end] != '"') end += text_[end] == '\\' ? 2 : 1;
    if (end >= text_.size()) return false;
    std::optional<Json> value = ParseJson(text_.substr(pos_, end + 1 - pos_));
    if (!value || !value->is_string()) return false;
    *out = value->get<std::string>();
    pos_ = end + 1;
    return true;
  }

  // A bare key runs up to the colon; a quoted one is a string.
  bool ReadKey(std::string* out) {
    SkipBlanks();
    if (At(kGemmaQuote) || Peek('"')) return ReadString(out);
    const size_t end = text_.find_first_of(":{}[],\n", pos_);
    if (end == std::string_view::npos || text_[end] != ':') return false;
    std::string_view key = TrimLeft(text_.substr(pos_, end - pos_));
    while (!key.empty() && IsSpace(key.back())) key.remove_suffix(1);
    if (key.empty() || key.find(kGemmaQuote) != std::string_view::npos) return false;
    *out = std::string(key);
    pos_ = end;
    return true;
  }

  // A number as JSON writes it, true, false, null, or the template's None.
  bool ReadScalar(Json* out) {
    size_t end = pos_;
    while (end < text_.size() && (std::isalnum(uint8_t(text_[end])) || text_[end] == '-' ||
                                  text_[end] == '+' || text_[end] == '.')) {
      ++end;
    }
    const std::string_view word = text_.substr(pos_, end - pos_);
    pos_ = end;
    if (word == "true" || word == "false") {
      *out = word == "true";
      return true;
    }
    if (word == "null" || word == "None") {
      *out = nullptr;
      return true;
    }
    if (word.empty() || !(word[0] == '-' || std::isdigit(uint8_t(word[0])))) return false;
    std::optional<Json> number = ParseJson(word);
    if (!number || !number->is_number()) return false;
    *out = std::move(*number);
    return true;
  }

  std::string_view text_;
  size_t pos_ = 0;
  size_t values_ = 0;
};

// call:NAME{ARGS}
std::optional<ParsedToolCall> ParseGemmaBody(std::string_view body) {
  body = TrimLeft(body);
  if (!body.starts_with(kGemmaCallPrefix)) return std::nullopt;
  body.remove_prefix(kGemmaCallPrefix.size());
  const size_t brace = body.find('{');
  if (brace == std::string_view::npos) return std::nullopt;
  std::string_view name = TrimLeft(body.substr(0, brace));
  while (!name.empty() && IsSpace(name.back())) name.remove_suffix(1);
  if (!ValidGemmaName(name)) return std::nullopt;
  std::optional<Json> arguments = GemmaReader(body.substr(brace)).ReadArguments();
  if (!arguments) return std::nullopt;
  return ParsedToolCall{std::string(name), DumpJson(*arguments), ToolCallSyntax::kGemma};
}

}  // namespace

std::optional<ParsedToolCall> ParseToolCallBody(std::string_view body, const Json& tools) {
  const std::string_view start = TrimLeft(body);
  if (start.starts_with(kFunctionOpen)) return ParseXmlBody(body, tools);
  if (start.starts_with(kGemmaCallPrefix)) return ParseGemmaBody(body);
  return ParseJsonBody(body);
}

size_t FindToolCallEnd(std::string_view text, std::string_view close_tag) {
  const std::string_view start = TrimLeft(text);
  const bool gemma = start.starts_with(kGemmaCallPrefix);
  if (!gemma && !start.starts_with(kFunctionOpen)) return text.find(close_tag);
  // The values whose text may hold the closing tag: a string, or a parameter's raw text.
  const std::string_view value_open = gemma ? kGemmaQuote : kParameterOpen;
  const std::string_view value_close = gemma ? kGemmaQuote : kParameterClose;
  size_t pos = 0;
  while (true) {
    const size_t close = text.find(close_tag, pos);
    const size_t value = text.find(value_open, pos);
    if (value == std::string_view::npos || value > close) return close;
    const size_t end = text.find(value_close, value + value_open.size());
    if (end == std::string_view::npos) return std::string_view::npos;
    pos = end + value_close.size();
  }
}

}  // namespace shardlm::server
