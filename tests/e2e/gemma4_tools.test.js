// End-to-end tests of Gemma 4's tool calls: the real `shardlm serve` on the gemma4 fixture
// (random weights, a byte vocabulary) under a Gemma 4-style chat template written here (tool
// calls as <|tool_call>call:NAME{ARGS}<tool_call|> in Gemma's notation, results inside the
// calling turn as <|tool_response>…<tool_response|>, the thought channel), driven by the
// official `openai` and `@anthropic-ai/sdk` clients.
//
// Goals: what a Gemma 4 user of tools sees, from a model that would never write a call by
// itself: tool_choice "required" and a named function force one call in Gemma's syntax,
// which reaches the client as tool_calls whose arguments validate (streamed and not); the
// assistant message sent back with the tool's result gives a second turn whose prompt holds
// both; Anthropic's tool_choice {type: 'any'} gives a tool_use block.
// Non-goals: what a trained model writes (the fixture's vocabulary has no Gemma markers: the
// grammar spells them in bytes); the server tests cover markers as special tokens.
// Fixtures: SHARDLM_FIXTURES or ../../../shared/fixtures; missing → skip (fail under CI).
// Binary: SHARDLM_BIN or ../../build/shardlm.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import { clientOf } from './client.js';
import { binary, cleanUp, fixtures, skipReason, startServer } from './harness.js';

const model = path.join(fixtures, 'gemma4-tiny.gguf');
const kTestTimeout = 120_000;
const skip = skipReason('gemma4_tools', [model]);

// The parts of Gemma 4's chat format the server relies on (see tests/server/tool_template.h).
const template = String.raw`
{%- macro gemma_value(v) -%}
  {%- if v is string -%}{{- '<|"|>' + v + '<|"|>' -}}
  {%- elif v is boolean -%}{{- 'true' if v else 'false' -}}
  {%- elif v is mapping -%}
    {{- '{' -}}
    {%- for k, x in v | dictsort -%}{{- ',' if not loop.first -}}{{- k + ':' -}}{{- gemma_value(x) -}}{%- endfor -%}
    {{- '}' -}}
  {%- elif v is sequence -%}
    {{- '[' -}}{%- for x in v -%}{{- ',' if not loop.first -}}{{- gemma_value(x) -}}{%- endfor -%}{{- ']' -}}
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
  {%- if not ns.open_turn -%}{{- '<|turn>' + ('model' if m.role == 'assistant' else m.role) + '\n' -}}{%- endif -%}
  {%- for c in m.tool_calls or [] -%}
    {{- '<|tool_call>call:' + c.function.name -}}{{- gemma_value(c.function.arguments) -}}{{- '<tool_call|>' -}}
  {%- endfor -%}
  {%- for r in m.tool_responses or [] -%}
    {{- '<|tool_response>response:' + r.name -}}
    {%- if r.response is mapping -%}{{- gemma_value(r.response) -}}
    {%- else -%}{{- '{value:' -}}{{- gemma_value(r.response) -}}{{- '}' -}}{%- endif -%}
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
`;

const weatherParams = {
  type: 'object',
  properties: {
    city: { type: 'string', maxLength: 12 },
    days: { type: 'integer' },
    units: { enum: ['metric', 'imperial'] },
  },
  required: ['city', 'days', 'units'],
  additionalProperties: false,
};
const timeParams = {
  type: 'object', properties: { zone: { enum: ['UTC', 'CET'] }, exact: { type: 'boolean' } },
  required: ['zone', 'exact'], additionalProperties: false,
};
const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'The weather in a city',
    parameters: weatherParams } },
  { type: 'function', function: { name: 'get_time', description: 'The time in a zone',
    parameters: timeParams } },
];
const paramsOf = { get_weather: weatherParams, get_time: timeParams };
const greedy = { model: 'm', temperature: 0, max_tokens: 300 };
const question = { role: 'user', content: 'What is the weather in Paris?' };

// The arguments hold exactly the required properties, each of its type or enum.
function assertValid(args, params, text) {
  assert.deepEqual(Object.keys(args).sort(), [...params.required].sort(), text);
  for (const [key, schema] of Object.entries(params.properties)) {
    const value = args[key];
    if (schema.enum) assert.ok(schema.enum.includes(value), `${key} in ${text}`);
    if (schema.type === 'integer') assert.ok(Number.isInteger(value), `${key} in ${text}`);
    if (schema.type === 'boolean') assert.equal(typeof value, 'boolean', `${key} in ${text}`);
    if (schema.type === 'string') {
      assert.equal(typeof value, 'string', `${key} in ${text}`);
      assert.ok([...value].length <= schema.maxLength, `${key} in ${text}`);
    }
  }
}

let dir;
let server;
let openai;

before(async () => {
  if (skip) return;
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'shardlm-gemma4-'));
  const templateFile = path.join(dir, 'gemma4.jinja');
  fs.writeFileSync(templateFile, template);
  server = await startServer(binary, model,
    ['--parallel', '2', '-c', '2048', '-t', '2', '--chat-template-file', templateFile]);
  openai = clientOf(server);
});

after(() => cleanUp(dir));

function complete(body, stream) {
  return stream
    ? openai.chat.completions.stream({ ...body, stream_options: { include_usage: true } })
      .finalChatCompletion()
    : openai.chat.completions.create(body);
}

// Turn 1 forces a call; turn 2 sends it back with the tool's result and gets an answer.
async function toolLoop(toolChoice, stream) {
  const first = await complete({ ...greedy, messages: [question], tools, tool_choice: toolChoice },
    stream);
  const choice = first.choices[0];
  assert.equal(choice.finish_reason, 'tool_calls');
  assert.equal(choice.message.content ?? '', '');
  assert.equal(choice.message.tool_calls.length, 1);
  const call = choice.message.tool_calls[0];
  assert.ok(call.function.name in paramsOf, call.function.name);
  assertValid(JSON.parse(call.function.arguments), paramsOf[call.function.name],
    call.function.arguments);
  const messages = [question, choice.message,
    { role: 'tool', tool_call_id: call.id, content: '{"sky": "clear", "celsius": 21}' }];
  const second = await complete(
    { ...greedy, max_tokens: 8, ignore_eos: true, messages, tools }, stream);
  assert.equal(second.choices[0].finish_reason, 'length');
  assert.ok(second.usage.prompt_tokens > first.usage.prompt_tokens + 40,
    'the call and its result are in the prompt');
  return call;
}

test('tool_choice required forces a Gemma 4 call; the loop goes on, streamed and not',
  { skip, timeout: kTestTimeout }, async () => {
    const whole = await toolLoop('required', false);
    const streamed = await toolLoop('required', true);
    assert.equal(streamed.function.name, whole.function.name);
    assert.equal(streamed.function.arguments, whole.function.arguments);
  });

test('a named function forces that call', { skip, timeout: kTestTimeout }, async () => {
  for (const name of ['get_time', 'get_weather']) {
    const call = await toolLoop({ type: 'function', function: { name } }, false);
    assert.equal(call.function.name, name);
  }
});

test('Anthropic tool_choice any gives a tool_use block', { skip, timeout: kTestTimeout },
  async () => {
    const anthropic = new Anthropic({ baseURL: server.base, apiKey: 'none', maxRetries: 0,
      timeout: 60_000 });
    const message = await anthropic.messages.create({
      model: 'm', max_tokens: 300, temperature: 0, tool_choice: { type: 'any' },
      messages: [{ role: 'user', content: 'Time in Berlin?' }],
      tools: [{ name: 'get_time', description: 'The time in a zone', input_schema: timeParams }],
    });
    assert.equal(message.stop_reason, 'tool_use');
    const block = message.content.find((b) => b.type === 'tool_use');
    assert.ok(block, JSON.stringify(message.content));
    assert.equal(block.name, 'get_time');
    assertValid(block.input, timeParams, JSON.stringify(block.input));
  });
