#!/usr/bin/env bash
# Cross-builds mha for 64-bit Arm (aarch64) and runs its tests under
# qemu-aarch64 on the CPUs our Arm users have:
#   - a NEON-only core (Cortex-A72, as in Graviton 1 / Raspberry Pi 4): the
#     whole suite, install tests included, on the NEON target, but the
#     long steady-state allocation tests (x86 runs them natively);
#   - SVE at 128, 256 and 512 bits (qemu's "max" CPU, which has SVE2): the
#     kernels' tests on the target such a CPU runs (SVE2_128 as Graviton 4
#     and Neoverse V2, SVE_256 as Graviton 3, the scalable SVE2 at 512 bits,
#     the length of A64FX), and the tests not tied to a target.
# Installs what it needs on Debian 12: the cross compiler, qemu-user and the
# arm64 builds of Highway, oneTBB and GoogleTest (multiarch).
# With --full, every SVE target the CPU supports (SVE and SVE2 too at 128
# and 256 bits) runs the whole suite, at 2048 bits as well (the longest
# vectors the architecture allows, and the slowest to emulate), and NEON
# runs the allocation tests too.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(g++-aarch64-linux-gnu qemu-user cmake gcc libhwy-dev:arm64
          libtbb-dev:arm64 libgtest-dev:arm64)
bash scripts/install-missing.sh --arch arm64 "${packages[@]}"

# By default the scalable SVE target (the one of SVE-only CPUs such as A64FX)
# is not compiled: no default run tests it, its code is SVE2's but for a few
# of Highway's ops, and it is one of the six targets this build compiles
# (the other five took 322 s of CI on a Zen 1). --full compiles and tests it.
omitted=SVE
[ "${1:-}" = --full ] && omitted=""
cmake -S . -B build-arm -DCMAKE_BUILD_TYPE=Release -DMHA_BUILD_BENCHMARKS=OFF \
  -DMHA_OMIT_TARGETS="$omitted" \
  -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/toolchains/aarch64-linux-gnu.cmake"
cmake --build build-arm -j2

# On an x86 host with FMA, qemu runs with fmaf and fma that clear the upper
# halves of the vector registers first (scripts/qemu_clear_upper_state.c):
# on Intel, the SVE runs at 256 and 512 bits took 19 and 29 minutes without
# it. QEMU_UNSET_ENV keeps the x86 library out of the emulated program.
if [ "$(uname -m)" = x86_64 ] && grep -qw fma /proc/cpuinfo; then
  gcc -O2 -shared -fPIC scripts/qemu_clear_upper_state.c \
    -o build-arm/libqemu_clear_upper_state.so
  export LD_PRELOAD="$PWD/build-arm/libqemu_clear_upper_state.so"
  export QEMU_UNSET_ENV=LD_PRELOAD
fi

covered=""
# run_on QEMU_CPU DESCRIPTION TARGETS EXCLUDED [ctest arguments]: the tests on
# one emulated CPU, but those matching the regex EXCLUDED: the per-target
# tests of TARGETS ("all": every target the CPU supports), and the tests not
# tied to a target (they run on the CPU's best).
run_on() {
  local cpu=$1 description=$2 targets=$3 excluded=$4
  shift 4
  local supported skipped=""
  supported=$(QEMU_CPU=$cpu qemu-aarch64 build-arm/examples/seed_demo |
              sed -n 's/.*(supported: \(.*\))$/\1/p')
  [ "$targets" = all ] && targets=$supported
  for target in $supported; do
    [[ " $targets " == *" $target "* ]] || skipped+="${skipped:+|}$target"
  done
  # ctest names a per-target test "Suite.Case/NEON  # GetParam() = ...": the
  # target's name ends at a space.
  [ -z "$skipped" ] || excluded+="|/(${skipped})( |\$)"
  # gtest_discover_tests lists the tests by running the binary (PRE_TEST)
  # and keeps that list until the binary changes: list them on this CPU.
  # (Without this, every run had the first CPU's targets, NEON and SCALAR,
  # and the SVE runs tested no SVE target.)
  rm -f build-arm/tests/*_tests.cmake
  echo "run-tests-arm: ${description}: targets ${targets}"
  # A failed test runs once more, its first run's output kept in the log:
  # qemu-user 7.2 (Debian 12) once killed a test process with SIGSEGV after
  # the test had passed and gtest had printed its summary, at exit (where,
  # we suppose, oneTBB's worker threads were still ending; not confirmed)
  # (EveryBlockingBoundary on SVE2 at 512 bits, 1 of some 500 emulated test
  # processes of that CI run). The same test passed 80 times in a row under
  # the same CPU, a short threaded one 600 times, and the code it ran is the
  # x86 targets' (no SVE-specific source), which AddressSanitizer checks. A
  # deterministic failure still fails CI; an intermittent one leaves its
  # first run's failure in the log.
  QEMU_CPU=$cpu ctest --test-dir build-arm -j2 --output-on-failure \
    --repeat until-pass:2 -E "${excluded}" "$@"
  covered="${covered} ${targets}"
}

# The memory test of a causal prefill at 16384 tokens (275 GFLOP) took over
# 10 minutes under emulation: it runs natively only. What it checks, the
# attention's scratch staying O(threads x tile), is the same on every ISA.
# The kernels' tests under other machines' caches (MHA_CACHES) choose among
# the same C++ blocking and walks on every ISA: natively only, too. So does
# the GEMM's test of B beyond 8 L2s (0.3 G multiply-adds a target, checked
# in double), whose copy of B's blocks the ragged products test everywhere.
native_only='^FusedAttentionMemory[.]LongCausalPrefill|^CacheOverride[.]|GemmTest[.]LargeBBlocksCopied/'
# The steady-state allocation tests (tens of forward calls at 300 tokens,
# alone on the machine: RUN_SERIAL) took 277 s of the NEON run's 453 under
# emulation; by default they run natively only, with --full on NEON too.
# What they check, the scratch and pools sized once, is the same C++ code
# on every ISA.
steady_state='^SteadyState[.]'
neon_excluded="${native_only}|${steady_state}"
# The check of the SVE kernels' machine code (no vector on the stack) reads
# the library, not the CPU: once, in the NEON run.
machine_code='^Kernels[.]MicroKernelLoops'
# SVE at each vector length (set in bytes): by default the target a CPU of
# that length runs (SVE2_128 at 128 bits, as Graviton 4 and Neoverse V2;
# SVE_256 at 256, as Graviton 3) and the scalable SVE2 target at 512 bits
# (the length of A64FX), with the tests not tied to a target. The tests
# size their shapes by the vector length, and qemu's time per vector
# operation grows with it: at 2048 bits, the longest the architecture
# allows, one test of the layer ran past its 10 minutes. With --full: every
# SVE target at 128, 256, 512 and 2048 bits, and the whole suite.
sve_bytes=(16 32 64)
sve_targets=(SVE2_128 SVE_256 SVE2)
sve_scope=("the SVE target's tests"
           "${steady_state}|${native_only}|${machine_code}" -LE install)
if [ "${1:-}" = --full ]; then
  neon_excluded="${native_only}"
  sve_bytes=(16 32 64 256)
  sve_targets=(all all all all)
  sve_scope=("the whole suite but ${native_only}"
             "${native_only}|${machine_code}")
fi
# The fallback (SCALAR) is GCC's scalar code, the same source on every
# architecture: the x86 suite runs it natively.
run_on cortex-a72 "Cortex-A72 (NEON), the whole suite but ${neon_excluded}" \
  NEON "${neon_excluded}"
for i in "${!sve_bytes[@]}"; do
  run_on "max,sve-default-vector-length=${sve_bytes[i]}" \
    "SVE at $((sve_bytes[i] * 8)) bits, ${sve_scope[0]}" "${sve_targets[i]}" \
    "${sve_scope[@]:1}"
done
covered=$(echo "$covered" | tr ' ' '\n' | sort -u | tr '\n' ' ')
echo "run-tests-arm: every test passed; targets run:${covered}"
for wanted in NEON SVE2 SVE2_128 SVE_256; do
  [[ " ${covered} " == *" ${wanted} "* ]] || { echo "run-tests-arm: ${wanted} never ran"; exit 1; }
done
