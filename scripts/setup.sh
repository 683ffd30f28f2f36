#!/usr/bin/env bash
# Installs what mha needs on Debian 12 and is missing: the toolchain, Highway,
# oneTBB, GoogleTest, Google Benchmark, OpenBLAS (the benchmark peer) and
# matplotlib (mha-bench's charts). Safe to run again: it installs nothing
# that is already there.
set -euo pipefail

packages=(build-essential clang cmake pkg-config libhwy-dev libtbb-dev libgtest-dev
          libbenchmark-dev libopenblas-dev libdnnl-dev python3 python3-matplotlib)
bash "$(dirname "$0")/install-missing.sh" "${packages[@]}"
