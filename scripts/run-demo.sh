#!/usr/bin/env bash
# Sets up, builds Release and runs the seed documents' example.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
./build/examples/seed_demo
