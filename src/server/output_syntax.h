// The markup a model writes around the parts of its output that are not plain content: the
// tags of its reasoning, and the syntax of its tool calls. Which ones a model uses is read
// from its chat template (chat_format.h); this file owns the tag sets and the parsing of one
// tool call's text.
//
// Reasoning tags: <think>…</think> (Qwen, DeepSeek, ChatML-style templates), or Gemma 4's
// thought channel, <|channel>thought…<channel|>.
// Tool calls: always inside <tool_call>…</tool_call>, with one of two bodies:
//  - kJson (Qwen3, Hermes): {"name": NAME, "arguments": {…}};
//  - kXml (Qwen3.5, Qwen3-Coder): <function=NAME> then one block per argument,
//    <parameter=KEY>\nVALUE\n</parameter>, then </function>. Templates write a string value
//    as its raw text and any other value as JSON (true, false and null as the Python
//    spellings True, False and None), so a value is read back as a string when the tool's
//    schema declares the property one, and otherwise as the JSON it parses as, one of those
//    three spellings as its JSON value, or else a string. Without a schema that says so, a
//    string whose text is valid JSON ("42") comes back as that JSON value: the syntax
//    itself cannot tell them apart.
//
// Goals: parsing that never throws and fails (std::nullopt) on anything malformed, so the
// caller can hand the text back as content; finding where a call ends without being
// fooled by a tag inside an XML argument's value.
// Non-goals: other syntaxes (Llama 3's bare JSON, Mistral's [TOOL_CALLS], Gemma 4's
// <|tool_call>call:NAME{…}<tool_call|>): later, as more cases here.
//
// Thread safety: constants and pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "server/json_limits.h"

namespace shardlm::server {

// The tags around a model's reasoning.
struct ReasoningTags {
  std::string_view open;
  std::string_view close;
};
inline constexpr ReasoningTags kThinkTags = {"<think>", "</think>"};
// Gemma 4 opens a named channel and closes it; "thought" is the reasoning one.
inline constexpr ReasoningTags kThoughtChannelTags = {"<|channel>thought", "<channel|>"};

// The tool-call syntax a chat template writes (and so the one a model trained on it uses).
enum class ToolCallSyntax { kNone, kJson, kXml, kSentinel };

inline constexpr std::string_view kToolCallOpen = "<tool_call>";
inline constexpr std::string_view kToolCallClose = "</tool_call>";
// The tags of the XML body.
inline constexpr std::string_view kFunctionOpen = "<function=";
inline constexpr std::string_view kFunctionClose = "</function>";
inline constexpr std::string_view kParameterOpen = "<parameter=";
inline constexpr std::string_view kParameterClose = "</parameter>";

// One call read from the text between <tool_call> and </tool_call>.
struct ParsedToolCall {
  std::string name;
  std::string arguments;  // a JSON text, as OpenAI sends it
  ToolCallSyntax syntax = ToolCallSyntax::kNone;
};

// The call in `body` (the text between the tags), in either syntax; nullopt when it is
// neither (bad JSON, no name, a tag out of place, a repeated or malformed parameter name).
// `tools`: the request's tools (an array of {"function": {"name", "parameters"}}), whose
// schemas say which XML values are strings; anything else: none do.
std::optional<ParsedToolCall> ParseToolCallBody(std::string_view body, const Json& tools = Json());

// Where the </tool_call> that ends the call whose body starts `text` begins, or npos when
// `text` does not hold it yet. In an XML body a parameter's value is raw text, which may
// itself contain "</tool_call>": the search skips every complete <parameter=…>…</parameter>.
size_t FindToolCallEnd(std::string_view text);

}  // namespace shardlm::server
