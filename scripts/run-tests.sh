#!/usr/bin/env bash
# Sets up, builds Release and runs the whole test suite with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
ctest --test-dir build -j2 --output-on-failure
