#!/usr/bin/env bash
# Layer-split benchmark: decode and prefill throughput of one model unsplit, as 2
# local stages (cpu:0 + cpu:1, layers 1:1) and as a local stage + a remote stage (cpu:0 + a
# `shardlm shard` daemon pinned to core 1), at 1 stream (`shardlm bench`, llama-bench's
# method) and at 1 and 4 concurrent streams (`shardlm serve` under bench/load_gen.mjs, via
# bench/serve_bench.sh). Model: a random-weight Qwen3-0.6B-shaped Q4_K_M file written by
# `shardlm gguf synth` when missing.
#
# Prints JSON lines on stdout, each with "config" (unsplit | local2 | local_remote) and
# "placement" (the --devices value) added: the lines of `shardlm bench --json` (tests pp<PP>,
# tg<TG> and tg<TG>x<S>), then
# load_gen's line per concurrency level and serve_bench's `serve_cpu` line; last, one
# `bytes_between_stages` line: a token crossing a stage boundary moves one float32 hidden
# row, n_embd x 4 bytes (per boundary, per token, both for prefill and decode). Logs go to
# stderr.
#
# Environment: SHARDLM (binary, default build/shardlm), MODEL (default
# /tmp/shardlm-qwen3-0.6b-q4_k_m.gguf), CONFIGS ("unsplit local2 local_remote"), PP (512),
# TG (128), STREAMS (1; a list such as 1,4 adds tg<TG>x<S>: S streams decoding together,
# on a split one micro-batch per stage in flight), REPS (3), CONCURRENCY (1,4), MAX_TOKENS
# (64), PROMPT_TOKENS (128), PARALLEL (4).
# Needs 2 cores (cpu:0 and cpu:1). On a shared machine run it in a session of its own:
#   setsid bash -c 'echo -20 > /proc/self/autogroup; SHARDLM=build/shardlm exec bench/split_bench.sh'
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BENCH_NAME=split_bench
# shellcheck source-path=SCRIPTDIR source=bench_lib.sh
source "$here/bench_lib.sh"
CONFIGS=${CONFIGS:-"unsplit local2 local_remote"}
PP=${PP:-512}
TG=${TG:-128}
REPS=${REPS:-3}
STREAMS=${STREAMS:-1}
CONCURRENCY=${CONCURRENCY:-1,4}
export SHARDLM MODEL CONCURRENCY
export MAX_TOKENS=${MAX_TOKENS:-64} PROMPT_TOKENS=${PROMPT_TOKENS:-128} PARALLEL=${PARALLEL:-4}

bench_ensure_model "$SHARDLM" "$MODEL"

tmp=$(mktemp -d /tmp/shardlm-split-bench.XXXXXX)
shard_pid=
stop_shard() {
  bench_stop_pid "$shard_pid" || true
  shard_pid=
}
trap 'stop_shard; rm -rf "$tmp"' EXIT

# Starts a shard daemon pinned to core 1 (--cores 1-1) and waits (up to 30 s) for its "listening" line.
start_shard() {
  local socket=$1
  "$SHARDLM" shard --listen "unix:$socket" --cores 1-1 >"$tmp/shard.log" 2>&1 &
  shard_pid=$!
  for _ in $(seq 1 300); do
    grep -q "listening on unix:$socket" "$tmp/shard.log" && return 0
    kill -0 "$shard_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "split_bench: the shard daemon did not start; log:" >&2
  cat "$tmp/shard.log" >&2
  exit 1
}

tag() {  # $1 = config, $2 = devices: prefixes every JSON line read with both
  sed -u "s|^{|{\"config\":\"$1\",\"placement\":\"$2\",|"
}

for config in $CONFIGS; do
  case $config in
    unsplit) devices=cpu; split_args=() ;;
    local2) devices=cpu:0,cpu:1; split_args=(--layer-split 1,1) ;;
    local_remote)
      devices="cpu:0,unix:$tmp/s1.sock"; split_args=(--layer-split 1,1)
      start_shard "$tmp/s1.sock" ;;
    *) echo "split_bench: unknown config $config (unsplit, local2, local_remote)" >&2; exit 2 ;;
  esac
  echo "split_bench: $config: bench --devices $devices (-p $PP -n $TG -s $STREAMS -r $REPS)" >&2
  "$SHARDLM" bench -m "$MODEL" -p "$PP" -n "$TG" -s "$STREAMS" -r "$REPS" -t 2 \
    --devices "$devices" "${split_args[@]}" --json | tag "$config" "$devices"
  echo "split_bench: $config: serve --devices $devices, load at $CONCURRENCY streams" >&2
  SERVE_ARGS="--devices $devices ${split_args[*]}" SERVER_LOG="$tmp/serve-$config.log" \
    "$here/serve_bench.sh" | tag "$config" "$devices"
  grep -E "stage [0-9]+:" "$tmp/serve-$config.log" >&2 || true
  stop_shard
done

n_embd=$("$SHARDLM" gguf info "$MODEL" | awk '$1 ~ /\.embedding_length$/ {print $3}')
printf '{"test":"bytes_between_stages","n_embd":%s,"bytes_per_token_per_boundary":%s}\n' \
  "$n_embd" "$((n_embd * 4))"
