"""Runs mha-bench --quick on two targets with a tiny filter and checks that
its JSON (Google Benchmark's format), CSV and PNG exist and parse. Not a
timing test: no number is judged, only that each column ran on its target.

usage: mha_bench_test.py MHA_BENCH MHA_BENCHMARKS OUT_DIR
"""
import csv
import json
import os
import shutil
import subprocess
import sys

mha_bench, benchmarks, out = sys.argv[1:4]
targets = subprocess.run([benchmarks, "--mha_list_targets"], check=True, text=True,
                         capture_output=True).stdout.split()
chosen = [targets[0], targets[-1]]  # the best and the portable fallback
shutil.rmtree(out, ignore_errors=True)
subprocess.run([mha_bench, "--quick", "--targets", ",".join(chosen), "--filter", "Softmax",
                "--out", out], check=True)

for target in chosen:
    with open(os.path.join(out, f"{target}.json")) as f:
        result = json.load(f)
    assert result["context"]["mha_target"] == target, result["context"]
    names = [b["name"] for b in result["benchmarks"]]
    assert any(n.startswith("BM_Softmax") for n in names), names
    assert all(b["label"] == target for b in result["benchmarks"]), "kernel ran elsewhere"

with open(os.path.join(out, "results.csv")) as f:
    rows = list(csv.DictReader(f))
assert {r["target"] for r in rows} == set(chosen), rows
assert all(float(r["value"]) > 0 for r in rows), rows

with open(os.path.join(out, "chart.png"), "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n", "not a PNG"
import matplotlib.image
image = matplotlib.image.imread(os.path.join(out, "chart.png"))
assert image.shape[0] > 100 and image.shape[1] > 100, image.shape

with open(os.path.join(out, "report.txt")) as f:
    report = f.read()
assert report.startswith("Machine:") and "FMA peak (GFLOP/s)" in report, report[:200]
print("mha-bench output parsed:", ", ".join(sorted(os.listdir(out))))
