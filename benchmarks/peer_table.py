#!/usr/bin/env python3
"""Turns a Google Benchmark JSON of mha_benchmarks (with aggregates) into the
README's table of mha against its peers: median rate per benchmark, and the
ratio of each mha row to the OpenBLAS row of the same shape.

usage: peer_table.py RESULTS.json
"""
import json
import sys

NAMES = {"BM_Sgemm": "mha sgemm", "BM_SgemmOpenBLAS": "OpenBLAS sgemm",
         "BM_SgemmOneDNN": "oneDNN matmul",
         "BM_AttentionFused": "mha attention, fused",
         "BM_AttentionWithWeights": "mha attention, weights returned",
         "BM_AttentionComposedMha": "unfused: mha sgemm + softmax + sgemm",
         "BM_AttentionComposedOpenBLAS": "unfused: OpenBLAS sgemm + softmax + sgemm",
         "BM_AttentionComposedOneDNN": "unfused: oneDNN batched matmul + softmax + matmul"}


def main():
    with open(sys.argv[1]) as f:
        data = json.load(f)
    medians = {}
    for b in data["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        name = b["run_name"].replace("/real_time", "")
        if name.startswith(("BM_FmaPeak", "BM_MemoryRead")):
            counter = "GFLOP/s" if name.startswith("BM_FmaPeak") else "GB/s"
            print(f"{name.split('/')[0][3:]}: {b[counter]:.1f} {counter}")
            continue
        function, shape = name.split("/", 1)
        rate, unit = (b["GFLOP/s"], "GFLOP/s")
        if function.startswith("BM_Sgemm") and shape.startswith("m:1/"):
            rate, unit = (b["GB/s"], "GB/s")
        medians[(function, shape)] = (rate, unit)
    print()
    print("| shape | implementation | median | vs OpenBLAS |")
    print("|---|---|---|---|")
    order = list(NAMES)
    shapes = sorted({s for _, s in medians}, key=lambda s: (s.startswith("b:"), len(s), s))
    for shape in shapes:
        rows = sorted(((f, medians[(f, s)]) for f, s in medians if s == shape),
                      key=lambda row: order.index(row[0]) if row[0] in order else len(order))
        peer = next((r for f, r in rows if "OpenBLAS" in f), None)
        for function, (rate, unit) in rows:
            ratio = f"{rate / peer[0]:.2f}x" if peer and "OpenBLAS" not in function else ""
            print(f"| {shape.replace(':', '=').replace('/', ' ')} | {NAMES.get(function, function)} "
                  f"| {rate:.1f} {unit} | {ratio} |")


if __name__ == "__main__":
    main()
