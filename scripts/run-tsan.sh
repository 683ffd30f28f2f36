#!/usr/bin/env bash
# Builds the library and the GoogleTest suite with ThreadSanitizer (clang,
# -fsanitize=thread) in build-tsan/ and runs the threaded tests: every
# Determinism* case (1 thread against 2, on every target) and Concurrency*
# (const calls on one layer from two threads). Fails on any ThreadSanitizer
# report. Extra arguments go to the test binary, e.g.
#   bash scripts/run-tsan.sh --gtest_filter='Concurrency*'
#
# oneTBB: Debian's libtbb12 is not instrumented, and TSan then cannot see the
# synchronization of TBB's scheduler: the hand-off of a task from the thread
# that spawns it to the worker that steals it happens in libtbb's own atomics.
# Every parallel_for then shows as races between mha's task bodies (and the
# task objects of TBB's inline headers) and the spawning thread -- about 280
# reports on the tests below, none of them real. So this script builds the
# same oneTBB version as the installed libtbb-dev from Debian's source
# package (apt-get source, through a private deb-src list that leaves the
# system's apt configuration alone) with TBB_SANITIZE=thread, once, into
# build-tsan/onetbb/, and links the tests against it.
# MHA_TSAN_SYSTEM_TBB=1 uses the system's libtbb instead (expect those false
# reports; tests/tsan.supp suppresses only reports entirely inside libtbb).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=build-tsan

source scripts/sanitizer-build.sh
install_clang_sanitizers
# apt-get source unpacks with dpkg-source (dpkg-dev) and xz.
bash scripts/install-missing.sh dpkg-dev xz-utils

tbb_args=()
if [ "${MHA_TSAN_SYSTEM_TBB:-0}" != 1 ]; then
  # The native package only: with arm64 multiarch (run-tests-arm.sh) the
  # bare name matches both and dpkg-query prints both, run together.
  native=libtbb-dev:$(dpkg --print-architecture)
  package=$(dpkg-query -W -f='${source:Package}' "$native")
  version=$(dpkg-query -W -f='${source:Version}' "$native")
  prefix=$root/$out/onetbb/install
  if [ "$(cat "$prefix/VERSION" 2>/dev/null)" != "$package $version" ]; then
    echo "run-tsan: building $package $version with -fsanitize=thread (once)"
    work=$root/$out/onetbb
    rm -rf "$work"
    mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial" \
             "$work/apt/parts" "$work/src"
    . /etc/os-release
    cat > "$work/apt/sources.list" <<EOF
deb-src http://deb.debian.org/debian $VERSION_CODENAME main
deb-src http://deb.debian.org/debian $VERSION_CODENAME-updates main
deb-src http://deb.debian.org/debian-security $VERSION_CODENAME-security main
EOF
    apt_private=(-o "Dir::Etc::SourceList=$work/apt/sources.list"
                 -o "Dir::Etc::SourceParts=$work/apt/parts"
                 -o "Dir::State::Lists=$work/apt/lists"
                 -o "Dir::Cache=$work/apt/cache"
                 -o "APT::Sandbox::User=root")
    apt-get -qq "${apt_private[@]}" update
    (cd "$work/src" &&
     apt-get -qq "${apt_private[@]}" source --download-only "$package=$version" &&
     dpkg-source -x --no-check ./*.dsc onetbb >/dev/null)
    CC=clang CXX=clang++ cmake -S "$work/src/onetbb" -B "$work/build" \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTBB_SANITIZE=thread -DTBB_TEST=OFF \
      -DTBB_EXAMPLES=OFF -DTBBMALLOC_BUILD=OFF -DTBB_STRICT=OFF \
      -DCMAKE_INSTALL_PREFIX="$prefix" >/dev/null
    cmake --build "$work/build" -j2 >/dev/null
    cmake --install "$work/build" >/dev/null
    echo "$package $version" > "$prefix/VERSION"
  fi
  tbb_args=(-DTBB_DIR="$prefix/lib/cmake/TBB" -DCMAKE_PREFIX_PATH="$prefix"
            -DCMAKE_BUILD_RPATH="$prefix/lib")
fi

# Line tables only (-gline-tables-only): all a report needs; the targets of
# every checking build (checking_build_omitted_targets).
flags="-fsanitize=thread -fno-omit-frame-pointer"
CXX=clang++ cmake -S . -B $out -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" \
  -DMHA_BUILD_BENCHMARKS=OFF -DMHA_BUILD_EXAMPLES=OFF -DMHA_OMIT_TARGETS="$(checking_build_omitted_targets)" \
  "${tbb_args[@]}" >/dev/null
cmake --build $out -j2 --target mha_tests
echo "run-tsan: mha_tests uses $(ldd $out/tests/mha_tests | grep -o '[^ ]*libtbb[^ ]*' | tail -1)"

filter='*Determinism*:*Concurrency*'
# halt_on_error=0 prints every report; exitcode makes any report (even one
# printed after the tests passed) fail the run.
export TSAN_OPTIONS="suppressions=$root/tests/tsan.supp halt_on_error=0 exitcode=66 \
second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
log=$out/tsan.log
set +e
./$out/tests/mha_tests --gtest_filter="$filter" "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
reports=$(grep -c "WARNING: ThreadSanitizer" "$log" || true)
if [ "$status" -ne 0 ] || [ "$reports" -ne 0 ]; then
  echo "run-tsan: FAILED (exit status $status, $reports ThreadSanitizer report(s); log in $log)"
  exit 1
fi
echo "run-tsan: passed, no ThreadSanitizer report (log in $log)"
