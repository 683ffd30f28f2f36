"""The environment a benchmark process times OpenBLAS in, shared by
peer_table.py and mha-bench so that both name the same kernels.

OpenBLAS runs on the kernel it picks for this CPU: the variables that hold it
to another (OPENBLAS_CORETYPE, OPENBLAS_L2_SIZE, which some machines set) are
removed, except where OpenBLAS does not know the CPU (openblas_core_for_cpu).
"""
import re
import subprocess

FORCING = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def openblas_core_for_cpu(env):
    """The OPENBLAS_CORETYPE to set, or None where OpenBLAS knows this CPU.

    Debian's OpenBLAS 0.3.21 picks its kernels by CPU model, and a model newer
    than it (Emerald Rapids, family 6 model 207) gets "Prescott", SSE3 kernels
    at a fifth of its rate (2048^3 on one thread: 32.9 GFLOP/s against 145 for
    oneDNN). A user on such a CPU would name the kernels the CPU's features
    allow, as OpenBLAS itself does for the models it knows: Cooperlake's for
    AVX512-BF16 (what 0.3.21 runs on Sapphire Rapids), SkylakeX's for
    AVX-512, Haswell's for AVX2 and FMA."""
    probe = ("import ctypes, ctypes.util\n"
             "lib = ctypes.CDLL(ctypes.util.find_library('openblas') or 'libopenblas.so.0')\n"
             "lib.openblas_get_corename.restype = ctypes.c_char_p\n"
             "print(lib.openblas_get_corename().decode())")
    found = subprocess.run(["python3", "-c", probe], env=env, capture_output=True, text=True)
    if found.returncode != 0 or found.stdout.strip() != "Prescott":
        return None
    with open("/proc/cpuinfo") as f:
        flags = set(re.search(r"^flags\s*:(.*)$", f.read(), re.M).group(1).split())
    for needs, core in (({"avx512_bf16"}, "Cooperlake"), ({"avx512f", "avx512bw"}, "SkylakeX"),
                        ({"avx2", "fma"}, "Haswell")):
        if needs <= flags:
            return core
    return None


def openblas_environment(env):
    """A copy of env with OpenBLAS left to its own kernel for this CPU, or
    given the one its features allow where it does not know the CPU (said on
    stdout, since it changes what the tables compare)."""
    env = {k: v for k, v in env.items() if k not in FORCING}
    core = openblas_core_for_cpu(env)
    if core:
        print(f"OpenBLAS does not know this CPU and would run its generic Prescott "
              f"kernels: OPENBLAS_CORETYPE={core} for its benchmarks", flush=True)
        env["OPENBLAS_CORETYPE"] = core
    return env
