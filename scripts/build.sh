#!/usr/bin/env bash
# Configures and builds shardlm into build/ (or $1), Release with -Wall -Wextra.
# Extra arguments go to cmake, e.g. scripts/build.sh build-asan -DSHARDLM_SANITIZE=ON
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-build}"
shift || true
cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)"
