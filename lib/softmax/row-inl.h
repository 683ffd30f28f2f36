// Vectorized row primitives of a numerically stable softmax, shared by
// mha::softmax and the attention kernels: the row maximum, the shifted
// exponentials with their sum, and the final scaling. Ragged tails go through
// a one-vector buffer, so no call reads or writes past the row.

#if defined(MHA_LIB_SOFTMAX_ROW_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_LIB_SOFTMAX_ROW_INL_H_
#undef MHA_LIB_SOFTMAX_ROW_INL_H_
#else
#define MHA_LIB_SOFTMAX_ROW_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "hwy/highway.h"
#include "lib/softmax/exp2-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using RowTag = hn::ScalableTag<float>;
using RowVec = hn::Vec<RowTag>;

// The last `count` (< one vector) elements of a row, padded with `fill`.
struct RowTail {
  HWY_ALIGN float lanes[hn::MaxLanes(RowTag())];

  RowVec Load(const float* from, std::size_t count, float fill) {
    const RowTag d;
    for (std::size_t i = 0; i < hn::Lanes(d); ++i) lanes[i] = fill;
    std::memcpy(lanes, from, count * sizeof(float));
    return hn::Load(d, lanes);
  }
  void Store(RowVec v, float* to, std::size_t count) {
    hn::Store(v, RowTag(), lanes);
    std::memcpy(to, lanes, count * sizeof(float));
  }
};

constexpr float kPosInf = std::numeric_limits<float>::infinity();
constexpr float kNegInf = -kPosInf;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The largest lane, -inf included. (Highway 1.0.3's EMU128 MaxOfLanes starts
// from -FLT_MAX, so a vector of -inf would report -FLT_MAX and a row that sees
// nothing would not be recognized: reduce through memory instead.)
inline float MaxLane(RowVec v) {
  const RowTag d;
  HWY_ALIGN float lanes[hn::MaxLanes(RowTag())];
  hn::Store(v, d, lanes);
  float max = kNegInf;
  for (std::size_t i = 0; i < hn::Lanes(d); ++i) max = std::max(max, lanes[i]);
  return max;
}

// The largest entry x[c], c < n: -inf when n == 0 or every entry is -inf,
// NaN when some entry is NaN. (Highway's Max returns either operand for NaN,
// depending on the target, so NaN is tracked on the side: a row holding NaN
// must never pass for one whose entries are all -inf, which sees nothing.)
inline float RowMax(const float* HWY_RESTRICT x, std::size_t n) {
  const RowTag d;
  const std::size_t lanes = hn::Lanes(d);
  RowVec max = hn::Set(d, kNegInf);
  auto has_nan = hn::FirstN(d, 0);
  std::size_t c = 0;
  for (; c + lanes <= n; c += lanes) {
    const RowVec v = hn::LoadU(d, x + c);
    max = hn::Max(max, v);
    has_nan = hn::Or(has_nan, hn::IsNaN(v));
  }
  if (c < n) {
    RowTail tail;
    const RowVec valid =
        hn::IfThenElse(hn::FirstN(d, n - c), tail.Load(x + c, n - c, 0.0f),
                       hn::Set(d, kNegInf));
    max = hn::Max(max, valid);
    has_nan = hn::Or(has_nan, hn::IsNaN(valid));
  }
  if (!hn::AllFalse(d, has_nan)) return kNaN;
  return MaxLane(max);
}

// A row maximum that NaN or +inf logits produced: the softmax of such a row
// is NaN, as IEEE arithmetic would make it (exp(inf - inf) is NaN).
inline bool PoisonedMax(float max) { return !(max < kPosInf); }

// A float's exponent field: all ones in NaN and infinities only.
constexpr std::uint32_t kExponentBits = 0x7f800000u;

// The exponent fields of the floats at `from`, as unsigned integers.
template <class D>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<D>> ExponentBits(D d,
                                                         const float* from) {
  const hn::RebindToUnsigned<D> du;
  return hn::And(hn::BitCast(du, hn::LoadU(d, from)),
                 hn::Set(du, kExponentBits));
}

// Whether `rows` rows of `width` floats, `stride` apart, are all finite.
//
// A float is NaN or infinite exactly when its exponent bits are all ones,
// the largest value they can take: the exponent fields are combined by an
// unsigned max, two vectors a step, with no mask operation in the loop. The
// same loop over IsFinite masks (vfpclassps, then knot and kand chained
// through one mask register on AVX-512) made the prefill tile's checks of
// Q, K and V cost 2.5-5% more of S3's attention core (b8 h12 L128 d64,
// token-major: rows d_model apart, as in users' [batch, tokens, d_model]
// tensors; Zen 5, 1 thread, interleaved), where skipping the checks
// altogether gained 5-6%. Head-major (the layer's own Q, K and V): 1.00x.
inline bool RowsAreFinite(const float* HWY_RESTRICT x, std::size_t rows,
                          std::size_t stride, std::size_t width) {
  const RowTag d;
  const hn::RebindToUnsigned<RowTag> du;
  const std::size_t lanes = hn::Lanes(d);
  auto max0 = hn::Zero(du), max1 = hn::Zero(du);
  for (std::size_t r = 0; r < rows; ++r) {
    const float* row = x + r * stride;
    std::size_t c = 0;
    for (; c + 2 * lanes <= width; c += 2 * lanes) {
      max0 = hn::Max(max0, ExponentBits(d, row + c));
      max1 = hn::Max(max1, ExponentBits(d, row + c + lanes));
    }
    for (; c + lanes <= width; c += lanes) {
      max0 = hn::Max(max0, ExponentBits(d, row + c));
    }
    for (; c < width; ++c) {
      if (!std::isfinite(row[c])) return false;
    }
  }
  return hn::AllFalse(du,
                      hn::Eq(hn::Max(max0, max1), hn::Set(du, kExponentBits)));
}

// y[c] = 2^(scale * x[c] - max) for c < n, max being scale * x_max rounded
// and x_max the RowMax, so that every exponent is <= 0 and the largest
// entry's is exactly 0; returns the sum of the y[c] (accumulated per lane,
// then across lanes: a fixed order). -inf gives 0. x and y may be the same
// row. Natural logits take scale * log2(e).
//
// With FMA, scale * x[c] - max is computed with one rounding (accurate for
// large logits), and `residual`, the rounding error of max (exactly
// scale * x_max - max), is subtracted, which makes the largest entry's
// exponent 0 rather than that error: for logits of 1e30 it is up to 2^99.
inline float Exp2ShiftedRow(const float* x, float* y, std::size_t n,
                            float scale, float max, float residual) {
  const RowTag d;
  const std::size_t lanes = hn::Lanes(d);
  const RowVec s = hn::Set(d, scale), m = hn::Set(d, max);
  const RowVec r = hn::Set(d, residual);
  RowVec sum = hn::Zero(d);
  std::size_t c = 0;
  for (; c + lanes <= n; c += lanes) {
    const RowVec e =
        Exp2OfNonPositive(d, hn::Sub(hn::MulSub(s, hn::LoadU(d, x + c), m), r));
    sum = hn::Add(sum, e);
    hn::StoreU(e, d, y + c);
  }
  if (c < n) {
    RowTail tail;
    const RowVec e = Exp2OfNonPositive(
        d, hn::Sub(hn::MulSub(s, tail.Load(x + c, n - c, 0.0f), m), r));
    const RowVec valid = hn::IfThenElseZero(hn::FirstN(d, n - c), e);
    sum = hn::Add(sum, valid);
    tail.Store(valid, y + c, n - c);
  }
  return hn::GetLane(hn::SumOfLanes(d, sum));
}

// The exact rounding error of max = scale * x_max rounded, when MulSub is
// fused (one rounding); 0 where it is a multiply then a subtract, which
// makes the largest entry's exponent exactly 0 by itself.
inline float ProductResidual(float scale, float x_max, float max) {
#if HWY_NATIVE_FMA
  return std::fma(scale, x_max, -max);
#else
  (void)scale, (void)x_max, (void)max;
  return 0.0f;
#endif
}

// y[c] = factor * x[c] for c < n; y may be x.
inline void ScaleRow(const float* x, std::size_t n, float factor, float* y) {
  const RowTag d;
  const std::size_t lanes = hn::Lanes(d);
  const RowVec f = hn::Set(d, factor);
  std::size_t c = 0;
  for (; c + lanes <= n; c += lanes)
    hn::StoreU(hn::Mul(f, hn::LoadU(d, x + c)), d, y + c);
  if (c < n) {
    RowTail tail;
    tail.Store(hn::Mul(f, tail.Load(x + c, n - c, 0.0f)), y + c, n - c);
  }
}

// y = scale * x, except that a -inf entry (a hidden one) stays -inf: a
// scale <= 0 would make it +inf or NaN. The rare path of non-positive
// scales, plain scalar code; the logits then round once more than on the
// fused path (at most L 2^-24 more, L the row's largest |scale * x|).
inline void ScaleKeepingHidden(const float* x, float* y, std::size_t n,
                               float scale) {
  for (std::size_t c = 0; c < n; ++c) {
    y[c] = x[c] == kNegInf ? kNegInf : scale * x[c];
  }
}

// The softmax of one row of scale * x into y (which may be x), computed in
// base 2, on the largest entry (scale > 0 here: a non-positive scale is
// applied first). -inf entries of x get 0 whatever the scale. A row whose
// maximum is -inf (all entries -inf, or n == 0) sees nothing: all zeros. A row
// holding NaN or +inf (after scaling) is all NaN.
inline void SoftmaxRow(const float* x, float* y, std::size_t n, float scale) {
  if (!(scale > 0.0f)) {
    ScaleKeepingHidden(x, y, n, scale);
    x = y;
    scale = 1.0f;
  }
  const float scale2 = scale * kLog2e;
  const float x_max = RowMax(x, n);
  const float max = scale2 * x_max;
  if (max == kNegInf) {
    std::memset(y, 0, n * sizeof(float));
    return;
  }
  if (PoisonedMax(max)) {
    std::fill(y, y + n, kNaN);
    return;
  }
  const float sum =
      Exp2ShiftedRow(x, y, n, scale2, max, ProductResidual(scale2, x_max, max));
  ScaleRow(y, n, 1.0f / sum, y);
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_LIB_SOFTMAX_ROW_INL_H_
