#!/usr/bin/env bash
# Builds the library and its tests with AddressSanitizer and
# UndefinedBehaviorSanitizer in build-asan/ and runs the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
# -g1: line tables only, all a sanitizer's report needs. With full -g, GCC
# tracks variables through the GEMM's large inlined loops: the 16-bit GEMM
# (lib/gemm/gemm_packed16.cc) took 12 minutes of one core per element type,
# 7.7 with -g1, as fast as without -g.
#
# AVX3_DL and SSSE3 are left out (MHA_OMIT_TARGETS): for fp32 their code is
# AVX3's and SSE4's at the same vector widths, and AVX3, AVX2, SSE4 and SCALAR
# still run every width (16, 8, 4 and 1 lanes). The build took 830 s of CI's
# 2712 on this project's machine with all six targets.
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMHA_SANITIZE=ON \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DMHA_OMIT_TARGETS=AVX3_DL,SSSE3 \
  -DMHA_BUILD_BENCHMARKS=OFF -DMHA_BUILD_EXAMPLES=OFF
cmake --build build-asan -j2
# The install test builds an unsanitized consumer: it runs in the plain build.
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan -j2 --output-on-failure -LE install
