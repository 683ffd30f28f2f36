#!/usr/bin/env bash
# Builds mha as a shared library with clang in build-clang/ and runs the test
# suite: with clang, Highway's portable fallback is EMU128 rather than GCC's
# SCALAR, so this covers the one target the main build cannot.
set -euo pipefail
cd "$(dirname "$0")/.."
CXX=clang++ cmake -S . -B build-clang -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
  -DMHA_BUILD_BENCHMARKS=OFF
cmake --build build-clang -j2
ctest --test-dir build-clang -j2 --output-on-failure
