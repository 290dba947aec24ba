// Chat prompt rendering and incremental output parsing. See chat_format.h.
#include "server/chat_format.h"

#include <algorithm>
#include <optional>

#include "server/json_limits.h"
#include "server/output_syntax.h"

namespace shardlm::server {
namespace {

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

// The syntax in which the template writes the call of the probe conversation, when an
// OutputParser reads it back as the same call; kNone for a template that fails on it or
// writes the call in a syntax we cannot read.
ToolCallSyntax ProbeToolCallSyntax(const ChatTemplate& tmpl, ReasoningTags tags,
                                   ToolCallTags tool_tags) {
  Result<std::string> text =
      tmpl.Render(Json::parse(kProbeMessages), Json::parse(kProbeTools), true);
  if (!text.ok()) return ToolCallSyntax::kNone;
  OutputParser parser(/*in_reasoning=*/false, /*parse_tools=*/true, "", tags,
                      Json::parse(kProbeTools), tool_tags);
  std::vector<ToolCall> calls = parser.Push(text.value()).tool_calls;
  for (ToolCall& call : parser.Finish().tool_calls) calls.push_back(std::move(call));
  const bool read_back = std::any_of(calls.begin(), calls.end(), [](const ToolCall& call) {
    return call.name == "probe_tool" &&
           Json::parse(call.arguments, nullptr, false) == Json{{"n", 7}};
  });
  return read_back ? parser.tool_call_syntax() : ToolCallSyntax::kNone;
}

// Gemma 4's templates write (and strip) its thought channel; every other template we know
// writes <think>, or nothing, which <think> tags then never meet.
ReasoningTags TemplateReasoningTags(const std::string& source) {
  const bool channel = source.find(kThoughtChannelTags.close) != std::string::npos &&
                       source.find("<|channel>") != std::string::npos;
  return channel ? kThoughtChannelTags : kThinkTags;
}

// Gemma 4's templates write its own tool-call tags; every other template we know writes
// <tool_call> or none.
ToolCallTags TemplateToolCallTags(const std::string& source) {
  const bool gemma = source.find(kGemmaToolCallTags.open) != std::string::npos &&
                     source.find(kGemmaToolCallTags.close) != std::string::npos;
  return gemma ? kGemmaToolCallTags : kToolCallTags;
}

// The string `object[key]`, or "" when it is missing or not a string (a client's id may be
// anything).
std::string StringField(const Json& object, const char* key) {
  if (!object.is_object()) return "";
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

bool HasToolCalls(const Json& message) {
  const auto calls = message.find("tool_calls");
  return calls != message.end() && calls->is_array() && !calls->empty();
}

// Whether `message` is the assistant's answer after its calls' results: text, no calls.
bool IsPlainAnswer(const Json& message) {
  return StringField(message, "role") == "assistant" && !HasToolCalls(message) &&
         !StringField(message, "content").empty();
}

// The function name of a tool call ("" when it has none).
std::string CallName(const Json& call) {
  const auto function = call.is_object() ? call.find("function") : call.end();
  return function != call.end() ? StringField(*function, "name") : "";
}

// The tool_responses entry of tool message `result`, an answer to one of `calls`: the one
// its tool_call_id names, else the first not answered yet (`answered` marks them).
Json ToolResponse(const Json& result, const Json& calls, std::vector<bool>& answered) {
  const std::string id = StringField(result, "tool_call_id");
  size_t index = calls.size();
  for (size_t i = 0; i < calls.size() && !id.empty(); ++i) {
    if (StringField(calls[i], "id") == id) index = i;
  }
  for (size_t i = 0; i < calls.size() && index == calls.size(); ++i) {
    if (!answered[i]) index = i;
  }
  std::string name = index < calls.size() ? CallName(calls[index]) : "";
  if (index < calls.size()) answered[index] = true;
  if (name.empty()) name = StringField(result, "name");
  if (name.empty()) name = id;
  const std::string text = StringField(result, "content");
  Result<Json> value = ParseJsonWithLimits(text, "", JsonLimits{});
  return {{"name", name}, {"response", value.ok() ? std::move(value).value() : Json(text)}};
}

// Gemma 4's templates have no tool role: a model turn's calls are answered inside that turn,
// from its message's tool_responses ({name, response}), and the turn goes on with what the
// model wrote after them. OpenAI's shape (an assistant message with tool_calls, one tool
// message per result, then the assistant's answer) becomes that one message; text the
// assistant wrote before its calls is left out, as the format has no place for it. A
// result's response is its content as JSON when it parses (an object is written key by
// key), else its text; its name is that of the call it answers (ToolResponse).
Json GemmaToolTurns(const Json& messages) {
  Json out = Json::array();
  for (size_t i = 0; i < messages.size();) {
    Json message = messages[i++];
    const bool calling = StringField(message, "role") == "assistant" && HasToolCalls(message);
    if (!calling || i == messages.size() || StringField(messages[i], "role") != "tool") {
      out.push_back(std::move(message));
      continue;
    }
    const Json calls = message["tool_calls"];
    Json responses = Json::array();
    std::vector<bool> answered(calls.size());
    while (i < messages.size() && StringField(messages[i], "role") == "tool") {
      responses.push_back(ToolResponse(messages[i++], calls, answered));
    }
    message["tool_responses"] = std::move(responses);
    message["content"] =
        i < messages.size() && IsPlainAnswer(messages[i]) ? messages[i++]["content"] : Json("");
    out.push_back(std::move(message));
  }
  return out;
}

// The CONTROL tokens that spell any of the tags OutputParser reads (see markup_tokens()).
std::vector<TokenId> MarkupTokens(const Tokenizer& tokenizer, ReasoningTags reasoning,
                                  ToolCallTags tool_call) {
  std::vector<TokenId> ids;
  for (std::string_view tag :
       {reasoning.open, reasoning.close, tool_call.open, tool_call.close, kFunctionOpen,
        kFunctionClose, kParameterOpen, kParameterClose, kGemmaQuote}) {
    for (TokenId id : tokenizer.Encode(tag, /*add_special=*/false, /*parse_special=*/true)) {
      if (tokenizer.IsControl(id) && !tokenizer.IsEog(id) && id != tokenizer.bos()) {
        ids.push_back(id);
      }
    }
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace

ChatFormatter::ChatFormatter(ChatTemplate tmpl, ReasoningTags reasoning_tags,
                             ToolCallTags tool_call_tags, bool tool_responses,
                             const Tokenizer& tokenizer)
    : template_(std::move(tmpl)),
      reasoning_tags_(reasoning_tags),
      tool_call_tags_(tool_call_tags),
      tool_responses_(tool_responses),
      tool_call_syntax_(ProbeToolCallSyntax(template_, reasoning_tags_, tool_call_tags_)),
      markup_tokens_(MarkupTokens(tokenizer, reasoning_tags_, tool_call_tags_)) {}

Result<ChatFormatter> ChatFormatter::Create(const std::string& template_source,
                                            const Tokenizer& tokenizer, bool* used_chatml) {
  std::optional<std::string> bos = SpecialText(tokenizer, tokenizer.bos());
  std::optional<std::string> eos = SpecialText(tokenizer, tokenizer.eos());
  if (used_chatml) *used_chatml = template_source.empty();
  if (template_source.empty()) {
    SHARDLM_ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::ChatMl(bos, eos));
    return ChatFormatter(std::move(tmpl), kThinkTags, kToolCallTags, false, tokenizer);
  }
  SHARDLM_ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::Create(template_source, bos, eos));
  const ToolCallTags tool_call_tags = TemplateToolCallTags(template_source);
  // Gemma 4's templates read a turn's tool results from its tool_responses.
  const bool tool_responses = tool_call_tags.open == kGemmaToolCallTags.open &&
                              template_source.find("tool_responses") != std::string::npos;
  return ChatFormatter(std::move(tmpl), TemplateReasoningTags(template_source), tool_call_tags,
                       tool_responses, tokenizer);
}

Result<std::string> ChatFormatter::Render(const ChatCompletionRequest& request) const {
  Result<std::string> text = template_.RenderWith(
      tool_responses_ ? GemmaToolTurns(request.messages) : request.messages, request.tools,
      /*add_generation_prompt=*/true, request.chat_template_kwargs);
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
  prompt.opens_reasoning = PromptOpensReasoning(text, reasoning_tags_);
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

bool PromptOpensReasoning(const std::string& prompt, ReasoningTags tags) {
  size_t open = prompt.rfind(tags.open);
  if (open == std::string::npos) return false;
  return prompt.find(tags.close, open) == std::string::npos;
}

OutputParser::OutputParser(bool in_reasoning, bool parse_tools, std::string id_prefix,
                           ReasoningTags tags, Json tools, ToolCallTags tool_tags)
    : tags_(tags),
      tool_tags_(tool_tags),
      tools_(std::move(tools)),
      state_(in_reasoning ? State::kReasoning : State::kContent),
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

void OutputParser::EndToolCall(const std::string& body, bool closed, OutputDelta& out) {
  std::optional<ParsedToolCall> call = ParseToolCallBody(body, tools_);
  if (!call) {
    // Not a call we can read: the client gets the text the model wrote.
    state_ = State::kContent;
    std::string text = std::string(tool_tags_.open) + body;
    if (closed) text += tool_tags_.close;
    Emit(text, out);
    return;
  }
  ToolCall tc;
  tc.id = id_prefix_ + std::to_string(tool_calls_++);
  tc.name = std::move(call->name);
  tc.arguments = std::move(call->arguments);
  tool_call_syntax_ = call->syntax;
  out.tool_calls.push_back(std::move(tc));
  // Templates put a newline between calls: blanks after a call start no content.
  content_started_ = false;
}

void OutputParser::Drain(bool final, OutputDelta& out) {
  // An output that ends right after the opening tag still has that tag to hand back.
  while (!buffer_.empty() || (final && state_ == State::kToolCall)) {
    if (state_ == State::kToolCall) {
      size_t end = FindToolCallEnd(buffer_, tool_tags_.close);
      if (end == std::string::npos) {
        if (final) EndToolCall(buffer_, /*closed=*/false, out), buffer_.clear();
        return;
      }
      std::string body = buffer_.substr(0, end);
      buffer_.erase(0, end + tool_tags_.close.size());
      state_ = State::kContent;
      EndToolCall(body, /*closed=*/true, out);
      continue;
    }
    std::vector<std::string_view> tags;
    if (state_ == State::kReasoning) {
      tags = {tags_.close};
    } else {
      tags = {tags_.open};
      if (parse_tools_) tags.push_back(tool_tags_.open);
      if (tags_.drop_stray_close) tags.push_back(tags_.close);
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
      // A stray closing tag (outside the reasoning) is dropped: the state stays.
      state_ = best_tag == tags_.open        ? State::kReasoning
               : best_tag == tool_tags_.open ? State::kToolCall
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
