// Output constraints from response_format and tool_choice (see output_constraint.h).
#include "server/output_constraint.h"

#include <fmt/format.h>

#include <algorithm>

#include "grammar/json_rules.h"
#include "grammar/json_schema.h"

namespace shardlm::server {
namespace {

using grammar::GrammarBuilder;
using grammar::RuleId;
using grammar::Sequence;

// How the templates that write each syntax lay out a call (the Qwen3 and Qwen3.5 ones).
constexpr std::string_view kJsonCallOpen = "<tool_call>\n";
constexpr std::string_view kJsonCallClose = "\n</tool_call>";
constexpr std::string_view kXmlCallClose = "</function>\n</tool_call>";
// Blanks allowed between </think> and the constrained output (templates put "\n\n").
constexpr int kBlanksAfterReasoning = 4;

Status Blame(const Status& status, std::string* param, const std::string& name,
             const std::string& where) {
  if (param) *param = name;
  return InvalidArgument("{}: {}", where, status.message());
}

// The parameter that carries response_format's schema, and the schema's own path, as the
// endpoint's API names them.
const char* FormatParam(Endpoint endpoint) {
  return endpoint == Endpoint::kResponses ? "text.format" : "response_format";
}
const char* FormatSchemaPath(Endpoint endpoint) {
  return endpoint == Endpoint::kResponses ? "text.format.schema"
                                          : "response_format.json_schema.schema";
}
// The path of tool `index`'s parameter schema in the request the client sent.
std::string ToolSchemaPath(Endpoint endpoint, size_t index) {
  switch (endpoint) {
    case Endpoint::kResponses:
      return fmt::format("tools[{}].parameters", index);
    case Endpoint::kMessages:
      return fmt::format("tools[{}].input_schema", index);
    default:
      return fmt::format("tools[{}].function.parameters", index);
  }
}

// Builds the grammar with `root`, behind free reasoning text up to `reasoning_close` when
// the model is inside it (empty: it is not).
Result<OutputGrammar> Finish(GrammarBuilder& builder, RuleId root,
                             std::string_view reasoning_close) {
  if (!reasoning_close.empty()) {
    const RuleId blanks = builder.Repeat({builder.Bytes(grammar::ByteSet::Chars(" \n"))}, {}, 0,
                                         kBlanksAfterReasoning);
    const RuleId wrapped = builder.AddRule("after-reasoning");
    builder.AddAlternative(
        wrapped, {GrammarBuilder::Ref(builder.TextUntil(
                     reasoning_close, {GrammarBuilder::Ref(blanks), GrammarBuilder::Ref(root)}))});
    root = wrapped;
  }
  SHARDLM_ASSIGN_OR_RETURN(grammar::Grammar g, builder.Build(root));
  return std::make_shared<const grammar::Grammar>(std::move(g));
}

// The value response_format asks for, or -1 for text.
Result<RuleId> ResponseFormatRule(grammar::JsonRules& rules, const ResponseFormat& format,
                                  Endpoint endpoint, std::string* param) {
  switch (format.type) {
    case ResponseFormat::Type::kJsonObject:
      return rules.AnyObject(0);
    case ResponseFormat::Type::kJsonSchema: {
      Result<RuleId> rule = grammar::AddJsonSchema(rules, format.schema);
      if (!rule.ok()) {
        return Blame(rule.status(), param, FormatParam(endpoint), FormatSchemaPath(endpoint));
      }
      return rule;
    }
    default:
      return -1;  // text: no constraint (the caller checks first)
  }
}

Result<OutputGrammar> ResponseFormatConstraint(const ResponseFormat& format, Endpoint endpoint,
                                               std::string_view reasoning_close,
                                               std::vector<std::string> tags, std::string* param) {
  if (format.type != ResponseFormat::Type::kJsonObject &&
      format.type != ResponseFormat::Type::kJsonSchema) {
    return OutputGrammar();
  }
  GrammarBuilder builder;
  grammar::JsonRules rules(builder, {.forbidden_in_strings = std::move(tags)});
  SHARDLM_ASSIGN_OR_RETURN(RuleId root, ResponseFormatRule(rules, format, endpoint, param));
  Result<OutputGrammar> g = Finish(builder, root, reasoning_close);
  if (!g.ok()) return Blame(g.status(), param, FormatParam(endpoint), FormatParam(endpoint));
  return g;
}

// A tool's parameter schema. Arguments are an object (a JSON string would reach the client
// unquoted): a schema that names no type gets "object"; no parameters at all means none, {}.
Json ParameterSchema(const Json& function) {
  Json parameters = {{"type", "object"}, {"additionalProperties", false}};
  if (auto it = function.find("parameters"); it != function.end()) parameters = *it;
  const bool typeless = parameters.is_object() && !parameters.contains("type") &&
                        !parameters.contains("$ref") && !parameters.contains("anyOf") &&
                        !parameters.contains("allOf");
  if (typeless) parameters["type"] = "object";
  return parameters;
}

void Append(Sequence& to, const Sequence& more) { to.insert(to.end(), more.begin(), more.end()); }

// {"name": NAME, "arguments": ARGS} for one tool; its arguments sit one level down.
Result<Sequence> JsonToolCall(grammar::JsonRules& rules, const Json& function,
                              const std::string& schema_path, std::string* param) {
  GrammarBuilder& b = rules.builder();
  Result<RuleId> args = grammar::AddJsonSchema(rules, ParameterSchema(function), /*depth=*/1);
  if (!args.ok()) return Blame(args.status(), param, "tools", schema_path);
  const grammar::Symbol ws = GrammarBuilder::Ref(rules.Whitespace());
  Sequence body = {b.Byte('{'), ws};
  auto append = [&](const Sequence& more) { body.insert(body.end(), more.begin(), more.end()); };
  append(b.Literal("\"name\""));
  append({ws, b.Byte(':'), ws});
  append(rules.Literal(function.at("name")));
  append({ws, b.Byte(','), ws});
  append(b.Literal("\"arguments\""));
  append({ws, b.Byte(':'), ws, GrammarBuilder::Ref(*args), ws, b.Byte('}')});
  Sequence call = b.Literal(kJsonCallOpen);
  Append(call, body);
  Append(call, b.Literal(kJsonCallClose));
  return call;
}

// A name the XML syntax can carry (output_syntax.h reads no blanks or brackets in one).
bool XmlName(std::string_view name) {
  return !name.empty() && name.find_first_of(" \t\r\n<>") == std::string_view::npos;
}

// One argument as the XML syntax writes it: <parameter=KEY>\nVALUE\n</parameter>\n. A
// string's VALUE is its raw text (one of its enum values when it has them), up to the
// first </parameter>; any other value is JSON valid against `schema`.
Result<Sequence> XmlParameter(grammar::JsonRules& rules, const std::string& key, const Json& schema,
                              const std::string& where, std::string* param) {
  GrammarBuilder& b = rules.builder();
  Sequence block = b.Literal(fmt::format("{}{}>\n", kParameterOpen, key));
  const Sequence close = b.Literal(fmt::format("\n{}\n", kParameterClose));
  auto type = schema.is_object() ? schema.find("type") : schema.end();
  if (type == schema.end() || *type != "string") {
    Result<RuleId> value = grammar::AddJsonSchema(rules, schema, /*depth=*/1);
    if (!value.ok()) return Blame(value.status(), param, "tools", where);
    block.push_back(GrammarBuilder::Ref(*value));
    Append(block, close);
    return block;
  }
  auto values = schema.find("enum");
  if (values == schema.end() || !values->is_array()) {
    Append(block, {GrammarBuilder::Ref(b.TextUntil(kParameterClose, b.Literal("\n")))});
    return block;
  }
  const RuleId choice = b.AddRule("enum-text");
  for (const Json& value : *values) {
    if (value.is_string()) b.AddAlternative(choice, b.Literal(value.get<std::string>()));
  }
  block.push_back(GrammarBuilder::Ref(choice));
  Append(block, close);
  return block;
}

// <tool_call>\n<function=NAME>\n, the arguments, </function>\n</tool_call>, as Qwen3.5's
// template writes them: the schema's properties in its order, the required ones always.
// A schema without properties takes none (the syntax has no way to say which are allowed).
Result<Sequence> XmlToolCall(grammar::JsonRules& rules, const Json& function,
                             const std::string& schema_path, std::string* param) {
  GrammarBuilder& b = rules.builder();
  const std::string name = function.at("name").get<std::string>();
  const Json parameters = ParameterSchema(function);
  const Json no_properties = Json::object();
  const Json& properties = parameters.is_object() && parameters.contains("properties")
                               ? parameters.at("properties")
                               : no_properties;
  if (!XmlName(name) || !parameters.is_object() || parameters.find("type") == parameters.end() ||
      parameters.at("type") != "object" || !properties.is_object()) {
    if (param) *param = "tools";
    return InvalidArgument(
        "{}: this model's tool-call syntax (<function=NAME><parameter=KEY>…) can only be "
        "forced for a tool whose name has no blanks or brackets and whose parameters are an "
        "object schema",
        schema_path);
  }
  Sequence call = b.Literal(fmt::format("{}\n{}{}>\n", kToolCallOpen, kFunctionOpen, name));
  const Json required = parameters.value("required", Json::array());
  for (const auto& [key, schema] : properties.items()) {
    const std::string where = fmt::format("{}.properties.{}", schema_path, key);
    if (!XmlName(key)) {
      if (param) *param = "tools";
      return InvalidArgument(
          "{}: a parameter name with blanks or brackets cannot be written "
          "in this model's tool-call syntax",
          where);
    }
    SHARDLM_ASSIGN_OR_RETURN(Sequence block, XmlParameter(rules, key, schema, where, param));
    if (std::find(required.begin(), required.end(), key) != required.end()) {
      Append(call, block);
      continue;
    }
    const RuleId optional = b.AddRule("optional-parameter");
    b.AddAlternative(optional, std::move(block));
    b.AddAlternative(optional, {});
    call.push_back(GrammarBuilder::Ref(optional));
  }
  Append(call, b.Literal(kXmlCallClose));
  return call;
}

// A name or key Gemma's notation writes bare and reads back: no blanks, and none of the
// characters that end or structure one.
bool GemmaName(std::string_view name) {
  return !name.empty() && name.find_first_of(" \t\r\n<>{}[]:,\"'") == std::string_view::npos;
}

// The first property name in `schema` (anywhere: nested objects, items, definitions) that
// Gemma's notation cannot write bare, as its schema path; "" when there is none.
std::string UnwritableGemmaKey(const Json& schema, const std::string& path) {
  if (schema.is_array()) {
    for (size_t i = 0; i < schema.size(); ++i) {
      std::string bad = UnwritableGemmaKey(schema[i], fmt::format("{}.{}", path, i));
      if (!bad.empty()) return bad;
    }
  }
  if (!schema.is_object()) return "";
  for (const auto& [key, value] : schema.items()) {
    const std::string where = path + "." + key;
    if (key == "properties" && value.is_object()) {
      for (const auto& [name, unused] : value.items()) {
        if (!GemmaName(name)) return where + "." + name;
      }
    }
    std::string bad = UnwritableGemmaKey(value, where);
    if (!bad.empty()) return bad;
  }
  return "";
}

// <|tool_call>call:NAME{ARGS}<tool_call|>, as Gemma 4's template writes a call: ARGS the
// arguments in Gemma's notation (json_rules.h), keys in the order the template sorts them.
Result<Sequence> GemmaToolCall(grammar::JsonRules& rules, const Json& function,
                               const std::string& schema_path, std::string* param) {
  GrammarBuilder& b = rules.builder();
  const std::string name = function.at("name").get<std::string>();
  const Json parameters = ParameterSchema(function);
  const bool object =
      parameters.is_object() && parameters.contains("type") && parameters.at("type") == "object";
  if (!GemmaName(name) || !object) {
    if (param) *param = "tools";
    return InvalidArgument(
        "{}: this model's tool-call syntax (call:NAME{{KEY:VALUE,…}}) can only be forced for a "
        "tool whose name has no blanks, brackets, braces, colons, commas or quotes and whose "
        "parameters are an object schema",
        schema_path);
  }
  if (const std::string bad = UnwritableGemmaKey(parameters, schema_path); !bad.empty()) {
    if (param) *param = "tools";
    return InvalidArgument(
        "{}: a property name with blanks, brackets, braces, colons, commas or quotes cannot be "
        "written in this model's tool-call syntax",
        bad);
  }
  Result<RuleId> args = grammar::AddJsonSchema(rules, parameters, /*depth=*/1);
  if (!args.ok()) return Blame(args.status(), param, "tools", schema_path);
  Sequence call = b.Literal(fmt::format("{}{}{}", kGemmaToolCallTags.open, kGemmaCallPrefix, name));
  call.push_back(GrammarBuilder::Ref(*args));
  Append(call, b.Literal(kGemmaToolCallTags.close));
  return call;
}

// The tags a string of a forced call must not hold: the one that would end it early (in the
// JSON syntax </tool_call>, in the XML one the </parameter> that ends the value it sits in;
// in Gemma's its closing tag, which would end the call when the template renders it back).
std::vector<std::string> CallStringTags(ToolCallSyntax syntax) {
  switch (syntax) {
    case ToolCallSyntax::kXml:
      return {std::string(kParameterClose)};
    case ToolCallSyntax::kGemma:
      return {std::string(kGemmaToolCallTags.close)};
    default:
      return {std::string(kToolCallClose)};
  }
}

Result<OutputGrammar> ToolCallConstraint(const ChatCompletionRequest& request,
                                         const ConstraintContext& context, std::string* param) {
  const ToolCallSyntax syntax = context.tool_call_syntax;
  if (syntax != ToolCallSyntax::kJson && syntax != ToolCallSyntax::kXml &&
      syntax != ToolCallSyntax::kGemma) {
    if (param) *param = "tool_choice";
    return InvalidArgument(
        "invalid 'tool_choice': a forced tool call cannot be enforced for this model: its chat "
        "template does not write tool calls as <tool_call>{{\"name\": …, \"arguments\": …}}"
        "</tool_call> (as Qwen3's and Hermes' templates do), as <tool_call><function=…>"
        "</tool_call> (as Qwen3.5's does) or as <|tool_call>call:NAME{{…}}<tool_call|> (as "
        "Gemma 4's does), the syntaxes this server constrains and parses; let the model choose "
        "(auto) or send no tools");
  }
  GrammarBuilder builder;
  grammar::JsonRules rules(
      builder, {.forbidden_in_strings = CallStringTags(syntax),
                .notation = syntax == ToolCallSyntax::kGemma ? grammar::Notation::kGemma
                                                             : grammar::Notation::kJson});
  const RuleId call = builder.AddRule("tool-call");
  for (size_t i = 0; i < request.tools.size(); ++i) {
    const Json& function = request.tools[i].at("function");
    const bool chosen = request.tool_choice.mode == ToolChoice::Mode::kRequired ||
                        function.at("name") == request.tool_choice.function;
    if (!chosen) continue;
    const std::string schema_path = ToolSchemaPath(context.endpoint, i);
    Result<Sequence> alternative =
        syntax == ToolCallSyntax::kXml     ? XmlToolCall(rules, function, schema_path, param)
        : syntax == ToolCallSyntax::kGemma ? GemmaToolCall(rules, function, schema_path, param)
                                           : JsonToolCall(rules, function, schema_path, param);
    if (!alternative.ok()) return alternative.status();
    builder.AddAlternative(call, std::move(alternative).value());
  }
  Result<OutputGrammar> g =
      Finish(builder, call, context.in_reasoning ? context.reasoning_tags.close : "");
  if (!g.ok()) return Blame(g.status(), param, "tools", "tools");
  return g;
}

}  // namespace

Result<OutputGrammar> ChatOutputConstraint(const ChatCompletionRequest& request,
                                           const ConstraintContext& context, std::string* param) {
  const ToolChoice::Mode mode = request.tool_choice.mode;
  const bool forced_call = !request.tools.is_null() && (mode == ToolChoice::Mode::kRequired ||
                                                        mode == ToolChoice::Mode::kFunction);
  if (forced_call) return ToolCallConstraint(request, context, param);
  std::vector<std::string> tags = {std::string(context.reasoning_tags.open)};
  if (!request.tools.is_null()) tags.emplace_back(context.tool_call_tags.open);
  return ResponseFormatConstraint(request.options.response_format, context.endpoint,
                                  context.in_reasoning ? context.reasoning_tags.close : "",
                                  std::move(tags), param);
}

Result<OutputGrammar> CompletionOutputConstraint(const CompletionRequest& request,
                                                 std::string* param) {
  return ResponseFormatConstraint(request.options.response_format, Endpoint::kCompletion,
                                  /*reasoning_close=*/"", {}, param);
}

}  // namespace shardlm::server
