#!/usr/bin/env node
// Interference of long prefills with running streams, the question disaggregated prefill
// answers: how much do the streams a server is decoding stutter while long prompts arrive?
//
// Starts nothing itself: point it at a running server. Keeps --streams streaming chat
// requests decoding all along (short prompts, temperature 0, ignore_eos, logprobs so every
// token makes a chunk), each re-sent when it ends after --stream-tokens tokens. With
// --stream-context N every stream's prompt starts with the same N-token text, so the streams
// decode between N and N + --stream-tokens positions deep in both phases (without it they
// start empty and grow all run long: the loaded phase then decodes deeper than the quiet one,
// and reads more KV per token). For --quiet-s seconds nothing else runs;
// then for --load-s seconds a long prompt of about --long-tokens tokens (each with a distinct
// head, so none hits the prefix cache) arrives every --every-s seconds, asking for one token.
// Prints one JSON line:
//   {"streams", "long_tokens", "every_s",
//    "quiet":  {"itl_ms": {p50, p99, mean, n}, "stream_tok_s"},
//    "loaded": {"itl_ms": {...}, "stream_tok_s", "long_ttft_ms": {p50, p99, mean, n},
//               "long_prompt_tokens", "long_errors"},
//    "itl_p99_loaded_over_quiet", "itl_p50_loaded_over_quiet"}
// Inter-token latency = the gap between successive token chunks of one stream (spread over
// the tokens a chunk carries), counted in the phase its later chunk arrives in; stream_tok_s
// = stream tokens that arrived in the phase / its length. TTFT = the long request sent → its
// response (its one token).
//
// Usage: node bench/interference.mjs --url http://127.0.0.1:8080 [--streams 4]
//   [--long-tokens 8192] [--every-s 5] [--quiet-s 20] [--load-s 60] [--stream-tokens 100000]
//   [--stream-context 0]
//   [--api-key KEY]
// Needs only node >= 18 (global fetch). Connects only to 127.0.0.1 / localhost.

import { cliTools, round } from './cli_args.mjs';
import { takeSseData } from './sse.mjs';

const { fail, log, parseArgs, boundedInt } = cliTools('interference');
const args = parseArgs(process.argv.slice(2));
const url = new URL(args.url ?? 'http://127.0.0.1:8080');
if (!['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname)) {
  fail(`--url must point at this machine (127.0.0.1), got ${url.hostname}`);
}
const base = url.origin;
const nStreams = boundedInt(args.streams, 4, 1, 64, '--streams');
const longTokens = boundedInt(args['long-tokens'], 8192, 16, 1 << 20, '--long-tokens');
const everyMs = boundedInt(args['every-s'], 5, 1, 3600, '--every-s') * 1000;
const quietMs = boundedInt(args['quiet-s'], 20, 1, 3600, '--quiet-s') * 1000;
const loadMs = boundedInt(args['load-s'], 60, 1, 3600, '--load-s') * 1000;
const streamTokens = boundedInt(args['stream-tokens'], 100000, 2, 1 << 20, '--stream-tokens');
const streamContext = boundedInt(args['stream-context'], 0, 0, 1 << 20, '--stream-context');
const apiKey = args['api-key'] ?? process.env.SHARDLM_API_KEY ?? '';
const headers = { 'content-type': 'application/json' };
if (apiKey) headers.authorization = `Bearer ${apiKey}`;

function stats(values) {
  const s = [...values].sort((a, b) => a - b);
  const at = (p) => (s.length ? s[Math.min(s.length - 1, Math.max(0, Math.ceil(p * s.length) - 1))] : null);
  const mean = s.length ? s.reduce((a, b) => a + b, 0) / s.length : null;
  return { p50: round(at(0.5)), p99: round(at(0.99)), mean: round(mean), n: s.length };
}

const FILLER = 'The quick brown fox jumps over the lazy dog. In a distant land, a small village ' +
  'kept a library of old maps, and every evening the children gathered to trace the rivers. ';

// A text of about `tokens` tokens (calibrated with POST /tokenize when the server has it).
async function textOf(tokens) {
  const sample = FILLER.repeat(8);
  let perToken = 4;
  try {
    const res = await fetch(base + '/tokenize', { method: 'POST', headers, body: JSON.stringify({ content: sample }) });
    if (res.ok) {
      const j = await res.json();
      if (Array.isArray(j.tokens) && j.tokens.length > 0) perToken = sample.length / j.tokens.length;
    }
  } catch { /* the default ratio */ }
  return FILLER.repeat(Math.ceil((tokens * perToken) / FILLER.length) + 1).slice(0, Math.round(tokens * perToken));
}

// The phases' clock starts once the texts are made and the streams' shared head is cached.
let loadStart = Infinity;
let end = Infinity;
const phaseOf = (t) => (t < loadStart ? 'quiet' : t < end ? 'loaded' : null);
const itl = { quiet: [], loaded: [] };
const streamTokensIn = { quiet: 0, loaded: 0 };
const controllers = new Set();
let serial = 0;

// One streaming request; resolves when it ends (or is aborted at the end). With
// --stream-context its prompt starts with the same text of about that many tokens (cached after
// the first stream), so every stream decodes at the same depth in both phases.
async function stream() {
  const ctrl = new AbortController();
  controllers.add(ctrl);
  const body = {
    messages: [{ role: 'user', content: `${streamHead}[stream ${++serial}] Tell me a long story.` }],
    max_tokens: streamTokens, temperature: 0, ignore_eos: true, stream: true,
    logprobs: true, top_logprobs: 0,
  };
  try {
    const res = await fetch(base + '/v1/chat/completions', { method: 'POST', headers, body: JSON.stringify(body), signal: ctrl.signal });
    if (!res.ok || !res.body) throw new Error(`HTTP ${res.status}`);
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buf = '';
    let last = null;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      const now = performance.now();
      const taken = takeSseData(buf + decoder.decode(value, { stream: true }));
      buf = taken.rest;
      for (const data of taken.payloads) {
        if (data === '[DONE]') continue;
        const lp = JSON.parse(data).choices?.[0]?.logprobs?.content;
        const n = Array.isArray(lp) ? lp.length : 0;
        if (n === 0) continue;
        const phase = phaseOf(now);
        if (phase) {
          streamTokensIn[phase] += n;
          if (last !== null) for (let i = 0; i < n; i++) itl[phase].push((now - last) / n);
        }
        last = now;
      }
    }
  } catch (e) {
    if (!ctrl.signal.aborted) log(`stream: ${e.message}`);
  } finally {
    controllers.delete(ctrl);
  }
}

async function keepStreaming() {
  while (performance.now() < end) await stream();
}

const longTtft = [];
let longPromptTokens = null;
let longErrors = 0;
async function longRequest(text) {
  const sent = performance.now();
  try {
    const res = await fetch(base + '/v1/chat/completions', {
      method: 'POST', headers,
      body: JSON.stringify({ messages: [{ role: 'user', content: `[long ${++serial}] ${text}` }], max_tokens: 1, temperature: 0 }),
    });
    const j = await res.json();
    if (!res.ok) throw new Error(`HTTP ${res.status}: ${JSON.stringify(j).slice(0, 200)}`);
    longTtft.push(performance.now() - sent);
    longPromptTokens = j.usage?.prompt_tokens ?? longPromptTokens;
  } catch (e) {
    longErrors++;
    log(`long prompt: ${e.message}`);
  }
}

const longText = await textOf(longTokens);
const streamHead = streamContext > 0 ? `${await textOf(streamContext)}\n` : '';
if (streamHead) {
  // Computed once before the clock starts: every stream then finds it in the prefix cache.
  const res = await fetch(base + '/v1/chat/completions', {
    method: 'POST', headers,
    body: JSON.stringify({ messages: [{ role: 'user', content: `${streamHead}[warm-up]` }], max_tokens: 1 }),
  });
  if (!res.ok) fail(`warming the streams' head up: HTTP ${res.status}: ${(await res.text()).slice(0, 200)}`);
}
loadStart = performance.now() + quietMs;
end = loadStart + loadMs;
const streams = Array.from({ length: nStreams }, () => keepStreaming());
const arrivals = [];
await new Promise((r) => setTimeout(r, Math.max(0, loadStart - performance.now())));
log(`quiet phase done; long prompts every ${everyMs / 1000} s`);
while (performance.now() < end) {
  arrivals.push(longRequest(longText));
  await new Promise((r) => setTimeout(r, everyMs));
}
await Promise.all(arrivals);
for (const ctrl of controllers) ctrl.abort();
await Promise.all(streams);

const quiet = { itl_ms: stats(itl.quiet), stream_tok_s: round(streamTokensIn.quiet / (quietMs / 1000)) };
const loaded = {
  itl_ms: stats(itl.loaded), stream_tok_s: round(streamTokensIn.loaded / (loadMs / 1000)),
  long_ttft_ms: stats(longTtft), long_prompt_tokens: longPromptTokens, long_errors: longErrors,
};
const ratio = (a, b) => (a !== null && b ? round(a / b) : null);
console.log(JSON.stringify({
  streams: nStreams, long_tokens: longTokens, every_s: everyMs / 1000, quiet, loaded,
  itl_p99_loaded_over_quiet: ratio(loaded.itl_ms.p99, quiet.itl_ms.p99),
  itl_p50_loaded_over_quiet: ratio(loaded.itl_ms.p50, quiet.itl_ms.p50),
}));
