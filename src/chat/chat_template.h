// ChatTemplate: renders OpenAI/Hugging Face chat messages into a model's prompt text with
// the model's Jinja chat template, the way transformers' apply_chat_template does.
//
// Owns: the variables a chat template sees (messages, tools, documents=None,
// add_generation_prompt, bos_token/eos_token when known, strftime_now with an injectable
// clock), and a built-in ChatML template for models without one.
// Goals: byte-identical prompts to transformers + jinja2 for real model templates.
// Non-goals: tokenization, parsing tool calls out of model output.
// Thread safety: immutable after Create; Render may be called concurrently.
// Lifetime: a value type; copies share the parsed template.
#pragma once

#include <ctime>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "base/status.h"
#include "chat/jinja_template.h"

namespace shardlm {

struct ChatTemplateOptions {
  // The time strftime_now() formats, as a naive wall time (only the year..second fields
  // need be set); defaults to the local wall clock (transformers calls datetime.now()).
  // Tests inject a fixed time.
  std::function<std::tm()> clock;
  jinja::RenderLimits limits;
};

class ChatTemplate {
 public:
  // `source` is the Jinja text (GGUF tokenizer.chat_template). A token left nullopt is not
  // passed to the template at all (it is then undefined there, like in transformers).
  static Result<ChatTemplate> Create(std::string source, std::optional<std::string> bos_token,
                                     std::optional<std::string> eos_token,
                                     ChatTemplateOptions options = {});
  // The ChatML template ("<|im_start|>role\ncontent<|im_end|>\n") for models without one.
  static Result<ChatTemplate> ChatMl(std::optional<std::string> bos_token = std::nullopt,
                                     std::optional<std::string> eos_token = std::nullopt);
  static const char* ChatMlSource();

  // messages: array of {role, content, tool_calls?, ...}; tools: array, or null → None.
  // Key order of dicts is what tojson prints, so pass ordered_json parsed from the request.
  // Errors: kInvalidArgument with the template's message for raise_exception(), or a
  // Python-like runtime error message; `raised` (optional) tells which.
  Result<std::string> Render(const nlohmann::ordered_json& messages,
                             const nlohmann::ordered_json& tools, bool add_generation_prompt,
                             bool* raised = nullptr) const;
  // Same, plus extra template variables (an object, e.g. a request's chat_template_kwargs
  // {"enable_thinking": false}); they are set after the standard ones and may override them.
  Result<std::string> RenderWith(const nlohmann::ordered_json& messages,
                                 const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                 const nlohmann::ordered_json& extra_vars,
                                 bool* raised = nullptr) const;
  // Same, from nlohmann::json (whose objects are key-sorted: tojson output then sorts keys).
  Result<std::string> Render(const nlohmann::json& messages, const nlohmann::json& tools,
                             bool add_generation_prompt, bool* raised = nullptr) const;

  const std::string& source() const { return source_; }

 private:
  ChatTemplate(std::string source, jinja::Template tmpl, std::optional<std::string> bos,
               std::optional<std::string> eos, ChatTemplateOptions options)
      : source_(std::move(source)),
        template_(std::move(tmpl)),
        bos_token_(std::move(bos)),
        eos_token_(std::move(eos)),
        options_(std::move(options)) {}

  std::string source_;
  jinja::Template template_;
  std::optional<std::string> bos_token_;
  std::optional<std::string> eos_token_;
  ChatTemplateOptions options_;
};

}  // namespace shardlm
