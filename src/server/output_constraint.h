// Output constraints: the grammar a request's output must follow, built from what it asks
// for (response_format, tool_choice) and the model's tool-call syntax. Every chat-shaped API
// maps onto the chat request first (the Responses API's text.format and tool_choice,
// Anthropic's tool_choice any/tool), so one set of rules serves them all.
//
// What each request gets:
//  - response_format json_object: one JSON object; json_schema: one JSON value valid
//    against the schema (grammar/json_schema.h has the subset and what is refused); then
//    end of generation. text, or no response_format: nothing (no cost).
//  - tool_choice "required" with tools, or naming one of them: exactly one tool call in
//    the syntax the model's template writes (ChatFormatter::tool_call_syntax), NAME one of
//    the tools' names (the named one), its arguments valid against that tool's
//    `parameters` (a schema that names no type is taken as an object's; no `parameters`:
//    none):
//     - JSON (Qwen3, Hermes): "<tool_call>\n{\"name\": NAME, \"arguments\": ARGS}\n
//       </tool_call>", ARGS an object;
//     - XML (Qwen3.5): "<tool_call>\n<function=NAME>\n", then for each property of the
//       schema in its order (the required ones always, the others optionally)
//       "<parameter=KEY>\nVALUE\n</parameter>\n", then "</function>\n</tool_call>"; VALUE
//       is raw text for a string property (one of its enum values when it has them), JSON
//       for any other. A tool whose name or property names hold blanks or brackets, or
//       whose parameters are not an object schema, is refused: the syntax cannot say it.
//     - Gemma (Gemma 4): "<|tool_call>call:NAME{ARGS}<tool_call|>", ARGS the arguments in
//       Gemma's notation (json_rules.h: keys bare and sorted as the template sorts them,
//       strings between <|"|> markers, no blanks). A tool whose name or property names
//       (nested ones too) hold blanks, brackets, braces, colons, commas or quotes, or whose
//       parameters are not an object schema, is refused.
//    One call, not several: the request is answered by it, and a random or looping model
//    cannot keep calling. When both are given, the tool call wins (response_format shapes
//    content, and a forced call has none). A template that writes calls in another syntax
//    (ChatFormatter::writes_tool_calls false) cannot be forced: the request is refused
//    rather than answered with text the client did not ask for.
//  - A prompt that leaves the model inside its reasoning (ChatPrompt::opens_reasoning):
//    free text up to the first closing tag ("</think>", or "<channel|>" for Gemma 4), up
//    to four blanks, then the constraint. The reasoning is not constrained, and ending
//    generation inside it is not allowed. A prompt that does not open it gets the
//    constraint from the first token: the model does not think first (an optional <think>
//    block would share its first bytes with a tool call's, and a weak model that wandered
//    into it might never leave).
// Strings of the output never contain the tags OutputParser reacts to where it would
// react (the reasoning's opening tag, and the tool-call opening tag when tools were offered,
// in content; "</tool_call>" inside a JSON call, "</parameter>" inside an XML one, the
// <|"|> marker and "<tool_call|>" inside a Gemma one), so a string value cannot break the
// parse.
//
// Errors: kInvalidArgument naming the field the client sent, in its API's terms
// ("text.format.schema", "tools[1].input_schema") and the schema path inside it; `*param`
// is set to the request parameter to blame.
//
// Thread safety: free functions. Lifetime: the grammar is shared with the engine request.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "grammar/grammar.h"
#include "server/completion_session.h"
#include "server/openai_types.h"
#include "server/output_syntax.h"

namespace shardlm::server {

using OutputGrammar = std::shared_ptr<const grammar::Grammar>;

// What besides the request decides a chat-shaped request's constraint.
struct ConstraintContext {
  Endpoint endpoint = Endpoint::kChat;  // whose field names a refusal uses
  bool in_reasoning = false;            // the prompt opened the reasoning and did not close it
  ReasoningTags reasoning_tags = kThinkTags;                // ChatFormatter::reasoning_tags
  ToolCallSyntax tool_call_syntax = ToolCallSyntax::kNone;  // ChatFormatter::tool_call_syntax
  ToolCallTags tool_call_tags = kToolCallTags;              // ChatFormatter::tool_call_tags
};

// The constraint of a chat-shaped request (null: none).
Result<OutputGrammar> ChatOutputConstraint(const ChatCompletionRequest& request,
                                           const ConstraintContext& context, std::string* param);
// The constraint of a completion request: its response_format (null: none).
Result<OutputGrammar> CompletionOutputConstraint(const CompletionRequest& request,
                                                 std::string* param);

}  // namespace shardlm::server
