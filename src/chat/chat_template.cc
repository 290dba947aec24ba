// ChatTemplate: apply_chat_template's variables around a jinja::Template.
#include "chat/chat_template.h"

#include <chrono>

namespace shardlm {
namespace {

constexpr char kChatMlSource[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

std::tm LocalNow() {
  std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  localtime_r(&now, &tm);
  return tm;
}

jinja::Value StrftimeNow(const std::function<std::tm()>& clock) {
  return jinja::Value::Function("strftime_now", [clock](jinja::CallArgs& args) {
    jinja::Value format = args.Get(0, "format");
    if (!format.IsString()) jinja::Fail("strftime_now() expects a format string");
    std::tm tm = clock ? clock() : LocalNow();
    timegm(&tm);  // normalizes a naive wall time and fills tm_wday / tm_yday
    std::string out(256, '\0');
    size_t n = std::strftime(out.data(), out.size(), format.AsString().c_str(), &tm);
    if (n == 0 && !format.AsString().empty()) jinja::Fail("strftime_now(): format too long");
    out.resize(n);
    return jinja::Value::String(std::move(out));
  });
}

}  // namespace

Result<ChatTemplate> ChatTemplate::Create(std::string source, std::optional<std::string> bos_token,
                                          std::optional<std::string> eos_token,
                                          ChatTemplateOptions options) {
  auto parsed = jinja::Template::Parse(source);
  if (!parsed.ok()) return parsed.status().WithContext("chat template");
  return ChatTemplate(std::move(source), std::move(parsed).value(), std::move(bos_token),
                      std::move(eos_token), std::move(options));
}

const char* ChatTemplate::ChatMlSource() { return kChatMlSource; }

Result<ChatTemplate> ChatTemplate::ChatMl(std::optional<std::string> bos_token,
                                          std::optional<std::string> eos_token) {
  return Create(kChatMlSource, std::move(bos_token), std::move(eos_token));
}

Result<std::string> ChatTemplate::Render(const nlohmann::ordered_json& messages,
                                         const nlohmann::ordered_json& tools,
                                         bool add_generation_prompt, bool* raised) const {
  return RenderWith(messages, tools, add_generation_prompt, nlohmann::ordered_json::object(),
                    raised);
}

Result<std::string> ChatTemplate::RenderWith(const nlohmann::ordered_json& messages,
                                             const nlohmann::ordered_json& tools,
                                             bool add_generation_prompt,
                                             const nlohmann::ordered_json& extra_vars,
                                             bool* raised) const {
  if (raised) *raised = false;
  if (!extra_vars.is_object()) {
    return InvalidArgument("chat template variables must be a JSON object, got {}",
                           extra_vars.type_name());
  }
  size_t values_left = options_.limits.max_input_values;
  jinja::Context context;
  try {
    context = {
        {"messages", jinja::Value::FromJson(messages, &values_left)},
        {"tools", jinja::Value::FromJson(tools, &values_left)},
        {"documents", jinja::Value::None()},
        {"add_generation_prompt", jinja::Value::Bool(add_generation_prompt)},
        {"strftime_now", StrftimeNow(options_.clock)},
    };
    for (const auto& [name, value] : extra_vars.items()) {
      context.emplace_back(name, jinja::Value::FromJson(value, &values_left));
    }
  } catch (const jinja::JinjaError& e) {
    return InvalidArgument(
        "the messages, tools and template variables cannot be rendered: {} "
        "(at most {} values, {} levels deep)",
        e.message, options_.limits.max_input_values, jinja::Value::kMaxFromJsonDepth);
  }
  if (bos_token_) context.emplace_back("bos_token", jinja::Value::String(*bos_token_));
  if (eos_token_) context.emplace_back("eos_token", jinja::Value::String(*eos_token_));
  return template_.Render(context, options_.limits, raised);
}

Result<std::string> ChatTemplate::Render(const nlohmann::json& messages,
                                         const nlohmann::json& tools, bool add_generation_prompt,
                                         bool* raised) const {
  return Render(nlohmann::ordered_json::parse(messages.dump()),
                nlohmann::ordered_json::parse(tools.dump()), add_generation_prompt, raised);
}

}  // namespace shardlm
