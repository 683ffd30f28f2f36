// Preloaded into qemu-aarch64 on x86 hosts by scripts/run-tests-arm.sh:
// fmaf and fma as libm computes them (one fused multiply-add, the same
// result), after a vzeroupper.
//
// Why: qemu's code generator runs the guest's 256- and 512-bit SVE vector
// operations on the host's AVX2 registers and never clears their upper
// halves. On Intel (a Sapphire Rapids VM) every legacy-SSE instruction of
// qemu's soft-float helpers then pays for the dirty upper state; on the
// Zen 5 VMs it did not. The helpers' hot path is the guest's float
// multiply-add, which calls libm's fmaf: clearing the state there is
// enough. On the Sapphire Rapids VM: mha::attention at 2 x 2 heads, 128 x
// 256 x 64, causal, 790 ms under qemu at 256 bits against 64 ms at 128
// bits, 108 ms with this library; the Arm step of CI 54 minutes, then 9.
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
