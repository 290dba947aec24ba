#!/usr/bin/env bash
# Two shardlm binaries measured against each other: `shardlm bench` of the one (A) and of
# the other (B) alternate round by round on the same model, A first in odd rounds and B
# first in even ones, so the machine's drift over minutes touches both alike. Each round
# runs every test of one `bench --json` call (-p PP -n TG -s STREAMS); the ratio of a test in
# a round is B's median_ts / A's, and the figure is the median over the rounds.
#
# Usage: bench/ab_bench.sh A_BINARY B_BINARY MODEL [extra bench flags...]
# Environment: ROUNDS (5), PP (64), TG (32), STREAMS (1,4), REPS (3), THREADS (2).
# Prints one line per test: "test median_ratio (B/A) [per-round ratios]" on stdout; the
# raw JSON lines go to stderr.
set -euo pipefail

if [[ $# -lt 3 ]]; then
  echo "usage: $0 A_BINARY B_BINARY MODEL [extra bench flags...]" >&2
  exit 2
fi
a=$1
b=$2
model=$3
shift 3
ROUNDS=${ROUNDS:-5}
PP=${PP:-64}
TG=${TG:-32}
STREAMS=${STREAMS:-1,4}
REPS=${REPS:-3}
THREADS=${THREADS:-2}

out=$(mktemp)
trap 'rm -f "$out"' EXIT
bench() {  # bench LABEL BINARY ROUND [extra flags...]
  local label=$1 binary=$2 round=$3
  shift 3
  "$binary" bench -m "$model" -p "$PP" -n "$TG" -s "$STREAMS" -r "$REPS" -t "$THREADS" --json \
    "$@" 2>/dev/null | sed "s/^/$label $round /" | tee -a "$out" >&2
}
for ((round = 1; round <= ROUNDS; round++)); do
  if ((round % 2)); then
    bench A "$a" "$round" "$@"
    bench B "$b" "$round" "$@"
  else
    bench B "$b" "$round" "$@"
    bench A "$a" "$round" "$@"
  fi
done

python3 - "$out" <<'PY'
import json, statistics, sys
ts = {}  # (test, round) -> {label: median_ts}
for line in open(sys.argv[1]):
    label, rnd, body = line.split(" ", 2)
    row = json.loads(body)
    ts.setdefault((row["test"], int(rnd)), {})[label] = row["median_ts"]
tests = sorted({t for t, _ in ts}, key=lambda t: (not t.startswith("pp"), t))
for test in tests:
    ratios = [v["B"] / v["A"] for (t, _), v in sorted(ts.items()) if t == test and "A" in v and "B" in v]
    print(f"{test} {statistics.median(ratios):.3f} [{' '.join(f'{r:.3f}' for r in ratios)}]")
PY
