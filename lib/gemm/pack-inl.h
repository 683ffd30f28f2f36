// Packing: copies a block of a matrix into the order the micro-kernel reads,
// zero-padding ragged edges so that every tile the kernel computes is full.
//
// A packed panel of width W holds, for each step p of the depth, W contiguous
// floats: panel[p * W + c]. B panels have width TileCols() (columns of B).
//
// Copies of contiguous steps are written with vectors explicitly: left to
// the compiler, per-step memcpys cost 5-10% of a 1024^3 product that packed
// both operands (more or less depending on the -mtune the library happened
// to be built with). Transposing copies go four rows at a time through 4 x 4
// transposes in 128-bit vectors (TransposeRowsIntoPanel).

#if defined(MHA_LIB_GEMM_PACK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_LIB_GEMM_PACK_INL_H_
#undef MHA_LIB_GEMM_PACK_INL_H_
#else
#define MHA_LIB_GEMM_PACK_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {

// Columns [0, count) of a panel `width` floats wide (count <= 4) from
// `count` rows, each contiguous over `depth` steps: panel[p * width + i] =
// scale * rows[i][p] (a scale of 1 is exact). Writes nothing else.
//
// Four rows go through 4 x 4 transposes in 128-bit vectors: 4 loads, 4
// multiplies, 8 shuffles and 4 stores per 16 elements, where element by
// element took 3 memory operations each. Native gathers (a vector of rows
// per step) lost to element by element on Zen 5, where an AVX-512 gather
// costs about 27 cycles: 5-19% over a whole attention task, 6-7% on S6's K
// and V projections when they packed A this way.
inline void TransposeRowsIntoPanel(float* HWY_RESTRICT panel, std::size_t width,
                                   const float* const* rows, std::size_t count,
                                   std::size_t depth, float scale) {
  std::size_t p = 0;
#if HWY_TARGET != HWY_SCALAR
  if (count == 4) {
    namespace hn = hwy::HWY_NAMESPACE;
    const hn::Full128<float> d;
    const hn::Repartition<uint64_t, decltype(d)> d64;
    const auto factor = hn::Set(d, scale);
    for (; p + 4 <= depth; p += 4) {
      const auto r0 = hn::Mul(hn::LoadU(d, rows[0] + p), factor);
      const auto r1 = hn::Mul(hn::LoadU(d, rows[1] + p), factor);
      const auto r2 = hn::Mul(hn::LoadU(d, rows[2] + p), factor);
      const auto r3 = hn::Mul(hn::LoadU(d, rows[3] + p), factor);
      // Pairs of rows interleaved (r0[0] r1[0] r0[1] r1[1], ...), then
      // pairs of those pairs: column i holds step p + i of the four rows.
      const auto r01_lo = hn::BitCast(d64, hn::InterleaveLower(d, r0, r1));
      const auto r23_lo = hn::BitCast(d64, hn::InterleaveLower(d, r2, r3));
      const auto r01_hi = hn::BitCast(d64, hn::InterleaveUpper(d, r0, r1));
      const auto r23_hi = hn::BitCast(d64, hn::InterleaveUpper(d, r2, r3));
      float* HWY_RESTRICT to = panel + p * width;
      hn::StoreU(hn::BitCast(d, hn::InterleaveLower(d64, r01_lo, r23_lo)), d,
                 to);
      hn::StoreU(hn::BitCast(d, hn::InterleaveUpper(d64, r01_lo, r23_lo)), d,
                 to + width);
      hn::StoreU(hn::BitCast(d, hn::InterleaveLower(d64, r01_hi, r23_hi)), d,
                 to + 2 * width);
      hn::StoreU(hn::BitCast(d, hn::InterleaveUpper(d64, r01_hi, r23_hi)), d,
                 to + 3 * width);
    }
  }
#endif
  for (; p < depth; ++p) {
    for (std::size_t i = 0; i < count; ++i) {
      panel[p * width + i] = scale * rows[i][p];
    }
  }
}

// panel[p * width + c] = src[c * c_stride + p * p_stride] for c < valid,
// zero for valid <= c < width; p < depth. Either a step's columns are
// contiguous (c_stride == 1) or a column's steps are (p_stride == 1, a
// transposing copy). Writes nothing past panel[width * depth - 1].
inline void PackPanel(float* HWY_RESTRICT panel, std::size_t width,
                      const float* HWY_RESTRICT src, std::size_t c_stride,
                      std::size_t p_stride, std::size_t valid,
                      std::size_t depth) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::ScalableTag<float> d;
  const std::size_t lanes = hn::Lanes(d);
  if (c_stride == 1) {  // a step's columns are contiguous: copy vectors
    for (std::size_t p = 0; p < depth; ++p) {
      float* HWY_RESTRICT row = panel + p * width;
      const float* HWY_RESTRICT from = src + p * p_stride;
      std::size_t c = 0;
      for (; c + lanes <= valid; c += lanes) {
        hn::StoreU(hn::LoadU(d, from + c), d, row + c);
      }
      for (; c < valid; ++c) row[c] = from[c];
      for (; c < width; ++c) row[c] = 0.0f;
    }
    return;
  }
  HWY_DASSERT(p_stride == 1);
  for (std::size_t c = 0; c < valid; c += 4) {
    const std::size_t count = std::min<std::size_t>(4, valid - c);
    const float* rows[4];
    for (std::size_t i = 0; i < count; ++i) rows[i] = src + (c + i) * c_stride;
    TransposeRowsIntoPanel(panel + c, width, rows, count, depth, 1.0f);
  }
  for (std::size_t p = 0; p < depth; ++p) {
    std::fill(panel + p * width + valid, panel + (p + 1) * width, 0.0f);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_LIB_GEMM_PACK_INL_H_
