// End-to-end tests of POST /v1/responses: the real `shardlm serve` on the Qwen3-vocabulary
// fixture (its template renders tools and thinking), driven by the official `openai` client's
// responses API.
//
// Goals: what a user of client.responses sees: the answer its chat equivalent gives (the same
// prompt reaches the same engine), a stream the SDK's stream helper assembles into the same
// response, a two-turn function-call loop (the call sent back with its output, inline or as a
// stored item reference as the Vercel AI SDK sends it, and through previous_response_id), the
// prefix cache serving a repeated conversation (input_tokens_details.cached_tokens), and
// errors as the SDK's APIError naming the field. The model has random weights: it is never
// relied on to choose a tool.
// Fixtures: SHARDLM_FIXTURES or ../../../shared/fixtures; missing → skip (fail under CI).
// Binary: SHARDLM_BIN or ../../build/shardlm.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { chat, clientOf, story } from './client.js';
import { binary, fixtures, killAll, skipReason, startServer } from './harness.js';

const model = path.join(fixtures, 'qwen3-tiny-qwenvocab-q8_0.gguf');
const kTestTimeout = 120_000;
const skip = skipReason('responses', [model]);

// Greedy and a fixed length (ignore_eos is shardlm's own field, passed through by the SDK).
const greedy = { model: 'm', temperature: 0, max_output_tokens: 24, ignore_eos: true };
const weatherTool = {
  type: 'function', name: 'get_weather', description: 'The weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};

let server;
let client;

before(async () => {
  if (skip) return;
  server = await startServer(binary, model, ['--parallel', '2', '-c', '2048', '-t', '2']);
  client = clientOf(server);
});

after(killAll);

// What the model wrote, reasoning first, as chat's reasoning_content + content reads it.
function responseText(r) {
  let reasoning = '';
  let text = '';
  for (const item of r.output) {
    if (item.type === 'reasoning') reasoning += (item.content ?? []).map((c) => c.text).join('');
    if (item.type === 'message') text += item.content.map((c) => c.text).join('');
  }
  return reasoning.replace(/\n+$/, '') + text;
}

test('responses.create answers what the same chat answers', { skip, timeout: kTestTimeout },
  async () => {
    const r = await client.responses.create({
      ...greedy, instructions: 'You are terse.', input: 'Tell me about dogs.',
      metadata: { run: 'e2e' },
    });
    assert.match(r.id, /^resp_/);
    assert.equal(r.object, 'response');
    assert.equal(r.status, 'incomplete');  // ignore_eos: the 24 tokens ran out
    assert.equal(r.incomplete_details.reason, 'max_output_tokens');
    assert.equal(r.instructions, 'You are terse.');
    assert.deepEqual(r.metadata, { run: 'e2e' });
    assert.equal(r.usage.output_tokens, 24);
    assert.equal(r.usage.total_tokens, r.usage.input_tokens + 24);
    const c = await chat(server, [{ role: 'system', content: 'You are terse.' },
      { role: 'user', content: 'Tell me about dogs.' }], 24);
    assert.equal(r.usage.input_tokens, c.usage.prompt_tokens);
    assert.equal(responseText(r), c.text);
    assert.ok(responseText(r).length > 0);
  });

test('a stream assembles into the whole response', { skip, timeout: kTestTimeout }, async () => {
  const body = { ...greedy, input: 'Tell me about cats.' };
  const whole = await client.responses.create(body);
  const stream = client.responses.stream(body);
  const types = [];
  let deltas = '';
  for await (const event of stream) {
    types.push(event.type);
    if (event.type === 'response.output_text.delta') deltas += event.delta;
  }
  const final = await stream.finalResponse();
  assert.equal(types[0], 'response.created');
  assert.equal(types[1], 'response.in_progress');
  assert.equal(types.at(-1), 'response.incomplete');
  assert.equal(responseText(final), responseText(whole));
  assert.equal(final.output_text, whole.output_text);
  assert.equal(deltas, whole.output_text);
  assert.equal(final.usage.output_tokens, 24);

  // The raw events too: sequence numbers count up from 0.
  const raw = await client.responses.create({ ...body, stream: true });
  let expected = 0;
  for await (const event of raw) assert.equal(event.sequence_number, expected++);
  assert.ok(expected > 5);
});

test('a two-turn function-call loop', { skip, timeout: kTestTimeout }, async () => {
  const question = { role: 'user', content: 'What is the weather in Paris?' };
  const first = await client.responses.create({
    ...greedy, input: [question], tools: [weatherTool], tool_choice: 'auto',
  });
  assert.deepEqual(first.tools.map((t) => t.name), ['get_weather']);
  // The random model does not choose to call the tool by itself (tool_choice required and
  // named, which force one: constrained.test.js), so turn 2 sends a fixed call, which the chat
  // below can send as well.
  const call = {
    type: 'function_call', call_id: 'call_e2e_1', name: 'get_weather',
    arguments: JSON.stringify({ city: 'Paris' }),
  };
  const result = { type: 'function_call_output', call_id: 'call_e2e_1', output: 'sunny, 21 C' };
  const second = await client.responses.create({
    ...greedy, input: [question, call, result], tools: [weatherTool],
  });
  assert.ok(['completed', 'incomplete'].includes(second.status));
  assert.ok(second.usage.input_tokens > first.usage.input_tokens + 10,
    'the call and its output are in the prompt');
  // The same history and tools as chat renders them answers the same.
  const c = await client.chat.completions.create({
    model: 'm', temperature: 0, max_tokens: 24, ignore_eos: true,
    messages: [question,
      { role: 'assistant', content: '', tool_calls: [{ id: 'call_e2e_1', type: 'function',
        function: { name: 'get_weather', arguments: call.arguments } }] },
      { role: 'tool', tool_call_id: 'call_e2e_1', content: 'sunny, 21 C' }],
    tools: [{ type: 'function', function: { name: weatherTool.name,
      description: weatherTool.description, parameters: weatherTool.parameters } }],
  });
  const m = c.choices[0].message;
  assert.equal(second.usage.input_tokens, c.usage.prompt_tokens);
  assert.equal(responseText(second), (m.reasoning_content ?? '') + (m.content ?? ''));

  // As the Vercel AI SDK sends it: turn 1's output items by reference (the server stored
  // them), then the call and its output.
  const refs = first.output.map((item) => ({ type: 'item_reference', id: item.id }));
  const byRef = await client.responses.create({
    ...greedy, input: [question, ...refs, call, result], tools: [weatherTool],
  });
  assert.ok(byRef.usage.input_tokens > second.usage.input_tokens);

  // And through previous_response_id: turn 1's input and output come from the server.
  const chained = await client.responses.create({
    ...greedy, previous_response_id: first.id, input: [call, result], tools: [weatherTool],
  });
  assert.equal(chained.previous_response_id, first.id);
  assert.equal(chained.usage.input_tokens, byRef.usage.input_tokens);
  assert.equal(responseText(chained), responseText(byRef));
});

test('a conversation sent again is served from the prefix cache',
  { skip, timeout: kTestTimeout }, async () => {
    const input = [{ role: 'user', content: `${story} ${story} ${story} What happened next?` }];
    const first = await client.responses.create({ ...greedy, input });
    assert.ok(first.usage.input_tokens > 128, `${first.usage.input_tokens} prompt tokens`);
    const again = await client.responses.create({
      ...greedy, previous_response_id: first.id, input: 'And then?',
    });
    // Every full 64-token page of the first prompt is reused.
    const cached = again.usage.input_tokens_details.cached_tokens;
    assert.ok(cached >= Math.floor(first.usage.input_tokens / 64) * 64,
      `${cached} of ${again.usage.input_tokens} cached`);
  });

test('errors are APIErrors naming the field', { skip, timeout: kTestTimeout }, async () => {
  await assert.rejects(client.responses.create({
    ...greedy, input: [{ role: 'user', content: [
      { type: 'input_image', image_url: 'https://example.com/a.png' }] }],
  }), (e) => e.status === 400 && e.param === 'input[0].content[0].type' &&
    /text-only/.test(e.message));
  await assert.rejects(client.responses.create({
    ...greedy, input: 'x', tools: [{ type: 'web_search' }],
  }), (e) => e.status === 400 && e.param === 'tools[0].type');
  await assert.rejects(client.responses.create({
    ...greedy, input: 'x', previous_response_id: 'resp_never',
  }), (e) => e.status === 400 && e.param === 'previous_response_id');
  await assert.rejects(client.responses.create({
    ...greedy, input: 'lorem ipsum dolor sit amet '.repeat(1000),
  }), (e) => e.status === 400 && e.code === 'context_length_exceeded' && e.param === 'input');
});
