#!/usr/bin/env bash
# Zero copy, seen in memory: the decode server's resident memory before and after one
# LONG_TOKENS-token prompt, colocated (`serve`) and disaggregated (`serve --disagg
# prefill=cpu:0,decode=cpu:1`: the worker writes the prompt's KV into pages the server maps).
# Prints one JSON line per mode: the server's RssAnon and RssShmem (KiB, from
# /proc/PID/status) before and after, their growth, the prompt's tokens, the machine's Shmem
# growth and, for the disaggregated server, the same figures of its worker. A private page pool grows RssAnon by
# the prompt's KV as it is written; a shared one grows RssShmem of both processes and leaves
# RssAnon alone, and the machine's Shmem (/proc/meminfo) grows once: one copy of the pages,
# mapped by both.
#
# Environment: SHARDLM, MODEL (bench_lib.sh), LONG_TOKENS (4096), PORT.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BENCH_NAME=disagg_rss
# shellcheck source-path=SCRIPTDIR source=bench_lib.sh
source "$here/bench_lib.sh"
LONG_TOKENS=${LONG_TOKENS:-4096}
log=$(mktemp /tmp/shardlm-disagg-rss.XXXXXX.log)
trap 'bench_stop_server 5 || true; rm -f "$log"' EXIT
bench_ensure_model "$SHARDLM" "$MODEL"

# rss PID: {"anon_kib":N,"shmem_kib":N} of the process.
rss() {
  awk '/^RssAnon:/ {a = $2} /^RssShmem:/ {s = $2}
       END {printf "{\"anon_kib\":%d,\"shmem_kib\":%d}", a, s}' "/proc/$1/status"
}

# The worker `serve --disagg` started: the server's one child process.
worker_pid() { cat "/proc/$BENCH_SERVER_PID/task/$BENCH_SERVER_PID/children" | awk '{print $1}'; }

measure() {  # measure MODE [SERVE FLAGS...]
  local mode=$1
  shift
  BENCH_PORT=${PORT:-}
  bench_start_server "$SHARDLM" "$log" -m "$MODEL" --parallel 1 \
    --ctx-size $((LONG_TOKENS + 512)) --disagg-min-tokens 64 "$@"
  local worker='' server_before worker_before='null' server_after worker_after='null' tokens
  local shmem_before shmem_after
  [[ $mode == disaggregated ]] && worker=$(worker_pid)
  shmem_before=$(awk '/^Shmem:/ {print $2}' /proc/meminfo)
  server_before=$(rss "$BENCH_SERVER_PID")
  [[ -n $worker ]] && worker_before=$(rss "$worker")
  # A prompt of about LONG_TOKENS tokens (characters per token measured with POST /tokenize).
  tokens=$(node -e '
    const [n, port] = process.argv.slice(1).map(Number);
    const base = `http://127.0.0.1:${port}`, json = {"content-type": "application/json"};
    const sentence = "Once upon a time, a small fox lived at the edge of a large forest. ";
    (async () => {
      const sample = sentence.repeat(8);
      const t = await (await fetch(base + "/tokenize", {method: "POST", headers: json,
        body: JSON.stringify({content: sample})})).json();
      const chars = Math.round((n * sample.length) / t.tokens.length);
      const prompt = sentence.repeat(Math.ceil(chars / sentence.length)).slice(0, chars);
      const j = await (await fetch(base + "/v1/completions", {method: "POST", headers: json,
        body: JSON.stringify({prompt, max_tokens: 8, temperature: 0})})).json();
      if (!j.usage) throw new Error(JSON.stringify(j));
      console.log(j.usage.prompt_tokens);
    })();
  ' "$LONG_TOKENS" "$BENCH_PORT")
  server_after=$(rss "$BENCH_SERVER_PID")
  shmem_after=$(awk '/^Shmem:/ {print $2}' /proc/meminfo)
  [[ -n $worker ]] && worker_after=$(rss "$worker")
  bench_stop_server 5 || true
  node -e '
    const [mode, tokens, sb, sa, wb, wa, mb, ma] = process.argv.slice(1);
    const s0 = JSON.parse(sb), s1 = JSON.parse(sa), w0 = JSON.parse(wb), w1 = JSON.parse(wa);
    const grow = (a, b) => ({anon_kib: b.anon_kib - a.anon_kib, shmem_kib: b.shmem_kib - a.shmem_kib});
    console.log(JSON.stringify({mode, prompt_tokens: Number(tokens),
      machine_shmem_growth_kib: Number(ma) - Number(mb),
      server: {before: s0, after: s1, growth: grow(s0, s1)},
      worker: w0 ? {before: w0, after: w1, growth: grow(w0, w1)} : null}));
  ' "$mode" "$tokens" "$server_before" "$server_after" "$worker_before" "$worker_after" \
    "$shmem_before" "$shmem_after"
}

measure colocated
measure disaggregated --disagg prefill=cpu:0,decode=cpu:1
