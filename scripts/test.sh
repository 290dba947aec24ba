#!/usr/bin/env bash
# Runs every test twice: on the Release build, then on a build with AddressSanitizer +
# UndefinedBehaviorSanitizer (fuzz tests included); and the HTTP transport's threads under
# ThreadSanitizer. Fixture tests read ../shared/fixtures; under CI=true a missing fixture
# fails instead of skipping.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
(cd build && ctest --output-on-failure -j2 --timeout 900)
# End-to-end: the real `shardlm serve` driven by the official openai npm client.
(cd tests/e2e && npm ci --no-audit --no-fund && SHARDLM_BIN=../../build/shardlm node --test)
scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=Sanitize -DSHARDLM_SANITIZE=ON
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j2 --timeout 900)
# ThreadSanitizer over the HTTP transport (its own few files). setarch -R: TSan's shadow
# memory layout needs the address-space randomization some kernels widen turned off.
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Sanitize -DSHARDLM_TSAN=ON >/dev/null
cmake --build build-tsan --target test_transport_stress
TSAN_OPTIONS=halt_on_error=1 setarch "$(uname -m)" -R build-tsan/tests/test_transport_stress
