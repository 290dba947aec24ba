// Chat formatting on both sides of the model: the prompt (the model's Jinja chat template,
// or ChatML when it has none) and the output (reasoning, tool calls, plain content).
//
// Which markup the output uses is read from the template (output_syntax.h has the tag sets
// and the tool-call syntaxes): reasoning inside <think>…</think>, or inside Gemma 4's
// thought channel when the template writes <|channel>…<channel|>; tool calls inside
// <tool_call>…</tool_call> as JSON (Qwen3, Hermes) or as <function=…> blocks (Qwen3.5), or
// inside Gemma 4's <|tool_call>…<tool_call|> as call:NAME{…}, whichever the template writes.
//
// Goals: one OutputParser that works incrementally (SSE deltas) and at once (non-stream),
// holding back text that might be the start of a tag so a tag is never split across deltas;
// knowing which tool-call syntax the template writes, the one a grammar can then force
// (output_constraint.h).
// Non-goals: the tool-call syntaxes output_syntax.h does not read (Llama 3 JSON, Mistral
// [TOOL_CALLS]): later, as more syntaxes there.
//
// Thread safety: ChatFormatter is immutable after Create (shared by handler threads);
// an OutputParser belongs to one request.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "chat/chat_template.h"
#include "server/openai_types.h"
#include "server/output_syntax.h"
#include "tokenizer/tokenizer.h"

namespace shardlm::server {

// A chat request's prompt as the engine takes it.
struct ChatPrompt {
  std::vector<TokenId> tokens;
  bool opens_reasoning = false;  // the text ends inside an open reasoning block
};

class ChatFormatter {
 public:
  // `template_source` empty: ChatML (and `*used_chatml` is set so the caller can log it).
  static Result<ChatFormatter> Create(const std::string& template_source,
                                      const Tokenizer& tokenizer, bool* used_chatml = nullptr);
  // The prompt text for a request (add_generation_prompt on). kInvalidArgument errors are
  // the template's own (raise_exception) or a render failure. For a template that writes
  // tool results inside the model's turn (Gemma 4's), the tool messages that answer a
  // turn's calls become that turn's tool_responses first.
  Result<std::string> Render(const ChatCompletionRequest& request) const;
  // Render, then tokenize (special tokens parsed, the BOS the model wants added once).
  Result<ChatPrompt> Tokenize(const ChatCompletionRequest& request,
                              const Tokenizer& tokenizer) const;
  // How many of `prompt` (this request's Tokenize) are its standing prefix: the leading
  // system (or developer) messages and the tool definitions, which agents resend every
  // turn, rendered alone; 0 when there are none or the template cannot render them alone.
  int32_t StandingPrefix(const ChatCompletionRequest& request, std::span<const TokenId> prompt,
                         const Tokenizer& tokenizer) const;
  // The syntax in which the template writes an assistant's tool calls, when OutputParser
  // reads them back (kNone otherwise): told once at Create by rendering a conversation with
  // one call and parsing it.
  ToolCallSyntax tool_call_syntax() const { return tool_call_syntax_; }
  bool writes_tool_calls() const { return tool_call_syntax_ != ToolCallSyntax::kNone; }
  // The tags of the model's reasoning, as the template writes them.
  ReasoningTags reasoning_tags() const { return reasoning_tags_; }
  // The tags around a tool call: Gemma 4's when the template writes them, else <tool_call>.
  ToolCallTags tool_call_tags() const { return tool_call_tags_; }
  // The CONTROL tokens of the vocabulary that spell the output's markup (the reasoning and
  // tool-call tags, the tags of a call's body, Gemma's string marker), sorted: a chat's
  // output shows them (EngineRequest::rendered_specials) so that OutputParser reads them.
  // Gemma 4's vocabulary makes <|channel>, <|tool_call>, <|"|> and the like special tokens,
  // which would otherwise give no text. End-of-generation tokens and BOS are never here.
  const std::vector<TokenId>& markup_tokens() const { return markup_tokens_; }

 private:
  ChatFormatter(ChatTemplate tmpl, ReasoningTags reasoning_tags, ToolCallTags tool_call_tags,
                bool tool_responses, const Tokenizer& tokenizer);
  ChatTemplate template_;
  ReasoningTags reasoning_tags_;
  ToolCallTags tool_call_tags_;
  // The template reads tool results from the calling message's tool_responses (Gemma 4's):
  // Render moves them there.
  bool tool_responses_ = false;
  ToolCallSyntax tool_call_syntax_ = ToolCallSyntax::kNone;
  std::vector<TokenId> markup_tokens_;
};

// What one piece of output adds to the reply.
struct OutputDelta {
  std::string content;
  std::string reasoning;
  std::vector<ToolCall> tool_calls;
  bool empty() const { return content.empty() && reasoning.empty() && tool_calls.empty(); }
};

// Splits the model's output into content, reasoning and tool calls. A tool-call block may
// hold any of the syntaxes (a model trained on one may still write another); one that holds
// none is handed back as content, as the model wrote it.
class OutputParser {
 public:
  // `in_reasoning`: the prompt already opened the reasoning (the model continues inside it).
  // `parse_tools`: the request offered tools (otherwise tool-call text is content).
  // `tools`: the tools offered, whose schemas say which arguments are strings.
  // `tool_tags`: the tags around a call (ChatFormatter::tool_call_tags).
  OutputParser(bool in_reasoning, bool parse_tools, std::string id_prefix,
               ReasoningTags tags = kThinkTags, Json tools = Json(),
               ToolCallTags tool_tags = kToolCallTags);
  OutputDelta Push(const std::string& text);
  OutputDelta Finish();  // releases whatever was held back
  int tool_call_count() const { return tool_calls_; }
  // Inside the reasoning now (the text pushed so far opened it and has not closed it).
  bool in_reasoning() const { return state_ == State::kReasoning; }
  // The syntax of the last tool call read (kNone before the first).
  ToolCallSyntax tool_call_syntax() const { return tool_call_syntax_; }

 private:
  enum class State { kContent, kReasoning, kToolCall };
  void Drain(bool final, OutputDelta& out);
  void Emit(const std::string& text, OutputDelta& out);
  // `closed`: the model wrote the closing tag (not so when its output ended inside the call).
  void EndToolCall(const std::string& body, bool closed, OutputDelta& out);

  ReasoningTags tags_;
  ToolCallTags tool_tags_;
  Json tools_;
  State state_;
  bool parse_tools_;
  std::string id_prefix_;
  std::string buffer_;
  bool content_started_ = false;
  bool reasoning_started_ = false;
  int tool_calls_ = 0;
  ToolCallSyntax tool_call_syntax_ = ToolCallSyntax::kNone;
};

// True when the rendered prompt ends inside an open reasoning block.
bool PromptOpensReasoning(const std::string& prompt, ReasoningTags tags = kThinkTags);

}  // namespace shardlm::server
