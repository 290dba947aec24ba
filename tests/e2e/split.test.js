// End-to-end tests of layer splits: `shardlm serve --devices ... --layer-split ...`
// with local stages, with a stage in a `shardlm shard` daemon, and that daemon killed -9
// mid-stream and restarted — driven by the official `openai` npm client.
//
// Goals: what a user sees: split servers give exactly the greedy text of the unsplit server
// (and of llama.cpp's golden continuations); GET /props shows the placement; the shard's
// socket is private (0600); a dead stage ends the running stream with an error event,
// /health answers 503 naming the stage, new requests get 503, and once the daemon is back
// the server reconnects by itself and serves the same text again. Every wait is bounded.
// Fixtures: SHARDLM_FIXTURES or ../../../shared/fixtures; missing → skip (fail under CI).
// Binary: SHARDLM_BIN or ../../build/shardlm.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { binary, cleanUp, fixtures, skipReason, sleep, startServer, startShard } from './harness.js';

const storiesModel = path.join(fixtures, 'stories260K.gguf');  // 5 layers: 2 and 3 stages
const qwenModel = path.join(fixtures, 'qwen3-tiny-f32.gguf');  // 2 layers
const goldenFile = path.join(fixtures, 'golden.json');
const kTestTimeout = 180_000;
// F32 K and V, as llama.cpp made the golden continuations (serve's default is F16).
const kServeArgs = ['--parallel', '2', '-c', '2048', '-t', '2', '--kv-type', 'f32'];
// The shard daemon computes with one thread (`--cores N`: N unpinned threads).
const shardCores = 1;

const skip = skipReason('split', [storiesModel, qwenModel, goldenFile]);

// llama.cpp's greedy continuations of stories260K, the ones safe to compare in full.
function goldenEntries() {
  const golden = JSON.parse(fs.readFileSync(goldenFile, 'utf8'));
  return golden.entries.filter((e) => e.model === 'stories260K.gguf' &&
    typeof e.greedy_text === 'string' && e.greedy_safe_prefix === e.greedy_n);
}

const clientOf = (server) =>
  new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60_000 });

async function assertGolden(server) {
  const entries = goldenEntries();
  assert.ok(entries.length > 0);
  const c = clientOf(server);
  for (const e of entries) {
    const r = await c.completions.create({
      model: 'stories', prompt: e.prompt_text, temperature: 0, max_tokens: e.greedy_n,
    });
    assert.equal(r.choices[0].text, e.greedy_text, e.id);
  }
}

// A long greedy chat answer (EOG ignored), to compare split against unsplit token by token.
const longChat = {
  model: 'qwen',
  messages: [{ role: 'user', content: 'Tell me a long story about a fox.' }],
  temperature: 0,
  max_tokens: 200,
  ignore_eos: true,
};

async function chatText(server, body) {
  const r = await clientOf(server).chat.completions.create(body);
  return (r.choices[0].message.reasoning_content ?? '') + (r.choices[0].message.content ?? '');
}

async function props(server) {
  const r = await fetch(`${server.base}/props`);
  assert.equal(r.status, 200);
  return r.json();
}

// The placement /props shows: one stage per device, contiguous layers over [0, nLayers).
function assertPlacement(p, devices, nLayers) {
  assert.equal(p.stages.length, devices.length, JSON.stringify(p.stages));
  let next = 0;
  p.stages.forEach((s, i) => {
    assert.equal(s.index, i);
    assert.equal(s.device, devices[i]);
    assert.equal(s.remote, devices[i].startsWith('unix:'));
    assert.equal(s.layers[0], next, `stage ${i} starts where stage ${i - 1} ended`);
    assert.ok(s.layers[1] > s.layers[0], `stage ${i} has at least one layer`);
    assert.ok(s.weight_bytes > 0 && s.kv_bytes > 0, JSON.stringify(s));
    assert.ok(s.threads >= 1);
    next = s.layers[1];
  });
  assert.equal(next, nLayers);
}

let tmp;
let unsplitQwen;

before(async () => {
  if (skip) return;
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'shardlm-split-'));
  unsplitQwen = await startServer(binary, qwenModel, kServeArgs);
});

after(() => cleanUp(tmp));

test('unsplit /props shows one stage over every layer', { skip, timeout: kTestTimeout },
  async () => {
    const p = await props(unsplitQwen);
    assertPlacement(p, ['cpu'], 2);
    assert.equal(p.n_ctx, 2048);
    assert.equal(p.n_parallel, 2);
  });

test('two local stages give the unsplit greedy text', { skip, timeout: kTestTimeout },
  async () => {
    const devices = ['--devices', 'cpu,cpu', '--layer-split', '1,1'];
    const stories = await startServer(binary, storiesModel, [...kServeArgs, ...devices]);
    const qwen = await startServer(binary, qwenModel, [...kServeArgs, ...devices]);
    try {
      assertPlacement(await props(stories), ['cpu', 'cpu'], 5);
      assertPlacement(await props(qwen), ['cpu', 'cpu'], 2);
      await assertGolden(stories);
      assert.equal(await chatText(qwen, longChat), await chatText(unsplitQwen, longChat));
      // /metrics counts one float32 hidden row (n_embd 64 x 4 bytes) per token crossing the
      // one stage boundary.
      const metrics = await (await fetch(`${stories.base}/metrics`)).text();
      const counter = (name) =>
        Number(new RegExp(`^shardlm_${name} (\\d+)$`, 'm').exec(metrics)?.[1]);
      assert.ok(counter('pipeline_tokens_total') > 0, metrics);
      assert.equal(counter('pipeline_bytes_between_stages_total'),
        counter('pipeline_tokens_total') * 64 * 4);
      // Per stage: every token passes both stages; stage 1 received what stage 0 produced.
      const perStage = (name, stage) => Number(new RegExp(
        `^shardlm_stage_${name}\\{stage="${stage}",device="cpu"\\} ([\\d.e+-]+)$`, 'm')
        .exec(metrics)?.[1]);
      for (const stage of [0, 1]) {
        assert.equal(perStage('tokens_total', stage), counter('pipeline_tokens_total'), metrics);
        assert.ok(perStage('busy_seconds_total', stage) > 0, metrics);
      }
      assert.equal(perStage('bytes_in_total', 1), perStage('bytes_out_total', 0), metrics);
      // The startup log names each stage.
      assert.match(stories.log(), /stage 0: layers \[0, \d\)/);
      assert.match(stories.log(), /stage 1: layers \[\d, 5\)/);
    } finally {
      await Promise.all([stories.kill(), qwen.kill()]);
    }
  });

test('three local stages give the golden greedy text', { skip, timeout: kTestTimeout },
  async () => {
    const stories = await startServer(binary, storiesModel,
      [...kServeArgs, '--devices', 'cpu,cpu,cpu', '--layer-split', '1,2,2']);
    try {
      const p = await props(stories);
      assertPlacement(p, ['cpu', 'cpu', 'cpu'], 5);
      assert.deepEqual(p.stages.map((s) => s.layers), [[0, 1], [1, 3], [3, 5]]);
      await assertGolden(stories);
    } finally {
      await stories.kill();
    }
  });

test('bad --devices / --layer-split exit non-zero with a clear message', { skip, timeout: kTestTimeout },
  async () => {
    const cases = [
      [['--devices', 'gpu:0'], /unknown device 'gpu:0'/],
      [['--devices', 'cpu,cpu', '--layer-split', '1,1,1'], /3 weights.*2 stages/],
      [['--devices', 'cpu,cpu', '--layer-split', '1,-1'], /must be a finite number > 0/],
      [['--devices', 'cpu:99999'], /core 99999 does not exist/],
      [['--devices', 'cpu,cpu,cpu'], /3 stages but the model has only 2 layers/],
    ];
    for (const [flags, message] of cases) {
      await assert.rejects(startServer(binary, qwenModel, [...kServeArgs, ...flags], 20_000),
        (e) => message.test(e.message), flags.join(' '));
    }
  });

// Local + remote stages (2 stages for qwen, local-remote-local for stories): the same text;
// then kill -9 and restart qwen's daemon under a running stream.
test('local + remote stages: same text, private socket, kill -9 and recovery',
  { skip, timeout: kTestTimeout }, async (t) => {
    // One daemon per server: a daemon serves one stage.
    const socket = path.join(tmp, 's1.sock');
    const storiesSocket = path.join(tmp, 's2.sock');
    let shard = await startShard(binary, socket, shardCores);
    const storiesShard = await startShard(binary, storiesSocket, shardCores);
    assert.equal(fs.statSync(socket).mode & 0o777, 0o600, 'the shard socket is mode 0600');
    const devices = ['cpu', `unix:${socket}`];
    // stories260K: 3 stages, the remote one in the middle.
    const storiesDevices = ['cpu', `unix:${storiesSocket}`, 'cpu'];
    const stories = await startServer(binary, storiesModel,
      [...kServeArgs, '--devices', storiesDevices.join(','), '--layer-split', '2,1,2']);
    const qwen = await startServer(binary, qwenModel,
      [...kServeArgs, '--devices', devices.join(',')]);
    try {
      assertPlacement(await props(stories), storiesDevices, 5);
      assertPlacement(await props(qwen), devices, 2);
      await assertGolden(stories);
      const qwenText = await chatText(qwen, longChat);
      assert.equal(qwenText, await chatText(unsplitQwen, longChat));

      // The unsplit server's answer to the long request, to check what streams before the kill.
      const c = clientOf(qwen);
      const longStream = { ...longChat, max_tokens: 1800 };
      const reference = await chatText(unsplitQwen, longStream);
      const stream = await c.chat.completions.create({ ...longStream, stream: true });
      let received = '';
      let chunks = 0;
      let finish = null;
      const streamError = await (async () => {
        try {
          for await (const chunk of stream) {
            const choice = chunk.choices[0];
            if (!choice) continue;
            received += (choice.delta.reasoning_content ?? '') + (choice.delta.content ?? '');
            if (choice.finish_reason) finish = choice.finish_reason;
            if (++chunks === 3) shard.proc.kill('SIGKILL');
          }
        } catch (e) {
          return e;
        }
        return null;
      })();
      assert.ok(chunks >= 3, `the stream sent ${chunks} chunks before ending`);
      assert.equal(finish, null, 'the stream must not finish normally after the kill');
      assert.ok(streamError, 'the client sees an error');
      assert.equal(streamError.code, 'stage_unavailable', String(streamError));
      assert.ok(reference.startsWith(received), 'the text before the error is the greedy text');
      await shard.exitPromise;

      const health = await fetch(`${qwen.base}/health`);
      assert.equal(health.status, 503);
      const body = await health.json();
      assert.equal(body.error.code, 'stage_unavailable');
      assert.match(body.error.message, /stage 1|s1\.sock/, 'the message names the stage');
      t.diagnostic(`killed after ${received.length} of ${reference.length} chars; ` +
        `stream error: ${streamError.message}; /health: ${body.error.message}`);
      await assert.rejects(c.completions.create({ model: 'q', prompt: 'Hi', max_tokens: 4 }),
        (e) => e.status === 503 && e.code === 'stage_unavailable');

      // The other server's daemon is untouched: it keeps serving.
      assert.equal((await fetch(`${stories.base}/health`)).status, 200);

      // Back on the same socket: the server reconnects by itself.
      shard = await startShard(binary, socket, shardCores);
      const deadline = Date.now() + 20_000;
      let status = 0;
      while (Date.now() < deadline) {
        status = (await fetch(`${qwen.base}/health`)).status;
        if (status === 200) break;
        await sleep(100);
      }
      assert.equal(status, 200, `/health after the daemon came back:\n${qwen.log()}`);
      assert.equal(await chatText(qwen, longChat), qwenText);
      await assertGolden(stories);
    } finally {
      await Promise.all([stories.kill(), qwen.kill(), shard.kill(), storiesShard.kill()]);
    }
  });
