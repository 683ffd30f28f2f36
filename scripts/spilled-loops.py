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

Prints one line per loop that spills (stack accesses, FMAs, address,
function) and a summary; exits 1 if any loop spills. x86 only (AT&T syntax).
"""

import argparse
import re
import subprocess
import sys

INSTRUCTION = re.compile(r"^\s+([0-9a-f]+):\s+(.*)$")
FUNCTION = re.compile(r"^([0-9a-f]+) <(.*)>:$")
JUMP = re.compile(r"^j\w+\s+([0-9a-f]+)")


def functions(binary):
    """Yields (name, [(address, instruction text)]) for each function."""
    listing = subprocess.run(
        ["objdump", "-d", "-C", "--no-show-raw-insn", binary],
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


def is_stack_vector_access(text):
    return "mm" in text and ("(%rsp)" in text or "(%rbp)" in text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("binary")
    parser.add_argument("--target", default="N_AVX3_DL",
                        help="regular expression for the functions to scan")
    parser.add_argument("--min-fma", type=int, default=48,
                        help="FMAs that make a loop a micro-kernel's")
    args = parser.parse_args()
    loops = spilled = 0
    for name, body in functions(args.binary):
        if not re.search(args.target, name):
            continue
        for loop in innermost_loops(body):
            fmas = sum("fmadd" in text for _, text in loop)
            if fmas < args.min_fma:
                continue
            loops += 1
            stack = sum(is_stack_vector_access(text) for _, text in loop)
            if stack:
                spilled += 1
                print(f"{stack:3d} stack accesses, {fmas:3d} FMAs at "
                      f"{loop[0][0]:#x}: {name[:200]}")
    print(f"{spilled} of {loops} loops with {args.min_fma}+ FMAs in "
          f"{args.target} functions keep vectors on the stack")
    return 1 if spilled else 0


if __name__ == "__main__":
    sys.exit(main())
