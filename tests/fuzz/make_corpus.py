#!/usr/bin/env python3
"""Writes the seed corpus of mha_fuzzer (tests/fuzz/corpus/).

Each file is one input of the harness, written field by field in the order
mha_fuzzer.cc reads them (keep the two in step). Seeds cover every entry
point, target, layout and mask kind; files named repro-* reproduce a rule
that a library once broke (see README.md beside this script).

    python3 tests/fuzz/make_corpus.py [output directory]
"""
import os
import struct
import sys

OPS = {"attention": 0, "sgemm": 1, "softmax": 2, "forward": 3, "cached": 4}
AUTO = 255  # target byte: the automatic choice; n: supported_targets()[n % count]


def u16(v):
    return struct.pack("<H", v)


def u32(v):
    return struct.pack("<I", v)


def invalid(kind):
    """Invalid byte: 0 is a valid call, kind >= 1 one bad argument."""
    return 0 if kind == 0 else 0xD0 + kind - 1


def batch(v):
    return 0xF0 if v == 0 else v - 1


def q_len(v):
    if v == 0:
        return 0xFF
    return v - 1 if v <= 8 else 0x80 | (v - 1)


def kv_len(v):  # u16
    return v if v <= 40 else 0x8000 | v


def head_dim(v):
    return v if v <= 16 else 0x80 | v


def dim(v):  # sgemm m, n, k; softmax rows
    if v == 0:
        return 0xFF
    return v - 1 if v <= 40 else 0x80 | (v - 1)


def model_head_dim(v):  # the layer: 1 + (b % 12), or 1 + ((b & 0x7f) % 40)
    return v - 1 if v <= 12 else 0x80 | (v - 1)


def layout(pad_row=0, token_major=False, gap_mid=False, gap_batch=False,
           broadcast=None):
    pads = {0: 0, 1: 1, 3: 2, 16: 3}
    b = pads[pad_row] | (4 if token_major else 0) | (8 if gap_mid else 0)
    b |= 16 if gap_batch else 0
    if broadcast == "head":
        b |= 7 << 5
    elif broadcast == "batch":
        b |= 6 << 5
    return b


PAD_NAN, PAD_INF, PAD_NEG_INF, PAD_HUGE = 0, 1, 2, 3


def placements(records):
    out = bytes([len(records)])
    for kind, arg, pos in records:
        out += bytes([kind, arg]) + u16(pos)
    return out


def attention(target=AUTO, weights=False, causal=False, lengths=False,
              bias=False, determinism=False, bad=0, bad_arg=0, b=1, kvh=1,
              group=1, q=4, kv=8, d=8, lq=0, lk=0, lv=0, lo=0, scale=0,
              values=0, seed=1, pad=PAD_NAN, lengths_mode=0, bias_mode=0,
              places=()):
    flags = (weights << 0) | (causal << 1) | (lengths << 2) | (bias << 3)
    flags |= 0x30 if determinism else 0
    return (bytes([OPS["attention"], target, flags, invalid(bad), bad_arg,
                   batch(b), kvh - 1, group - 1, q_len(q)]) + u16(kv_len(kv)) +
            bytes([head_dim(d), lq, lk, lv, lo, scale, values]) + u32(seed) +
            bytes([pad, lengths_mode, bias_mode]) + placements(places))


def sgemm(target=AUTO, ta=False, tb=False, determinism=False, bad=0,
          bad_arg=0, m=8, n=8, k=8, pads=0, alpha=0, beta=0, values=0, seed=1,
          pad=PAD_NAN, places=()):
    flags = ta | (tb << 1) | (0xC if determinism else 0)
    return (bytes([OPS["sgemm"], target, flags, invalid(bad), bad_arg, dim(m),
                   dim(n), dim(k), pads, alpha, beta, values]) + u32(seed) +
            bytes([pad]) + placements(places))


def softmax(target=AUTO, in_place=False, determinism=False, bad=0, bad_arg=0,
            rows=4, cols=16, pads=0, scale=0, values=0, seed=1, pad=PAD_NAN,
            places=()):
    flags = in_place | (6 if determinism else 0)
    return (bytes([OPS["softmax"], target, flags, invalid(bad), bad_arg,
                   dim(rows)]) + u16(kv_len(cols)) +
            bytes([pads, scale, values]) + u32(seed) + bytes([pad]) +
            placements(places))


def model(kvh=1, group=2, hd=4, scales=0):
    return bytes([kvh - 1, group - 1, model_head_dim(hd), scales])


def forward(target=AUTO, weights_target=AUTO, bias=False, out_in=False,
            weights=False, causal=False, lengths=False, bias_mask=False,
            kv_heads_zero=False, bad=0, bad_arg=0, determinism=False, seed=1,
            kvh=1, group=2, hd=4, scales=0, b=1, q=3, kv=3, mode=0, values=0,
            lengths_mode=0, bias_mode=0, places=()):
    flags = bias | (out_in << 1) | (weights << 2) | (causal << 3)
    flags |= (lengths << 4) | (bias_mask << 5) | (kv_heads_zero << 6)
    # forward reads kv_len from one byte: 0..40
    return (bytes([OPS["forward"], target, weights_target, flags, invalid(bad),
                   bad_arg, 3 if determinism else 0]) + u32(seed) +
            model(kvh, group, hd, scales) +
            bytes([batch(b), q_len(q), kv, mode, values, lengths_mode,
                   bias_mode]) + placements(places))


def cached(target=AUTO, bias=False, out_in=False, copies=False,
           switch_targets=False, kv_heads_zero=False, bad=0, bad_arg=0,
           seed=1, kvh=1, group=2, hd=4, scales=0, b=1, length=6, extra=0,
           values=0, places=(), chunks=()):
    flags = bias | (out_in << 1) | (copies << 2) | (switch_targets << 3)
    flags |= kv_heads_zero << 6
    return (bytes([OPS["cached"], target, flags, invalid(bad), bad_arg]) +
            u32(seed) + model(kvh, group, hd, scales) +
            bytes([batch(b), length - 1, extra, values]) + placements(places) +
            bytes(chunks))


# Placement kinds (see mha_fuzzer.cc).
A_Q_NAN, A_Q_ROW_NAN, A_K_NAN, A_K_INF, A_V_NAN, A_V_INF, A_Q_INF = range(7)
A_BIAS_NAN, A_BIAS_PINF, A_BIAS_NINF, A_BIAS_ROW_NINF = 7, 8, 9, 10
A_POISON_LENGTHS, A_BIAS_HIDE_POISON, A_V_ROW_NAN, A_K_ROW_NAN = 11, 12, 13, 14
L_QUERY, L_KEY, L_VALUE = 0, 2, 4
L_WQ, L_WK, L_WV, L_WO, L_BIAS = 6, 7, 8, 9, 10
L_MASK_NAN, L_MASK_ROW_NINF, L_POISON_LENGTHS, L_BIAS_HIDE_POISON = 11, 12, 13, 14


def corpus():
    c = {}
    # --- seeds: attention
    c["seed-attention-basic"] = attention()
    for t in range(8):  # every target (index modulo the supported ones)
        c[f"seed-attention-target{t}"] = attention(
            target=t, b=2, kvh=2, group=2, q=5, kv=19, d=17 + t * 7,
            causal=True, weights=t % 2 == 1, seed=10 + t)
    c["seed-attention-decode-long"] = attention(q=1, kv=300, d=64, kvh=1,
                                                group=4, lengths=True,
                                                lengths_mode=1, seed=3)
    c["seed-attention-blocks"] = attention(q=6, kv=270, d=8, causal=True,
                                           bias=True, bias_mode=1,
                                           weights=True, seed=4)
    c["seed-attention-strided"] = attention(
        b=2, kvh=1, group=3, q=7, kv=11, d=33, lq=layout(3, True, True, True),
        lk=layout(1, False, True), lv=layout(16, True), lo=layout(1, True, True),
        pad=PAD_INF, seed=5)
    c["seed-attention-broadcast"] = attention(
        b=2, kvh=2, group=1, q=3, kv=9, d=12, lk=layout(broadcast="head"),
        lv=layout(broadcast="batch"), seed=6)
    c["seed-attention-q-gt-kv"] = attention(q=9, kv=4, d=8, causal=True,
                                            lengths=True, lengths_mode=2, b=2,
                                            weights=True, seed=7)
    c["seed-attention-scale"] = attention(scale=0x80 | 6, q=5, kv=30, d=32,
                                          values=1, seed=8)
    c["seed-attention-kv0"] = attention(kv=0, q=3, d=5)
    # kv_lengths-hidden keys holding NaN/Inf (85fb56a already got these right)
    c["seed-attention-hidden-lengths"] = attention(
        b=2, q=3, kv=6, d=4, lengths=True, lengths_mode=1, weights=True,
        places=[(A_POISON_LENGTHS, 4, 1), (A_POISON_LENGTHS, 6, 0)], seed=5)
    c["seed-forward-hidden-lengths"] = forward(
        lengths=True, lengths_mode=1, mode=2, q=4, kv=6, seed=64,
        places=[(L_POISON_LENGTHS, 4, 0), (L_POISON_LENGTHS, 4, 1)])
    c["seed-attention-bias-rows"] = attention(bias=True, bias_mode=3, q=8,
                                              kv=12, weights=True, seed=9,
                                              determinism=True)
    # --- seeds: sgemm
    for i, (ta, tb) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
        c[f"seed-sgemm-t{ta}{tb}"] = sgemm(
            target=i, ta=ta, tb=tb, m=13 + i, n=33 + i, k=17 + 3 * i,
            pads=0b011001 if i % 2 else 0, alpha=0x40 | (i + 1),
            beta=0x40 | (i + 1), seed=20 + i)
    c["seed-sgemm-gemv"] = sgemm(m=1, n=97, k=70, seed=24)
    c["seed-sgemm-k0"] = sgemm(m=5, n=6, k=0, beta=0x41)
    c["seed-sgemm-nan"] = sgemm(m=9, n=9, k=9, beta=0x41, seed=25,
                                places=[(0, 0, 5), (3, 1, 40), (4, 0, 77)])
    # --- seeds: softmax
    c["seed-softmax-basic"] = softmax()
    c["seed-softmax-inplace"] = softmax(in_place=True, rows=7, cols=300,
                                        pads=1, scale=0x80 | 9, seed=30)
    c["seed-softmax-large"] = softmax(rows=3, cols=40, values=3 << 4, seed=31,
                                      places=[(0, 0, 4), (2, 0, 1)])
    # --- seeds: the layer
    c["seed-forward-self"] = forward(q=5, kv=5, seed=40)
    c["seed-forward-cross"] = forward(target=1, weights_target=2, bias=True,
                                      out_in=True, weights=True, kvh=2,
                                      group=2, hd=8, b=2, q=4, kv=9, mode=2,
                                      seed=41)
    c["seed-forward-masks"] = forward(causal=True, lengths=True,
                                      bias_mask=True, bias_mode=2,
                                      lengths_mode=1, kvh=1, group=4, hd=6,
                                      b=2, q=6, kv=6, mode=1, weights=True,
                                      seed=42, determinism=True)
    c["seed-forward-selfptr"] = forward(q=3, kv=7, mode=3, hd=20, kvh=2,
                                        group=1, seed=43)
    c["seed-cached-chunks"] = cached(bias=True, kvh=2, group=2, hd=4, b=2,
                                     length=13, extra=2, seed=50,
                                     chunks=[2, 0, 4, 0xFF, 1, 3])
    c["seed-cached-copies"] = cached(copies=True, switch_targets=True,
                                     length=9, seed=51,
                                     chunks=[0x82, 0x89, 0x90, 0x01])

    # --- reproducers of the precise rules (each broke at 85fb56a)
    # Hidden keys never count: NaN in the V of keys that rows do not see.
    c["repro-hidden-v-nan-causal"] = attention(
        q=4, kv=8, d=8, causal=True, places=[(A_V_ROW_NAN, 0, 7)], seed=60)
    c["repro-hidden-v-nan-causal-weights"] = attention(
        q=4, kv=8, d=8, causal=True, weights=True,
        places=[(A_V_ROW_NAN, 0, 7)], seed=60)
    c["repro-hidden-v-nan-bias"] = attention(
        q=2, kv=2, d=1, bias=True, places=[(A_BIAS_HIDE_POISON, 4, 2)],
        seed=61)
    c["repro-hidden-layer-value-bias"] = forward(
        bias_mask=True, mode=2, q=3, kv=5, seed=1,
        places=[(L_BIAS_HIDE_POISON, 4, 4)])
    c["repro-hidden-cached-future-token"] = cached(
        length=6, seed=65, places=[(0, 0, 5 * 8 + 3)], chunks=[5, 0])
    # NaN propagates: NaN (or Inf) in a query row must not give zeros.
    c["repro-nan-k-visible"] = attention(  # hidden from row 0, seen by 1, 2
        q=3, kv=5, d=4, bias=True, places=[(A_BIAS_HIDE_POISON, 0, 3)],
        seed=62)
    c["repro-nan-q-fused"] = attention(q=2, kv=5, d=8,
                                       places=[(A_Q_ROW_NAN, 0, 1)], seed=66)
    c["repro-nan-q-element"] = attention(q=3, kv=40, d=16,
                                         places=[(A_Q_NAN, 0, 20)], seed=67)
    c["seed-attention-inf-q-weights"] = attention(q=2, kv=5, d=8, weights=True,
                                         places=[(A_Q_INF, 0, 9)], seed=68)
    c["repro-inf-k-visible"] = attention(q=2, kv=5, d=8,
                                         places=[(A_K_INF, 1, 0)], seed=69)
    c["repro-nan-layer-query"] = forward(q=4, kv=4, mode=1, seed=70,
                                         places=[(L_QUERY, 0, 2 * 8 + 1)])
    c["repro-softmax-nan-row"] = softmax(rows=3, cols=20,
                                         places=[(3, 0, 5 * 3), (4, 0, 1)])
    # Scale must be finite.
    c["repro-scale-nan"] = attention(bad=10, bad_arg=0)
    c["repro-scale-inf"] = attention(bad=10, bad_arg=1)
    c["repro-softmax-scale-inf"] = softmax(bad=7, bad_arg=1)
    # Aliasing is checked.
    c["repro-sgemm-c-overlaps-a"] = sgemm(bad=7, bad_arg=100, m=4, n=4, k=4)
    c["repro-sgemm-c-overlaps-b"] = sgemm(bad=8, bad_arg=10, m=4, n=4, k=4)
    c["repro-attention-out-overlaps-q"] = attention(bad=11, bad_arg=64)
    c["repro-attention-weights-overlap-v"] = attention(bad=12, bad_arg=33)
    c["repro-attention-weights-overlap-out"] = attention(bad=14, bad_arg=16)
    c["repro-attention-out-overlaps-bias"] = attention(bad=15, bad_arg=8)
    for arg in (0, 1, 2, 7):  # batch, head, token stride 0; head stride 2
        c[f"repro-attention-out-rows-overlap-{arg}"] = attention(
            bad=16, bad_arg=arg, b=2, kvh=2)
    c["repro-softmax-y-overlaps-x"] = softmax(bad=9, bad_arg=50)
    c["repro-forward-output-overlaps-query"] = forward(bad=9, bad_arg=40)
    c["repro-forward-weights-overlap-value"] = forward(bad=10, bad_arg=41,
                                                       weights=True, mode=2,
                                                       kv=5)
    c["repro-cached-output-overlaps-x"] = cached(bad=6, bad_arg=70,
                                                 chunks=[0x42, 3])
    # Sizes that overflow throw.
    for v in range(3):
        c[f"repro-overflow-attention-{v}"] = attention(bad=13, bad_arg=v)
    c["repro-overflow-sgemm-a"] = sgemm(bad=9)
    c["repro-overflow-sgemm-c"] = sgemm(bad=10)
    c["repro-overflow-softmax"] = softmax(bad=6)
    c["repro-overflow-forward"] = forward(bad=11)
    c["repro-overflow-kvcache"] = forward(bad=12)
    c["repro-overflow-kvcache-cached"] = cached(bad=7, chunks=[0x40, 2])
    # Found by the fuzzer at c2d841b (see README.md).
    c["repro-hidden-weight-of-nan-row"] = attention(
        q=2, kv=7, d=4, causal=True, weights=True,
        places=[(A_Q_ROW_NAN, 0, 0)], seed=71)
    c["repro-forward-null-kv-kv0"] = forward(mode=2, q=1, kv=0, bias=True,
                                             seed=72)
    return c


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "corpus")
    os.makedirs(out, exist_ok=True)
    for name, data in sorted(corpus().items()):
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print(f"make_corpus: {len(corpus())} inputs in {out}")


if __name__ == "__main__":
    main()
