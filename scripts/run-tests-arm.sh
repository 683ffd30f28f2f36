#!/usr/bin/env bash
# Cross-builds mha for 64-bit Arm (aarch64) and runs its tests under
# qemu-aarch64 on the CPUs our Arm users have:
#   - a NEON-only core (Cortex-A72, as in Graviton 1 / Raspberry Pi 4): the
#     whole suite, install tests included;
#   - SVE at 128, 256 and 2048 bits (qemu's "max" CPU, which has SVE2; 128
#     as Graviton 4 and Neoverse V2, 256 as Graviton 3, 2048 the longest the
#     architecture allows): every test of the kernels on each SVE target the
#     CPU supports (SVE2, SVE, and SVE2_128 or SVE_256 at their vector
#     lengths), and the tests not tied to a target.
# Installs what it needs on Debian 12: the cross compiler, qemu-user and the
# arm64 builds of Highway, oneTBB and GoogleTest (multiarch).
# With --full, SVE at 512 bits (A64FX) runs too, and every SVE setting runs
# the whole suite (about 10 more minutes): the NEON and fallback targets'
# tests and the install and allocation tests again, at each vector length.
# 512 bits is left to --full because 256 and 2048 bracket it, and AVX3 runs
# the same 16-lane logic natively; it took 45 s of CI.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(g++-aarch64-linux-gnu qemu-user cmake libhwy-dev:arm64 libtbb-dev:arm64
          libgtest-dev:arm64)
bash scripts/install-missing.sh --arch arm64 "${packages[@]}"

cmake -S . -B build-arm -DCMAKE_BUILD_TYPE=Release -DMHA_BUILD_BENCHMARKS=OFF \
  -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/toolchains/aarch64-linux-gnu.cmake"
cmake --build build-arm -j2

covered=""
# run_on QEMU_CPU DESCRIPTION [ctest arguments]: the tests on one emulated CPU.
run_on() {
  local cpu=$1 description=$2
  shift 2
  local targets
  targets=$(QEMU_CPU=$cpu qemu-aarch64 build-arm/examples/seed_demo |
            sed -n 's/.*(supported: \(.*\))$/\1/p')
  echo "run-tests-arm: ${description}: targets ${targets}"
  QEMU_CPU=$cpu ctest --test-dir build-arm -j2 --output-on-failure "$@"
  covered="${covered} ${targets}"
}

# The memory test of a causal prefill at 16384 tokens (275 GFLOP) took over
# 10 minutes under emulation: it runs natively only. What it checks, the
# attention's scratch staying O(threads x tile), is the same on every ISA.
native_only='^FusedAttentionMemory[.]LongCausalPrefill'
run_on cortex-a72 "Cortex-A72 (NEON), the whole suite but ${native_only}" \
  -E "${native_only}"
# The SVE vector length is set in bytes. The NEON and fallback targets'
# code does not depend on it, and ran above, and so did the allocation tests
# (about 100 s each under emulation): by default these runs take the SVE
# targets. (ctest names a per-target test "Suite.Case/NEON  # GetParam() =
# ...": the target's name ends at a space.)
sve_scope=("the SVE targets' tests" -LE install
           -E "/(NEON|SCALAR)( |\$)|^SteadyState[.]|${native_only}")
sve_bytes=(16 32 256)
if [ "${1:-}" = --full ]; then
  sve_scope=("the whole suite but ${native_only}" -E "${native_only}")
  sve_bytes=(16 32 64 256)
fi
for bytes in "${sve_bytes[@]}"; do
  run_on "max,sve-default-vector-length=${bytes}" \
    "SVE at $((bytes * 8)) bits, ${sve_scope[0]}" "${sve_scope[@]:1}"
done
covered=$(echo "$covered" | tr ' ' '\n' | sort -u | tr '\n' ' ')
echo "run-tests-arm: every test passed; targets run:${covered}"
for wanted in NEON SVE SVE2; do
  [[ " ${covered} " == *" ${wanted} "* ]] || { echo "run-tests-arm: ${wanted} never ran"; exit 1; }
done
