#!/usr/bin/env bash
# Windowed layers' KV kept in rings (`--window-kv ring`) against the whole context in pages
# (`--window-kv full`) and llama.cpp, deep into a context: decode tok/s of TG tokens after DEPTH
# positions (prefilled untimed: `shardlm bench --depth`, `llama-bench -d`) and the peak resident
# memory of each run (the weights are the same file in every run, so the difference is KV).
# The three runs alternate their order round by round, so the machine's drift over minutes
# touches them alike; ratios are per round, the figure is their median.
#
# Usage: bench/window_kv_bench.sh MODEL   (a model with windowed layers: gemma3, gemma4)
# Environment: SHARDLM (build/shardlm), LLAMA_BENCH (../shared/oracle/llama-bench), ROUNDS (3),
# DEPTH (8192), TG (64), THREADS (2), KV_TYPE (f16, in all three).
# Prints one JSON line per run {"round", "engine", "ts", "peak_rss_mib"} on stderr, then one
# summary JSON line on stdout: per engine its tok/s and peak RSS per round, and the median
# ratios ring / full and ring / llama.cpp of tok/s.
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
DEPTH=${DEPTH:-8192}
TG=${TG:-64}
THREADS=${THREADS:-2}
KV_TYPE=${KV_TYPE:-f16}

out=$(mktemp)
rss=$(mktemp)
trap 'rm -f "$out" "$rss"' EXIT

run() {  # $1 = round, $2 = engine name; the command follows
  local round=$1 engine=$2
  shift 2
  local ts
  ts=$(/usr/bin/time -f '%M' -o "$rss" "$@" 2>/dev/null | jq -s 'last | (.median_ts // .avg_ts)')
  jq -nc --argjson r "$round" --arg e "$engine" --argjson ts "$ts" \
    --argjson kib "$(tail -1 "$rss")" '{round: $r, engine: $e, ts: $ts, peak_rss_mib: ($kib / 1024)}' |
    tee -a "$out" >&2
}

shardlm() {  # $1 = round, $2 = ring | full
  run "$1" "shardlm-$2" "$SHARDLM" bench -m "$model" -p 0 -n "$TG" --depth "$DEPTH" -r 1 \
    -t "$THREADS" --kv-type "$KV_TYPE" --window-kv "$2" --json
}

llama() {  # $1 = round
  run "$1" "llama.cpp" "$LLAMA_BENCH" -m "$model" -t "$THREADS" -p 0 -n "$TG" -d "$DEPTH" -r 1 \
    -ctk "$KV_TYPE" -ctv "$KV_TYPE" -o jsonl
}

for ((round = 1; round <= ROUNDS; round++)); do
  case $((round % 3)) in
    1) shardlm "$round" ring; shardlm "$round" full; llama "$round" ;;
    2) shardlm "$round" full; llama "$round"; shardlm "$round" ring ;;
    0) llama "$round"; shardlm "$round" ring; shardlm "$round" full ;;
  esac
done

jq -sc --argjson depth "$DEPTH" --argjson tg "$TG" '
  def median: sort | if length % 2 == 1 then .[length / 2 | floor]
                     else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  def of($e): map(select(.engine == $e)) | sort_by(.round);
  (of("shardlm-ring")) as $ring | (of("shardlm-full")) as $full | (of("llama.cpp")) as $llama |
  {test: "tg\($tg)@d\($depth)",
   ring_ts: $ring | map(.ts), full_ts: $full | map(.ts), llama_cpp_ts: $llama | map(.ts),
   ring_peak_rss_mib: $ring | map(.peak_rss_mib), full_peak_rss_mib: $full | map(.peak_rss_mib),
   llama_cpp_peak_rss_mib: $llama | map(.peak_rss_mib),
   ring_over_full_median: [range($ring | length) | $ring[.].ts / $full[.].ts] | median,
   ring_over_llama_cpp_median: [range($ring | length) | $ring[.].ts / $llama[.].ts] | median}
' "$out"
