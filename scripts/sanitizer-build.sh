# Sourced by the scripts that build mha with clang's sanitizers
# (run-sanitizers.sh, run-fuzzer.sh, run-tsan.sh): installs what clang
# needs for them, names the Highway targets such a build leaves out, and
# configures the AddressSanitizer build that the tests and the fuzzer share.

# Installs clang and Debian's libclang-rt-N-dev (the sanitizer and libFuzzer
# runtimes; N is clang's major version), when missing: clang itself does not
# depend on the runtimes.
install_clang_sanitizers() {
  command -v clang++ >/dev/null || bash scripts/install-missing.sh clang
  local major
  major=$(clang++ -dumpversion | cut -d. -f1)
  bash scripts/install-missing.sh "libclang-rt-$major-dev"
}

# The targets (MHA_OMIT_TARGETS) a build that checks the code, rather than
# ships it, leaves out. Under a sanitizer the kernels compile 3 to 4 times
# slower than in Release (lib/attention/attention.cc: 100 s a target with
# clang's ASan + UBSan against 27 in GCC's Release build), so a checking
# build compiles what this CPU runs at each vector width, and each of the
# kernels' register tiles, once:
#   - AVX3_DL and SSSE3: for fp32 their code is AVX3's and SSE4's;
#   - SSE4: its 4 lanes are the fallback's (EMU128 with clang), its 6-row
#     tile AVX2's, and its 8-column panels both (lib/gemm/tile_shape-inl.h);
#   - AVX3 too when this CPU lacks AVX-512: its tests could not run here.
# AVX3 (16 lanes) where the CPU has it, AVX2 (8) and the fallback (4)
# remain. The Release build tests every target natively, and Arm's runs
# (run-tests-arm.sh) add NEON and SVE at 128 to 512 bits.
checking_build_omitted_targets() {
  local omitted=AVX3_DL,SSSE3,SSE4
  grep -qw avx512f /proc/cpuinfo || omitted+=,AVX3
  echo "$omitted"
}

# Configures build-asan/ with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer: the library (shared, as users may link it),
# the test suite and the libFuzzer harness, everything also instrumented for
# libFuzzer (MHA_BUILD_FUZZERS). One build serves run-sanitizers.sh and
# run-fuzzer.sh: GCC's ASan build of the tests alone took 1690 s of CI on a
# 2-core Zen 3, and a separate fuzzer build 690 more.
# -gline-tables-only: all a report needs. -O2: at -O1 clang compiled
# attention.cc in 415 s instead of 300 (less inlining leaves more code to
# instrument).
configure_asan_build() {
  CXX=clang++ cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG" \
    -DMHA_SANITIZE=ON -DMHA_BUILD_FUZZERS=ON -DBUILD_SHARED_LIBS=ON \
    -DMHA_OMIT_TARGETS="$(checking_build_omitted_targets)" \
    -DMHA_BUILD_BENCHMARKS=OFF -DMHA_BUILD_EXAMPLES=OFF >/dev/null
}
