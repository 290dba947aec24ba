// Chat formatting on both sides of the model: the prompt (the model's Jinja chat template,
// or ChatML when it has none) and the output (reasoning inside <think>…</think>, Qwen-style
// <tool_call>{"name":…, "arguments":…}</tool_call> blocks, plain content).
//
// Goals: one OutputParser that works incrementally (SSE deltas) and at once (non-stream),
// holding back text that might be the start of a tag so a tag is never split across deltas;
// knowing whether the template writes tool calls in the syntax OutputParser reads, the one
// a grammar can then force (output_constraint.h).
// Non-goals: other tool-call syntaxes (Llama 3 JSON, Mistral [TOOL_CALLS], Qwen3.5's
// <function=…> blocks): later, as more tag sets here.
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
#include "tokenizer/tokenizer.h"

namespace shardlm::server {

// A chat request's prompt as the engine takes it.
struct ChatPrompt {
  std::vector<TokenId> tokens;
  bool opens_reasoning = false;  // the text ends inside an open <think> block
};

class ChatFormatter {
 public:
  // `template_source` empty: ChatML (and `*used_chatml` is set so the caller can log it).
  static Result<ChatFormatter> Create(const std::string& template_source,
                                      const Tokenizer& tokenizer, bool* used_chatml = nullptr);
  // The prompt text for a request (add_generation_prompt on). kInvalidArgument errors are
  // the template's own (raise_exception) or a render failure.
  Result<std::string> Render(const ChatCompletionRequest& request) const;
  // Render, then tokenize (special tokens parsed, the BOS the model wants added once).
  Result<ChatPrompt> Tokenize(const ChatCompletionRequest& request,
                              const Tokenizer& tokenizer) const;
  // How many of `prompt` (this request's Tokenize) are its standing prefix: the leading
  // system (or developer) messages and the tool definitions, which agents resend every
  // turn, rendered alone; 0 when there are none or the template cannot render them alone.
  int32_t StandingPrefix(const ChatCompletionRequest& request, std::span<const TokenId> prompt,
                         const Tokenizer& tokenizer) const;
  // The template writes an assistant's tool calls as blocks OutputParser reads back
  // (<tool_call>{"name": …, "arguments": …}</tool_call>, as Qwen3's and Hermes' do): told
  // once at Create by rendering a conversation with one call and parsing it.
  bool writes_tool_calls() const { return writes_tool_calls_; }

 private:
  explicit ChatFormatter(ChatTemplate tmpl);
  ChatTemplate template_;
  bool writes_tool_calls_ = false;
};

// What one piece of output adds to the reply.
struct OutputDelta {
  std::string content;
  std::string reasoning;
  std::vector<ToolCall> tool_calls;
  bool empty() const { return content.empty() && reasoning.empty() && tool_calls.empty(); }
};

// Splits the model's output into content, reasoning and tool calls.
class OutputParser {
 public:
  // `in_reasoning`: the prompt already opened <think> (the model continues inside it).
  // `parse_tools`: the request offered tools (otherwise <tool_call> text is content).
  OutputParser(bool in_reasoning, bool parse_tools, std::string id_prefix);
  OutputDelta Push(const std::string& text);
  OutputDelta Finish();  // releases whatever was held back
  int tool_call_count() const { return tool_calls_; }
  // Inside <think>…</think> now (the text pushed so far opened it and has not closed it).
  bool in_reasoning() const { return state_ == State::kReasoning; }

 private:
  enum class State { kContent, kReasoning, kToolCall };
  void Drain(bool final, OutputDelta& out);
  void Emit(const std::string& text, OutputDelta& out);
  void EndToolCall(const std::string& body, OutputDelta& out);

  State state_;
  bool parse_tools_;
  std::string id_prefix_;
  std::string buffer_;
  bool content_started_ = false;
  bool reasoning_started_ = false;
  int tool_calls_ = 0;
};

// True when the rendered prompt ends inside an open <think> block.
bool PromptOpensReasoning(const std::string& prompt);

}  // namespace shardlm::server
