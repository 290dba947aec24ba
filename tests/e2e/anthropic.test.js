// End-to-end tests of POST /v1/messages and /v1/messages/count_tokens: the real
// `shardlm serve` on the Qwen3-vocabulary fixture (its template renders tools and thinking),
// driven by the official `@anthropic-ai/sdk` client.
//
// Goals: what a user of client.messages sees: a two-turn tool loop (tool_use → tool_result)
// answering what its chat equivalent answers, the same message streamed through
// client.messages.stream, stop reasons and stop sequences, count_tokens equal to the prompt a
// message sends, `thinking` reaching the template, the prefix cache serving a repeated
// conversation (cache_read_input_tokens), and errors as the SDK's typed errors in Anthropic's
// shape. The model has random weights: it is never relied on to choose a tool.
// Fixtures: SHARDLM_FIXTURES or ../../../shared/fixtures; missing → skip (fail under CI).
// Binary: SHARDLM_BIN or ../../build/shardlm.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import { clientOf, story } from './client.js';
import { binary, fixtures, killAll, skipReason, startServer } from './harness.js';

const model = path.join(fixtures, 'qwen3-tiny-qwenvocab-q8_0.gguf');
const kTestTimeout = 120_000;
const kServeArgs = ['--parallel', '2', '-c', '2048', '-t', '2'];
const skip = skipReason('anthropic', [model]);

// Greedy and a fixed length (ignore_eos is shardlm's own field, passed through by the SDK).
const greedy = { model: 'm', max_tokens: 24, temperature: 0, ignore_eos: true };
const weatherTool = {
  name: 'get_weather', description: 'The weather in a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};
// Turn 2 of a tool loop: the assistant's tool_use (sent by the test: see below) and its result.
const toolLoop = [
  { role: 'user', content: 'What is the weather in Paris?' },
  { role: 'assistant', content: [
    { type: 'tool_use', id: 'toolu_e2e_1', name: 'get_weather', input: { city: 'Paris' } }] },
  { role: 'user', content: [
    { type: 'tool_result', tool_use_id: 'toolu_e2e_1', content: 'sunny, 21 C' }] },
];

let server;
let client;

before(async () => {
  if (skip) return;
  server = await startServer(binary, model, kServeArgs);
  client = new Anthropic({ baseURL: server.base, apiKey: 'none', maxRetries: 0,
    timeout: 60_000 });
});

after(killAll);

const textOf = (m) => m.content.filter((b) => b.type === 'text').map((b) => b.text).join('');

// What the model wrote, thinking first, as chat's reasoning_content + content reads it.
function messageText(m) {
  const thinking = m.content.filter((b) => b.type === 'thinking').map((b) => b.thinking).join('');
  return thinking.replace(/\n+$/, '') + textOf(m);
}

test('a two-turn tool loop answers what the same chat answers', { skip, timeout: kTestTimeout },
  async () => {
    const first = await client.messages.create({
      ...greedy, messages: [toolLoop[0]], tools: [weatherTool],
    });
    assert.match(first.id, /^msg_/);
    assert.equal(first.type, 'message');
    assert.equal(first.role, 'assistant');
    assert.equal(first.stop_reason, 'max_tokens');  // ignore_eos: the 24 tokens ran out
    assert.equal(first.usage.output_tokens, 24);
    // The random model does not choose to call the tool by itself (tool_choice any and tool,
    // which force one: constrained.test.js), so turn 2 carries the assistant's tool_use: a
    // fixed one, which the chat below can send as well.
    const second = await client.messages.create({
      ...greedy, messages: toolLoop, tools: [weatherTool],
    });
    assert.ok(second.content.length > 0);
    const prompt = second.usage.input_tokens + second.usage.cache_read_input_tokens;
    assert.ok(prompt > first.usage.input_tokens + first.usage.cache_read_input_tokens + 10);
    // The same history and tools as chat renders them answers the same.
    const c = await clientOf(server).chat.completions.create({
      model: 'm', temperature: 0, max_tokens: 24, ignore_eos: true,
      messages: [toolLoop[0],
        { role: 'assistant', content: '', tool_calls: [{ id: 'toolu_e2e_1', type: 'function',
          function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
        { role: 'tool', tool_call_id: 'toolu_e2e_1', content: 'sunny, 21 C' }],
      tools: [{ type: 'function', function: { name: weatherTool.name,
        description: weatherTool.description, parameters: weatherTool.input_schema } }],
    });
    const m = c.choices[0].message;
    assert.equal(prompt, c.usage.prompt_tokens);
    assert.equal(messageText(second), (m.reasoning_content ?? '') + (m.content ?? ''));
  });

test('client.messages.stream assembles the same message', { skip, timeout: kTestTimeout },
  async () => {
    const body = { ...greedy, messages: toolLoop, tools: [weatherTool] };
    const whole = await client.messages.create(body);
    const stream = client.messages.stream(body);
    let streamedText = '';
    stream.on('text', (delta) => { streamedText += delta; });
    const final = await stream.finalMessage();
    assert.deepEqual(final.content, whole.content);
    assert.equal(final.stop_reason, whole.stop_reason);
    assert.equal(final.usage.output_tokens, 24);
    assert.equal(final.usage.input_tokens + final.usage.cache_read_input_tokens,
      whole.usage.input_tokens + whole.usage.cache_read_input_tokens);
    assert.equal(streamedText, textOf(whole));
  });

test('stop sequences end the message', { skip, timeout: kTestTimeout }, async () => {
  const body = { ...greedy, max_tokens: 40, messages: [{ role: 'user', content: 'Count.' }] };
  const full = await client.messages.create(body);
  const text = textOf(full);
  // A stop sequence from the middle of what the model writes anyway, where it first occurs.
  const chars = Array.from(text);
  let stop;
  for (let i = Math.floor(chars.length / 2); i + 2 <= chars.length && !stop; ++i) {
    const s = chars.slice(i, i + 2).join('');
    if (s.trim() === s && text.indexOf(s) === chars.slice(0, i).join('').length) stop = s;
  }
  assert.ok(stop, `no stop sequence to take from ${JSON.stringify(text)}`);
  const cut = await client.messages.create({ ...body, stop_sequences: ['never written', stop] });
  assert.equal(cut.stop_reason, 'stop_sequence');
  assert.equal(cut.stop_sequence, stop);
  assert.equal(textOf(cut), text.slice(0, text.indexOf(stop)));
});

test('count_tokens is the prompt a message sends; thinking reaches the template',
  { skip, timeout: kTestTimeout }, async () => {
    const body = { model: 'm', messages: toolLoop, tools: [weatherTool], system: 'Be brief.' };
    const counted = await client.messages.countTokens(body);
    const sent = await client.messages.create({ ...body, max_tokens: 4, temperature: 0 });
    assert.equal(counted.input_tokens,
      sent.usage.input_tokens + sent.usage.cache_read_input_tokens);
    // Thinking off: Qwen3's template closes an empty <think> block in the prompt.
    const off = await client.messages.countTokens({ ...body, thinking: { type: 'disabled' } });
    assert.ok(off.input_tokens > counted.input_tokens,
      `${off.input_tokens} with thinking off, ${counted.input_tokens} without the field`);
    const on = await client.messages.countTokens({
      ...body, thinking: { type: 'enabled', budget_tokens: 1024 },
    });
    assert.equal(on.input_tokens, counted.input_tokens);
  });

test('a conversation sent again is served from the prefix cache',
  { skip, timeout: kTestTimeout }, async () => {
    const messages = [{ role: 'user', content: `${story} ${story} ${story} What happened next?` }];
    const first = await client.messages.create({ ...greedy, messages });
    const prompt = first.usage.input_tokens + first.usage.cache_read_input_tokens;
    assert.ok(prompt > 128, `${prompt} prompt tokens`);
    const again = await client.messages.create({
      ...greedy,
      messages: [...messages, { role: 'assistant', content: first.content },
        { role: 'user', content: 'And then?' }],
    });
    assert.ok(again.usage.cache_read_input_tokens >= Math.floor(prompt / 64) * 64,
      `${again.usage.cache_read_input_tokens} cached of a ${prompt}-token prefix`);
  });

test('errors are the SDK\'s typed errors in Anthropic\'s shape', { skip, timeout: kTestTimeout },
  async () => {
    // A server with a key: the SDK's x-api-key header is checked before the body is read.
    const keyed = await startServer(binary, model, [...kServeArgs, '--api-key', 'sk-e2e']);
    const wrongKey = new Anthropic({ baseURL: keyed.base, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(wrongKey.messages.create({ ...greedy, messages: toolLoop }),
      (e) => e instanceof Anthropic.AuthenticationError &&
        e.error.type === 'error' && e.error.error.type === 'authentication_error');
    const rightKey = new Anthropic({ baseURL: keyed.base, apiKey: 'sk-e2e', maxRetries: 0 });
    assert.equal((await rightKey.messages.countTokens({ model: 'm', messages: toolLoop }))
      .input_tokens > 0, true);
    await keyed.kill();
    await assert.rejects(client.messages.create({ model: 'm', messages: toolLoop }),
      (e) => e instanceof Anthropic.BadRequestError &&
        e.error.error.type === 'invalid_request_error' && /max_tokens/.test(e.message));
    await assert.rejects(client.messages.create({
      ...greedy, messages: [{ role: 'user', content: [
        { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AA==' } }] }],
    }), (e) => e instanceof Anthropic.BadRequestError &&
      /messages\[0\]\.content\[0\]\.type/.test(e.message));
    await assert.rejects(client.messages.create({
      ...greedy, messages: [{ role: 'user', content: 'lorem ipsum dolor sit amet '.repeat(1000) }],
    }), (e) => e instanceof Anthropic.BadRequestError && /context/.test(e.message));
    const nf = await fetch(`${server.base}/v1/messages/batches`, { method: 'POST', body: '{}' });
    assert.equal(nf.status, 404);
    assert.deepEqual(Object.keys(await nf.json()), ['type', 'error']);
  });
