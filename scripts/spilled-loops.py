#!/usr/bin/env python3
"""Lists the innermost multiply-add loops of a binary that keep vectors on
the stack.

A register tile spilled by the compiler reloads and stores accumulators
every few steps: the loop still runs, only slower, and no test notices.
This reads `objdump -d` of a binary or object file, finds each innermost
loop (a backward jump over straight-line code) with at least --min-fma
FMAs in a function whose name --target matches (a regular expression:
Highway targets' namespaces), and counts its vector loads and stores
addressed from the stack pointer or frame pointer.

  python3 scripts/spilled-loops.py build/benchmarks/mha_benchmarks
  python3 scripts/spilled-loops.py --target 'N_AVX(2|3)' build/lib/libmha.a

  python3 scripts/spilled-loops.py --objdump aarch64-linux-gnu-objdump \
      --target 'N_(NEON|SVE)' build-arm/lib/libmha.a

Prints one line per loop that spills (stack accesses, FMAs, address,
function) and a summary; exits 1 if any loop spills. Reads x86 (AT&T
syntax) and aarch64 (NEON and SVE registers) code.
"""

import argparse
import re
import subprocess
import sys

INSTRUCTION = re.compile(r"^\s+([0-9a-f]+):\s+(.*)$")
FUNCTION = re.compile(r"^([0-9a-f]+) <(.*)>:$")
# x86's jumps; aarch64's branches (b, b.cond, cbz, cbnz, tbz, tbnz).
JUMP = re.compile(r"^(?:j\w+|b|b\.\w+|cbn?z\s+\w+,|tbn?z\s+\w+, #\d+,)"
                  r"\s+([0-9a-f]+)\b")
# x86's vfmadd*; aarch64's fmla (NEON and SVE) and SVE's fmad.
FMA = re.compile(r"^(?:v?fn?m(?:add|sub)\w*|fmla|fmad)\s")
# A vector register (x86's xmm/ymm/zmm; aarch64's q, v and SVE's z) read or
# written relative to the stack pointer, or to the frame pointer where the
# function sets one up (elsewhere clang uses rbp as any other register: it
# held the attention's A sliver).
def vector_access(x86_base, arm_base):
    """A vector register read or written relative to the named base."""
    return re.compile(
        rf"(?:%[xyz]mm\d+.*\(%{x86_base}\)|\(%{x86_base}\).*%[xyz]mm\d+)"
        rf"|(?:\b[qvz]\d+\b.*\[{arm_base}\b)")


STACK_VECTOR = vector_access("rsp", "sp")
FRAME_VECTOR = vector_access("rbp", "x29")
SETS_FRAME_POINTER = re.compile(r"^mov\s+(?:%rsp,%rbp|x29, sp)$")


def functions(binary, objdump):
    """Yields (name, [(address, instruction text)]) for each function."""
    listing = subprocess.run(
        [objdump, "-d", "-C", "--no-show-raw-insn", binary],
        capture_output=True, text=True, check=True).stdout
    name, body = None, []
    for line in listing.splitlines():
        match = FUNCTION.match(line)
        if match:
            if name is not None:
                yield name, body
            name, body = match.group(2), []
            continue
        match = INSTRUCTION.match(line)
        if match:
            body.append((int(match.group(1), 16), match.group(2)))
    if name is not None:
        yield name, body


def innermost_loops(body):
    """Yields the instructions of each loop whose only jump is its last."""
    index = {address: i for i, (address, _) in enumerate(body)}
    for i, (address, text) in enumerate(body):
        match = JUMP.match(text)
        if not match:
            continue
        target = int(match.group(1), 16)
        if target >= address or target not in index:
            continue
        loop = body[index[target]:i + 1]
        if not any(JUMP.match(t) for _, t in loop[:-1]):
            yield loop


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("binary")
    parser.add_argument("--target", default="N_AVX3_DL",
                        help="regular expression for the functions to scan")
    parser.add_argument("--min-fma", type=int, default=48,
                        help="FMAs that make a loop a micro-kernel's")
    parser.add_argument("--objdump", default="objdump",
                        help="the objdump of the binary's architecture")
    args = parser.parse_args()
    loops = spilled = 0
    for name, body in functions(args.binary, args.objdump):
        if not re.search(args.target, name):
            continue
        frame = any(SETS_FRAME_POINTER.match(text) for _, text in body)
        for loop in innermost_loops(body):
            fmas = sum(bool(FMA.match(text)) for _, text in loop)
            if fmas < args.min_fma:
                continue
            loops += 1
            stack = sum(bool(STACK_VECTOR.search(text) or
                             (frame and FRAME_VECTOR.search(text)))
                        for _, text in loop)
            if stack:
                spilled += 1
                print(f"{stack:3d} stack accesses, {fmas:3d} FMAs at "
                      f"{loop[0][0]:#x}: {name[:200]}")
    print(f"{spilled} of {loops} loops with {args.min_fma}+ FMAs in "
          f"{args.target} functions keep vectors on the stack")
    return 1 if spilled else 0


if __name__ == "__main__":
    sys.exit(main())
