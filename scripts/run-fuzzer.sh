#!/usr/bin/env bash
# Builds the libFuzzer harness (tests/fuzz/mha_fuzzer.cc) with clang in
# build-fuzz/ -- the library with -fsanitize=fuzzer-no-link,address,undefined,
# the harness with -fsanitize=fuzzer,address,undefined -- and fuzzes
# mha::attention, sgemm, softmax and the layer for a bounded time over the
# seed corpus tests/fuzz/corpus/ (read only) plus a scratch corpus in
# build-fuzz/corpus/. Fails (non-zero exit) on any crash, sanitizer report,
# timeout, leak or mismatch against the double-precision reference; the input
# is then saved in build-fuzz/artifacts/ (re-run it with
# `MHA_FUZZ_VERBOSE=1 build-fuzz/tests/fuzz/mha_fuzzer <file>`).
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

bash scripts/setup.sh
# libFuzzer (and the sanitizer runtimes) ship in Debian's libclang-rt-N-dev,
# N being clang's major version; clang itself does not depend on it.
runtime=$(clang++ -print-file-name=libclang_rt.fuzzer-x86_64.a)
if [ ! -e "$runtime" ]; then
  major=$(clang++ -dumpversion | cut -d. -f1)
  echo "run-fuzzer: installing libclang-rt-$major-dev (libFuzzer)"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "libclang-rt-$major-dev"
fi

# Line tables only: all a crash report needs; the targets of the sanitizer
# build, every vector width (scripts/run-sanitizers.sh).
CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG" \
  -DMHA_OMIT_TARGETS=AVX3_DL,SSSE3 \
  -DMHA_BUILD_FUZZERS=ON -DMHA_BUILD_TESTS=OFF -DMHA_BUILD_BENCHMARKS=OFF \
  -DMHA_BUILD_EXAMPLES=OFF >/dev/null
cmake --build build-fuzz -j2 --target mha_fuzzer

mkdir -p build-fuzz/corpus build-fuzz/artifacts
log=build-fuzz/fuzz.log
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
./build-fuzz/tests/fuzz/mha_fuzzer build-fuzz/corpus tests/fuzz/corpus \
  "${limit[@]}" -print_final_stats=1 -print_funcs=0 \
  -timeout=30 -rss_limit_mb=4096 -max_len=256 \
  -artifact_prefix=build-fuzz/artifacts/ "$@" 2>&1 |
  tee "$log" |
  grep --line-buffered -v -E '^#[0-9]+[[:space:]]+(NEW|REDUCE)|^".*" # Uses: [0-9]+$'
status=${PIPESTATUS[0]}
set -e

execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
echo "run-fuzzer: ${execs:-?} executions, ${rate:-?} executions per second"
if [ "$status" -ne 0 ] || grep -q -E "MISMATCH|ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer)|runtime error:" "$log"; then
  echo "run-fuzzer: FAILED (libFuzzer exit status $status); input in build-fuzz/artifacts/"
  exit 1
fi
echo "run-fuzzer: passed"
