#!/usr/bin/env bash
# Every weight type against llama.cpp on the Qwen3-0.6B shape: for each type, a synth model
# (written once to DIR), then rounds in which every type runs bench/vs_llama_bench.sh once
# (pp512 and tg128 of shardlm and llama-bench, which engine goes first alternating by round)
# and the machine's read bandwidth is measured (bench/read_bandwidth), so each type's figures
# and its reference's come from the same minutes.
#
# Per type and round: the ratios shardlm / llama.cpp, and decode's weight rate: tg t/s times
# the file's bytes (Qwen3-0.6B ties its head to the embedding, so a token reads about every
# byte of the file), in GB/s, as a fraction of the measured bandwidth and of Q4_K_M's rate in
# the same round. Figures are medians over rounds (with two, the lower one); the ratios of
# every round are printed too, so that a noisy machine's spread shows.
#
# Usage: bench/types_bench.sh [TYPE...]   (default: q4_k_m q8_0 and every IQ, TQ, MXFP4 type)
# Environment: SHARDLM (build/shardlm), READ_BANDWIDTH (build/bench/read_bandwidth), DIR
# (/tmp: the synth models, shardlm-qwen3-0.6b-TYPE.gguf), ROUNDS (3), REPS (2), THREADS (2),
# and vs_llama_bench.sh's LLAMA_BENCH, PP, TG.
# Prints one JSON line per type: {"type", "pp_ratio", "tg_ratio", "pp_ratios", "tg_ratios"
# (per round, in order), "shardlm_pp", "shardlm_tg", "llama_pp", "llama_tg", "decode_gb_s",
# "of_bandwidth", "of_q4_k_m_rate", "bandwidth_gb_s"}, then a Markdown table of the same on
# stderr.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
SHARDLM=${SHARDLM:-build/shardlm}
READ_BANDWIDTH=${READ_BANDWIDTH:-build/bench/read_bandwidth}
DIR=${DIR:-/tmp}
ROUNDS=${ROUNDS:-3}
export REPS=${REPS:-2} THREADS=${THREADS:-2} SHARDLM

types=("$@")
if [[ ${#types[@]} -eq 0 ]]; then
  types=(q4_k_m q8_0 iq4_nl iq4_xs iq3_s iq3_xxs iq2_s iq2_xs iq2_xxs iq1_m iq1_s tq1_0 tq2_0 mxfp4)
fi
[[ " ${types[*]} " == *" q4_k_m "* ]] || types=(q4_k_m "${types[@]}")  # the rate's reference

model_of() { echo "$DIR/shardlm-qwen3-0.6b-$1.gguf"; }
for type in "${types[@]}"; do
  model=$(model_of "$type")
  if [[ ! -f "$model" ]]; then
    echo "types_bench: writing $model" >&2
    "$SHARDLM" gguf synth --arch qwen3 --preset 0.6b --type "$type" -o "$model" -q >&2
  fi
done

rows=$(mktemp)
summary=$(mktemp)
trap 'rm -f "$rows" "$summary"' EXIT
for ((round = 1; round <= ROUNDS; round++)); do
  bandwidth=$("$READ_BANDWIDTH" --threads "$THREADS" | jq '.gb_per_s')
  for type in "${types[@]}"; do
    model=$(model_of "$type")
    FIRST_ROUND=$round ROUNDS=1 "$here/vs_llama_bench.sh" "$model" 2>/dev/null |
      jq -c --arg type "$type" --argjson round "$round" --argjson bw "$bandwidth" \
        --argjson bytes "$(stat -c %s "$model")" \
        '{type: $type, round: $round, bandwidth: $bw, bytes: $bytes, test: .test,
          shardlm: .shardlm_ts[0], llama: .llama_cpp_ts[0]}' >>"$rows"
  done
  echo "types_bench: round $round/$ROUNDS done" >&2
done

jq -s -c 'def median: sort | .[(length - 1) / 2 | floor];
  (map(select(.type == "q4_k_m" and (.test | startswith("tg"))) | {key: "\(.round)",
     value: (.shardlm * .bytes / 1e9)}) | from_entries) as $ref
  | group_by(.type)[] | . as $r
  | ($r | map(select(.test | startswith("pp")))) as $pp
  | ($r | map(select(.test | startswith("tg")))) as $tg
  | {type: $r[0].type,
     pp_ratio: ($pp | map(.shardlm / .llama) | median),
     tg_ratio: ($tg | map(.shardlm / .llama) | median),
     pp_ratios: ($pp | sort_by(.round) | map(.shardlm / .llama * 100 | round / 100)),
     tg_ratios: ($tg | sort_by(.round) | map(.shardlm / .llama * 100 | round / 100)),
     shardlm_pp: ($pp | map(.shardlm) | median), shardlm_tg: ($tg | map(.shardlm) | median),
     llama_pp: ($pp | map(.llama) | median), llama_tg: ($tg | map(.llama) | median),
     decode_gb_s: ($tg | map(.shardlm * .bytes / 1e9) | median),
     of_bandwidth: ($tg | map(.shardlm * .bytes / 1e9 / .bandwidth) | median),
     of_q4_k_m_rate: ($tg | map(.shardlm * .bytes / 1e9 / $ref["\(.round)"]) | median),
     bandwidth_gb_s: ($tg | map(.bandwidth) | median)}' "$rows" >"$summary"
cat "$summary"
jq -rs '"| type | pp512 shardlm | pp512 llama.cpp | ratio | per round | tg128 shardlm | tg128 llama.cpp | ratio | per round | decode GB/s | of bandwidth | of Q4_K_M rate |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|",
    (.[] | "| \(.type) | \(.shardlm_pp | floor) | \(.llama_pp | floor) | \(.pp_ratio * 100 | round / 100)x | \(.pp_ratios | join(", ")) | \(.shardlm_tg * 10 | round / 10) | \(.llama_tg * 10 | round / 10) | \(.tg_ratio * 100 | round / 100)x | \(.tg_ratios | join(", ")) | \(.decode_gb_s * 10 | round / 10) | \(.of_bandwidth * 100 | round)% | \(.of_q4_k_m_rate * 100 | round)% |")' "$summary" >&2
