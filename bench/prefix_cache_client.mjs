#!/usr/bin/env node
// Client of bench/prefix_cache_bench.sh: time to first token of one long prompt
// sent as token ids, and the summary of a run's JSON lines against the prefix-cache goals.
//
//   node bench/prefix_cache_client.mjs ttft --url http://127.0.0.1:PORT --case cold
//     [--prompt-tokens 16384] [--suffix-tokens 32] [--suffix-seed 1] [--seed 5]
//     [--max-tokens 4] [--timeout-s 1800]
//   Sends one streaming POST /v1/completions whose prompt is an array of token ids: the
//   first prompt-tokens - suffix-tokens ids come from --seed (the shared prefix; the same in
//   every case of a run), the last suffix-tokens ids from --suffix-seed (a new tail per
//   case, so a hit covers every full page of the prefix and computes the rest). It asks
//   for logprobs (0 alternatives), which makes the server stream one chunk per token even
//   when its text is empty, as with a random-weight model; temperature 0, ignore_eos.
//   Prints one JSON line:
//     {"test":"ttft", "case", "prompt_tokens", "cached_tokens" (usage), "ttft_ms" (request
//      sent -> first chunk carrying a token, at the client), "server_ttft_ms" (the
//      server's queue_ms + prompt_ms), "queue_ms", "prompt_ms", "e2e_ms",
//      "completion_tokens", "metrics": how the server's prefix-cache counters changed}
//   and a progress line on stderr every 15 s while it waits.
//
//   node bench/prefix_cache_client.mjs summary FILE
//   Reads the JSON lines of a run (ttft lines and load_gen lines tagged with "config")
//   and prints one {"test":"summary", ...} line: memory and disk TTFT as fractions of cold,
//   and the throughput of each cache configuration against --no-prefix-cache (each turn
//   against the `off` turn of the same round, then the mean), each with its goal.
//
// Needs only node >= 18 (global fetch). Connects only to 127.0.0.1 / localhost.

import { readFileSync } from 'node:fs';
import http from 'node:http';
import { cliTools, round } from './cli_args.mjs';
import { takeSseData } from './sse.mjs';

const kGoals = { memory_of_cold: 0.02, disk_of_cold: 0.05, throughput_cost: 0.01 };
// Token ids of the prompts: away from the byte tokens at the start of the vocabulary and
// the special tokens at its end, so every id is an ordinary token of a Qwen3-shaped model.
const kFirstId = 1000;
const kIdRange = 100000;

const [command, ...rest] = process.argv.slice(2);
const { fail, log, parseArgs, boundedInt } = cliTools('prefix_cache_client');
const args = parseArgs(rest, { positional: true });

// mulberry32: a small deterministic generator, so a seed names the same tokens every run.
function tokens(seed, n) {
  let a = (seed * 0x9e3779b9) >>> 0;
  const out = new Array(n);
  for (let i = 0; i < n; i++) {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    out[i] = kFirstId + (((t ^ (t >>> 14)) >>> 0) % kIdRange);
  }
  return out;
}

// The server's prefix-cache counters from GET /metrics (shardlm_prompt_tokens_*,
// shardlm_prefix_cache_*, shardlm_kv_disk_*), keyed without the shardlm_ prefix; {} when
// unreachable.
async function cacheCounters(base) {
  try {
    const res = await fetch(`${base}/metrics`, { signal: AbortSignal.timeout(10000) });
    if (!res.ok) return {};
    const out = {};
    for (const line of (await res.text()).split('\n')) {
      const m = /^shardlm_((?:prompt_tokens|prefix_cache|kv_disk)\w*)\s+([0-9.eE+-]+)$/.exec(line);
      if (m) out[m[1]] = Number(m[2]);
    }
    return out;
  } catch {
    return {};
  }
}

// POST with node:http rather than fetch: fetch gives up on a response whose headers take
// more than 300 s, and the server sends them with the first token, after the prefill.
function postStream(url, body, timeoutMs) {
  return new Promise((resolve, reject) => {
    const req = http.request(url, {
      method: 'POST', headers: { 'content-type': 'application/json' }, timeout: timeoutMs,
    }, resolve);
    req.on('timeout', () => req.destroy(new Error(`no response within ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end(body);
  });
}

async function readAll(res) {
  let s = '';
  for await (const chunk of res) s += chunk;
  return s;
}

async function ttft() {
  const url = new URL(args.url ?? 'http://127.0.0.1:8080');
  if (!['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname)) {
    fail(`--url must point at this machine (127.0.0.1), got ${url.hostname}`);
  }
  const base = url.origin;
  const name = args.case ?? 'cold';
  const promptTokens = boundedInt(args['prompt-tokens'], 16384, 2, 1 << 20, '--prompt-tokens');
  const suffixTokens = boundedInt(args['suffix-tokens'], 32, 1, promptTokens - 1, '--suffix-tokens');
  const seed = boundedInt(args.seed, 5, 0, 1 << 30, '--seed');
  const suffixSeed = boundedInt(args['suffix-seed'], 1, 0, 1 << 30, '--suffix-seed');
  const maxTokens = boundedInt(args['max-tokens'], 4, 1, 4096, '--max-tokens');
  const timeoutMs = boundedInt(args['timeout-s'], 1800, 1, 86400, '--timeout-s') * 1000;
  // The suffix seed is offset so that no suffix equals the start of the prefix.
  const prompt = tokens(seed, promptTokens - suffixTokens)
    .concat(tokens(suffixSeed + 1000003, suffixTokens));
  const body = {
    prompt, max_tokens: maxTokens, temperature: 0, ignore_eos: true, logprobs: 0,
    stream: true, stream_options: { include_usage: true },
  };
  const before = await cacheCounters(base);
  const r = { ttft: null, usage: null, timings: null, done: false, error: null };
  const t0 = performance.now();
  const heartbeat = setInterval(() => {
    const s = Math.round((performance.now() - t0) / 1000);
    log(`${name}: ${r.ttft === null ? 'waiting for the first token' : 'decoding'}, ${s} s`);
  }, 15000);
  try {
    const res = await postStream(`${base}/v1/completions`, JSON.stringify(body), timeoutMs);
    if (res.statusCode !== 200) fail(`HTTP ${res.statusCode}: ${(await readAll(res)).slice(0, 300)}`);
    res.setEncoding('utf8');
    let buf = '';
    // Bounded: the timeout destroys the request, which ends this loop.
    for await (const value of res) {
      const now = performance.now();
      buf += value;
      const taken = takeSseData(buf);
      buf = taken.rest;
      for (const data of taken.payloads) {
        if (data === '[DONE]') { r.done = true; continue; }
        const j = JSON.parse(data);
        if (j.error) r.error = JSON.stringify(j.error).slice(0, 300);
        const choice = j.choices && j.choices[0];
        const carriesToken = choice && ((typeof choice.text === 'string' && choice.text !== '') ||
          (choice.logprobs && Array.isArray(choice.logprobs.tokens) && choice.logprobs.tokens.length > 0) ||
          choice.finish_reason);
        if (carriesToken && r.ttft === null) r.ttft = now - t0;
        if (j.usage) r.usage = j.usage;
        if (j.timings) r.timings = j.timings;
      }
    }
  } finally {
    clearInterval(heartbeat);
  }
  const e2e = performance.now() - t0;
  if (r.error) fail(`${name}: stream error ${r.error}`);
  if (!r.done || !r.usage) fail(`${name}: the stream ended without usage and [DONE]`);
  const after = await cacheCounters(base);
  const metrics = {};
  for (const k of Object.keys(after)) metrics[k] = after[k] - (before[k] ?? 0);
  const st = r.timings ?? {};
  const line = {
    test: 'ttft', case: name,
    prompt_tokens: r.usage.prompt_tokens,
    cached_tokens: r.usage.prompt_tokens_details?.cached_tokens ?? st.cache_n ?? null,
    ttft_ms: round(r.ttft),
    server_ttft_ms: r.timings ? round((st.queue_ms ?? 0) + (st.prompt_ms ?? 0)) : null,
    queue_ms: round(st.queue_ms), prompt_ms: round(st.prompt_ms),
    e2e_ms: round(e2e),
    completion_tokens: r.usage.completion_tokens,
    metrics,
  };
  log(`${name}: TTFT ${line.ttft_ms} ms (server ${line.server_ttft_ms} ms), ` +
    `${line.cached_tokens} of ${line.prompt_tokens} prompt tokens cached`);
  process.stdout.write(JSON.stringify(line) + '\n');
}

function summary() {
  const file = args._[0];
  if (!file) fail('summary: give the file of JSON lines');
  const lines = readFileSync(file, 'utf8').split('\n').filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l));
  const ttftOf = (name) => lines.find((l) => l.test === 'ttft' && l.case === name);
  const cold = ttftOf('cold');
  const out = { test: 'summary', goals: kGoals };
  const fraction = (name, goal) => {
    const hit = ttftOf(name);
    if (!cold || !hit) return null;
    const f = (k) => (cold[k] > 0 && hit[k] !== null ? round(hit[k] / cold[k], 4) : null);
    const r = { of_cold: f('ttft_ms'), server_of_cold: f('server_ttft_ms'),
      cached_tokens: hit.cached_tokens, prompt_tokens: hit.prompt_tokens };
    r.goal_met = r.of_cold !== null && r.of_cold <= goal;
    return r;
  };
  out.memory_hit = fraction('memory', kGoals.memory_of_cold);
  for (const name of ['disk', 'disk_cold_page_cache']) {
    const skipped = lines.find((l) => l.test === 'ttft_skipped' && l.case === name);
    const key = name === 'disk' ? 'disk_hit' : 'disk_hit_cold_page_cache';
    out[key] = skipped ? { skipped: skipped.reason } : fraction(name, kGoals.disk_of_cold);
  }
  // Throughput turns: load_gen lines tagged with config and round.
  const turns = lines.filter((l) => l.config && typeof l.output_tok_s === 'number');
  const rounds = [...new Set(turns.map((t) => t.round))];
  const configs = [...new Set(turns.map((t) => t.config))].filter((c) => c !== 'off');
  out.throughput = {};
  for (const c of configs) {
    const ratios = [];
    for (const rd of rounds) {
      const on = turns.find((t) => t.config === c && t.round === rd);
      const off = turns.find((t) => t.config === 'off' && t.round === rd);
      if (on && off && off.output_tok_s > 0) ratios.push(on.output_tok_s / off.output_tok_s);
    }
    if (!ratios.length) continue;
    const mean = ratios.reduce((a, b) => a + b, 0) / ratios.length;
    const cost = 1 - mean;
    out.throughput[c] = { ratio_to_off: ratios.map((x) => round(x, 4)), mean_ratio: round(mean, 4),
      cost: round(cost, 4), goal_met: cost <= kGoals.throughput_cost };
  }
  process.stdout.write(JSON.stringify(out) + '\n');
  const pct = (x) => (x === null || x === undefined ? '?' : `${round(100 * x, 2)}%`);
  const verdict = (met) => (met ? 'goal met' : 'goal NOT met');
  if (cold) log(`cold TTFT ${cold.ttft_ms} ms for ${cold.prompt_tokens} prompt tokens`);
  for (const [key, goal] of [['memory_hit', kGoals.memory_of_cold], ['disk_hit', kGoals.disk_of_cold],
    ['disk_hit_cold_page_cache', kGoals.disk_of_cold]]) {
    const r = out[key];
    if (!r) continue;
    if (r.skipped) { log(`${key}: skipped (${r.skipped})`); continue; }
    log(`${key}: ${pct(r.of_cold)} of cold (goal <= ${pct(goal)}), ${r.cached_tokens} of ` +
      `${r.prompt_tokens} tokens cached: ${verdict(r.goal_met)}`);
  }
  for (const [c, r] of Object.entries(out.throughput)) {
    log(`throughput ${c} / off: ${r.ratio_to_off.join(', ')}; cost ${pct(r.cost)} ` +
      `(goal <= ${pct(kGoals.throughput_cost)}): ${verdict(r.goal_met)}`);
  }
}

if (command === 'ttft') {
  ttft().catch((e) => fail(e && e.stack ? e.stack : String(e)));
} else if (command === 'summary') {
  summary();
} else {
  fail('usage: prefix_cache_client.mjs ttft|summary ... (see the comment at the top)');
}
