# shellcheck shell=bash
# Shared helpers of the benchmark scripts (sourced, not run): the synth model, a free port,
# starting `shardlm serve` and waiting for /health, stopping a process gracefully, and a
# process's CPU time. Every helper logs to stderr with the caller's $BENCH_NAME prefix.
#
# Goals: one copy of the start/wait/stop code, and of the default SHARDLM and MODEL, that
# serve_bench.sh, split_bench.sh and prefix_cache_bench.sh share. Non-goals: choosing flags
# (the callers do), running load.
#
# Use: BENCH_NAME=my_bench; source "$here/bench_lib.sh"

BENCH_NAME=${BENCH_NAME:-bench}

# The binary and the model the callers run unless their environment names others: the
# build's binary and the synth model bench_ensure_model writes.
SHARDLM=${SHARDLM:-build/shardlm}
MODEL=${MODEL:-/tmp/shardlm-qwen3-0.6b-q4_k_m.gguf}

# bench_log MESSAGE...: one line on stderr.
bench_log() { echo "$BENCH_NAME: $*" >&2; }

# bench_ensure_model SHARDLM MODEL: writes the random-weight Qwen3-0.6B-shaped Q4_K_M model
# (docs/BENCHMARKS.md) to MODEL when it is missing.
bench_ensure_model() {
  local shardlm=$1 model=$2
  [[ -f "$model" ]] && return 0
  bench_log "writing $model"
  "$shardlm" gguf synth --arch qwen3 --preset 0.6b --type q4_k_m -o "$model" -q >&2
}

# bench_free_port: prints a TCP port of 127.0.0.1 that was free a moment ago.
bench_free_port() {
  node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}

# bench_stop_pid PID [GRACE_S]: SIGTERM, up to GRACE_S seconds (default 5) to exit, then
# SIGKILL; reaps it when it is our child. Returns 1 when it had to be killed.
bench_stop_pid() {
  local pid=$1 grace=${2:-5} killed=0
  [[ -z "$pid" ]] && return 0
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 $((grace * 10))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      bench_log "pid $pid still running $grace s after SIGTERM: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      killed=1
    fi
  fi
  wait "$pid" 2>/dev/null || true
  return $killed
}

# bench_start_server SHARDLM LOG [SERVE FLAGS...]: starts `SHARDLM serve --host 127.0.0.1
# --port $BENCH_PORT FLAGS...` in the background with its output in LOG and waits up to
# $BENCH_HEALTH_TIMEOUT_S (default 60) seconds for GET /health. Sets BENCH_PORT (kept when
# already set, else a free port) and BENCH_SERVER_PID. Exits the script (with the log on
# stderr) when the server dies or never becomes healthy.
bench_start_server() {
  local shardlm=$1 log=$2
  shift 2
  BENCH_PORT=${BENCH_PORT:-$(bench_free_port)}
  "$shardlm" serve --host 127.0.0.1 --port "$BENCH_PORT" "$@" >"$log" 2>&1 &
  BENCH_SERVER_PID=$!
  bench_log "server pid $BENCH_SERVER_PID on 127.0.0.1:$BENCH_PORT (log $log)"
  local timeout=${BENCH_HEALTH_TIMEOUT_S:-60}
  for _ in $(seq 1 $((timeout * 10))); do
    if ! kill -0 "$BENCH_SERVER_PID" 2>/dev/null; then
      bench_log "server exited; log:"
      cat "$log" >&2
      exit 1
    fi
    if curl -fsS "http://127.0.0.1:$BENCH_PORT/health" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  bench_log "no /health after $timeout s; log:"
  cat "$log" >&2
  exit 1
}

# bench_stop_server [GRACE_S]: stops the server bench_start_server started (see
# bench_stop_pid); a server with a disk tier writes its queued pages before it exits, so
# give it a longer grace then.
bench_stop_server() {
  local rc=0
  bench_stop_pid "${BENCH_SERVER_PID:-}" "${1:-5}" || rc=$?
  BENCH_SERVER_PID=
  return $rc
}

# bench_cpu_ticks PID: user + system CPU time of PID, in clock ticks.
bench_cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
