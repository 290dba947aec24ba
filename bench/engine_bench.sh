#!/usr/bin/env bash
# Engine benchmark: prefill/decode throughput (`shardlm bench`, llama-bench's method) and
# peak RSS of `shardlm run`, on random-weight models in the shape of Qwen3-0.6B written by
# `shardlm gguf synth` (Q4_K_M and Q8_0, the files of fixtures/README.md section 8).
#
# Prints JSON lines on stdout: one per bench test (the fields of `shardlm bench --json`
# plus `llama_cpp_ref_ts` and `ratio` = avg_ts / llama_cpp_ref_ts), then one `run_rss` line
# per model (max_rss_kib, weights and KV bytes). Logs go to stderr.
#
# Environment: SHARDLM (binary, default build/shardlm), MODEL_DIR (default /tmp), THREADS
# (2), PP (512), TG (128), REPS (5), TYPES ("q4_k_m q8_0"). Needs /usr/bin/time; jq adds
# the ratio fields when present.
set -euo pipefail

SHARDLM=${SHARDLM:-build/shardlm}
MODEL_DIR=${MODEL_DIR:-/tmp}
THREADS=${THREADS:-2}
PP=${PP:-512}
TG=${TG:-128}
REPS=${REPS:-5}
TYPES=${TYPES:-"q4_k_m q8_0"}
PROMPT=${PROMPT:-"The quick brown fox jumps over the lazy dog. In a distant land, a small \
village kept a library of old maps, and every evening the children gathered to trace the \
rivers and mountains with their fingers while the keeper told stories of the travellers."}

# llama.cpp 3f545be on the same kind of machine (fixtures/README.md section 8), tok/s.
ref_ts() {
  case "$1:$2" in
    q4_k_m:pp512) echo 160 ;; q4_k_m:tg128) echo 59 ;;
    q8_0:pp512) echo 137 ;; q8_0:tg128) echo 35 ;;
    *) echo null ;;
  esac
}

annotate() {  # $1 = type; reads bench JSON lines, adds the reference and the ratio
  local type=$1 line test ref
  while IFS= read -r line; do
    if command -v jq >/dev/null; then
      test=$(jq -r .test <<<"$line")
      ref=$(ref_ts "$type" "$test")
      jq -c --argjson ref "$ref" \
        '. + {llama_cpp_ref_ts: $ref, ratio: (if $ref == null then null else .avg_ts / $ref end)}' \
        <<<"$line"
    else
      echo "$line"
    fi
  done
}

for type in $TYPES; do
  model="$MODEL_DIR/shardlm-qwen3-0.6b-$type.gguf"
  if [[ ! -f "$model" ]]; then
    echo "engine_bench: writing $model" >&2
    "$SHARDLM" gguf synth --arch qwen3 --preset 0.6b --type "$type" -o "$model" -q >&2
  fi
  echo "engine_bench: bench $model (-p $PP -n $TG -t $THREADS -r $REPS)" >&2
  "$SHARDLM" bench -m "$model" -p "$PP" -n "$TG" -t "$THREADS" -r "$REPS" --json | annotate "$type"

  log=$(mktemp)
  /usr/bin/time -v "$SHARDLM" run -m "$model" -p "$PROMPT" -n 64 --temp 0 -t "$THREADS" \
    >/dev/null 2>"$log"
  rss_kib=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$log")
  kv_mib=$(awk '/^kv cache:/ {print $3}' "$log")
  weights=$(stat -c %s "$model")
  rm -f "$log"
  printf '{"test":"run_rss","model_filename":"%s","n_threads":%s,"n_gen":64,"max_rss_kib":%s,"file_bytes":%s,"kv_mib":%s}\n' \
    "$model" "$THREADS" "$rss_kib" "$weights" "$kv_mib"
done
