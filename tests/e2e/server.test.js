// End-to-end tests of `shardlm serve`: the real binary on fixture models, driven by the
// official `openai` npm client (and plain fetch for the non-OpenAI routes).
//
// Goals: what a user's client sees: chat and completions, streaming and not, logprobs,
// tools accepted, every error shape, greedy text equal to llama.cpp's golden continuation,
// 16 concurrent streams getting the same text, tokenize round trip, a repeated long chat
// served from the prefix cache with the same text. Every wait is bounded.
// Fixtures: SHARDLM_FIXTURES or ../../../shared/fixtures; missing → skip (fail under CI).
// Binary: SHARDLM_BIN or ../../build/shardlm.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import { binary, fixtures, killAll, skipReason, sleep, startServer as startShardlm } from './harness.js';

const qwenModel = path.join(fixtures, 'qwen3-tiny-f32.gguf');
const storiesModel = path.join(fixtures, 'stories260K.gguf');
const apiKey = 'e2e-test-key';
const kTestTimeout = 120_000;

const skip = skipReason('server', [qwenModel, storiesModel, path.join(fixtures, 'golden.json')]);

// `shardlm serve` with the settings these tests share: four slots, 512 positions, 2 threads.
const startServer = (model, extra = []) =>
  startShardlm(binary, model, ['--parallel', '4', '-c', '512', '-t', '2', ...extra]);

let qwen;
let stories;
let client;

before(async () => {
  if (skip) return;
  [qwen, stories] = await Promise.all([
    startServer(qwenModel, ['--api-key', apiKey]),
    // llama.cpp made the golden continuations with F32 K and V; serve stores F16 by default.
    startServer(storiesModel, ['--kv-type', 'f32']),
  ]);
  client = new OpenAI({ baseURL: `${qwen.base}/v1`, apiKey, maxRetries: 0, timeout: 60_000 });
});

after(async () => {
  await killAll();
});

const chatBody = (extra = {}) => ({
  model: 'qwen3-tiny',
  messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello!' }],
  temperature: 0,
  max_tokens: 16,
  ...extra,
});

async function streamChatText(c, body) {
  const stream = await c.chat.completions.create({ ...body, stream: true });
  let text = '';
  let finish = null;
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    text += (choice.delta.reasoning_content ?? '') + (choice.delta.content ?? '');
    if (choice.finish_reason) finish = choice.finish_reason;
  }
  return { text, finish };
}

test('models lists the served model', { skip, timeout: kTestTimeout }, async () => {
  const models = await client.models.list();
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].object, 'model');
});

test('chat completion, streaming and not, same greedy text', { skip, timeout: kTestTimeout },
  async () => {
    const r = await client.chat.completions.create(chatBody());
    assert.equal(r.object, 'chat.completion');
    assert.equal(r.choices[0].message.role, 'assistant');
    assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
    assert.ok(r.usage.prompt_tokens > 0);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
    assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
    const message = r.choices[0].message;
    const full = (message.reasoning_content ?? '') + (message.content ?? '');
    const s = await streamChatText(client, chatBody());
    assert.equal(s.text, full);
    assert.equal(s.finish, r.choices[0].finish_reason);
  });

test('completions, streaming and not, with usage', { skip, timeout: kTestTimeout }, async () => {
  const body = { model: 'm', prompt: 'Once upon', temperature: 0, max_tokens: 12 };
  const r = await client.completions.create(body);
  assert.equal(r.object, 'text_completion');
  const stream = await client.completions.create({
    ...body, stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    if (chunk.choices[0]) text += chunk.choices[0].text;
  }
  assert.equal(text, r.choices[0].text);
  assert.deepEqual(usage, r.usage);
});

test('chat logprobs', { skip, timeout: kTestTimeout }, async () => {
  const r = await client.chat.completions.create(chatBody({ logprobs: true, top_logprobs: 3 }));
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, r.usage.completion_tokens);
  for (const t of content) {
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 3);
    assert.ok(Array.isArray(t.bytes));
  }
});

test('streamed logprobs equal the non-streamed ones, one entry per token',
  { skip, timeout: kTestTimeout }, async () => {
    // Completions: logprobs N gives the chosen token's logprob and N alternatives.
    const body = { model: 'm', prompt: 'Once upon', temperature: 0, max_tokens: 12, logprobs: 2 };
    const r = await client.completions.create(body);
    const want = r.choices[0].logprobs;
    assert.equal(want.tokens.length, r.usage.completion_tokens);
    const got = { tokens: [], token_logprobs: [], top_logprobs: [] };
    let text = '';
    for await (const chunk of await client.completions.create({ ...body, stream: true })) {
      const choice = chunk.choices[0];
      text += choice.text;
      if (!choice.logprobs) continue;
      for (const key of Object.keys(got)) got[key].push(...choice.logprobs[key]);
    }
    assert.equal(text, r.choices[0].text);
    assert.deepEqual(got, want);
    // Up to 2 alternatives (pieces of partial UTF-8 characters may share a key); the chosen
    // greedy token is the likeliest.
    got.top_logprobs.forEach((alts, i) => {
      const n = Object.keys(alts).length;
      assert.ok(n >= 1 && n <= 2, JSON.stringify(alts));
      assert.equal(Math.max(...Object.values(alts)), got.token_logprobs[i]);
    });

    // Chat: the chunks' logprobs.content, concatenated, is the non-streamed content.
    const chat = chatBody({ logprobs: true, top_logprobs: 2 });
    const c = await client.chat.completions.create(chat);
    const streamed = [];
    for await (const chunk of await client.chat.completions.create({ ...chat, stream: true })) {
      streamed.push(...(chunk.choices[0]?.logprobs?.content ?? []));
    }
    assert.deepEqual(streamed, c.choices[0].logprobs.content);
  });

test('tools are accepted and rendered', { skip, timeout: kTestTimeout }, async () => {
  const r = await client.chat.completions.create(chatBody({
    tools: [{
      type: 'function',
      function: { name: 'get_weather', parameters: { type: 'object', properties: {} } },
    }],
  }));
  assert.ok(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason));
});

test('errors: 401, 400, context_length_exceeded, 404', { skip, timeout: kTestTimeout },
  async () => {
    const noKey = new OpenAI({ baseURL: `${qwen.base}/v1`, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(noKey.chat.completions.create(chatBody()), (e) => e.status === 401);
    await assert.rejects(client.chat.completions.create(chatBody({ temperature: 'hot' })),
      (e) => e.status === 400 && e.param === 'temperature');
    await assert.rejects(client.chat.completions.create(chatBody({ n: 3 })),
      (e) => e.status === 400);
    const long = 'lorem ipsum '.repeat(400);
    await assert.rejects(
      client.chat.completions.create(chatBody({ messages: [{ role: 'user', content: long }] })),
      (e) => e.status === 400 && e.code === 'context_length_exceeded');
    const health = await fetch(`${qwen.base}/health`);
    assert.equal(health.status, 200);
    const nf = await fetch(`${qwen.base}/nope`, { headers: { Authorization: `Bearer ${apiKey}` } });
    assert.equal(nf.status, 404);
    assert.ok((await nf.json()).error.message);
  });

test('16 concurrent streaming clients get the single-client text', { skip, timeout: kTestTimeout },
  async () => {
    const body = chatBody({ max_tokens: 32 });
    const single = await streamChatText(client, body);
    const texts = await Promise.all(
      Array.from({ length: 16 }, () => streamChatText(client, body)));
    for (const t of texts) assert.equal(t.text, single.text);
  });

test('tokenize / detokenize round trip', { skip, timeout: kTestTimeout }, async () => {
  const headers = { Authorization: `Bearer ${apiKey}`, 'Content-Type': 'application/json' };
  const content = 'Hello, world! café';
  const t = await fetch(`${qwen.base}/tokenize`,
    { method: 'POST', headers, body: JSON.stringify({ content }) });
  const { tokens } = await t.json();
  assert.ok(tokens.length > 0);
  const d = await fetch(`${qwen.base}/detokenize`,
    { method: 'POST', headers, body: JSON.stringify({ tokens }) });
  assert.equal((await d.json()).content, content);
});

test('greedy completions equal the golden continuations', { skip, timeout: kTestTimeout },
  async () => {
    const golden = JSON.parse(fs.readFileSync(path.join(fixtures, 'golden.json'), 'utf8'));
    const entries = golden.entries.filter((e) => e.model === 'stories260K.gguf' &&
      typeof e.greedy_text === 'string' && e.greedy_safe_prefix === e.greedy_n);
    assert.ok(entries.length > 0);
    const c = new OpenAI({ baseURL: `${stories.base}/v1`, apiKey: 'none', maxRetries: 0 });
    for (const e of entries) {
      const r = await c.completions.create({
        model: 'stories', prompt: e.prompt_text, temperature: 0, max_tokens: e.greedy_n,
      });
      assert.equal(r.choices[0].text, e.greedy_text, e.id);
    }
  });

function rssKiB(pid) {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)/.exec(status)[1]);
}

test('300 requests from 16 concurrent clients: none lost, none wrong, RSS back to idle',
  { skip, timeout: 300_000 }, async () => {
    const body = { model: 'm', prompt: 'The quick brown fox', temperature: 0, max_tokens: 16 };
    const expected = (await client.completions.create(body)).choices[0].text;
    // Warm up every slot and handler thread once, then take the idle level.
    await Promise.all(Array.from({ length: 16 }, () => client.completions.create(body)));
    await sleep(500);
    const idle = rssKiB(qwen.proc.pid);
    let next = 0;
    let done = 0;
    const worker = async () => {
      while (next < 300) {
        next++;
        const stream = next % 2 === 0;
        let text = '';
        if (stream) {
          for await (const chunk of await client.completions.create({ ...body, stream })) {
            text += chunk.choices[0]?.text ?? '';
          }
        } else {
          text = (await client.completions.create(body)).choices[0].text;
        }
        assert.equal(text, expected);
        done++;
      }
    };
    await Promise.all(Array.from({ length: 16 }, worker));
    assert.equal(done, 300);
    await sleep(1000);
    const after = rssKiB(qwen.proc.pid);
    assert.ok(after <= idle * 1.1 + 16 * 1024, `RSS ${after} KiB after vs ${idle} KiB idle`);
  });

test('a repeated long chat is served from the prefix cache with the same text',
  { skip, timeout: kTestTimeout }, async () => {
    // Long enough to fill at least one 64-token page before the user's turn.
    const system = 'You are a careful assistant. '.repeat(6);
    const body = chatBody({
      messages: [{ role: 'system', content: system }, { role: 'user', content: 'Hi there.' }],
    });
    const first = await client.chat.completions.create(body);
    const second = await client.chat.completions.create(body);
    assert.ok(second.usage.prompt_tokens_details.cached_tokens > 0);
    assert.ok(second.usage.prompt_tokens_details.cached_tokens < second.usage.prompt_tokens);
    const text = (r) => (r.choices[0].message.reasoning_content ?? '') +
      (r.choices[0].message.content ?? '');
    assert.equal(text(second), text(first));
    const m = await fetch(`${qwen.base}/metrics`, { headers: { Authorization: `Bearer ${apiKey}` } });
    const cached = /shardlm_prompt_tokens_cached_total (\d+)/.exec(await m.text());
    assert.ok(cached && Number(cached[1]) >= second.usage.prompt_tokens_details.cached_tokens);
  });
