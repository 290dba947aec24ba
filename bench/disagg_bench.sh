#!/usr/bin/env bash
# Disaggregated against colocated prefill, paired: ROUNDS rounds of bench/interference_bench.sh
# (STREAMS streams decoding, then a LONG_TOKENS-token prompt every EVERY_S seconds) against two
# servers on the same two cores, in alternating order — colocated (`serve`, every core) and
# disaggregated (`serve --disagg prefill=cpu:0,decode=cpu:1`: a worker prefills the long prompts
# on core 0 into the KV pages the server decodes from on core 1). Prints one JSON line per run
# ({"round", "mode", ...interference_bench's figures}) and a last line with the median over
# rounds of each mode's figures and of the ratios the goal is stated in:
#   itl_p99_loaded_over_quiet (disaggregated; goal <= 1.5) and
#   long_ttft_p50_disagg_over_colocated (goal <= 1.3).
#
# The streams decode at one depth in both phases: each starts STREAM_CONTEXT (2048) tokens deep,
# from a cached head, and is sent again after STREAM_TOKENS (256) tokens, so the loaded phase's
# ITL is not measured deeper in the context (more KV read per token) than the quiet one's.
#
# Environment: ROUNDS (2), DISAGG_MIN_TOKENS (256), STREAM_CONTEXT, STREAM_TOKENS, and those of
# interference_bench.sh (STREAMS, LONG_TOKENS, EVERY_S, QUIET_S, LOAD_S, SHARDLM, MODEL).
# On a shared machine run it in a session of its own with a higher autogroup priority:
#   setsid bash -c 'echo -20 > /proc/self/autogroup; exec bench/disagg_bench.sh'
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROUNDS=${ROUNDS:-2}
DISAGG_MIN_TOKENS=${DISAGG_MIN_TOKENS:-256}
export STREAM_CONTEXT=${STREAM_CONTEXT:-2048} STREAM_TOKENS=${STREAM_TOKENS:-256}
results=$(mktemp /tmp/shardlm-disagg-bench.XXXXXX.jsonl)
trap 'rm -f "$results"' EXIT

run() {  # run ROUND MODE
  local round=$1 mode=$2 line
  if [[ $mode == colocated ]]; then
    line=$(THREADS=0 SERVE_ARGS="" "$here/interference_bench.sh")
  else
    line=$(THREADS=0 SERVE_ARGS="--disagg prefill=cpu:0,decode=cpu:1 \
--disagg-min-tokens $DISAGG_MIN_TOKENS" "$here/interference_bench.sh")
  fi
  line="{\"round\":$round,\"mode\":\"$mode\",${line#\{}"
  echo "$line" | tee -a "$results"
}

for ((round = 1; round <= ROUNDS; round++)); do
  if ((round % 2)); then
    run "$round" colocated
    run "$round" disaggregated
  else
    run "$round" disaggregated
    run "$round" colocated
  fi
done

node -e '
const lines = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
const median = (xs) => { const s = xs.filter((x) => x !== null).sort((a, b) => a - b);
  return s.length ? (s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2) : null; };
const r2 = (x) => (x === null ? null : Math.round(x * 100) / 100);
const of = (mode, pick) => median(lines.filter((l) => l.mode === mode).map(pick));
const summary = {};
for (const mode of ["colocated", "disaggregated"]) {
  summary[mode] = {
    quiet_itl_p50_ms: r2(of(mode, (l) => l.quiet.itl_ms.p50)),
    quiet_itl_p99_ms: r2(of(mode, (l) => l.quiet.itl_ms.p99)),
    loaded_itl_p50_ms: r2(of(mode, (l) => l.loaded.itl_ms.p50)),
    loaded_itl_p99_ms: r2(of(mode, (l) => l.loaded.itl_ms.p99)),
    quiet_stream_tok_s: r2(of(mode, (l) => l.quiet.stream_tok_s)),
    loaded_stream_tok_s: r2(of(mode, (l) => l.loaded.stream_tok_s)),
    long_ttft_p50_ms: r2(of(mode, (l) => l.loaded.long_ttft_ms.p50)),
    itl_p99_loaded_over_quiet: r2(of(mode, (l) => l.itl_p99_loaded_over_quiet)),
  };
}
// Paired: each round its own ratio, then the median.
const rounds = [...new Set(lines.map((l) => l.round))];
const pair = (pick) => median(rounds.map((r) => {
  const d = lines.find((l) => l.round === r && l.mode === "disaggregated");
  const c = lines.find((l) => l.round === r && l.mode === "colocated");
  return d && c && pick(c) ? pick(d) / pick(c) : null; }));
summary.long_ttft_p50_disagg_over_colocated = r2(pair((l) => l.loaded.long_ttft_ms.p50));
summary.loaded_itl_p99_disagg_over_colocated = r2(pair((l) => l.loaded.itl_ms.p99));
summary.rounds = rounds.length;
console.log(JSON.stringify(summary));
' "$results"
