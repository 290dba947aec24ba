#!/usr/bin/env node
// Load generator for `shardlm serve` (or any OpenAI-compatible server on this machine).
//
// Starts nothing itself: point it at a running server. For each concurrency level it runs
// that many clients, each sending streaming POST /v1/completions (default) or
// /v1/chat/completions (--endpoint chat; with logprobs, so that every token makes a chunk
// even when its text is empty, as with a random-weight model) requests one after another
// (temperature 0, ignore_eos, max_tokens fixed, stream_options.include_usage) until the
// level's request count is issued or its time budget is spent, and prints one JSON line:
//
//   {"concurrency", "requests", "ok", "errors", "wall_s", "output_tokens",
//    "output_tok_s"        total completion tokens / wall time of the level (aggregate),
//    "decode_tok_s"        sum over requests of (tokens - 1) / the time during which at
//                          least one request was between its first and last token, i.e.
//                          the aggregate decode rate while streams run,
//    "endpoint", "latency_source", "ttft_ms": {p50, p99, mean}, "itl_ms": {p50, p99, mean}, "e2e_ms": {p50, p99},
//    "server": {prompt_tokens_mean, cached_tokens_mean, predicted_per_second_mean}}
//
// TTFT = request sent -> first SSE chunk carrying a token; inter-token latency = gaps
// between successive token chunks divided by the tokens the chunk carries (chat: the length
// of logprobs.content; completions: chunks with text, which skips tokens whose text is
// empty or held back). Output token counts come from the server's `usage`. When a request
// streamed no token chunks (completions on a random-weight model, whose greedy tokens have
// empty text), its TTFT is the server's queue_ms + prompt_ms and its inter-token latency the
// server's predicted_ms / completion tokens (one mean per request): `latency_source` says
// which ("client" or "server_timings").
//
// Usage: node bench/load_gen.mjs --url http://127.0.0.1:8080 [--concurrency 1,4,8,16]
//   [--requests N (per level; default 2 x concurrency, at least 4)] [--max-tokens 64]
//   [--prompt-tokens 128] [--api-key KEY] [--model NAME] [--warmup 1]
//   [--endpoint chat|completions] [--level-timeout-s 300] [--request-timeout-s 120]
// Needs only node >= 18 (global fetch). Connects only to 127.0.0.1 / localhost.

import { cliTools, round } from './cli_args.mjs';
import { takeSseData } from './sse.mjs';

const { fail, log, parseArgs, boundedInt } = cliTools('load_gen');
const args = parseArgs(process.argv.slice(2));
const url = new URL(args.url ?? 'http://127.0.0.1:8080');
if (!['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname)) {
  fail(`--url must point at this machine (127.0.0.1), got ${url.hostname}`);
}
const base = url.origin;
const levels = String(args.concurrency ?? '1,4,8,16')
  .split(',')
  .map((s) => Number.parseInt(s, 10))
  .filter((n) => Number.isFinite(n) && n > 0 && n <= 256);
if (levels.length === 0) fail('--concurrency: expected a list such as 1,4,8,16');
const maxTokens = boundedInt(args['max-tokens'], 64, 1, 4096, '--max-tokens');
const promptTokens = boundedInt(args['prompt-tokens'], 128, 1, 8192, '--prompt-tokens');
const requestsArg = args.requests === undefined ? null
  : boundedInt(args.requests, 0, 1, 10000, '--requests');
const warmup = boundedInt(args.warmup, 1, 0, 16, '--warmup');
const levelTimeoutMs = boundedInt(args['level-timeout-s'], 300, 1, 3600, '--level-timeout-s') * 1000;
const requestTimeoutMs = boundedInt(args['request-timeout-s'], 120, 1, 3600, '--request-timeout-s') * 1000;
const endpoint = args.endpoint ?? 'completions';
if (!['chat', 'completions'].includes(endpoint)) fail('--endpoint: chat or completions');
const apiKey = args['api-key'] ?? process.env.SHARDLM_API_KEY ?? '';
const headers = { 'content-type': 'application/json' };
if (apiKey) headers.authorization = `Bearer ${apiKey}`;

function percentile(sorted, p) {
  if (sorted.length === 0) return null;
  const idx = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return round(sorted[idx]);
}

function stats(values) {
  const s = [...values].sort((a, b) => a - b);
  const mean = s.length ? s.reduce((a, b) => a + b, 0) / s.length : null;
  return { p50: percentile(s, 50), p99: percentile(s, 99), mean: round(mean) };
}

async function fetchWithTimeout(path, init, ms) {
  const ctrl = new AbortController();
  const timer = setTimeout(() => ctrl.abort(new Error(`timeout after ${ms} ms`)), ms);
  try {
    return { res: await fetch(base + path, { ...init, signal: ctrl.signal }), timer, ctrl };
  } catch (e) {
    clearTimeout(timer);
    throw e;
  }
}

// A prompt text of about `promptTokens` tokens, calibrated with POST /tokenize when the
// server has it (otherwise assumes ~4 characters per token).
const FILLER = 'The quick brown fox jumps over the lazy dog. In a distant land, a small village ' +
  'kept a library of old maps, and every evening the children gathered to trace the rivers ' +
  'and mountains with their fingers while the keeper told stories of the travellers. ';

async function countTokens(text) {
  try {
    const { res, timer } = await fetchWithTimeout('/tokenize', {
      method: 'POST', headers, body: JSON.stringify({ content: text }),
    }, 10000);
    clearTimeout(timer);
    if (!res.ok) return null;
    const j = await res.json();
    return Array.isArray(j.tokens) ? j.tokens.length : null;
  } catch {
    return null;
  }
}

async function makeBasePrompt() {
  const sample = FILLER.repeat(4);
  const n = await countTokens(sample);
  const charsPerToken = n ? sample.length / n : 4;
  let text = '';
  const want = Math.max(1, Math.round(promptTokens * charsPerToken));
  for (let i = 0; i < 64 && text.length < want; i++) text += FILLER;
  text = text.slice(0, want);
  const got = await countTokens(text);
  log(`prompt: ${text.length} chars, ${got ?? '?'} tokens (asked ~${promptTokens})`);
  return text;
}

// Each request starts with a distinct tag so no two share a cached prefix.
let requestSerial = 0;
function promptFor(basePrompt) {
  const tag = `[request ${++requestSerial} ${Date.now() % 100000}] `;
  return tag + basePrompt.slice(Math.min(tag.length, basePrompt.length - 1));
}

async function oneRequest(basePrompt) {
  const body = endpoint === 'chat'
    ? { messages: [{ role: 'user', content: promptFor(basePrompt) }], logprobs: true, top_logprobs: 0 }
    : { prompt: promptFor(basePrompt) };
  Object.assign(body, {
    max_tokens: maxTokens,
    temperature: 0,
    ignore_eos: true,
    stream: true,
    stream_options: { include_usage: true },
  });
  if (args.model) body.model = args.model;
  const t0 = performance.now();
  const r = { ok: false, ttft: null, itls: [], tokens: 0, e2e: null, firstAt: null, lastAt: null,
    prompt_tokens: null, server_timings: null, latency_source: null, cached_tokens: null, predicted_per_second: null, error: null };
  let timer = null;
  try {
    const f = await fetchWithTimeout(endpoint === 'chat' ? '/v1/chat/completions' : '/v1/completions', {
      method: 'POST', headers, body: JSON.stringify(body),
    }, requestTimeoutMs);
    timer = f.timer;
    const res = f.res;
    if (!res.ok || !res.body) {
      r.error = `HTTP ${res.status}: ${(await res.text()).slice(0, 200)}`;
      return r;
    }
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buf = '';
    let chunkTimes = [];  // [time, text] per chunk with text
    let done = false;
    let finish = null;
    // Bounded: the request timeout aborts the body stream, which ends this loop.
    for (let reads = 0; reads < 1_000_000 && !done; reads++) {
      const { value, done: eof } = await reader.read();
      if (eof) break;
      const now = performance.now();
      buf += decoder.decode(value, { stream: true });
      const taken = takeSseData(buf);
      buf = taken.rest;
      for (const data of taken.payloads) {
        if (data === '[DONE]') { done = true; continue; }
        let j;
        try { j = JSON.parse(data); } catch { r.error = `bad SSE JSON: ${data.slice(0, 100)}`; continue; }
        if (j.error) { r.error = `stream error: ${JSON.stringify(j.error).slice(0, 200)}`; continue; }
        const choice = j.choices && j.choices[0];
        if (choice) {
          // completions: a chunk with text; chat: a chunk with content or logprobs (one
          // logprobs entry per token, so empty-text tokens count too).
          const lp = choice.logprobs?.content;
          const n = Array.isArray(lp) ? lp.length
            : (typeof choice.text === 'string' && choice.text.length > 0) ||
              (typeof choice.delta?.content === 'string' && choice.delta.content.length > 0) ? 1 : 0;
          if (n > 0) chunkTimes.push([now, n]);
        }
        if (choice && choice.finish_reason) finish = choice.finish_reason;
        if (j.usage) {
          r.tokens = j.usage.completion_tokens ?? 0;
          r.prompt_tokens = j.usage.prompt_tokens ?? null;
          r.cached_tokens = j.usage.prompt_tokens_details?.cached_tokens ??
            j.timings?.cache_n ?? null;
        }
        if (j.timings) {
          r.predicted_per_second = j.timings.predicted_per_second ?? null;
          r.server_timings = j.timings;
        }
      }
    }
    const tEnd = performance.now();
    r.e2e = tEnd - t0;
    if (chunkTimes.length > 0) {
      r.latency_source = 'client';
      r.ttft = chunkTimes[0][0] - t0;
      r.firstAt = chunkTimes[0][0];
      r.lastAt = chunkTimes[chunkTimes.length - 1][0];
      // A gap is spread over the tokens the later chunk carries (normally one).
      for (let i = 1; i < chunkTimes.length; i++) {
        const gap = (chunkTimes[i][0] - chunkTimes[i - 1][0]) / chunkTimes[i][1];
        for (let k = 0; k < chunkTimes[i][1]; k++) r.itls.push(gap);
      }
    } else if (r.server_timings && r.tokens > 0) {
      // No chunk per token (completions of tokens whose text is empty): the server's
      // timings stand in: TTFT = queue + prefill, one mean inter-token gap per request.
      const st = r.server_timings;
      r.latency_source = 'server_timings';
      r.ttft = (st.queue_ms ?? 0) + (st.prompt_ms ?? 0);
      r.firstAt = t0 + r.ttft;
      r.lastAt = tEnd;
      if (r.tokens > 1 && st.predicted_ms > 0) r.itls.push(st.predicted_ms / r.tokens);
    }
    if (!r.error && !done) r.error = 'stream ended without [DONE]';
    if (!r.error && r.tokens === 0) r.error = 'no usage.completion_tokens in the stream';
    if (!r.error && r.tokens !== maxTokens) {
      log(`note: ${r.tokens} tokens, not ${maxTokens} (finish_reason ${finish})`);
    }
    r.ok = !r.error;
    return r;
  } catch (e) {
    r.error = String(e && e.message ? e.message : e);
    return r;
  } finally {
    if (timer) clearTimeout(timer);
  }
}

async function runLevel(concurrency, basePrompt) {
  const total = requestsArg ?? Math.max(4, 2 * concurrency);
  const deadline = performance.now() + levelTimeoutMs;
  let issued = 0;
  const results = [];
  const t0 = performance.now();
  async function client() {
    // Bounded by the request count and the level's deadline.
    while (issued < total && performance.now() < deadline) {
      issued++;
      results.push(await oneRequest(basePrompt));
    }
  }
  await Promise.all(Array.from({ length: concurrency }, client));
  const wall = (performance.now() - t0) / 1000;
  const ok = results.filter((r) => r.ok);
  const errors = results.length - ok.length;
  for (const r of results.filter((x) => !x.ok).slice(0, 3)) log(`error: ${r.error}`);
  const outTokens = ok.reduce((a, r) => a + r.tokens, 0);
  // Aggregate decode rate: the decode-phase token rate of each request, summed over the
  // requests running at once = sum(rate_i * duration_i) / (time when any stream decodes).
  const spans = ok.filter((r) => r.lastAt > r.firstAt && r.tokens > 1)
    .map((r) => [r.firstAt, r.lastAt, r.tokens - 1]);
  let decodeRate = null;
  if (spans.length) {
    const sorted = spans.map(([a, b]) => [a, b]).sort((x, y) => x[0] - y[0]);
    let covered = 0, curA = sorted[0][0], curB = sorted[0][1];
    for (const [a, b] of sorted.slice(1)) {
      if (a > curB) { covered += curB - curA; curA = a; curB = b; } else curB = Math.max(curB, b);
    }
    covered += curB - curA;
    const decTokens = spans.reduce((s, x) => s + x[2], 0);
    decodeRate = covered > 0 ? decTokens / (covered / 1000) : null;
  }
  const mean = (xs) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null);
  return {
    concurrency,
    requests: results.length,
    ok: ok.length,
    errors,
    max_tokens: maxTokens,
    wall_s: round(wall, 3),
    output_tokens: outTokens,
    output_tok_s: round(outTokens / wall),
    decode_tok_s: round(decodeRate),
    endpoint,
    latency_source: [...new Set(ok.map((r) => r.latency_source))].join(',') || null,
    ttft_ms: stats(ok.map((r) => r.ttft).filter((x) => x !== null)),
    itl_ms: stats(ok.flatMap((r) => r.itls)),
    e2e_ms: (({ p50, p99 }) => ({ p50, p99 }))(stats(ok.map((r) => r.e2e))),
    server: {
      prompt_tokens_mean: round(mean(ok.map((r) => r.prompt_tokens).filter((x) => x !== null)), 1),
      cached_tokens_mean: round(mean(ok.map((r) => r.cached_tokens).filter((x) => x !== null)), 1),
      predicted_per_second_mean: round(mean(ok.map((r) => r.predicted_per_second).filter((x) => x !== null))),
    },
  };
}

async function main() {
  try {
    const { res, timer } = await fetchWithTimeout('/health', { headers }, 10000);
    clearTimeout(timer);
    if (!res.ok) fail(`GET /health: HTTP ${res.status}`);
  } catch (e) {
    fail(`cannot reach ${base}/health: ${e.message ?? e}`);
  }
  const basePrompt = await makeBasePrompt();
  for (let i = 0; i < warmup; i++) {
    const r = await oneRequest(basePrompt);
    log(`warm-up: ${r.ok ? `${r.tokens} tokens in ${round(r.e2e)} ms` : r.error}`);
  }
  for (const c of levels) {
    log(`concurrency ${c} ...`);
    const line = await runLevel(c, basePrompt);
    process.stdout.write(JSON.stringify(line) + '\n');
  }
}

main().catch((e) => fail(e && e.stack ? e.stack : String(e)));
