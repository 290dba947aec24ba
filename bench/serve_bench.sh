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
BENCH_NAME=serve_bench
# shellcheck source-path=SCRIPTDIR source=bench_lib.sh
source "$here/bench_lib.sh"
PARALLEL=${PARALLEL:-16}
CTX=${CTX:-512}
THREADS=${THREADS:-0}
CONCURRENCY=${CONCURRENCY:-1,4,8,16}
MAX_TOKENS=${MAX_TOKENS:-64}
PROMPT_TOKENS=${PROMPT_TOKENS:-128}
SERVER_LOG=${SERVER_LOG:-$(mktemp /tmp/shardlm-serve-bench.XXXXXX.log)}

bench_ensure_model "$SHARDLM" "$MODEL"
BENCH_PORT=${PORT:-}

# shellcheck disable=SC2086
bench_start_server "$SHARDLM" "$SERVER_LOG" -m "$MODEL" --parallel "$PARALLEL" \
  --ctx-size "$CTX" --threads "$THREADS" --max-queue 256 ${SERVE_ARGS:-}
server_pid=$BENCH_SERVER_PID
trap 'bench_stop_server 5 || true' EXIT

cpu_ticks() { bench_cpu_ticks "$server_pid"; }
hz=$(getconf CLK_TCK)
ncpu=$(nproc)
ticks0=$(cpu_ticks); t0=$(date +%s.%N)

load_args=(--url "http://127.0.0.1:$BENCH_PORT" --concurrency "$CONCURRENCY"
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
bench_stop_server 5 || true
trap - EXIT
