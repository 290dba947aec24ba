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

// Gemma 4's chat format, written for these tests (the parts the server relies on): the tools
// in a system turn, a model turn's calls as <|tool_call>call:NAME{ARGS}<tool_call|> with ARGS
// in Gemma's notation (keys bare and sorted, strings between <|"|> markers and raw, None for
// null), the results that answer them inside the same turn as
// <|tool_response>response:NAME{…}<tool_response|> (read from an assistant message's
// tool_responses: the format has no tool role), after which the turn stays open, and an empty
// closed thought channel after the generation prompt unless enable_thinking.
inline constexpr char kGemmaToolTemplate[] = R"JINJA(
{%- macro gemma_value(v) -%}
  {%- if v is string -%}{{- '<|"|>' + v + '<|"|>' -}}
  {%- elif v is boolean -%}{{- 'true' if v else 'false' -}}
  {%- elif v is mapping -%}
    {{- '{' -}}
    {%- for k, x in v | dictsort -%}
      {{- ',' if not loop.first -}}{{- k + ':' -}}{{- gemma_value(x) -}}
    {%- endfor -%}
    {{- '}' -}}
  {%- elif v is sequence -%}
    {{- '[' -}}
    {%- for x in v -%}{{- ',' if not loop.first -}}{{- gemma_value(x) -}}{%- endfor -%}
    {{- ']' -}}
  {%- else -%}{{- v -}}
  {%- endif -%}
{%- endmacro -%}
{{- bos_token -}}
{%- if tools -%}
  {{- '<|turn>system\n' -}}
  {%- for t in tools -%}{{- '<|tool>' + t.function.name + '<tool|>' -}}{%- endfor -%}
  {{- '<turn|>\n' -}}
{%- endif -%}
{%- set ns = namespace(open_turn=false) -%}
{%- for m in messages -%}
  {%- if not ns.open_turn -%}
    {{- '<|turn>' + ('model' if m.role == 'assistant' else m.role) + '\n' -}}
  {%- endif -%}
  {%- for c in m.tool_calls or [] -%}
    {{- '<|tool_call>call:' + c.function.name -}}{{- gemma_value(c.function.arguments) -}}
    {{- '<tool_call|>' -}}
  {%- endfor -%}
  {%- for r in m.tool_responses or [] -%}
    {{- '<|tool_response>response:' + r.name -}}
    {%- if r.response is mapping -%}{{- gemma_value(r.response) -}}
    {%- else -%}{{- '{value:' -}}{{- gemma_value(r.response) -}}{{- '}' -}}
    {%- endif -%}
    {{- '<tool_response|>' -}}
  {%- endfor -%}
  {%- if m.content is string -%}{{- m.content -}}{%- endif -%}
  {%- set ns.open_turn = m.tool_responses and not m.content -%}
  {%- if not ns.open_turn -%}{{- '<turn|>\n' -}}{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {%- if not ns.open_turn -%}{{- '<|turn>model\n' -}}{%- endif -%}
  {%- if not enable_thinking | default(false) -%}{{- '<|channel>thought\n<channel|>' -}}{%- endif -%}
{%- endif -%}
)JINJA";

}  // namespace shardlm::server
