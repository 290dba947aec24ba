#!/usr/bin/env bash
# Serving benchmark: starts `shardlm serve` on a random-weight Qwen3-0.6B-shaped Q4_K_M model
# (written by `shardlm gguf synth` when missing), waits for /health, runs
# bench/load_gen.mjs at each concurrency level, stops the server and prints load_gen's JSON
# lines on stdout (one per level) followed by one `serve_cpu` line (the server's CPU time /
# (wall time x cores) over the load). Logs go to stderr; the server's log to $SERVER_LOG.
#
# Environment: SHARDLM (binary, default build/shardlm), MODEL (default
# /tmp/shardlm-qwen3-0.6b-q4_k_m.gguf), PARALLEL (16), CTX (512, per sequence), THREADS
# (0 = every core), CONCURRENCY (1,4,8,16), REQUESTS (per level; default load_gen's
# 2 x concurrency, at least 4), MAX_TOKENS (64), PROMPT_TOKENS (128), PORT (default: a
# free one), ENDPOINT (completions, the default, or chat: see load_gen.mjs), SERVER_LOG (default a temp file), SERVE_ARGS (extra flags for serve).
#
# On a shared machine run it in a session of its own with a higher autogroup priority:
#   setsid bash -c 'echo -20 > /proc/self/autogroup; SHARDLM=build/shardlm exec bench/serve_bench.sh'
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SHARDLM=${SHARDLM:-build/shardlm}
MODEL=${MODEL:-/tmp/shardlm-qwen3-0.6b-q4_k_m.gguf}
PARALLEL=${PARALLEL:-16}
CTX=${CTX:-512}
THREADS=${THREADS:-0}
CONCURRENCY=${CONCURRENCY:-1,4,8,16}
MAX_TOKENS=${MAX_TOKENS:-64}
PROMPT_TOKENS=${PROMPT_TOKENS:-128}
SERVER_LOG=${SERVER_LOG:-$(mktemp /tmp/shardlm-serve-bench.XXXXXX.log)}

if [[ ! -f "$MODEL" ]]; then
  echo "serve_bench: writing $MODEL" >&2
  "$SHARDLM" gguf synth --arch qwen3 --preset 0.6b --type q4_k_m -o "$MODEL" -q >&2
fi

if [[ -z "${PORT:-}" ]]; then
  PORT=$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
fi

# shellcheck disable=SC2086
"$SHARDLM" serve -m "$MODEL" --host 127.0.0.1 --port "$PORT" --parallel "$PARALLEL" \
  --ctx-size "$CTX" --threads "$THREADS" --max-queue 256 ${SERVE_ARGS:-} >"$SERVER_LOG" 2>&1 &
server_pid=$!
stop_server() {
  if kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$server_pid" 2>/dev/null || true
  fi
  wait "$server_pid" 2>/dev/null || true
}
trap stop_server EXIT

echo "serve_bench: server pid $server_pid on 127.0.0.1:$PORT (log $SERVER_LOG)" >&2
healthy=0
for _ in $(seq 1 600); do  # up to 60 s for the model to load
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "serve_bench: server exited; log:" >&2; cat "$SERVER_LOG" >&2; exit 1
  fi
  if curl -fsS "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then healthy=1; break; fi
  sleep 0.1
done
[[ $healthy == 1 ]] || { echo "serve_bench: no /health after 60 s" >&2; exit 1; }

cpu_ticks() { awk '{print $14 + $15}' "/proc/$server_pid/stat"; }
hz=$(getconf CLK_TCK)
ncpu=$(nproc)
ticks0=$(cpu_ticks); t0=$(date +%s.%N)

load_args=(--url "http://127.0.0.1:$PORT" --concurrency "$CONCURRENCY"
  --max-tokens "$MAX_TOKENS" --prompt-tokens "$PROMPT_TOKENS")
[[ -n "${REQUESTS:-}" ]] && load_args+=(--requests "$REQUESTS")
[[ -n "${ENDPOINT:-}" ]] && load_args+=(--endpoint "$ENDPOINT")
node "$here/load_gen.mjs" "${load_args[@]}"

ticks1=$(cpu_ticks); t1=$(date +%s.%N)
awk -v a="$ticks0" -v b="$ticks1" -v t0="$t0" -v t1="$t1" -v hz="$hz" -v n="$ncpu" \
  -v load="$(cut -d' ' -f1-3 /proc/loadavg)" \
  'BEGIN { wall = t1 - t0; cpu = (b - a) / hz;
           printf "{\"test\":\"serve_cpu\",\"wall_s\":%.2f,\"cpu_s\":%.2f,\"cpu_share\":%.3f,\"cores\":%d,\"loadavg\":\"%s\"}\n",
                  wall, cpu, cpu / (wall * n), n, load }'
stop_server
trap - EXIT
