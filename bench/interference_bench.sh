#!/usr/bin/env bash
# Long prefills against running streams: starts `shardlm serve` on a random-weight
# Qwen3-0.6B-shaped Q4_K_M model (written by `shardlm gguf synth` when missing), runs
# bench/interference.mjs against it (STREAMS streams decoding all along; after a quiet phase,
# a LONG_TOKENS-token prompt every EVERY_S seconds), stops the server and prints the client's
# JSON line on stdout. Logs go to stderr; the server's log to $SERVER_LOG.
#
# Environment: SHARDLM (binary, default build/shardlm), MODEL (default
# /tmp/shardlm-qwen3-0.6b-q4_k_m.gguf), STREAMS (4), LONG_TOKENS (8192), EVERY_S (30: longer than one such prefill
# takes on 2 cores, or the prompts queue without bound),
# QUIET_S (20), LOAD_S (90), STREAM_CONTEXT (0: the streams start from a short prompt and grow
# all run long; N: they start N tokens deep, from a shared cached head, see interference.mjs),
# STREAM_TOKENS (tokens per stream request before it is sent again; default: until the context
# is full), THREADS (0 = every core), PORT (default: a free one),
# SERVER_LOG (default a temp file), SERVE_ARGS (extra flags for serve, e.g. --prefill-chunk
# 64).
#
# On a shared machine run it in a session of its own with a higher autogroup priority:
#   setsid bash -c 'echo -20 > /proc/self/autogroup; exec bench/interference_bench.sh'
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BENCH_NAME=interference_bench
# shellcheck source-path=SCRIPTDIR source=bench_lib.sh
source "$here/bench_lib.sh"
STREAMS=${STREAMS:-4}
LONG_TOKENS=${LONG_TOKENS:-8192}
EVERY_S=${EVERY_S:-30}
QUIET_S=${QUIET_S:-20}
LOAD_S=${LOAD_S:-90}
THREADS=${THREADS:-0}
SERVER_LOG=${SERVER_LOG:-$(mktemp /tmp/shardlm-interference.XXXXXX.log)}
# Room for a long prompt (and the chat template around it) in every sequence; the streams
# decode until their context is full and start again.
CTX=$((LONG_TOKENS + 512))

bench_ensure_model "$SHARDLM" "$MODEL"
BENCH_PORT=${PORT:-}
# Slots for the streams and two long prompts at once (one prefilling, one queued).
# shellcheck disable=SC2086
bench_start_server "$SHARDLM" "$SERVER_LOG" -m "$MODEL" --parallel $((STREAMS + 2)) \
  --ctx-size "$CTX" --threads "$THREADS" --max-queue 64 ${SERVE_ARGS:-}
trap 'bench_stop_server 5 || true' EXIT

node "$here/interference.mjs" --url "http://127.0.0.1:$BENCH_PORT" --streams "$STREAMS" \
  --long-tokens "$LONG_TOKENS" --every-s "$EVERY_S" --quiet-s "$QUIET_S" --load-s "$LOAD_S" \
  --stream-tokens "${STREAM_TOKENS:-$((CTX - 64))}" --stream-context "${STREAM_CONTEXT:-0}"

bench_stop_server 5 || true
trap - EXIT
