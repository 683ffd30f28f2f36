// Packing: copies a block of a matrix into the order the micro-kernel reads,
// zero-padding ragged edges so that every tile the kernel computes is full.
//
// A packed panel of width W holds, for each step p of the depth, W contiguous
// floats: panel[p * W + c]. A panels have width kTileRows (rows of A), B
// panels width TileCols() (columns of B).
//
// The copies are written with vectors explicitly: left to the compiler, the
// per-step memcpy of B panels and the element-by-element transposition of A
// slivers cost 5-10% of a 1024^3 product (and more or less depending on the
// -mtune the library happened to be built with).

#if defined(MHA_LIB_GEMM_PACK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_LIB_GEMM_PACK_INL_H_
#undef MHA_LIB_GEMM_PACK_INL_H_
#else
#define MHA_LIB_GEMM_PACK_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {

// panel[p * width + c] = src[c * c_stride + p * p_stride] for c < valid,
// zero for valid <= c < width; p < depth. Serves every transpose case: the
// strides say how the panel's columns and its depth lie in memory. Writes
// nothing past panel[width * depth - 1].
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
#if HWY_TARGET <= HWY_AVX2 || HWY_TARGET == HWY_SVE ||     \
    HWY_TARGET == HWY_SVE2 || HWY_TARGET == HWY_SVE_256 || \
    HWY_TARGET == HWY_SVE2_128
  // Transposing (columns strided in memory) with native gathers: one
  // gather per vector of columns per step. Lanes past `valid` gather column
  // 0 again (in bounds) and are zeroed; the last vector of a step may reach
  // past the panel's width into the next step's place, which that step,
  // written next, overwrites.
  if (c_stride * width < (std::size_t{1} << 31)) {
    const hn::RebindToSigned<decltype(d)> di;
    const auto iota = hn::Iota(di, 0);
    const auto last = hn::Set(di, static_cast<int32_t>(valid));
    const auto stride = hn::Set(di, static_cast<int32_t>(c_stride));
    for (std::size_t p = 0; p < depth; ++p) {
      for (std::size_t c0 = 0; c0 < width; c0 += lanes) {
        const auto column =
            hn::Add(iota, hn::Set(di, static_cast<int32_t>(c0)));
        const auto in_range = hn::Lt(column, last);
        const auto offsets =
            hn::IfThenElseZero(in_range, hn::Mul(column, stride));
        const auto gathered =
            hn::IfThenElseZero(hn::RebindMask(d, in_range),
                               hn::GatherIndex(d, src + p * p_stride, offsets));
        float* to = panel + p * width + c0;
        if (p + 1 < depth || c0 + lanes <= width) {
          hn::StoreU(gathered, d, to);
        } else {  // the panel's very end: nothing past it (a neighbour's)
          HWY_ALIGN float last_lanes[hn::MaxLanes(d)];
          hn::Store(gathered, d, last_lanes);
          std::memcpy(to, last_lanes, (width - c0) * sizeof(float));
        }
      }
    }
    return;
  }
#endif
  for (std::size_t p = 0; p < depth; ++p) {
    float* HWY_RESTRICT row = panel + p * width;
    const float* HWY_RESTRICT from = src + p * p_stride;
    for (std::size_t c = 0; c < valid; ++c) row[c] = from[c * c_stride];
    for (std::size_t c = valid; c < width; ++c) row[c] = 0.0f;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_LIB_GEMM_PACK_INL_H_
