#!/usr/bin/env bash
# shardlm against llama.cpp on one model file: `shardlm bench --json` and llama.cpp's
# `llama-bench -o jsonl` alternate round by round (shardlm first in odd rounds, llama.cpp in
# even ones), so the machine's drift over minutes touches both alike. Per round and test
# (ppPP, tgTG, and with DEPTH a tgTG at that depth) the ratio is shardlm's tok/s over
# llama.cpp's; the figure is the median over rounds.
#
# Usage: bench/vs_llama_bench.sh MODEL
# Environment: SHARDLM (build/shardlm), LLAMA_BENCH (../shared/oracle/llama-bench), ROUNDS (3),
# PP (512), TG (128), REPS (3), THREADS (2), DEPTH (0: none; else the decode test runs after
# DEPTH positions of context: shardlm's --depth, llama-bench's -d), KV_TYPE (f16, llama-bench's
# default cache type; both engines use it), FIRST_ROUND (1: the rounds' numbers start there, so
# a caller running one round at a time can still alternate which engine goes first).
# Prints one JSON line per test on stdout: {"test", "ratio_median", "ratios", "shardlm_ts",
# "llama_cpp_ts"} (per-round figures in order); the raw lines go to stderr.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 MODEL" >&2
  exit 2
fi
model=$1
here=$(cd "$(dirname "$0")" && pwd)
SHARDLM=${SHARDLM:-build/shardlm}
LLAMA_BENCH=${LLAMA_BENCH:-$here/../../shared/oracle/llama-bench}
ROUNDS=${ROUNDS:-3}
PP=${PP:-512}
TG=${TG:-128}
REPS=${REPS:-3}
THREADS=${THREADS:-2}
DEPTH=${DEPTH:-0}
KV_TYPE=${KV_TYPE:-f16}
FIRST_ROUND=${FIRST_ROUND:-1}

out=$(mktemp)
trap 'rm -f "$out"' EXIT

run_shardlm() {  # $1 = round
  local depth_args=()
  [[ $DEPTH -gt 0 ]] && depth_args=(--depth "$DEPTH")
  "$SHARDLM" bench -m "$model" -p "$PP" -n "$TG" -r "$REPS" -t "$THREADS" --json \
    --kv-type "$KV_TYPE" \
    "${depth_args[@]}" 2>/dev/null |
    jq -c --argjson r "$1" '{round: $r, engine: "shardlm", test: .test, ts: .median_ts}'
}

run_llama() {  # $1 = round
  local depth_args=()
  [[ $DEPTH -gt 0 ]] && depth_args=(-d "$DEPTH")
  "$LLAMA_BENCH" -m "$model" -t "$THREADS" -p "$PP" -n "$TG" -r "$REPS" -o jsonl \
    -ctk "$KV_TYPE" -ctv "$KV_TYPE" \
    "${depth_args[@]}" 2>/dev/null |
    jq -c --argjson r "$1" '{round: $r, engine: "llama.cpp",
      test: ((if .n_prompt > 0 then "pp\(.n_prompt)" else "tg\(.n_gen)" end)
             + (if .n_depth > 0 then "@d\(.n_depth)" else "" end)),
      ts: .avg_ts}'
}

for ((round = FIRST_ROUND; round < FIRST_ROUND + ROUNDS; round++)); do
  if ((round % 2 == 1)); then
    run_shardlm "$round" >>"$out"
    run_llama "$round" >>"$out"
  else
    run_llama "$round" >>"$out"
    run_shardlm "$round" >>"$out"
  fi
  echo "round $round of $FIRST_ROUND..$((FIRST_ROUND + ROUNDS - 1)) done" >&2
done
cat "$out" >&2

jq -s -c 'group_by(.test)[] | . as $rows
  | [range(($rows | map(.round) | min); ($rows | map(.round) | max) + 1)] as $rounds
  | {test: $rows[0].test,
     shardlm_ts: [$rounds[] as $r | $rows[] | select(.round == $r and .engine == "shardlm") | .ts],
     llama_cpp_ts: [$rounds[] as $r | $rows[] | select(.round == $r and .engine == "llama.cpp") | .ts]}
  | select((.shardlm_ts | length) > 0 and (.llama_cpp_ts | length) > 0)
  | .ratios = [range(0; [(.shardlm_ts | length), (.llama_cpp_ts | length)] | min) as $i
               | .shardlm_ts[$i] / .llama_cpp_ts[$i]]
  | .ratio_median = (.ratios | sort | .[(length - 1) / 2 | floor])' "$out"
