// End-to-end tests of disaggregated prefill: `shardlm worker --role prefill` computing long
// prompts into the KV pages of `shardlm serve --prefill-worker unix:PATH` (also of a split
// server whose second stage is a `shardlm shard` daemon), and the one-command
// form `serve --disagg prefill=cpu:A,decode=cpu:B` — driven by the official `openai` npm client.
//
// Goals: what a user sees: the same greedy text as a colocated server (bounded KV pool too), the
// request's log line
// and /metrics showing the handoff; kill -9 of the worker in the middle of a long prompt fails
// that request with a 503 while a stream decoding beside it finishes with its full text, and
// after the worker is restarted the server reconnects by itself and the next long prompt goes
// through it again. Every wait is bounded.
// Fixtures: SHARDLM_FIXTURES or ../../../shared/fixtures; missing → skip (fail under CI).
// Binary: SHARDLM_BIN or ../../build/shardlm.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import {
  binary, cleanUp, fixtures, skipReason, sleep, startServer, startShard, startWorker,
} from './harness.js';

const qwenModel = path.join(fixtures, 'qwen3-tiny-f32.gguf');
const kTestTimeout = 180_000;
const kServeArgs = ['--parallel', '3', '-c', '4096', '-t', '1', '-b', '64',
  '--disagg-min-tokens', '200'];

const skip = skipReason('disagg', [qwenModel]);

const clientOf = (server) =>
  new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60_000 });

// A prompt of several hundred tokens: the worker's (--disagg-min-tokens 200).
const longPrompt = 'Once upon a time, a small fox lived at the edge of a large forest. '.repeat(12);
const shortPrompt = 'Tell me about the sea.';

async function completion(server, prompt, maxTokens) {
  const r = await clientOf(server).completions.create({
    model: 'qwen', prompt, temperature: 0, max_tokens: maxTokens, ignore_eos: true,
  });
  return r.choices[0].text;
}

async function metric(server, name) {
  const text = await (await fetch(`${server.base}/metrics`)).text();
  return Number(new RegExp(`^shardlm_${name} ([\\d.e+-]+)$`, 'm').exec(text)?.[1]);
}

async function waitFor(what, predicate, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await predicate())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

let tmp;
let colocated;

before(async () => {
  if (skip) return;
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'shardlm-disagg-'));
  colocated = await startServer(binary, qwenModel, kServeArgs);
});

after(() => cleanUp(tmp));

test('a prompt prefilled by the worker gives the colocated text, and says so',
  { skip, timeout: kTestTimeout }, async () => {
    const socket = path.join(tmp, 'worker.sock');
    const worker = await startWorker(binary, socket, 0);
    // `--cores 0`: a worker's cores, here core 0 alone.
    assert.match(worker.log(), /listening on unix:.* \(prefill, 1 thread, pinned to cpu:0\)/);
    const server = await startServer(binary, qwenModel,
      [...kServeArgs, '--prefill-worker', `unix:${socket}`]);
    try {
      assert.equal(await completion(server, longPrompt, 40),
        await completion(colocated, longPrompt, 40));
      // A short prompt prefills here: no handoff.
      assert.equal(await completion(server, shortPrompt, 20),
        await completion(colocated, shortPrompt, 20));
      assert.equal(await metric(server, 'prefill_worker_handoffs_total'), 1);
      assert.equal(await metric(server, 'prefill_worker_up'), 1);
      assert.equal(await metric(server, 'prefill_worker_state_bytes_total'), 0);
      assert.match(server.log(), /prompt_tokens=\d{3,} .* prefill=worker handoff_ms=/);
      assert.match(worker.log(), /KV [\d.]+ MiB \(the server's, shared\)/);
    } finally {
      await Promise.all([server.kill(), worker.kill()]);
    }
  });

test('a split decode side, its second stage in a shard daemon, reads the pages the worker wrote',
  { skip, timeout: kTestTimeout }, async () => {
    const stageSocket = path.join(tmp, 'split-stage.sock');
    const stage = await startShard(binary, stageSocket, 1);
    // --disagg without decode=: the decode side is --devices, here a split.
    const server = await startServer(binary, qwenModel,
      [...kServeArgs, '--disagg', 'prefill=cpu:0', '--devices', `cpu:1,unix:${stageSocket}`]);
    try {
      const prompt = 'A young sailor kept a diary of every storm he crossed at sea. '.repeat(10);
      assert.equal(await completion(server, prompt, 32), await completion(colocated, prompt, 32));
      assert.equal(await metric(server, 'prefill_worker_handoffs_total'), 1);
      // The daemon shares its pages with the server, which hands them on to the worker (whose
      // lines are in the server's log: it is the server's child).
      assert.match(stage.log(), /KV [\d.]+ MiB \(shared with the server\)/);
      assert.match(server.log(), /worker: session 1: .*KV [\d.]+ MiB \(the server's, shared\)/);
    } finally {
      await Promise.all([server.kill(), stage.kill()]);
    }
  });

test('under a bounded KV pool a prompt several times the pool, prefilled by the worker, gives ' +
  'the bounded colocated text', { skip, timeout: kTestTimeout }, async () => {
  // Pages of 64 positions, 4 resident per sequence; the prompt is several hundred tokens.
  const pool = ['--kv-pool', '256', '--kv-sink', '16', '--kv-tail', '64', '--kv-reselect', '16'];
  const [bounded, server] = await Promise.all([
    startServer(binary, qwenModel, [...kServeArgs, ...pool]),
    startServer(binary, qwenModel,
      [...kServeArgs, ...pool, '--disagg', 'prefill=cpu:0,decode=cpu:1']),
  ]);
  try {
    const prompt = longPrompt.repeat(4);
    assert.equal(await completion(server, prompt, 48), await completion(bounded, prompt, 48));
    assert.equal(await metric(server, 'prefill_worker_handoffs_total'), 1);
    assert.ok(await metric(server, 'kv_pool_pages_evicted_total') > 0);
    // The pages the worker wrote left the pool through the server's own tier.
    const metrics = await (await fetch(`${server.base}/metrics`)).text();
    assert.match(metrics, /^shardlm_stage_kv_page_outs_total\{[^}]*\} [1-9]/m);
  } finally {
    await Promise.all([server.kill(), bounded.kill()]);
  }
});

test('kill -9 of the worker mid-prompt: a 503 for that prompt, the stream beside it finishes, ' +
  'the restarted worker serves the next one', { skip, timeout: kTestTimeout }, async (t) => {
  const socket = path.join(tmp, 'slow.sock');
  // Each worker batch waits 1 s: the long prompt (several batches) is still on the worker when
  // it is killed.
  const slow = ['--debug-batch-delay-ms', '1000'];
  let worker = await startWorker(binary, socket, 0, slow);
  const server = await startServer(binary, qwenModel,
    [...kServeArgs, '--prefill-worker', `unix:${socket}`]);
  try {
    const reference = await completion(colocated, shortPrompt, 400);
    const c = clientOf(server);
    const stream = (async () => {
      const s = await c.completions.create({
        model: 'qwen', prompt: shortPrompt, temperature: 0, max_tokens: 400, ignore_eos: true,
        stream: true,
      });
      let text = '';
      let finish = null;
      for await (const chunk of s) {
        text += chunk.choices[0]?.text ?? '';
        finish = chunk.choices[0]?.finish_reason ?? finish;
      }
      return { text, finish };
    })();
    const interrupted = completion(server, longPrompt, 8).then(() => null, (e) => e);
    await waitFor('the worker to compute a batch', () => worker.log().includes('session'));
    await sleep(1500);
    worker.proc.kill('SIGKILL');
    await worker.exitPromise;
    const error = await interrupted;
    assert.ok(error, 'the interrupted prompt must fail');
    assert.equal(error.status, 503, String(error));
    assert.equal(error.code, 'stage_unavailable');
    assert.match(error.message, /prefill worker/);
    const streamed = await stream;
    assert.equal(streamed.finish, 'length');
    assert.equal(streamed.text, reference, 'the stream decoding here is untouched');
    assert.equal((await fetch(`${server.base}/health`)).status, 200);
    assert.equal(await metric(server, 'prefill_worker_failed_requests_total'), 1);
    t.diagnostic(`interrupted prompt: ${error.message}`);

    worker = await startWorker(binary, socket, 0);
    await waitFor('the server to reconnect', async () =>
      (await metric(server, 'prefill_worker_up')) === 1);
    assert.equal(await completion(server, longPrompt, 16),
      await completion(colocated, longPrompt, 16));
    assert.equal(await metric(server, 'prefill_worker_handoffs_total'), 1);
  } finally {
    await Promise.all([server.kill(), worker.kill()]);
  }
});

// The worker's child process, the one `serve --disagg` started (a restarted one is the child of
// the server's supervising thread, so every thread's children are read).
function workerPid(server) {
  const tasks = `/proc/${server.proc.pid}/task`;
  const children = fs.readdirSync(tasks)
    .flatMap((task) => fs.readFileSync(`${tasks}/${task}/children`, 'utf8').trim().split(/\s+/))
    .map(Number).filter(Boolean);
  assert.equal(children.length, 1, 'one child process: the worker');
  return children[0];
}

test('serve --disagg ends a hung worker: a 503 after the heartbeat timeout, a new worker, and ' +
  'the pages the hung one could still write are free again', { skip, timeout: kTestTimeout },
async () => {
  const server = await startServer(binary, qwenModel,
    [...kServeArgs, '--disagg', 'prefill=cpu:0,decode=cpu:1']);
  try {
    const hung = workerPid(server);
    process.kill(hung, 'SIGSTOP');  // alive, holding its session, answering nothing
    const error = await completion(server, longPrompt, 8).then(() => null, (e) => e);
    assert.ok(error, 'the prompt on the hung worker must fail');
    assert.equal(error.status, 503, String(error));
    assert.match(error.message, /no heartbeat/);
    await waitFor('the server to end the hung worker and reconnect to a new one',
      () => server.log().includes('the prefill worker is back'), 30_000);
    assert.equal(await metric(server, 'prefill_worker_up'), 1);
    assert.notEqual(workerPid(server), hung);
    assert.match(server.log(), new RegExp(`lost the prefill worker \\(pid ${hung}\\); ending it`));
    assert.match(server.log(), /pages the lost prefill worker may have been writing are free again/);
    const next = 'The baker rose before dawn and lit the old stone oven. '.repeat(10);
    assert.equal(await completion(server, next, 16), await completion(colocated, next, 16));
    assert.equal(await metric(server, 'prefill_worker_handoffs_total'), 1);
  } finally {
    await server.kill();
  }
});

test('serve --disagg starts its own worker, restarts it, and stops it',
  { skip, timeout: kTestTimeout }, async () => {
    const server = await startServer(binary, qwenModel,
      [...kServeArgs, '--disagg', 'prefill=cpu:0,decode=cpu:1']);
    try {
      assert.equal(await completion(server, longPrompt, 24),
        await completion(colocated, longPrompt, 24));
      assert.equal(await metric(server, 'prefill_worker_handoffs_total'), 1);
      const props = await (await fetch(`${server.base}/props`)).json();
      assert.equal(props.stages[0].device, 'cpu:1');
      assert.ok(server.log().includes('prefill worker started on cores 0-0'), server.log());
      // The server's own threads stay off the worker's core.
      const status = fs.readFileSync(`/proc/${server.proc.pid}/status`, 'utf8');
      assert.equal(/Cpus_allowed_list:\s*(\S+)/.exec(status)?.[1], '1');
      // The worker dies: the server starts another and reconnects to it. (Each prompt below is
      // new: a cached one would have nothing left to prefill.)
      process.kill(workerPid(server), 'SIGKILL');
      await waitFor('the worker to be started again',
        () => server.log().includes('starting it again'));
      const second = 'The old lighthouse keeper counted the ships every night. '.repeat(10);
      assert.equal(await completion(server, second, 16), await completion(colocated, second, 16));
      await waitFor('the server to reconnect', async () =>
        (await metric(server, 'prefill_worker_up')) === 1);
      const third = 'A girl found a map in her grandmother\'s attic one rainy day. '.repeat(10);
      assert.equal(await completion(server, third, 16), await completion(colocated, third, 16));
      assert.ok(await metric(server, 'prefill_worker_handoffs_total') >= 2);
    } finally {
      await server.kill();
    }
  });
