#!/usr/bin/env bash
# Configures and builds mha (Release) in build/, two jobs at a time.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j2
