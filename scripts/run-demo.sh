#!/usr/bin/env bash
# Sets up, builds Release, runs the seed documents' example, then compares
# every supported ISA target with mha-bench --quick (table on the terminal;
# JSON, CSV, chart and report in bench-out/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
./build/examples/seed_demo
echo
./build/benchmarks/mha-bench --quick --out bench-out
