// End-to-end test of bounded KV residency: `shardlm serve --kv-pool ...` with a long story
// prompt far past the pool, driven by the official `openai` npm client.
//
// Goals: what a user sees: the server answers a request whose context is many times its
// pool; two servers started alike (one with its tier in a file, one with a layer split
// through a `shardlm shard` daemon) give the same text; /props states the pool and
// /metrics counts the pages each stage moved; the tier file lives in the folder given and
// is gone when the server stops; a conversation past the pool continues with the same text
// after a restart on the disk cache, after a slot save and restore, and through a restarted
// remote stage, computing only the new tokens; a chat's system prompt and tools are pinned
// (as far as the pool has room) and the pinned ranges come back in chat, Responses and
// Messages replies; a tier file truncated under the server fails only the request that needs
// its pages, with an error naming the file, and the server keeps serving. Every wait is
// bounded.
// Fixtures: SHARDLM_FIXTURES or ../../../shared/fixtures; missing → skip (fail under CI).
// Binary: SHARDLM_BIN or ../../build/shardlm.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { complete, metric, tokenize } from './client.js';
import { floorPage, stop } from './disk_tier.js';
import { binary, cleanUp, fixtures, skipReason, startServer, startShard } from './harness.js';

const model = path.join(fixtures, 'stories260K.gguf');
const kTestTimeout = 180_000;
// Pages of 64 positions; a pool of 4 pages (sink 1 page, tail 1 page, 2 for writes) under a
// 4096-position context.
const kPoolArgs = ['--parallel', '1', '-c', '4096', '-t', '2', '--kv-type', 'f32',
  '--kv-pool', '256', '--kv-sink', '16', '--kv-tail', '64', '--kv-reselect', '16'];

const skip = skipReason('kv_pool', [model]);
let tmp;

before(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'shardlm-kv-pool-'));
});
after(() => cleanUp(tmp));

const clientOf = (server) =>
  new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'none', maxRetries: 0, timeout: 120_000 });

const story = 'Once upon a time, there was a little dog named Max. He liked to run in the ' +
  'park with his friend Lily. One day they found a big red ball under a tree. ';
const request = {
  model: 'stories', prompt: story.repeat(40), temperature: 0, max_tokens: 48,
};

async function metricsOf(server) {
  const r = await fetch(`${server.base}/metrics`);
  assert.equal(r.status, 200);
  return r.text();
}

test('a context many times the pool is served the same through a file tier and a split',
  { skip, timeout: kTestTimeout }, async () => {
    const tierDir = path.join(tmp, 'tier');
    const ram = await startServer(binary, model, kPoolArgs);
    const want = await clientOf(ram).completions.create(request);
    assert.ok(want.usage.prompt_tokens > 1500, `prompt of ${want.usage.prompt_tokens} tokens`);
    assert.equal(want.choices[0].finish_reason, 'length');
    assert.ok(want.choices[0].text.length > 0);
    const props = await (await fetch(`${ram.base}/props`)).json();
    assert.deepEqual(props.kv_pool, {
      positions: 256, tier: 'ram', select: 'qk', sink: 16, tail: 64, reselect: 16,
    });
    const metrics = await metricsOf(ram);
    const outs = metrics.match(/^shardlm_stage_kv_page_outs_total\{stage="0"[^}]*\} (\d+)$/m);
    assert.ok(outs && Number(outs[1]) > 0, metrics);
    assert.match(metrics, /^shardlm_stage_kv_resident_pages\{stage="0"[^}]*\} 4$/m);
    assert.match(metrics, /^shardlm_kv_pool_reselects_total [1-9]/m);
    assert.match(metrics, /^shardlm_kv_pool_select_seconds_total [0-9.e-]+$/m);
    // The request's log line counts the pages read back for it.
    const line = ram.log().split('\n').find((l) => l.includes('request id='));
    assert.match(line ?? '', / kv_page_ins=[1-9]\d* /, ram.log());
    // The pin extension field: this pool has no room beside its sink, tail and writes.
    await assert.rejects(clientOf(ram).completions.create({ ...request, pin: [[0, 64]] }),
      (err) => err.status === 400 && /pins: 1 pinned pages/.test(err.message));
    await ram.kill();

    const file = await startServer(binary, model, [...kPoolArgs, '--kv-tier', `file:${tierDir}`]);
    const got = await clientOf(file).completions.create(request);
    assert.equal(got.choices[0].text, want.choices[0].text);
    assert.equal(fs.readdirSync(tierDir).length, 1, 'one tier file for the one stage');
    await file.kill();
    assert.deepEqual(fs.readdirSync(tierDir), [], 'the tier file goes with the server');

    const socket = path.join(tmp, 'shard.sock');
    const shard = await startShard(binary, socket, 1);
    const split = await startServer(binary, model, [...kPoolArgs, '--devices',
      `cpu,unix:${socket}`, '--layer-split', '2,3']);
    const remote = await clientOf(split).completions.create(request);
    assert.equal(remote.choices[0].text, want.choices[0].text);
    const splitMetrics = await metricsOf(split);
    assert.match(splitMetrics, /^shardlm_stage_kv_resident_pages\{stage="1"[^}]*\} 4$/m);
    await split.kill();
    await shard.kill();
  });

test('a pool below its floor is refused at start, naming the sizes', { skip }, async () => {
  await assert.rejects(
    startServer(binary, model, ['-c', '4096', '--kv-pool', '64', '--kv-sink', '64',
      '--kv-tail', '256'], 20_000),
    /--kv-pool 64 .*at least 7 pages/s);
});

test('a conversation past the pool continues the same after a restart, a slot restore and ' +
  'through a remote stage', { skip, timeout: kTestTimeout }, async (t) => {
  // Turn 1 is many pools long; turn 2 extends it, so its cached prefix is turn 1's full pages.
  const a = await startServer(binary, model, kPoolArgs);
  let t1 = await tokenize(a, story.repeat(30));
  t1 = t1.slice(0, floorPage(t1.length - 10) + 10);
  const more = (await tokenize(a, ' The cat sat on the mat.')).slice(1);  // no BOS
  const t2 = [...t1, ...more];
  const cached2 = floorPage(t1.length);
  assert.ok(t1.length > 1500, `turn 1 has ${t1.length} tokens`);
  await complete(a, t1, 24);
  const want = await complete(a, t2, 24);
  assert.equal(want.usage.prompt_tokens_details.cached_tokens, cached2, 'never restarted');
  await a.kill();

  // Turn 1, a restart on the same cache folder, turn 2.
  const cacheArgs = [...kPoolArgs, '--kv-cache-dir', path.join(tmp, 'cache')];
  let server = await startServer(binary, model, cacheArgs);
  await complete(server, t1, 24);
  await stop(server);
  server = await startServer(binary, model, cacheArgs);
  const restarted = await complete(server, t2, 24);
  assert.equal(restarted.text, want.text, 'restarted on the disk cache');
  assert.equal(restarted.usage.prompt_tokens_details.cached_tokens, cached2);
  assert.equal(await metric(server, 'prompt_tokens_disk_total'), cached2);
  await stop(server);

  // Turn 1 saved from its slot, a restart, the slot restored, turn 2.
  const slotArgs = [...kPoolArgs, '--slot-save-path', path.join(tmp, 'slots')];
  server = await startServer(binary, model, slotArgs);
  await complete(server, t1, 24);
  const post = (action) => fetch(`${server.base}/slots/0?action=${action}`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ filename: 'conversation' }),
  });
  assert.equal((await post('save')).status, 200);
  await stop(server);
  server = await startServer(binary, model, slotArgs);
  assert.equal((await post('restore')).status, 200);
  const restored = await complete(server, t2, 24);
  assert.equal(restored.text, want.text, 'restored from a slot file');
  assert.equal(restored.usage.prompt_tokens_details.cached_tokens, cached2);
  await stop(server);

  // A local + remote split on a cache folder of its own: both processes restart.
  const socket = path.join(tmp, 'turns.sock');
  const splitArgs = [...kPoolArgs, '--kv-cache-dir', path.join(tmp, 'split-cache'), '--devices',
    `cpu,unix:${socket}`, '--layer-split', '2,3'];
  let shard = await startShard(binary, socket, 1);
  server = await startServer(binary, model, splitArgs);
  await complete(server, t1, 24);
  await stop(server);
  await shard.kill();
  shard = await startShard(binary, socket, 1);
  server = await startServer(binary, model, splitArgs);
  const split = await complete(server, t2, 24);
  assert.equal(split.text, want.text, 'through a restarted remote stage');
  assert.equal(split.usage.prompt_tokens_details.cached_tokens, cached2);
  t.diagnostic(`turn 2: ${t2.length} tokens, ${cached2} cached, pool of 256 positions`);
  await stop(server);
  await shard.kill();
});

test('the system prompt is pinned as far as the pool has room, and reported by every API',
  { skip, timeout: kTestTimeout }, async (t) => {
    // 8 pages: the sink, the tail and two pages for writes leave 4 pages (256 positions).
    const args = kPoolArgs.map((a) => (a === '256' ? '512' : a));
    const server = await startServer(binary, model, args);
    const client = clientOf(server);
    const question = 'What did they find?';
    const chatOf = (system) => client.chat.completions.create({
      model: 'stories', temperature: 0, max_tokens: 8,
      messages: [{ role: 'system', content: system }, { role: 'user', content: question }],
    });
    const chat = await chatOf(story.repeat(3));
    assert.equal(chat.pin.length, 1, JSON.stringify(chat.pin));
    const [begin, end] = chat.pin[0];
    assert.equal(begin, 0);
    assert.ok(end > 100 && end < chat.usage.prompt_tokens - 5, `pinned [0, ${end})`);
    t.diagnostic(`system prompt pinned: [0, ${end}) of ${chat.usage.prompt_tokens} tokens`);
    // Without a system message nothing is pinned.
    const plain = await client.chat.completions.create({
      model: 'stories', temperature: 0, max_tokens: 8,
      messages: [{ role: 'user', content: question }],
    });
    assert.equal(plain.pin, undefined);
    // A system prompt larger than the room is pinned up to the room.
    const long = await chatOf(story.repeat(20));
    assert.deepEqual(long.pin, [[0, 256]]);
    // The Responses API's instructions and the Messages API's system are the same prefix.
    const response = await client.responses.create({
      model: 'stories', instructions: story.repeat(3), input: question, max_output_tokens: 8,
      temperature: 0,
    });
    assert.deepEqual(response.pin, chat.pin);
    const r = await fetch(`${server.base}/v1/messages`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: 'stories', max_tokens: 8, system: story.repeat(3),
        messages: [{ role: 'user', content: question }] }),
    });
    assert.equal(r.status, 200);
    assert.deepEqual((await r.json()).pin, chat.pin);
    await server.kill();
  });

test('a truncated tier file fails only the request that needs it', { skip, timeout: kTestTimeout },
  async () => {
    const tierDir = path.join(tmp, 'lossy-tier');
    const server = await startServer(binary, model, [...kPoolArgs, '--kv-tier', `file:${tierDir}`]);
    const client = clientOf(server);
    await client.completions.create(request);
    for (const f of fs.readdirSync(tierDir)) fs.truncateSync(path.join(tierDir, f), 0);
    // The same prompt continued: its cached pages live in the truncated file.
    await assert.rejects(
      client.completions.create({ ...request, prompt: `${request.prompt}The end.` }),
      (err) => err.status >= 500 && /KV tier/.test(err.message));
    // A short request, then the same long one: both are served.
    const short = await client.completions.create({ ...request, prompt: story, max_tokens: 8 });
    assert.equal(short.choices[0].finish_reason, 'length');
    const again = await client.completions.create(request);
    assert.equal(again.choices[0].finish_reason, 'length');
    await server.kill();
  });
