// Chat prompt rendering and incremental output parsing. See chat_format.h.
#include "server/chat_format.h"

#include <algorithm>
#include <optional>

#include "server/json_limits.h"

namespace shardlm::server {
namespace {

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kToolOpen = "<tool_call>";
constexpr std::string_view kToolClose = "</tool_call>";

// The text of a special token, when the vocab has one.
std::optional<std::string> SpecialText(const Tokenizer& tokenizer, TokenId id) {
  if (id < 0 || id >= tokenizer.n_vocab()) return std::nullopt;
  return std::string(tokenizer.TokenText(id));
}

// Length of the longest suffix of `text` that is a proper prefix of `tag`.
size_t PartialTagSuffix(const std::string& text, std::string_view tag) {
  size_t most = std::min(text.size(), tag.size() - 1);
  for (size_t n = most; n > 0; --n) {
    if (text.compare(text.size() - n, n, tag.data(), n) == 0) return n;
  }
  return 0;
}

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// A conversation with one tool call and its result, as a request normalizes it (arguments
// an object). The id has the 9 alphanumeric characters Mistral's templates insist on.
constexpr char kProbeTools[] = R"([{"type": "function", "function": {"name": "probe_tool",
    "description": "a probe", "parameters": {"type": "object",
    "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}])";
constexpr char kProbeMessages[] = R"([{"role": "user", "content": "call it"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "probe0001", "type": "function",
     "function": {"name": "probe_tool", "arguments": {"n": 7}}}]},
    {"role": "tool", "tool_call_id": "probe0001", "name": "probe_tool", "content": "7"}])";

// Whether the call of the probe conversation, as the template writes it, comes back out of
// an OutputParser as the same call. A template that fails on it writes no calls we can read.
bool WritesParsableToolCalls(const ChatTemplate& tmpl) {
  Result<std::string> text =
      tmpl.Render(Json::parse(kProbeMessages), Json::parse(kProbeTools), true);
  if (!text.ok()) return false;
  OutputParser parser(/*in_reasoning=*/false, /*parse_tools=*/true, "");
  std::vector<ToolCall> calls = parser.Push(text.value()).tool_calls;
  for (ToolCall& call : parser.Finish().tool_calls) calls.push_back(std::move(call));
  return std::any_of(calls.begin(), calls.end(), [](const ToolCall& call) {
    return call.name == "probe_tool" &&
           Json::parse(call.arguments, nullptr, false) == Json{{"n", 7}};
  });
}

}  // namespace

ChatFormatter::ChatFormatter(ChatTemplate tmpl)
    : template_(std::move(tmpl)), writes_tool_calls_(WritesParsableToolCalls(template_)) {}

Result<ChatFormatter> ChatFormatter::Create(const std::string& template_source,
                                            const Tokenizer& tokenizer, bool* used_chatml) {
  std::optional<std::string> bos = SpecialText(tokenizer, tokenizer.bos());
  std::optional<std::string> eos = SpecialText(tokenizer, tokenizer.eos());
  if (used_chatml) *used_chatml = template_source.empty();
  if (template_source.empty()) {
    SHARDLM_ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::ChatMl(bos, eos));
    return ChatFormatter(std::move(tmpl));
  }
  SHARDLM_ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::Create(template_source, bos, eos));
  return ChatFormatter(std::move(tmpl));
}

Result<std::string> ChatFormatter::Render(const ChatCompletionRequest& request) const {
  Result<std::string> text =
      template_.RenderWith(request.messages, request.tools, /*add_generation_prompt=*/true,
                           request.chat_template_kwargs);
  if (!text.ok()) {
    return InvalidArgument("the chat template failed on these messages: {}",
                           text.status().message());
  }
  return text;
}

namespace {

// The prompt tokens of rendered text: special tokens parsed, the BOS the model wants added
// once (templates that write the BOS text themselves would get a second from add_special).
std::vector<TokenId> PromptTokens(const std::string& text, const Tokenizer& tokenizer) {
  std::vector<TokenId> tokens =
      tokenizer.Encode(text, /*add_special=*/true, /*parse_special=*/true);
  if (tokens.size() >= 2 && tokenizer.bos() >= 0 && tokens[0] == tokenizer.bos() &&
      tokens[1] == tokenizer.bos()) {
    tokens.erase(tokens.begin());
  }
  return tokens;
}

}  // namespace

Result<ChatPrompt> ChatFormatter::Tokenize(const ChatCompletionRequest& request,
                                           const Tokenizer& tokenizer) const {
  SHARDLM_ASSIGN_OR_RETURN(std::string text, Render(request));
  ChatPrompt prompt;
  prompt.tokens = PromptTokens(text, tokenizer);
  prompt.opens_reasoning = PromptOpensReasoning(text);
  return prompt;
}

int32_t ChatFormatter::StandingPrefix(const ChatCompletionRequest& request,
                                      std::span<const TokenId> prompt,
                                      const Tokenizer& tokenizer) const {
  Json standing = Json::array();
  for (const auto& message : request.messages) {
    const auto role = message.find("role");
    if (role == message.end() || (*role != "system" && *role != "developer")) break;
    standing.push_back(message);
  }
  if (standing.empty() && request.tools.is_null()) return 0;
  Result<std::string> text =
      template_.RenderWith(standing, request.tools,
                           /*add_generation_prompt=*/false, request.chat_template_kwargs);
  if (!text.ok()) return 0;
  // The tokens both renderings share: a template that writes the system turn differently
  // when later turns follow pins less, never something else.
  const std::vector<TokenId> alone = PromptTokens(*text, tokenizer);
  const auto [end, unused] =
      std::mismatch(prompt.begin(), prompt.end(), alone.begin(), alone.end());
  return int32_t(end - prompt.begin());
}

bool PromptOpensReasoning(const std::string& prompt) {
  size_t open = prompt.rfind(kThinkOpen);
  if (open == std::string::npos) return false;
  return prompt.find(kThinkClose, open) == std::string::npos;
}

OutputParser::OutputParser(bool in_reasoning, bool parse_tools, std::string id_prefix)
    : state_(in_reasoning ? State::kReasoning : State::kContent),
      parse_tools_(parse_tools),
      id_prefix_(std::move(id_prefix)) {}

OutputDelta OutputParser::Push(const std::string& text) {
  OutputDelta out;
  buffer_ += text;
  Drain(/*final=*/false, out);
  return out;
}

OutputDelta OutputParser::Finish() {
  OutputDelta out;
  Drain(/*final=*/true, out);
  return out;
}

void OutputParser::Emit(const std::string& text, OutputDelta& out) {
  bool reasoning = state_ == State::kReasoning;
  bool& started = reasoning ? reasoning_started_ : content_started_;
  size_t begin = 0;
  if (!started) {
    while (begin < text.size() && IsSpace(text[begin])) ++begin;
    if (begin == text.size()) return;
    started = true;
  }
  (reasoning ? out.reasoning : out.content).append(text, begin, std::string::npos);
}

void OutputParser::EndToolCall(const std::string& body, OutputDelta& out) {
  // The model's text is as untrusted as a request: the same limits keep a runaway or
  // adversarial output from nesting deep enough to hurt whatever walks it.
  Result<Json> parsed = ParseJsonWithLimits(body, "", JsonLimits{});
  Json call = parsed.ok() ? std::move(parsed).value() : Json();
  auto name = call.is_object() ? call.find("name") : call.end();
  if (!call.is_object() || name == call.end() || !name->is_string()) {
    state_ = State::kContent;
    Emit(std::string(kToolOpen) + body + std::string(kToolClose), out);
    return;
  }
  ToolCall tc;
  tc.id = id_prefix_ + std::to_string(tool_calls_++);
  tc.name = name->get<std::string>();
  auto args = call.find("arguments");
  if (args == call.end() || args->is_null()) {
    tc.arguments = "{}";
  } else if (args->is_string()) {
    tc.arguments = args->get<std::string>();
  } else {
    tc.arguments = args->dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  out.tool_calls.push_back(std::move(tc));
}

void OutputParser::Drain(bool final, OutputDelta& out) {
  while (!buffer_.empty()) {
    if (state_ == State::kToolCall) {
      size_t end = buffer_.find(kToolClose);
      if (end == std::string::npos) {
        if (final) EndToolCall(buffer_, out), buffer_.clear();
        return;
      }
      std::string body = buffer_.substr(0, end);
      buffer_.erase(0, end + kToolClose.size());
      state_ = State::kContent;
      EndToolCall(body, out);
      continue;
    }
    std::vector<std::string_view> tags;
    if (state_ == State::kReasoning) {
      tags = {kThinkClose};
    } else {
      tags = {kThinkOpen};
      if (parse_tools_) tags.push_back(kToolOpen);
    }
    size_t best = std::string::npos;
    std::string_view best_tag;
    for (std::string_view tag : tags) {
      size_t pos = buffer_.find(tag);
      if (pos < best) best = pos, best_tag = tag;
    }
    if (best != std::string::npos) {
      Emit(buffer_.substr(0, best), out);
      buffer_.erase(0, best + best_tag.size());
      state_ = best_tag == kThinkOpen  ? State::kReasoning
               : best_tag == kToolOpen ? State::kToolCall
                                       : State::kContent;
      continue;
    }
    size_t hold = 0;
    if (!final) {
      for (std::string_view tag : tags) hold = std::max(hold, PartialTagSuffix(buffer_, tag));
    }
    Emit(buffer_.substr(0, buffer_.size() - hold), out);
    buffer_.erase(0, buffer_.size() - hold);
    return;
  }
}

}  // namespace shardlm::server
