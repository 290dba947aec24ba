#!/usr/bin/env bash
# Runs every test: the Release build, then the GGUF fuzz and unit tests again under
# AddressSanitizer + UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
(cd build && ctest --output-on-failure -j2 --timeout 900)
scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDLM_SANITIZE=ON
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --output-on-failure -j2 --timeout 900 -L sanitize)
