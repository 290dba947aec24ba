// Tool-call bodies in their two syntaxes. See output_syntax.h.
#include "server/output_syntax.h"

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

}  // namespace

std::optional<ParsedToolCall> ParseToolCallBody(std::string_view body, const Json& tools) {
  if (TrimLeft(body).starts_with(kFunctionOpen)) return ParseXmlBody(body, tools);
  return ParseJsonBody(body);
}

size_t FindToolCallEnd(std::string_view text) {
  if (!TrimLeft(text).starts_with(kFunctionOpen)) return text.find(kToolCallClose);
  size_t pos = 0;
  while (true) {
    const size_t close = text.find(kToolCallClose, pos);
    const size_t param = text.find(kParameterOpen, pos);
    if (param == std::string_view::npos || param > close) return close;
    const size_t end = text.find(kParameterClose, param);
    if (end == std::string_view::npos) return std::string_view::npos;
    pos = end + kParameterClose.size();
  }
}

}  // namespace shardlm::server
