// A small chat template for the HTTP tests of the chat-shaped APIs: it writes every field a
// request can map to (roles, content, reasoning_content, tool calls with their ids and
// arguments, tool results with their call ids, the tools offered, enable_thinking), so a test
// can read in the prompt the engine got exactly what a request became. A message is
// "<|im_start|>ROLE|TEXT<|im_end|>". kHermesToolTemplate is the same with tool calls in the
// syntax Qwen3's template writes.
#pragma once

namespace shardlm::server {

inline constexpr char kToolTemplate[] =
    "{%- if tools %}<tools>{% for t in tools %}{{ t.function.name }};{% endfor %}</tools>"
    "{% endif -%}"
    "{%- for m in messages -%}"
    "<|im_start|>{{ m.role }}|"
    "{%- if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{% endif -%}"
    "{%- if m.content %}{{ m.content }}{% endif -%}"
    "{%- if m.tool_calls %}{% for c in m.tool_calls -%}"
    "<tool_call>{{ c.id }} {{ c.function.name }} {{ c.function.arguments | tojson }}</tool_call>"
    "{%- endfor %}{% endif -%}"
    "{%- if m.tool_call_id %} [for {{ m.tool_call_id }}]{% endif %}<|im_end|>"
    "{%- endfor -%}"
    "{%- if enable_thinking is defined and not enable_thinking %}[no thinking]{% endif -%}"
    "{%- if add_generation_prompt %}<|im_start|>assistant|{% endif -%}";

// Tool calls the way Qwen3's and Hermes' templates write them, the syntax the server can
// force (output_constraint.h): "<tool_call>\n{"name": N, "arguments": A}\n</tool_call>".
// kToolTemplate's calls are not in it, so a forced tool_choice is refused under that one.
inline constexpr char kHermesToolTemplate[] =
    "{%- if tools %}<tools>{% for t in tools %}{{ t.function.name }};{% endfor %}</tools>"
    "{% endif -%}"
    "{%- for m in messages -%}"
    "<|im_start|>{{ m.role }}\n"
    "{% if m.content %}{{ m.content }}{% endif -%}"
    "{%- if m.tool_calls %}{% for c in m.tool_calls -%}"
    "<tool_call>\n{\"name\": \"{{ c.function.name }}\", \"arguments\": "
    "{{ c.function.arguments | tojson }}{{ '}' }}\n</tool_call>"
    "{%- endfor %}{% endif %}<|im_end|>\n"
    "{% endfor -%}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif -%}";

}  // namespace shardlm::server
