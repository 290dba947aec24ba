// End-to-end tests of constrained output: the real `shardlm serve` on the Qwen3-vocabulary
// fixture (random weights, Qwen3's chat template), driven by the official `openai` and
// `@anthropic-ai/sdk` clients.
//
// Goals: what a user of structured outputs and forced tool calls sees, from a model that
// would never write valid JSON or a tool call by itself: chat's response_format json_schema
// through client.chat.completions.parse (streamed and not) and json_object; tool_choice
// "required" and a named function forcing one call whose arguments validate against the
// tool's parameters, the assistant message echoed back with the tool's result and a second
// turn that answers (streamed and not); the Responses API's text.format json_schema through
// client.responses.parse and a forced function_call; Anthropic's tool_choice {type: 'tool'}
// and {type: 'any'} giving a tool_use block; logit_bias forcing a token, and refused outside
// the vocabulary. Schemas bound their strings (maxLength) or use
// enums: a random model picks a closing quote among 150k tokens almost never, and an
// unbounded string would run to max_tokens.
// Fixtures: SHARDLM_FIXTURES or ../../../shared/fixtures; missing → skip (fail under CI).
// Binary: SHARDLM_BIN or ../../build/shardlm.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import { clientOf, tokenize } from './client.js';
import { binary, fixtures, killAll, skipReason, startServer } from './harness.js';

const model = path.join(fixtures, 'qwen3-tiny-qwenvocab-q8_0.gguf');
const kTestTimeout = 120_000;
const skip = skipReason('constrained', [model]);

const weatherSchema = {
  type: 'object',
  properties: {
    city: { type: 'string', maxLength: 16 },
    days: { type: 'integer' },
    units: { enum: ['metric', 'imperial'] },
    alerts: {
      type: 'array', maxItems: 2,
      items: { type: 'object', properties: { level: { type: 'integer' }, ok: { type: 'boolean' } },
        required: ['level', 'ok'], additionalProperties: false },
    },
    note: { anyOf: [{ type: 'string', maxLength: 8 }, { type: 'null' }] },
  },
  required: ['city', 'days', 'units', 'alerts', 'note'],
  additionalProperties: false,
};
const weatherParams = {
  type: 'object', properties: { city: { type: 'string', maxLength: 16 } }, required: ['city'],
  additionalProperties: false,
};
const timeParams = {
  type: 'object', properties: { zone: { enum: ['UTC', 'CET'] }, exact: { type: 'boolean' } },
  required: ['zone', 'exact'], additionalProperties: false,
};
const chatTools = [
  { type: 'function', function: { name: 'get_weather', description: 'The weather in a city',
    parameters: weatherParams } },
  { type: 'function', function: { name: 'get_time', description: 'The time in a zone',
    parameters: timeParams } },
];
const paramsOf = { get_weather: weatherParams, get_time: timeParams };
// Greedy; max_tokens is room for the whole value, which ends the request by itself.
const greedy = { model: 'm', temperature: 0, max_tokens: 200 };

// The JSON Schema keywords the schemas above use.
function violation(value, schema, where = '$') {
  if (schema.anyOf) {
    return schema.anyOf.some((s) => !violation(value, s, where)) ? '' : `${where}: no anyOf`;
  }
  if (schema.enum) return schema.enum.includes(value) ? '' : `${where}: not in enum`;
  const type = value === null ? 'null' : Array.isArray(value) ? 'array' : typeof value;
  switch (schema.type) {
    case 'integer':
      return Number.isInteger(value) ? '' : `${where}: not an integer`;
    case 'string':
      if (type !== 'string') return `${where}: not a string`;
      return [...value].length <= (schema.maxLength ?? Infinity) ? '' : `${where}: too long`;
    case 'array':
      if (type !== 'array') return `${where}: not an array`;
      if (value.length > (schema.maxItems ?? Infinity)) return `${where}: too many items`;
      return value.map((v, i) => violation(v, schema.items, `${where}[${i}]`)).join('');
    case 'object': {
      if (type !== 'object') return `${where}: not an object`;
      const props = schema.properties ?? {};
      for (const key of schema.required ?? []) if (!(key in value)) return `${where}.${key}: missing`;
      for (const key of Object.keys(value)) {
        if (!(key in props)) return `${where}.${key}: not allowed`;
      }
      return Object.keys(value).map((k) => violation(value[k], props[k], `${where}.${k}`)).join('');
    }
    default:
      return type === schema.type ? '' : `${where}: not ${schema.type}`;
  }
}

function assertValid(value, schema, text) {
  assert.equal(violation(value, schema), '', `${JSON.stringify(value)} from ${text}`);
}

let server;
let openai;
let anthropic;

before(async () => {
  if (skip) return;
  server = await startServer(binary, model, ['--parallel', '2', '-c', '2048', '-t', '2']);
  openai = clientOf(server);
  anthropic = new Anthropic({ baseURL: server.base, apiKey: 'none', maxRetries: 0,
    timeout: 60_000 });
});

after(killAll);

const responseFormat = {
  type: 'json_schema', json_schema: { name: 'weather', strict: true, schema: weatherSchema },
};
const question = { role: 'user', content: 'What is the weather in Paris?' };

test('json_schema output parses and validates, streamed and not', { skip, timeout: kTestTimeout },
  async () => {
    const whole = await openai.chat.completions.parse({
      ...greedy, messages: [question], response_format: responseFormat,
    });
    const message = whole.choices[0].message;
    assert.equal(whole.choices[0].finish_reason, 'stop');
    assertValid(message.parsed, weatherSchema, message.content);
    assert.ok(whole.usage.completion_tokens < greedy.max_tokens);

    const stream = openai.chat.completions.stream({
      ...greedy, messages: [question], response_format: responseFormat,
    });
    let deltas = '';
    stream.on('content', (delta) => { deltas += delta; });
    const final = await stream.finalChatCompletion();
    assert.equal(final.choices[0].message.content, message.content);
    assert.equal(deltas, message.content);
    // The stream helper parses only schemas it built itself (zod): the text parses the same.
    assert.deepEqual(JSON.parse(final.choices[0].message.content), message.parsed);

    // Another seed samples another value, which validates as well.
    const sampled = await openai.chat.completions.parse({
      ...greedy, temperature: 1, seed: 7, messages: [question], response_format: responseFormat,
    });
    assertValid(sampled.choices[0].message.parsed, weatherSchema,
      sampled.choices[0].message.content);

    // json_object: any object. With no bound on its strings a random model's value may not end,
    // so only its start is checked, where max_tokens cut it.
    const object = await openai.chat.completions.create({
      ...greedy, max_tokens: 8, messages: [question], response_format: { type: 'json_object' },
    });
    assert.match(object.choices[0].message.content, /^\{/);
  });

// A whole completion, or the one the stream helper assembles (usage asked for).
function complete(body, stream) {
  return stream
    ? openai.chat.completions.stream({ ...body, stream_options: { include_usage: true } })
      .finalChatCompletion()
    : openai.chat.completions.create(body);
}

// Turn 1 forces a call; turn 2 sends the assistant message back as the client received it,
// with the tool's result, and gets an answer.
async function toolLoop(toolChoice, stream) {
  const body = { ...greedy, messages: [question], tools: chatTools, tool_choice: toolChoice };
  const first = await complete(body, stream);
  const choice = first.choices[0];
  assert.equal(choice.finish_reason, 'tool_calls');
  assert.equal(choice.message.tool_calls.length, 1);
  const call = choice.message.tool_calls[0];
  assert.ok(call.function.name in paramsOf, call.function.name);
  assertValid(JSON.parse(call.function.arguments), paramsOf[call.function.name],
    call.function.arguments);
  const messages = [question, choice.message,
    { role: 'tool', tool_call_id: call.id, content: 'sunny, 21 C' }];
  const secondBody = { ...greedy, max_tokens: 16, ignore_eos: true, messages, tools: chatTools };
  const second = await complete(secondBody, stream);
  const answer = second.choices[0].message;
  assert.equal(second.choices[0].finish_reason, 'length');
  assert.ok(((answer.reasoning_content ?? '') + (answer.content ?? '')).length > 0);
  assert.ok(second.usage.prompt_tokens > first.usage.prompt_tokens + 10,
    'the call and its result are in the prompt');
  return call;
}

test('tool_choice required forces a call; the loop goes on, streamed and not',
  { skip, timeout: kTestTimeout }, async () => {
    const whole = await toolLoop('required', false);
    const streamed = await toolLoop('required', true);
    assert.equal(streamed.function.name, whole.function.name);
    assert.equal(streamed.function.arguments, whole.function.arguments);
  });

test('a named function forces that call, streamed and not', { skip, timeout: kTestTimeout },
  async () => {
    for (const name of ['get_time', 'get_weather']) {
      const choice = { type: 'function', function: { name } };
      assert.equal((await toolLoop(choice, false)).function.name, name);
      assert.equal((await toolLoop(choice, true)).function.name, name);
    }
  });

test('Responses: text.format json_schema parses; tool_choice forces a function_call',
  { skip, timeout: kTestTimeout }, async () => {
    const r = await openai.responses.parse({
      model: 'm', temperature: 0, max_output_tokens: 200, input: 'Weather in Oslo?',
      text: { format: { type: 'json_schema', name: 'weather', strict: true,
        schema: weatherSchema } },
    });
    assert.equal(r.status, 'completed');
    assertValid(r.output_parsed, weatherSchema, r.output_text);

    const tools = chatTools.map(({ function: f }) => ({ type: 'function', ...f }));
    for (const toolChoice of ['required', { type: 'function', name: 'get_time' }]) {
      const called = await openai.responses.create({
        model: 'm', temperature: 0, max_output_tokens: 200, input: 'What time is it?', tools,
        tool_choice: toolChoice,
      });
      const calls = called.output.filter((item) => item.type === 'function_call');
      assert.equal(calls.length, 1, JSON.stringify(called.output));
      if (toolChoice !== 'required') assert.equal(calls[0].name, 'get_time');
      assertValid(JSON.parse(calls[0].arguments), paramsOf[calls[0].name], calls[0].arguments);
    }
  });

test('Anthropic: tool_choice tool and any give a tool_use block', { skip, timeout: kTestTimeout },
  async () => {
    const tools = chatTools.map(({ function: f }) => ({
      name: f.name, description: f.description, input_schema: f.parameters,
    }));
    const body = { model: 'm', max_tokens: 200, temperature: 0, messages: [question], tools };
    const named = await anthropic.messages.create({
      ...body, tool_choice: { type: 'tool', name: 'get_weather' },
    });
    assert.equal(named.stop_reason, 'tool_use');
    const use = named.content.find((b) => b.type === 'tool_use');
    assert.ok(use, JSON.stringify(named.content));
    assert.equal(use.name, 'get_weather');
    assertValid(use.input, weatherParams, JSON.stringify(use.input));

    const streamed = await anthropic.messages.stream({ ...body, tool_choice: { type: 'any' } })
      .finalMessage();
    assert.equal(streamed.stop_reason, 'tool_use');
    const any = streamed.content.find((b) => b.type === 'tool_use');
    assert.ok(any.name in paramsOf, any.name);
    assertValid(any.input, paramsOf[any.name], JSON.stringify(any.input));

    // The tool_use goes back with its result; the next turn answers.
    const second = await anthropic.messages.create({
      ...body, max_tokens: 16, ignore_eos: true, messages: [question,
        { role: 'assistant', content: named.content },
        { role: 'user', content: [
          { type: 'tool_result', tool_use_id: use.id, content: 'sunny, 21 C' }] }],
    });
    assert.equal(second.stop_reason, 'max_tokens');
    assert.ok(second.content.length > 0);
  });

test('logit_bias forces a token; an id outside the vocabulary is a 400',
  { skip, timeout: kTestTimeout }, async () => {
    const ids = await tokenize(server, ' yes');
    assert.equal(ids.length, 1, `' yes' is ${ids.length} tokens`);
    const r = await openai.completions.create({
      model: 'm', prompt: 'Say it:', temperature: 0, max_tokens: 5, ignore_eos: true,
      logit_bias: { [ids[0]]: 100 },
    });
    assert.equal(r.choices[0].text, ' yes'.repeat(5));
    await assert.rejects(
      openai.chat.completions.create({ ...greedy, messages: [question],
        logit_bias: { 10000000: 5 } }),
      (e) => e.status === 400 && e.param === 'logit_bias' && /outside the vocabulary/.test(e.message));
  });
