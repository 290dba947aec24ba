#!/usr/bin/env bash
# Runs every test twice: on the Release build, then on a build with AddressSanitizer +
# UndefinedBehaviorSanitizer (fuzz tests included); and the HTTP transport's threads under
# ThreadSanitizer. Fixture tests read ../shared/fixtures; under CI=true a missing fixture
# fails instead of skipping. Each phase prints when it starts and how long the run has taken.
set -euo pipefail
cd "$(dirname "$0")/.."
phase() { echo "== test.sh: $1 (at ${SECONDS} s)" >&2; }
# Test binaries compile their files in batches: the two builds below take about half the time.
unity=-DSHARDLM_UNITY_TESTS=ON
phase "setup"
scripts/setup.sh
phase "Release build"
scripts/build.sh build "$unity"
phase "Release tests"
(cd build && ctest --output-on-failure -j2 --timeout 900)
# End-to-end: the real `shardlm serve` driven by the official client libraries, three test
# files at a time. They mostly wait (servers starting, timeouts), so they run beside the
# sanitizer build, which yields the cores to them (nice); their output follows the build's.
phase "end-to-end tests, beside the AddressSanitizer + UndefinedBehaviorSanitizer build"
e2e_log="$(mktemp)"
(cd tests/e2e && npm ci --no-audit --no-fund &&
  SHARDLM_BIN=../../build/shardlm node --test --test-concurrency=3) >"$e2e_log" 2>&1 &
e2e_pid=$!
# The benchmark programs are checked by the Release build; the sanitizer build skips them.
# Its tests run a few processes per test binary (gtest shards), not one per test: start-up
# under the sanitizers costs more than most tests (the Release run names each test).
nice -n 19 scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=Sanitize -DSHARDLM_SANITIZE=ON \
  "$unity" -DSHARDLM_BENCHES=OFF -DSHARDLM_TEST_SHARDS=ON
phase "sanitizer build done; waiting for the end-to-end tests"
e2e_status=0
wait "$e2e_pid" || e2e_status=$?
cat "$e2e_log"
rm -f "$e2e_log"
if [ "$e2e_status" -ne 0 ]; then
  echo "== test.sh: the end-to-end tests failed (exit $e2e_status)" >&2
  exit "$e2e_status"
fi
phase "AddressSanitizer + UndefinedBehaviorSanitizer tests"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j2 --timeout 900)
# ThreadSanitizer over the HTTP transport (its own few files). setarch -R: TSan's shadow
# memory layout needs the address-space randomization some kernels widen turned off.
phase "ThreadSanitizer build and transport test"
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Sanitize -DSHARDLM_TSAN=ON >/dev/null
cmake --build build-tsan --target test_transport_stress
TSAN_OPTIONS=halt_on_error=1 setarch "$(uname -m)" -R build-tsan/tests/test_transport_stress
phase "done"
