// The markup a model writes around the parts of its output that are not plain content: the
// tags of its reasoning, and the syntax of its tool calls. Which ones a model uses is read
// from its chat template (chat_format.h); this file owns the tag sets and the parsing of one
// tool call's text.
//
// Reasoning tags: <think>…</think> (Qwen, DeepSeek, ChatML-style templates), or Gemma 4's
// thought channel, <|channel>thought…<channel|>.
// Tool calls: inside <tool_call>…</tool_call> (Qwen, Hermes) or Gemma 4's
// <|tool_call>…<tool_call|>, with one of three bodies:
//  - kJson (Qwen3, Hermes): {"name": NAME, "arguments": {…}};
//  - kXml (Qwen3.5, Qwen3-Coder): <function=NAME> then one block per argument,
//    <parameter=KEY>\nVALUE\n</parameter>, then </function>. Templates write a string value
//    as its raw text and any other value as JSON (true, false and null as the Python
//    spellings True, False and None), so a value is read back as a string when the tool's
//    schema declares the property one, and otherwise as the JSON it parses as, one of those
//    three spellings as its JSON value, or else a string. Without a schema that says so, a
//    string whose text is valid JSON ("42") comes back as that JSON value: the syntax
//    itself cannot tell them apart;
//  - kGemma (Gemma 4): call:NAME{ARGS}, ARGS an object in Gemma's own notation: keys bare
//    (key:value, no quotes, sorted by the template), members separated by commas with no
//    blanks, a string between two <|"|> markers with its text raw (no escapes: quotes,
//    backslashes and newlines are themselves; it ends at the next <|"|>), numbers as JSON
//    writes them, true and false, nested objects {k:v} and lists [a,b] in the same
//    notation. Templates print a null as None (Jinja's spelling); null is read as well.
//    Read leniently where a model may drift and the meaning is still plain: blanks between
//    tokens, a key written as a string (<|"|>k<|"|> or "k"), and a string written as a JSON
//    string ("a\"b"). Anything else (a bare word as a value, a repeated key, text after the
//    object) is malformed.
//
// Goals: parsing that never throws and fails (std::nullopt) on anything malformed, so the
// caller can hand the text back as content; finding where a call ends without being
// fooled by a closing tag inside an argument's value (an XML value's raw text, a Gemma
// string); the same limits on nesting and size as any JSON the server reads.
// Non-goals: other syntaxes (Llama 3's bare JSON, Mistral's [TOOL_CALLS]): later, as more
// cases here.
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
  // A closing tag met outside the reasoning is dropped rather than shown as content: true
  // for tags that are special tokens, never text a model writes as prose (Gemma 4 closes an
  // empty channel it never opened now and then).
  bool drop_stray_close = false;
};
inline constexpr ReasoningTags kThinkTags = {"<think>", "</think>"};
// Gemma 4 opens a named channel and closes it; "thought" is the reasoning one.
inline constexpr ReasoningTags kThoughtChannelTags = {"<|channel>thought", "<channel|>", true};

// The tool-call syntax a chat template writes (and so the one a model trained on it uses).
enum class ToolCallSyntax { kNone, kJson, kXml, kGemma, kSentinel };

// The tags around one tool call.
struct ToolCallTags {
  std::string_view open;
  std::string_view close;
};
inline constexpr ToolCallTags kToolCallTags = {"<tool_call>", "</tool_call>"};
// Gemma 4's pair is asymmetric: the bar sits inside the opening tag and outside the closing.
inline constexpr ToolCallTags kGemmaToolCallTags = {"<|tool_call>", "<tool_call|>"};

inline constexpr std::string_view kToolCallOpen = kToolCallTags.open;
inline constexpr std::string_view kToolCallClose = kToolCallTags.close;
// What a Gemma 4 body starts with, and the marker on both sides of its strings.
inline constexpr std::string_view kGemmaCallPrefix = "call:";
inline constexpr std::string_view kGemmaQuote = "<|\"|>";
// The tags of the XML body.
inline constexpr std::string_view kFunctionOpen = "<function=";
inline constexpr std::string_view kFunctionClose = "</function>";
inline constexpr std::string_view kParameterOpen = "<parameter=";
inline constexpr std::string_view kParameterClose = "</parameter>";

// One call read from the text between a tool call's tags.
struct ParsedToolCall {
  std::string name;
  std::string arguments;  // a JSON text, as OpenAI sends it
  ToolCallSyntax syntax = ToolCallSyntax::kNone;
};

// The call in `body` (the text between the tags), in any of the syntaxes; nullopt when it
// is none of them (bad JSON, no name, a tag out of place, a repeated or malformed parameter
// name or key, nesting past the JSON limits). `tools`: the request's tools (an array of
// {"function": {"name", "parameters"}}), whose schemas say which XML values are strings;
// anything else: none do.
std::optional<ParsedToolCall> ParseToolCallBody(std::string_view body, const Json& tools = Json());

// Where the `close` tag that ends the call whose body starts `text` begins, or npos when
// `text` does not hold it yet. Values may hold the closing tag as text: in an XML body the
// search skips every complete <parameter=…>…</parameter>, in a Gemma body every complete
// <|"|>…<|"|> string.
size_t FindToolCallEnd(std::string_view text, std::string_view close = kToolCallClose);

}  // namespace shardlm::server
