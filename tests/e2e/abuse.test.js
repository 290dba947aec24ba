// Abuse of the real `shardlm serve` over raw sockets: what a hostile client, a hostile web
// page or a broken client sends. After every case the server still answers /health and its
// resident memory stays bounded.
//
// Cases: the request that once killed the server (tool-call arguments nested 200000 deep),
// nested tools, arrays of a million values, huge strings, chunked bodies past the limit,
// a foreign Host (DNS rebinding), a foreign browser Origin, bad UTF-8, slow heads, truncated
// requests, a client that leaves while it waits for a whole response (its slot frees at
// once), and a few thousand seeded random mutations of valid requests, bounded in time.
// Fixtures: the Qwen3-vocabulary model (its template renders tools); missing → skip (fail
// under CI).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { binary, fixtures, killAll, skipReason, sleep, startServer } from './harness.js';

const model = path.join(fixtures, 'qwen3-tiny-qwenvocab-q8_0.gguf');
const skip = skipReason('abuse', [model]);
const kBodyLimit = 8 << 20;

let server;
let port;
let rssLimitKiB;

function rssKiB(pid) {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)/.exec(status)[1]);
}

// Sends `parts` (strings or Buffers; a number is a pause in ms) on a new connection and
// resolves with everything the server answered until it closed or `timeoutMs` passed.
// `endAfter`: close our side once sent; `quietMs`: close our side if nothing came back by
// then (a request that is incomplete would wait for the server's timeouts), and stop once an
// answer has been quiet that long (a kept-alive connection stays open).
function raw(parts, { timeoutMs = 15_000, endAfter = false, quietMs = 0 } = {}) {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    const chunks = [];
    let done = false;
    const finish = (why) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      clearTimeout(quiet);
      socket.destroy();
      resolve({ text: Buffer.concat(chunks).toString('latin1'), why });
    };
    const timer = setTimeout(() => finish('timeout'), timeoutMs);
    let quiet = null;
    const armQuiet = () => {
      if (quietMs <= 0) return;
      clearTimeout(quiet);
      quiet = setTimeout(() => (chunks.length ? finish('quiet') : socket.end()), quietMs);
    };
    socket.on('data', (d) => {
      chunks.push(d);
      armQuiet();
    });
    socket.on('error', () => finish('error'));
    socket.on('close', () => finish('closed'));
    socket.on('connect', async () => {
      for (const p of parts) {
        if (done) return;
        if (typeof p === 'number') await sleep(p);
        else if (!socket.write(p)) await new Promise((r) => socket.once('drain', r));
      }
      if (endAfter) socket.end();
      armQuiet();
    });
  });
}

const hostHeader = () => `Host: 127.0.0.1:${port}\r\n`;
function post(route, body, headers = '') {
  const bytes = Buffer.isBuffer(body) ? body : Buffer.from(body, 'utf8');
  return [`POST ${route} HTTP/1.1\r\n${hostHeader()}Content-Type: application/json\r\n` +
    `Content-Length: ${bytes.length}\r\nConnection: close\r\n${headers}\r\n`, bytes];
}
const statusOf = (text) => Number(/^HTTP\/1\.[01] (\d{3})/.exec(text)?.[1] ?? 0);
const bodyOf = (text) => {
  const i = text.indexOf('\r\n\r\n');
  try {
    return JSON.parse(text.slice(i + 4));
  } catch {
    return null;
  }
};

async function assertServing(label) {
  const r = await fetch(`http://127.0.0.1:${port}/health`, { signal: AbortSignal.timeout(10_000) });
  assert.equal(r.status, 200, `${label}: /health`);
  const rss = rssKiB(server.proc.pid);
  assert.ok(rss < rssLimitKiB, `${label}: RSS ${rss} KiB over ${rssLimitKiB} KiB`);
}

const nested = (n, open = '[', close = ']') => open.repeat(n) + '1' + close.repeat(n);

before(async () => {
  if (skip) return;
  server = await startServer(binary, model, ['--parallel', '2', '-c', '4096', '-t', '2']);
  port = Number(new URL(server.base).port);
  // A chat request first, so the baseline has the template and the compute buffers.
  const warm = await raw(post('/v1/chat/completions',
    JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 })));
  assert.equal(statusOf(warm.text), 200, warm.text);
  // Everything below may hold a few bodies of 8 MiB and what they parse into at once; far
  // less than this, and far less than an unbounded parse of them would take.
  rssLimitKiB = rssKiB(server.proc.pid) + 512 * 1024;
});
after(killAll);

test('tool-call arguments nested 200000 deep are a 400 naming them', { skip }, async () => {
  const body = JSON.stringify({
    messages: [
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: null,
        tool_calls: [{ id: '1', type: 'function', function: { name: 'f', arguments: nested(200000) } }] },
      { role: 'tool', tool_call_id: '1', content: 'r' }],
  });
  const r = await raw(post('/v1/chat/completions', body));
  assert.equal(statusOf(r.text), 400, r.text.slice(0, 500));
  const e = bodyOf(r.text).error;
  assert.equal(e.param, 'messages[1].tool_calls[0].function.arguments');
  assert.match(e.message, /deeper than 64 levels/);
  await assertServing('nested arguments');
});

test('nested tools and nested bodies are refused while parsed', { skip }, async () => {
  const tools = `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function",` +
    `"function":{"name":"f","parameters":${nested(300000, '{"a":', '}')}}}]}`;
  let r = await raw(post('/v1/chat/completions', tools));
  assert.equal(statusOf(r.text), 400);
  assert.match(bodyOf(r.text).error.message, /tools\[0\]\.function\.parameters\.a\.a.*deeper/);
  r = await raw(post('/v1/completions', `{"prompt":"x","x":${nested(1_000_000)}}`));
  assert.equal(statusOf(r.text), 400);
  await assertServing('nested tools');
});

test('arrays of a million values and huge strings', { skip }, async () => {
  const ones = new Array(1_000_000).fill(1).join(',');
  let r = await raw(post('/v1/completions', `{"prompt":[${ones}]}`));
  assert.equal(statusOf(r.text), 400);
  assert.equal(bodyOf(r.text).error.code, 'context_length_exceeded');
  r = await raw(post('/v1/completions', `{"prompt":"x","stop":[${ones}]}`));
  assert.equal(statusOf(r.text), 400);
  r = await raw(post('/v1/chat/completions', `{"messages":[${new Array(1_000_000).fill('{}').join(',')}]}`));
  assert.equal(statusOf(r.text), 400);
  r = await raw(post('/v1/completions', `{"prompt":[${ones},${ones}]}`));
  assert.equal(statusOf(r.text), 400);
  assert.match(bodyOf(r.text).error.message, /more than 1048576 JSON values/);
  // A string just under the body limit, and a body just over it.
  r = await raw(post('/v1/chat/completions', JSON.stringify({
    messages: [{ role: 'user', content: 'word '.repeat(1_000_000) }] })));
  assert.equal(statusOf(r.text), 400);
  assert.equal(bodyOf(r.text).error.code, 'context_length_exceeded');
  r = await raw(post('/v1/completions', JSON.stringify({ prompt: 'x'.repeat(kBodyLimit) })));
  assert.equal(statusOf(r.text), 413, r.text.slice(0, 300));
  r = await raw(post('/v1/completions', JSON.stringify({ prompt: 'x', stop: ['y'.repeat(5000)] })));
  assert.equal(statusOf(r.text), 400);
  assert.equal(bodyOf(r.text).error.param, 'stop');
  await assertServing('big values');
});

test('chunked bodies: read under the limit, refused past it', { skip }, async () => {
  const head = `POST /v1/completions HTTP/1.1\r\n${hostHeader()}Transfer-Encoding: chunked\r\n` +
    'Connection: close\r\n\r\n';
  const body = JSON.stringify({ prompt: 'hello', max_tokens: 2 });
  let r = await raw([head, `${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`]);
  assert.equal(statusOf(r.text), 200, r.text.slice(0, 300));
  const piece = `${(1 << 20).toString(16)}\r\n${'x'.repeat(1 << 20)}\r\n`;
  const parts = [head];
  for (let i = 0; i < 64; ++i) parts.push(piece);  // 64 MiB offered
  r = await raw(parts);
  assert.equal(statusOf(r.text), 413, r.text.slice(0, 300));
  await assertServing('chunked');
});

test('foreign Host, foreign Origin, bad UTF-8', { skip }, async () => {
  let r = await raw([`GET /v1/models HTTP/1.1\r\nHost: attacker.example:${port}\r\nConnection: close\r\n\r\n`]);
  assert.equal(statusOf(r.text), 403);
  assert.equal(bodyOf(r.text).error.code, 'host_not_allowed');
  // A web page's form-like POST: text/plain needs no preflight, and is refused.
  const [h, b] = post('/v1/completions', '{"prompt":"pwned"}', 'Origin: https://evil.example\r\n');
  r = await raw([h.replace('application/json', 'text/plain'), b]);
  assert.equal(statusOf(r.text), 403);
  assert.equal(bodyOf(r.text).error.code, 'origin_not_allowed');
  // curl -d sends no Origin and a form content type: served.
  const [h2, b2] = post('/v1/completions', '{"prompt":"ok","max_tokens":2}');
  r = await raw([h2.replace('application/json', 'application/x-www-form-urlencoded'), b2]);
  assert.equal(statusOf(r.text), 200);
  r = await raw(post('/v1/completions',
    Buffer.concat([Buffer.from('{"prompt":"'), Buffer.from([0xff, 0xfe, 0xc0]), Buffer.from('"}')])));
  assert.equal(statusOf(r.text), 400);
  assert.match(bodyOf(r.text).error.message, /not valid JSON/);
  r = await raw([`GET /v1/\xff\xfe HTTP/1.1\r\n${hostHeader()}X-Bad: \xff\r\nConnection: close\r\n\r\n`]);
  assert.ok([400, 404].includes(statusOf(r.text)), r.text.slice(0, 200));
  await assertServing('host, origin, utf-8');
});

test('slow heads hold no thread and are timed out; truncated requests are dropped', { skip }, async () => {
  const slow = [];
  for (let i = 0; i < 40; ++i) {
    slow.push(raw(['P', 300, 'OST /v1/com', 300, 'pletions HTTP/1.1\r\n', 300, 'X: ', 20_000],
      { timeoutMs: 14_000 }));
  }
  await sleep(500);
  const t0 = Date.now();
  await assertServing('while 40 clients send heads slowly');
  assert.ok(Date.now() - t0 < 2000, `/health took ${Date.now() - t0} ms`);
  const results = await Promise.all(slow);
  for (const r of results) assert.equal(statusOf(r.text), 408, r.text.slice(0, 200));

  const valid = post('/v1/chat/completions',
    JSON.stringify({ messages: [{ role: 'user', content: 'hello there' }], max_tokens: 4 }));
  const whole = Buffer.concat(valid.map((p) => Buffer.from(p)));
  for (let cut = 1; cut < whole.length; cut += 7) {
    await raw([whole.subarray(0, cut)], { endAfter: true, timeoutMs: 2000 });
  }
  await assertServing('truncated');
});

test('a client gone while it waits for a whole response frees its slot', { skip }, async () => {
  const [h, b] = post('/v1/completions',
    JSON.stringify({ prompt: 'Once upon a time', max_tokens: -1, ignore_eos: true }));
  const socket = net.connect(port, '127.0.0.1');
  await new Promise((r) => socket.on('connect', r));
  socket.write(h.replace('Connection: close\r\n', ''));
  socket.write(b);
  const busy = async () => {
    const slots = await (await fetch(`http://127.0.0.1:${port}/slots`)).json();
    return slots.some((s) => s.is_processing);
  };
  for (let i = 0; i < 100 && !(await busy()); ++i) await sleep(10);
  assert.ok(await busy(), 'the request runs');
  socket.destroy();
  let freed = false;
  for (let i = 0; i < 50 && !freed; ++i) {
    await sleep(20);
    freed = !(await busy());
  }
  assert.ok(freed, 'the slot is freed within a second of the client leaving');
  await assertServing('client gone');
});

// A small seeded PRNG (mulberry32), so a failure can be replayed.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

test('random mutations of valid requests never crash it', { skip, timeout: 180_000 }, async (t) => {
  const seeds = [
    post('/v1/chat/completions', JSON.stringify({ messages: [{ role: 'system', content: 's' },
      { role: 'user', content: 'hi' }], max_tokens: 3, temperature: 0.5, stop: ['a'],
    stream: true })),
    post('/v1/chat/completions', JSON.stringify({ max_tokens: 3, messages: [
      { role: 'user', content: 'weather?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function',
        function: { name: 'get', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', tool_call_id: 'c1', content: [{ type: 'text', text: 'sunny' }] }],
    tools: [{ type: 'function', function: { name: 'get', parameters: { type: 'object',
      properties: { city: { type: 'string' } } } } }] })),
    post('/v1/completions', JSON.stringify({ prompt: [1, 2, 3], max_tokens: 3, logprobs: 2, echo: true })),
    post('/tokenize', JSON.stringify({ content: 'hello', add_special: true })),
    [`GET /v1/models HTTP/1.1\r\n${hostHeader()}Connection: close\r\n\r\n`],
  ].map((parts) => Buffer.concat(parts.map((p) => Buffer.from(p))));
  const inserts = ['{', '}', '[', ']', '"', ',', ':', '\r\n', '\r\n\r\n', 'null', '-1', '1e999',
    '\\u0000', '\xff', 'Transfer-Encoding: chunked\r\n', 'Content-Length: 99\r\n', ' '];
  const random = rng(20261126);
  const deadline = Date.now() + 60_000;
  const statuses = new Map();
  let sent = 0;
  for (; sent < 3000 && Date.now() < deadline; ++sent) {
    let bytes = Buffer.from(seeds[sent % seeds.length]);
    for (let m = 1 + Math.floor(random() * 4); m > 0; --m) {
      const pos = Math.floor(random() * bytes.length);
      const kind = random();
      if (kind < 0.3) {
        bytes = Buffer.concat([bytes.subarray(0, pos), bytes.subarray(pos + 1 + Math.floor(random() * 3))]);
      } else if (kind < 0.6) {
        const ins = Buffer.from(inserts[Math.floor(random() * inserts.length)], 'latin1');
        bytes = Buffer.concat([bytes.subarray(0, pos), ins, bytes.subarray(pos)]);
      } else if (kind < 0.97) {
        bytes[pos] = Math.floor(random() * 256);
      } else {
        const deep = Buffer.from(nested(50_000 + Math.floor(random() * 100_000)));
        bytes = Buffer.concat([bytes.subarray(0, pos), deep, bytes.subarray(pos)]);
      }
    }
    const r = await raw([bytes], { timeoutMs: 12_000, quietMs: 150 });
    const s = statusOf(r.text);
    statuses.set(s, (statuses.get(s) ?? 0) + 1);
    // A 5xx is the server's own failure: a malformed request is the client's (4xx).
    assert.ok(s < 500, `status ${s} for ${JSON.stringify(bytes.toString('latin1').slice(0, 400))}:` +
      ` ${r.text.slice(0, 400)}`);
    if (sent % 250 === 0) await assertServing(`after ${sent} mutated requests`);
  }
  await assertServing(`after ${sent} mutated requests`);
  t.diagnostic(`${sent} mutated requests, statuses ${JSON.stringify([...statuses])}`);
  assert.ok(sent >= 500, `only ${sent} requests in the time budget`);
  assert.ok((statuses.get(200) ?? 0) > 0 && (statuses.get(400) ?? 0) > 0,
    JSON.stringify([...statuses]));
});
