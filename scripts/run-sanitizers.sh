#!/usr/bin/env bash
# Builds the library and its tests with AddressSanitizer and
# UndefinedBehaviorSanitizer in build-asan/ and runs the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
# -g1: line tables only, all a sanitizer's report needs. With full -g, GCC
# tracks variables through the GEMM's large inlined loops: the 16-bit GEMM
# (lib/gemm/gemm_packed16.cc) took 12 minutes of one core per element type,
# 7.7 with -g1, as fast as without -g.
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMHA_SANITIZE=ON \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DMHA_BUILD_BENCHMARKS=OFF -DMHA_BUILD_EXAMPLES=OFF
cmake --build build-asan -j2
# The install test builds an unsanitized consumer: it runs in the plain build.
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan -j2 --output-on-failure -LE install
