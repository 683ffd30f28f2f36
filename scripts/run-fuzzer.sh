#!/usr/bin/env bash
# Fuzzes mha::attention, sgemm, softmax and the layer with the libFuzzer
# harness (tests/fuzz/mha_fuzzer.cc) for a bounded time, over the seed corpus
# tests/fuzz/corpus/ (read only) plus a scratch corpus in build-asan/fuzz/.
# The harness is built in build-asan/, the clang AddressSanitizer +
# UndefinedBehaviorSanitizer build that scripts/run-sanitizers.sh tests
# (configure_asan_build in scripts/sanitizer-build.sh); after that script,
# nothing is left to build. Fails (non-zero exit) on any crash, sanitizer
# report, timeout, leak or mismatch against the double-precision reference;
# the input is then saved in build-asan/fuzz/artifacts/ (re-run it with
# `MHA_FUZZ_VERBOSE=1 build-asan/tests/fuzz/mha_fuzzer <file>`).
#
#   bash scripts/run-fuzzer.sh [seconds] [libFuzzer flags...]
#
# seconds: the argument, else $MHA_FUZZ_SECONDS, else 180; 0 only runs every
# input of the two corpora once (a quick regression check).
# MHA_FUZZ_TOLERATE=cat1,cat2 (categories: hidden, hiddenweight, nanprop,
# scale, alias, overflow, nullkv) reports those failures without stopping:
# a triage aid to look past a known defect, never for CI.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${MHA_FUZZ_SECONDS:-180}
if [ $# -gt 0 ] && [[ $1 =~ ^[0-9]+$ ]]; then
  seconds=$1
  shift
fi

source scripts/sanitizer-build.sh

bash scripts/setup.sh
install_clang_sanitizers
configure_asan_build
cmake --build build-asan -j2 --target mha_fuzzer

fuzz=build-asan/fuzz
mkdir -p $fuzz/corpus $fuzz/artifacts
log=$fuzz/fuzz.log
if [ "$seconds" -eq 0 ]; then
  limit=(-runs=0)
  echo "run-fuzzer: running the corpus once (log in $log)"
else
  limit=(-max_total_time="$seconds")
  echo "run-fuzzer: fuzzing for $seconds s (log in $log)"
fi
export ASAN_OPTIONS="detect_leaks=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
set +e
# The first corpus directory receives the new inputs; the seeds stay as they
# are. One execution takes well under a millisecond on average: a 30 s
# timeout is a hang.
./build-asan/tests/fuzz/mha_fuzzer $fuzz/corpus tests/fuzz/corpus \
  "${limit[@]}" -print_final_stats=1 -print_funcs=0 \
  -timeout=30 -rss_limit_mb=4096 -max_len=256 \
  -artifact_prefix=$fuzz/artifacts/ "$@" 2>&1 |
  tee "$log" |
  grep --line-buffered -v -E '^#[0-9]+[[:space:]]+(NEW|REDUCE)|^".*" # Uses: [0-9]+$'
status=${PIPESTATUS[0]}
set -e

execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
echo "run-fuzzer: ${execs:-?} executions, ${rate:-?} executions per second"
if [ "$status" -ne 0 ] || grep -q -E "MISMATCH|ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer)|runtime error:" "$log"; then
  echo "run-fuzzer: FAILED (libFuzzer exit status $status); input in $fuzz/artifacts/"
  exit 1
fi
echo "run-fuzzer: passed"
