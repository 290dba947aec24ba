#!/usr/bin/env bash
# Prefill through a bounded KV pool against the unbounded engine: `shardlm bench -p N -n 0`
# with and without `--kv-pool POOL` alternate round by round (pooled first in odd rounds),
# on the random-weight Qwen3-0.6B-shaped Q4_K_M model, so the machine's drift touches both
# alike. Past the pool the prompt prefills chunk by chunk through it and attention reads at
# most POOL positions, so its cost stops growing with the prompt.
#
# Prints one JSON line per round and size on stdout: {"n_prompt", "round", "unbounded_s",
# "pooled_s", "ratio"} with ratio = unbounded_s / pooled_s (above 1: the pool is faster),
# then one {"n_prompt", "median_ratio", "rounds"} line per size. Logs go to stderr.
#
# Environment: SHARDLM (build/shardlm), MODEL (the synth Q4_K_M file, written when missing),
# POOL (2048), SIZES ("4096 8192"), ROUNDS (3), THREADS (2), KV_TYPE (f16).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
BENCH_NAME=kv_pool_prefill
# shellcheck source=bench/bench_lib.sh
source "$here/bench_lib.sh"
POOL=${POOL:-2048}
SIZES=${SIZES:-"4096 8192"}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2}
KV_TYPE=${KV_TYPE:-f16}

bench_ensure_model "$SHARDLM" "$MODEL"

# seconds N [extra flags...]: the wall time of one pp<N> run.
seconds() {
  local n=$1
  shift
  "$SHARDLM" bench -m "$MODEL" -p "$n" -n 0 -r 1 -t "$THREADS" --kv-type "$KV_TYPE" --json "$@" |
    node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{
      console.log(JSON.parse(s.trim().split("\n").pop()).avg_ns / 1e9)})'
}

for n in $SIZES; do
  ratios=()
  for round in $(seq 1 "$ROUNDS"); do
    bench_log "pp$n round $round/$ROUNDS"
    if ((round % 2)); then
      pooled=$(seconds "$n" --kv-pool "$POOL")
      unbounded=$(seconds "$n")
    else
      unbounded=$(seconds "$n")
      pooled=$(seconds "$n" --kv-pool "$POOL")
    fi
    ratio=$(node -e "console.log(($unbounded / $pooled).toFixed(3))")
    ratios+=("$ratio")
    echo "{\"n_prompt\":$n,\"round\":$round,\"pool\":$POOL,\"unbounded_s\":$unbounded,\"pooled_s\":$pooled,\"ratio\":$ratio}"
  done
  median=$(printf '%s\n' "${ratios[@]}" | sort -g | node -e 'let s="";process.stdin.on("data",
    d=>s+=d).on("end",()=>{const v=s.trim().split("\n").map(Number);const m=v.length>>1;
    console.log(v.length%2?v[m]:((v[m-1]+v[m])/2).toFixed(3))})')
  echo "{\"n_prompt\":$n,\"pool\":$POOL,\"median_ratio\":$median,\"rounds\":$ROUNDS}"
done
