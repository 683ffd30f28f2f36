// 2^x for the arguments a softmax makes: x = logit - max <= 0 (or slightly
// above from rounding), in base 2, scale and log2(e) folded into the logits
// beforehand (as FlashAttention does), or -inf.
//
// Range reduction to x = n + f, n = round(x), |f| <= 1/2, then 2^f by a
// degree-5 polynomial (fitted for relative error on [-1/2, 1/2] with its
// constant term fixed at 1, so 2^0 is exactly 1), then 2^n. Measured against
// double exp2 on 18 million floats of [-126, 0] (tests/exp2_test.cc): at
// most 2.02 ulp with FMA, 2.19 without. Below -126 the result is exactly 0,
// never a denormal: next to the row's largest term, 2^0 = 1, such terms are
// below float precision, and Intel cores make and consume denormals through
// microcode assists. With ALiBi's bias at L4096 (b1 h8 hd64), where 3% of a
// row's terms fell in [2^-149, 2^-126) and the products of P V read them, the
// fused core ran at 22 GFLOP/s on Sapphire Rapids against 126 without the
// bias (Zen 5 computes denormals at full speed). -inf gives exactly 0. NaN is
// never passed in: the callers poison rows holding NaN before.
//
// 9 vector operations per vector on AVX-512 (a compare, vreduceps for f, a
// subtraction for n, 5 FMAs, vscalefps for 2^n, as in XNNPACK's f32
// "rr1-p5-scalef" exp but for the reduction); 12 elsewhere, where 2^n is
// built in the exponent bits (13 before n and its bits came from one
// addition: the AVX2 target's attention core on Sapphire Rapids, b1 h8 L4096,
// b8 h12 L128 and b1 h25 L1024 causal, ran 1.047x, 1.064x and 1.055x as fast,
// one process per build alternating, medians of 7). With f by vreduceps rather
// than x - round(x) (vrndscaleps, 2 uops) and without the clamp of -inf that
// the rounding needed, a loop of exponentials ran 1.2x as fast (Sapphire
// Rapids), with the same results; the fused attention core, one process per
// build alternating (medians of 7-9, 1 thread): b1 h8 L4096 hd64 1.007x and
// 1.034x, b8 h12 L128 1.022x, b1 h25 L1024 causal 0.971x and 1.011x.
// Rejected: f = x - floor(x) in [0, 1), vscalefps taking 2^floor(x) from x
// itself (2 operations fewer still): f rounds where x is just below an
// integer, and the polynomial's values near 2 have half the relative ulp,
// 3.07 ulp at best. (A degree-4 polynomial would save one FMA but costs 40
// ulp; PyTorch's exp_u20 accepts 20.)

#if defined(MHA_LIB_SOFTMAX_EXP2_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_LIB_SOFTMAX_EXP2_INL_H_
#undef MHA_LIB_SOFTMAX_EXP2_INL_H_
#else
#define MHA_LIB_SOFTMAX_EXP2_INL_H_
#endif

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// log2(e): natural logits times this are base-2 logits.
constexpr float kLog2e = 1.44269504088896341f;

template <class D, class V = hn::Vec<D>>
HWY_INLINE V Exp2OfNonPositive(D d, V x) {
  // Lanes from -126 up have n >= -126 and, where n = -126, f >= 0 and so
  // 2^f >= 1: a normal result. The others (-inf too) give 0.
  const auto normal = hn::Ge(x, hn::Set(d, -126.0f));
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  // f = x - round(x) in one vreduceps (1 uop, where vrndscaleps is 2),
  // exact, and n = x - f. (-inf gives f = 0, n = -inf, in a lane the mask
  // zeroes.)
  const V f{
      _mm512_reduce_ps(x.raw, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
  const V n = hn::Sub(x, f);
#else
  // n + 127 must stay a valid biased exponent: -127 gives bits 0, exactly 0.
  x = hn::IfThenElse(normal, x, hn::Set(d, -127.0f));
  // x + 1.5 * 2^23 + 127 rounds to an integer (floats from 2^23 on are), and
  // its low mantissa bits are n + 127, the biased exponent of 2^n: one
  // addition for n and its bits, where rounding (2 uops on Intel) and a
  // conversion took three operations. A tie (x = k + 1/2) goes to whichever
  // of k and k + 1 makes the sum even: f = 1/2 or -1/2, both in the
  // polynomial's range.
  const V magic = hn::Set(d, 12582912.0f + 127.0f);
  const V biased_n = hn::Add(x, magic);
  const V n = hn::Sub(biased_n, magic);
  const V f = hn::Sub(x, n);
#endif
  // 2^f = 1 + f (c1 + f (c2 + ...)): the constant term exactly 1, so that
  // the largest term of a row is exactly 1.
  V p = hn::Set(d, 0.0013264722656458616f);
  p = hn::MulAdd(p, f, hn::Set(d, 0.009671512991189957f));
  p = hn::MulAdd(p, f, hn::Set(d, 0.05550733581185341f));
  p = hn::MulAdd(p, f, hn::Set(d, 0.24022242426872253f));
  p = hn::MulAdd(p, f, hn::Set(d, 0.6931470036506653f));
  p = hn::MulAdd(p, f, hn::Set(d, 1.0f));
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  // (maskz: GCC 12 warns of the undefined pass-through of the plain form.)
  return V{_mm512_maskz_scalef_ps(normal.raw, p.raw, n.raw)};
#else
  const hn::RebindToSigned<D> di;
  return hn::Mul(p,
                 hn::BitCast(d, hn::ShiftLeft<23>(hn::BitCast(di, biased_n))));
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_LIB_SOFTMAX_EXP2_INL_H_
