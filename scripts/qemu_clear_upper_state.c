// Preloaded into qemu-aarch64 on x86 hosts by scripts/run-tests-arm.sh:
// fmaf and fma as libm computes them (one fused multiply-add, the same
// result), after a vzeroupper.
//
// Why: qemu's code generator runs the guest's 256- and 512-bit SVE vector
// operations on the host's AVX2 registers and never clears their upper
// halves. On Intel (Sapphire Rapids here) every legacy-SSE instruction of
// qemu's soft-float helpers then pays for the dirty upper state; AMD does
// not. The helpers' hot path is the guest's float multiply-add, which calls
// libm's fmaf: clearing the state there is enough. Measured on a Sapphire
// Rapids VM: mha::attention at 2 x 2 heads, 128 x 256 x 64, causal, 790 ms
// under qemu at 256 bits against 64 ms at 128 bits; 108 ms with this
// library. The Arm step of CI took 54 minutes there (9.5 on Zen 5).
//
// vzeroupper is safe at a call: the x86-64 calling convention leaves every
// vector register to the caller. Built only where the CPU has FMA.
#include <immintrin.h>

__attribute__((target("avx,fma"))) float fmaf(float a, float b, float c) {
  _mm256_zeroupper();
  return __builtin_fmaf(a, b, c);
}

__attribute__((target("avx,fma"))) double fma(double a, double b, double c) {
  _mm256_zeroupper();
  return __builtin_fma(a, b, c);
}
