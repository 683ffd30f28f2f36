#!/usr/bin/env bash
# Builds mha, its test suite and the libFuzzer harness with clang,
# AddressSanitizer and UndefinedBehaviorSanitizer in build-asan/
# (configure_asan_build in scripts/sanitizer-build.sh) and runs the test
# suite; scripts/run-fuzzer.sh fuzzes with the same build. With clang,
# Highway's portable fallback is EMU128 (4 lanes, emulated) rather than
# GCC's SCALAR, which the Release build tests.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/sanitizer-build.sh

bash scripts/setup.sh
install_clang_sanitizers
configure_asan_build
cmake --build build-asan -j2
# The install tests build an unsanitized consumer: they run in the plain
# build. So do the kernels' tests under other machines' caches
# (cache_override: the same code as the suite, blocked otherwise), which
# would add minutes to CI under the sanitizers.
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan -j2 --output-on-failure -LE 'install|cache_override'
