#!/usr/bin/env python3
"""Measures mha against its peers and prints the README's performance tables.

One process of mha_benchmarks runs every benchmark of the tables, mha's and
the peers' (OpenBLAS, oneDNN, and PyTorch for the layer and the attention
core when the build found it), with repetitions in random interleaved order,
so that all rates of a table share the same machine state; the tables show
medians. OpenBLAS runs on the kernel it picks for this CPU: the environment
variables that hold it to another (OPENBLAS_CORETYPE, OPENBLAS_L2_SIZE) are
removed for this process, except where OpenBLAS does not know the CPU and
falls back to its generic SSE3 kernels (openblas_core.py). Every buffer
of the process, the peers' as well, is put on transparent huge pages (glibc's
tunable glibc.malloc.hugetlb=1), as mha puts its packed weights and KV caches
and the read probe its buffer: the tables compare the kernels, not the page
sizes their callers happened to get.
Tables, each with every row, wins and losses:

- SGEMM / GEMV: GFLOP/s (GB/s for M = 1), the fraction of the measured peak
  (FMA, or DRAM read for M = 1), and ours / the best peer.
- forward (the layer): GFLOP/s, fraction of the FMA peak (the compute floor),
  and the best composition's time / ours (above 1: mha is faster).
- decode step (one sequence, and a batch of sequences): GB/s of weights and
  cache read, fraction of the measured read bandwidth, and the
  composition's time / ours.
- attention core: fused mha attention against the composition of each peer's
  matrix products around a softmax; ours / the best; and the same with an
  additive bias (mask.bias), which the compositions add in their first
  product.

usage: peer_table.py [--binary build/benchmarks/mha_benchmarks] [--reps 5]
                     [--min-time 0.3] [--json results.json]
       peer_table.py --from-json results.json
"""
import argparse
import json
import os
import re
import subprocess
from collections import defaultdict

from openblas_core import openblas_environment

PEERS = ("OpenBLAS", "OneDNN", "PyTorch")
# mha's own benchmarks with 16-bit storage: BM_DecodeStepBF16, ...
VARIANTS = ("BF16", "F16")
KINDS = {"BM_DecodeStep": "decode step", "BM_Forward": "forward",
         "BM_AttentionFused": "attention core"}
GEMM = r"BM_Sgemm(OpenBLAS|OneDNN)?/m:(20/n:512|128/n:512|(16|64|96)/n:4096|64/n:1024|(32|128)/n:2304|1024/n:768|1024/n:1024|2048/n:2048/k:2048" \
       r"|2048/n:1024|4096/n:512|1/n:4096/k:4096|2048/n:2048/k:64|2048/n:64)/"
LAYER = r"BM_Forward(OpenBLAS|OneDNN|PyTorch|BF16|F16)?/|BM_Decode(Step|Batch)(OpenBLAS|BF16|F16)?/"
CORE = r"BM_Attention(Fused|FusedBF16|FusedF16|ComposedOpenBLAS|ComposedOneDNN|ComposedPyTorch)/b:1/h:(8|32)" \
       r"/kvh:(8|32)/q:(4096|1)/kv:(4096|2048)/d:(64|128)/causal:0/"
BIAS = r"BM_AttentionBias(Fused|ComposedOpenBLAS|ComposedOneDNN)/"
PEAKS = r"BM_FmaPeak|BM_TilePeak|BM_MemoryRead"
# The layer shapes of the performance issue (S1 is the seed's example), and
# P64, a 64-token prompt through S6's layer.
LAYER_NAMES = {
    f"b={b} q={q} kv={kv} d={d} h={h} kvh={h} self={self}":
        f"{label} B{b} Lq{q} Lkv{kv} d{d} h{h}{', self' if self else ''}"
    for label, b, q, kv, d, h in (("S1", 2, 10, 10, 512, 8), ("S2", 1, 128, 128, 512, 8),
                                  ("S3", 8, 128, 128, 768, 12), ("S4", 1, 2048, 2048, 1024, 16),
                                  ("S5", 1, 4096, 4096, 512, 8), ("S6", 1, 1, 2048, 4096, 32),
                                  ("P64", 1, 64, 64, 4096, 32))
    for self in (0, 1)}


def parse_args():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--binary", default=os.path.join(here, "..", "build", "benchmarks",
                                                    "mha_benchmarks"))
    p.add_argument("--reps", type=int, default=5, help="interleaved repetitions (median)")
    p.add_argument("--min-time", type=float, default=0.3, help="seconds per repetition")
    p.add_argument("--json", help="also keep Google Benchmark's JSON here")
    p.add_argument("--from-json", help="print the tables of a JSON kept by --json, "
                                       "without measuring")
    p.add_argument("--only", help="measure only the benchmarks this regex matches (and "
                                  "the peaks): rerun a few cells, interleaved, e.g. "
                                  "'BM_Sgemm(OpenBLAS|OneDNN)?/m:4096/'")
    return p.parse_args()


def measure(args):
    """Runs the benchmarks; returns {name without /real_time: median counters}."""
    env = {k: v for k, v in os.environ.items() if k != "MHA_TARGET"}
    if not args.from_json:
        env = openblas_environment(env)
    env["GLIBC_TUNABLES"] = ":".join(
        filter(None, (env.get("GLIBC_TUNABLES"), "glibc.malloc.hugetlb=1")))
    measured = (args.only,) if args.only else (GEMM, LAYER, CORE, BIAS)
    command = [args.binary, f"--benchmark_filter={'|'.join(measured + (PEAKS,))}",
               "--benchmark_format=json", f"--benchmark_repetitions={args.reps}",
               "--benchmark_report_aggregates_only=true",
               f"--benchmark_min_time={args.min_time}",
               "--benchmark_enable_random_interleaving=true"]
    if args.from_json:
        with open(args.from_json) as f:
            out = f.read()
    else:
        out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    if args.json and not args.from_json:
        with open(args.json, "w") as f:
            f.write(out)
    data = json.loads(out)
    medians = {b["run_name"].replace("/real_time", ""): b for b in data["benchmarks"]
               if b.get("aggregate_name") == "median"}
    return data["context"], medians


def split(name):
    """'BM_SgemmOneDNN/m:1/.../t:2' -> ('BM_Sgemm', 'OneDNN', 'm=1 ...', 2)."""
    function, shape = name.split("/", 1)
    peer = next((p for p in PEERS + VARIANTS
                 if function.endswith(p) and function != "BM_" + p), "")
    base = function[: len(function) - len(peer)] if peer else function
    if base.startswith("BM_Attention") and base.endswith("Composed"):
        base = base.replace("Composed", "Fused")
    threads = int(re.search(r"(?:^|/)t:(\d+)", shape).group(1))
    shape = re.sub(r"(?:^|/)t:\d+.*", "", shape).replace(":", "=").replace("/", " ")
    shape = shape.replace(" bt=0", "").replace(" bt=1", ", B transposed")
    return base, peer, LAYER_NAMES.get(shape, shape), threads


def peaks(medians):
    """{threads: (FMA GFLOP/s, read GB/s, narrow tile GFLOP/s, wide tile
    GFLOP/s)} of this run: the FMA peak and read bandwidth are the table's
    denominators; the tiles from L1 are the ceiling of a GEMM built on them."""
    found = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for name, b in medians.items():
        threads = int(re.search(r"/t:(\d+)", name).group(1))
        if name.startswith("BM_FmaPeak"):
            found[threads][0] = b["GFLOP/s"]
        elif name.startswith("BM_MemoryRead"):
            found[threads][1] = b["GB/s"]
        elif name.startswith("BM_TilePeak"):
            found[threads][3 if "/wide:1/" in name else 2] = b["GFLOP/s"]
    return found


def rows_of(medians, bases):
    """{(base, shape, threads): {peer or '': median}} for the given functions."""
    rows = defaultdict(dict)
    for name, b in medians.items():
        base, peer, shape, threads = split(name)
        if base in bases:
            rows[(base, shape, threads)][peer] = b
    def natural(item):  # m=20 before m=128; then by threads
        base, shape, threads = item[0]
        return [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", shape)], threads
    return sorted(rows.items(), key=natural)


def table(title, header, lines, note=None):
    """Prints a markdown table; nothing when it has no lines (--only)."""
    if not lines:
        return
    print(f"\n{title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for line in lines:
        print("| " + " | ".join(line) + " |")
    if note:
        print(f"\n{note}")


def rate_cell(b, unit, peak):
    if b is None:
        return "-"
    return f"{b[unit]:.1f} ({100 * b[unit] / peak:.0f}%)" if peak else f"{b[unit]:.1f}"


def main():
    args = parse_args()
    context, medians = measure(args)
    limits = peaks(medians)
    caches = ", ".join(f"L{c['level']} {c['size'] // 1024} KiB" for c in context["caches"]
                       if c["type"] != "Instruction")
    print(f"{context.get('host_name', '')}: {context['num_cpus']} CPUs at "
          f"{context['mhz_per_cpu']} MHz; caches {caches or 'not reported (no /sys cache entries)'}")
    if "mha_caches" in context:
        print(f"caches as mha blocks for them: {context['mha_caches']}")
    labels = [context[k] for k in ("peer_openblas", "peer_onednn") if k in context]
    if labels:
        print("peers: " + "; ".join(labels))
    for threads, (fma, read, narrow, wide) in sorted(limits.items()):
        tiles = (f"; the register tiles from L1 {narrow:.1f} and {wide:.1f} GFLOP/s, "
                 f"{100 * narrow / fma:.0f}% and {100 * wide / fma:.0f}% of the FMA peak "
                 "(narrow and wide: 12 x 2 and 6 x 4 on AVX-512)"
                 if fma and narrow and wide else "")
        print(f"measured on {threads} thread(s): FMA peak {fma:.1f} GFLOP/s, "
              f"DRAM read {read:.1f} GB/s{tiles}")

    gemm_unit = lambda shape: ("GB/s", 1) if shape.startswith("m=1 ") else ("GFLOP/s", 0)
    core_unit = lambda shape: ("GB/s", 1) if " q=1 " in f" {shape} " else ("GFLOP/s", 0)
    compositions = {"OpenBLAS": "OpenBLAS composition", "OneDNN": "oneDNN composition"}
    comparison(medians, limits, "BM_Sgemm",
               "SGEMM: GFLOP/s (GB/s for m=1), % of the measured peak (DRAM read for m=1)",
               gemm_unit, "mha", {"OpenBLAS": "OpenBLAS", "OneDNN": "oneDNN"},
               "mha / best peer")
    comparison(medians, limits, "BM_Forward", "forward: GFLOP/s (% of FMA peak)",
               lambda shape: ("GFLOP/s", 0), "mha",
               dict(compositions, PyTorch="PyTorch nn.MultiheadAttention"),
               "best peer time / mha time",
               above_peak="mha computes this shape in the absorbed order (K and V "
               "never projected, lib/layer/absorbed_attention.h): its rate counts "
               "the standard order's multiply-adds, so only its time compares.")
    comparison(medians, limits, "BM_DecodeStep",
               "decode step: GB/s of weights and cache (% of DRAM read)",
               lambda shape: ("GB/s", 1), "mha", compositions, "best peer time / mha time")
    comparison(medians, limits, "BM_DecodeBatch",
               "decode step of a batch of sequences: GB/s of weights and caches (% of "
               "DRAM read)",
               lambda shape: ("GB/s", 1), "mha", compositions, "best peer time / mha time")
    comparison(medians, limits, "BM_AttentionFused",
               "attention core: fused mha against matrix products + softmax; GFLOP/s "
               "(GB/s for q=1), % of the peak", core_unit, "mha fused",
               dict(compositions, PyTorch="PyTorch scaled_dot_product_attention"),
               "mha / best peer")
    comparison(medians, limits, "BM_AttentionBiasFused",
               "attention core with an additive bias (mask.bias, ALiBi's): GFLOP/s, "
               "% of the peak", core_unit, "mha fused", compositions, "mha / best peer")
    sixteen_bit(medians, limits, core_unit)


def comparison(medians, limits, base, title, unit_of, ours_header, peer_headers,
               ratio_header, above_peak=None):
    """One table of mha's `base` benchmark against the peers' of each shape:
    rates with the fraction of the peak, and ours / the best peer's rate
    (for equal work, the best peer's time / ours). A column per peer of
    peer_headers ({peer: header}) that has rows in this run. Rates of ours
    above the peak get a * and the explanation `above_peak` under the
    table."""
    rows = rows_of(medians, {base})
    peers = [p for p in peer_headers if any(p in runs for _, runs in rows)]
    lines = []
    marked = False
    for (_, shape, threads), runs in rows:
        unit, limit = unit_of(shape)
        peak = limits[threads][limit]
        best = max((runs[p][unit] for p in peers if p in runs), default=0)
        ours = runs.get("")
        ratio = f"{ours[unit] / best:.2f}" if ours and best else "-"
        ours_cell = rate_cell(ours, unit, peak)
        if above_peak and ours and ours[unit] > peak:
            ours_cell += " *"
            marked = True
        lines.append([shape, str(threads), ours_cell]
                     + [rate_cell(runs.get(p), unit, peak) for p in peers] + [ratio])
    table(title, ["shape", "threads", ours_header] + [peer_headers[p] for p in peers]
          + [ratio_header], lines, f"\\* {above_peak}" if marked else None)


def sixteen_bit(medians, limits, core_unit):
    """Weights and cache stored in BF16 and F16 against fp32, same shapes:
    GB/s of the bytes stored (GFLOP/s for prefill) and the speedup in time."""
    lines = []
    for (base, shape, threads), runs in rows_of(
            medians, {"BM_DecodeStep", "BM_Forward", "BM_AttentionFused"}):
        if not any(v in runs for v in VARIANTS):
            continue
        unit, limit = ("GB/s", 1) if base == "BM_DecodeStep" else (
            core_unit(shape) if base == "BM_AttentionFused" else ("GFLOP/s", 0))
        peak = limits[threads][limit]
        f32 = runs.get("")
        cells = [rate_cell(f32, unit, peak)]
        for variant in VARIANTS:
            got = runs.get(variant)
            cells.append(rate_cell(got, unit, peak))
            # Time ratio: the work is the same, the bytes are halved.
            per_work = "GFLOP/s"
            cells.append(f"{got[per_work] / f32[per_work]:.2f}x" if got and f32 else "-")
        lines.append([KINDS[base], shape, str(threads)] + cells)
    table("16-bit storage (weights and cache for decode and forward; K and V for the "
          "core): rates of the bytes stored, % of the peak, speedup over F32 in time",
          ["kernel", "shape", "threads", "F32", "BF16", "BF16 speedup", "F16",
           "F16 speedup"], lines)


if __name__ == "__main__":
    main()
