// Packing: copies a block of a matrix into the order the micro-kernel reads,
// zero-padding ragged edges so that every tile the kernel computes is full.
//
// A packed panel of width W holds, for each step p of the depth, W contiguous
// floats: panel[p * W + c]. B panels have width TileCols() (columns of B).
//
// Copies of contiguous steps are written with vectors explicitly: left to
// the compiler, per-step memcpys cost 5-10% of a 1024^3 product that packed
// both operands (more or less depending on the -mtune the library happened
// to be built with). Transposing copies go element by element (below).

#if defined(MHA_LIB_GEMM_PACK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_LIB_GEMM_PACK_INL_H_
#undef MHA_LIB_GEMM_PACK_INL_H_
#else
#define MHA_LIB_GEMM_PACK_INL_H_
#endif

#include <cstddef>

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
  // Transposing (columns strided in memory): element by element. One
  // native gather per vector of columns and step was slower on Zen 5, where
  // an AVX-512 gather costs about 27 cycles: S6's K and V projections (A
  // packed, 2048 x 4096 x 4096) ran 6-7% faster with this loop, on one and
  // two threads; B transposed (2048 x 2048 x 64) the same.
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
