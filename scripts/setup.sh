#!/usr/bin/env bash
# Installs what mha needs on Debian 12 and is missing: the toolchain, Highway,
# oneTBB, GoogleTest, Google Benchmark, OpenBLAS (the benchmark peer) and
# matplotlib (mha-bench's charts). Safe to run again: it installs nothing
# that is already there.
set -euo pipefail

packages=(build-essential clang cmake pkg-config libhwy-dev libtbb-dev libgtest-dev
          libbenchmark-dev libopenblas-dev libdnnl-dev python3 python3-matplotlib)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: every dependency is installed"
  exit 0
fi
echo "setup: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
