// Output constraints from response_format and tool_choice (see output_constraint.h).
#include "server/output_constraint.h"

#include <fmt/format.h>

#include "grammar/json_rules.h"
#include "grammar/json_schema.h"

namespace shardlm::server {
namespace {

using grammar::GrammarBuilder;
using grammar::RuleId;
using grammar::Sequence;

// The tool-call syntax OutputParser reads (and the Qwen3 template writes).
constexpr std::string_view kToolCallOpen = "<tool_call>\n";
constexpr std::string_view kToolCallClose = "\n</tool_call>";
// The tags OutputParser looks for in content, and inside a tool call.
constexpr const char* kThinkOpen = "<think>";
constexpr const char* kToolOpenTag = "<tool_call>";
constexpr const char* kToolCloseTag = "</tool_call>";
constexpr std::string_view kThinkClose = "</think>";
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

// Builds the grammar with `root`, behind free reasoning text when the model is inside it.
Result<OutputGrammar> Finish(GrammarBuilder& builder, RuleId root, bool in_reasoning) {
  if (in_reasoning) {
    const RuleId blanks = builder.Repeat({builder.Bytes(grammar::ByteSet::Chars(" \n"))}, {}, 0,
                                         kBlanksAfterReasoning);
    const RuleId wrapped = builder.AddRule("after-reasoning");
    builder.AddAlternative(
        wrapped, {GrammarBuilder::Ref(builder.TextUntil(
                     kThinkClose, {GrammarBuilder::Ref(blanks), GrammarBuilder::Ref(root)}))});
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
                                               bool in_reasoning, std::vector<std::string> tags,
                                               std::string* param) {
  if (format.type != ResponseFormat::Type::kJsonObject &&
      format.type != ResponseFormat::Type::kJsonSchema) {
    return OutputGrammar();
  }
  GrammarBuilder builder;
  grammar::JsonRules rules(builder, {.forbidden_in_strings = std::move(tags)});
  SHARDLM_ASSIGN_OR_RETURN(RuleId root, ResponseFormatRule(rules, format, endpoint, param));
  Result<OutputGrammar> g = Finish(builder, root, in_reasoning);
  if (!g.ok()) return Blame(g.status(), param, FormatParam(endpoint), FormatParam(endpoint));
  return g;
}

// {"name": NAME, "arguments": ARGS} for one tool; its arguments sit one level down.
Result<Sequence> ToolCallBody(grammar::JsonRules& rules, const Json& function,
                              const std::string& schema_path, std::string* param) {
  GrammarBuilder& b = rules.builder();
  // Arguments are an object (a JSON string would reach the client unquoted): a schema that
  // names no type gets "object"; no parameters at all means none, {}.
  Json parameters = {{"type", "object"}, {"additionalProperties", false}};
  if (auto it = function.find("parameters"); it != function.end()) parameters = *it;
  const bool typeless = parameters.is_object() && !parameters.contains("type") &&
                        !parameters.contains("$ref") && !parameters.contains("anyOf") &&
                        !parameters.contains("allOf");
  if (typeless) parameters["type"] = "object";
  Result<RuleId> args = grammar::AddJsonSchema(rules, parameters, /*depth=*/1);
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
  return body;
}

Result<OutputGrammar> ToolCallConstraint(const ChatCompletionRequest& request,
                                         const ConstraintContext& context, std::string* param) {
  if (!context.template_writes_tool_calls) {
    if (param) *param = "tool_choice";
    return InvalidArgument(
        "invalid 'tool_choice': a forced tool call cannot be enforced for this model: its chat "
        "template does not write tool calls as <tool_call>{{\"name\": …, \"arguments\": …}}"
        "</tool_call> (as Qwen3's and Hermes' templates do), the syntax this server constrains "
        "and parses; let the model choose (auto) or send no tools");
  }
  GrammarBuilder builder;
  grammar::JsonRules rules(builder, {.forbidden_in_strings = {kToolCloseTag}});
  const RuleId call = builder.AddRule("tool-call");
  for (size_t i = 0; i < request.tools.size(); ++i) {
    const Json& function = request.tools[i].at("function");
    const bool chosen = request.tool_choice.mode == ToolChoice::Mode::kRequired ||
                        function.at("name") == request.tool_choice.function;
    if (!chosen) continue;
    SHARDLM_ASSIGN_OR_RETURN(
        Sequence body, ToolCallBody(rules, function, ToolSchemaPath(context.endpoint, i), param));
    Sequence alternative = builder.Literal(kToolCallOpen);
    alternative.insert(alternative.end(), body.begin(), body.end());
    const Sequence close = builder.Literal(kToolCallClose);
    alternative.insert(alternative.end(), close.begin(), close.end());
    builder.AddAlternative(call, std::move(alternative));
  }
  Result<OutputGrammar> g = Finish(builder, call, context.in_reasoning);
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
  std::vector<std::string> tags = {kThinkOpen};
  if (!request.tools.is_null()) tags.push_back(kToolOpenTag);
  return ResponseFormatConstraint(request.options.response_format, context.endpoint,
                                  context.in_reasoning, std::move(tags), param);
}

Result<OutputGrammar> CompletionOutputConstraint(const CompletionRequest& request,
                                                 std::string* param) {
  return ResponseFormatConstraint(request.options.response_format, Endpoint::kCompletion,
                                  /*in_reasoning=*/false, {}, param);
}

}  // namespace shardlm::server
