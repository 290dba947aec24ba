#!/usr/bin/env bash
# Prefix-cache benchmark on a random-weight Qwen3-0.6B-shaped Q4_K_M model
# (written by `shardlm gguf synth` when missing):
#
# 1. Time to first token of a long prompt (default 16384 tokens, sent as token ids through
#    bench/prefix_cache_client.mjs) on `serve --parallel 1`, with the disk tier on a fresh
#    folder when this build has it (--kv-cache-dir):
#      cold    the first request;
#      memory  the same prefix with a new 32-token tail (the cache holds every full page of
#              the prefix, the tail is computed);
#      disk    after a restart on the same --kv-cache-dir, another new tail (the pages come
#              from the files, which the page cache still holds: they were just written);
#      disk_cold_page_cache  the same after another restart, with the files' pages dropped
#              from the page cache first (`dd iflag=nocache count=0` on each file).
#    Without a disk tier the two disk cases print a `ttft_skipped` line with the reason.
# 2. The cost when nothing hits: aggregate throughput of bench/load_gen.mjs (distinct
#    prompts: each starts with its own tag, so no two share a first page) on servers with
#    --no-prefix-cache (`off`), the in-memory cache (`memory`) and the disk tier too
#    (`disk`, a fresh folder per turn), one server per turn, rounds in rotated order.
#
# Prints JSON lines on stdout: one `ttft` line per case (see prefix_cache_client.mjs) with
# the server's CPU share and the load average added, a `shutdown` line per stopped TTFT
# server (how long it took to write its queue), a `disk_store` line (files and bytes in the
# folder), one load_gen line per throughput turn with "config", "round", "server_cpu_share",
# "loadavg" and the server's prompt-token counters added, and last a `summary` line: the
# TTFT ratios and throughput costs against the goals (memory hit <= 2% of cold, disk hit
# <= 5%, cost <= 1%). Progress goes to stderr.
#
# Usage: bench/prefix_cache_bench.sh [--model FILE] [--shardlm BIN] [--prompt-tokens 16384]
#   [--suffix-tokens 32] [--rounds 3] [--requests 8] [--concurrency 4]
#   [--load-prompt-tokens 512] [--load-max-tokens 32] [--skip-ttft] [--skip-throughput]
#   [--no-disk] [--keep]
# A quick run: --prompt-tokens 2048 --rounds 1. Needs about (prompt tokens x 112 KiB) of
# memory for the KV pool and as much free disk (serve's default F16 KV of this model). Time:
# the cold prefill grows with the square of the prompt (attention); on 2 cores 16384 tokens
# took 7 minutes (2026-11-24), and each throughput turn about 30-60 s.
# On a shared machine run it in a session of its own with a higher autogroup priority:
#   setsid bash -c 'echo -20 > /proc/self/autogroup; exec bench/prefix_cache_bench.sh'
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BENCH_NAME=prefix_cache_bench
# shellcheck source-path=SCRIPTDIR source=bench_lib.sh
source "$here/bench_lib.sh"

prompt_tokens=16384
suffix_tokens=32
max_tokens=4
rounds=3
requests=8
concurrency=4
load_prompt_tokens=512
load_max_tokens=32
do_ttft=1
do_throughput=1
want_disk=1
keep=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --model) MODEL=$2; shift 2 ;;
    --shardlm) SHARDLM=$2; shift 2 ;;
    --prompt-tokens) prompt_tokens=$2; shift 2 ;;
    --suffix-tokens) suffix_tokens=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --requests) requests=$2; shift 2 ;;
    --concurrency) concurrency=$2; shift 2 ;;
    --load-prompt-tokens) load_prompt_tokens=$2; shift 2 ;;
    --load-max-tokens) load_max_tokens=$2; shift 2 ;;
    --skip-ttft) do_ttft=0; shift ;;
    --skip-throughput) do_throughput=0; shift ;;
    --no-disk) want_disk=0; shift ;;
    --keep) keep=1; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) bench_log "unknown argument $1 (see --help)"; exit 2 ;;
  esac
done

bench_ensure_model "$SHARDLM" "$MODEL"
tmp=$(mktemp -d /tmp/shardlm-prefix-bench.XXXXXX)
lines=$tmp/lines.jsonl
cleanup() {
  bench_stop_server 5 || true
  if [[ $keep == 1 ]]; then bench_log "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

disk_reason=
if [[ $want_disk == 0 ]]; then
  disk_reason="--no-disk given"
elif ! "$SHARDLM" serve --help 2>&1 | grep -q -- '--kv-cache-dir'; then
  disk_reason="this build of shardlm serve has no --kv-cache-dir (no disk tier)"
fi
[[ -n "$disk_reason" ]] && bench_log "disk cases skipped: $disk_reason"

# F32 KV of the model: 28 layers x 2 (K, V) x 8 heads x 128 x 4 B = 224 KiB per position.
kv_bytes_per_token=$((28 * 2 * 8 * 128 * 4))
page=64
ceil_pages() { echo $((($1 + page - 1) / page)); }

emit() { tee -a "$lines"; }  # stdout, and the file the summary reads

# add_fields JSON_FIELDS: appends fields (`"k":v,...`) to every JSON line read.
add_fields() { sed -u "s|}\$|,$1}|"; }

hz=$(getconf CLK_TCK)
ncpu=$(nproc)
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
cpu_share() {  # ticks0 ticks1 t0 t1
  awk -v a="$1" -v b="$2" -v t0="$3" -v t1="$4" -v hz="$hz" -v n="$ncpu" \
    'BEGIN { w = t1 - t0; printf "%.3f", (w > 0 ? (b - a) / hz / (w * n) : 0) }'
}

# metrics_counters: the server's prefix-cache counters (prompt tokens, pages, disk) as JSON fields.
metrics_counters() {
  curl -fsS "http://127.0.0.1:$BENCH_PORT/metrics" 2>/dev/null |
    awk '/^shardlm_(prompt_tokens|prefix_cache|kv_disk)[a-z_]* [0-9.eE+-]+$/ {
           printf "%s\"%s\":%s", n++ ? "," : "", $1, $2 } END { if (!n) printf "\"none\":0" }'
}

# ttft_case NAME SUFFIX_SEED: one request through the client; adds CPU share and load.
ttft_case() {
  local name=$1 seed=$2 k0 k1 t0 t1 out
  bench_log "$name: $prompt_tokens-token prompt ..."
  k0=$(bench_cpu_ticks "$BENCH_SERVER_PID"); t0=$(date +%s.%N)
  out=$(node "$here/prefix_cache_client.mjs" ttft --url "http://127.0.0.1:$BENCH_PORT" \
    --case "$name" --prompt-tokens "$prompt_tokens" --suffix-tokens "$suffix_tokens" \
    --suffix-seed "$seed" --max-tokens "$max_tokens")
  k1=$(bench_cpu_ticks "$BENCH_SERVER_PID"); t1=$(date +%s.%N)
  echo "$out" | add_fields "\"server_cpu_share\":$(cpu_share "$k0" "$k1" "$t0" "$t1"),\"loadavg\":\"$(loadavg)\"" | emit
}

# stop_timed NAME: stops the server, giving it up to 10 min to write its disk queue.
stop_timed() {
  local t0 t1 killed=false
  t0=$(date +%s.%N)
  bench_stop_server 600 || killed=true
  t1=$(date +%s.%N)
  printf '{"test":"shutdown","after":"%s","seconds":%.2f,"killed":%s}\n' "$1" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b - a}')" "$killed" | emit
}

disk_store_line() {
  local files bytes
  files=$(find "$1" -name '*.snap' | wc -l)
  bytes=$(find "$1" -name '*.snap' -printf '%s\n' | awk '{s += $1} END {print s + 0}')
  printf '{"test":"disk_store","files":%d,"bytes":%d}\n' "$files" "$bytes" | emit
}

run_ttft() {
  local ctx pages budget kvdir serve_args
  ctx=$((($(ceil_pages $((prompt_tokens + max_tokens))) + 1) * page))
  pages=$(ceil_pages "$prompt_tokens")
  budget=$(((pages + 16) * page * kv_bytes_per_token * 2))  # twice the prompt's pages
  kvdir=$tmp/kv-ttft
  serve_args=(-m "$MODEL" --parallel 1 --ctx-size "$ctx" --threads 0)
  if [[ -z "$disk_reason" ]]; then
    mkdir -p "$kvdir"
    serve_args+=(--kv-cache-dir "$kvdir" --kv-cache-budget "$budget")
  fi
  bench_log "TTFT: serve --parallel 1 --ctx-size $ctx${disk_reason:+ (no disk tier)}"
  export BENCH_HEALTH_TIMEOUT_S=600  # the KV pool of a long context takes a while to map
  BENCH_PORT=
  bench_start_server "$SHARDLM" "$tmp/serve-ttft-1.log" "${serve_args[@]}"
  ttft_case cold 1
  ttft_case memory 2
  if [[ -n "$disk_reason" ]]; then
    stop_timed memory
    for c in disk disk_cold_page_cache; do
      printf '{"test":"ttft_skipped","case":"%s","reason":"%s"}\n' "$c" "$disk_reason" | emit
    done
    return
  fi
  bench_log "stopping the server (it writes its queued pages first)"
  stop_timed memory
  disk_store_line "$kvdir"
  BENCH_PORT=
  bench_start_server "$SHARDLM" "$tmp/serve-ttft-2.log" "${serve_args[@]}"
  ttft_case disk 3
  stop_timed disk
  bench_log "dropping the snapshot files from the page cache"
  find "$kvdir" -name '*.snap' -exec dd if={} iflag=nocache count=0 status=none \;
  BENCH_PORT=
  bench_start_server "$SHARDLM" "$tmp/serve-ttft-3.log" "${serve_args[@]}"
  ttft_case disk_cold_page_cache 4
  stop_timed disk_cold_page_cache
  grep -h "kv-cache" "$tmp"/serve-ttft-*.log >&2 || true
}

# throughput_turn CONFIG ROUND: one server, one load_gen level, one tagged line.
throughput_turn() {
  local config=$1 round=$2 k0 k1 t0 t1 out extra kvdir=$tmp/kv-load
  local ctx=$((($(ceil_pages $((load_prompt_tokens + load_max_tokens + 64))) + 1) * page))
  local args=(-m "$MODEL" --parallel "$concurrency" --ctx-size "$ctx" --threads 0 --max-queue 256)
  case $config in
    off) args+=(--no-prefix-cache) ;;
    memory) ;;
    disk) rm -rf "$kvdir"; mkdir -p "$kvdir"; args+=(--kv-cache-dir "$kvdir" --kv-cache-budget 4GiB) ;;
  esac
  bench_log "throughput round $round: $config"
  BENCH_PORT=
  bench_start_server "$SHARDLM" "$tmp/serve-load-$config-$round.log" "${args[@]}"
  k0=$(bench_cpu_ticks "$BENCH_SERVER_PID"); t0=$(date +%s.%N)
  out=$(node "$here/load_gen.mjs" --url "http://127.0.0.1:$BENCH_PORT" \
    --concurrency "$concurrency" --requests "$requests" --prompt-tokens "$load_prompt_tokens" \
    --max-tokens "$load_max_tokens" --warmup 1)
  k1=$(bench_cpu_ticks "$BENCH_SERVER_PID"); t1=$(date +%s.%N)
  extra="\"config\":\"$config\",\"round\":$round,\"server_cpu_share\":$(cpu_share "$k0" "$k1" "$t0" "$t1")"
  extra+=",\"loadavg\":\"$(loadavg)\",\"counters\":{$(metrics_counters)}"
  echo "$out" | add_fields "$extra" | emit
  bench_stop_server 120 || bench_log "$config: the server did not stop within 120 s"
  rm -rf "$kvdir"
}

run_throughput() {
  local configs=(off memory) n i r
  [[ -z "$disk_reason" ]] && configs+=(disk)
  n=${#configs[@]}
  for r in $(seq 1 "$rounds"); do
    for i in $(seq 0 $((n - 1))); do  # rotated: each config goes first once in n rounds
      throughput_turn "${configs[$(((i + r - 1) % n))]}" "$r"
    done
  done
}

bench_log "$SHARDLM, model $MODEL, load $(loadavg)"
[[ $do_ttft == 1 ]] && run_ttft
[[ $do_throughput == 1 ]] && run_throughput
node "$here/prefix_cache_client.mjs" summary "$lines"
