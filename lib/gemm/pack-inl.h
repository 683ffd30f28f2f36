// Packing: copies a block of a matrix into the order the micro-kernel reads,
// zero-padding ragged edges so that every tile the kernel computes is full.
//
// A packed panel of width W holds, for each step p of the depth, W contiguous
// floats: panel[p * W + c]. A panels have width kTileRows (rows of A), B
// panels width TileCols() (columns of B).

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
// strides say how the panel's columns and its depth lie in memory.
inline void PackPanel(float* HWY_RESTRICT panel, std::size_t width,
                      const float* HWY_RESTRICT src, std::size_t c_stride,
                      std::size_t p_stride, std::size_t valid,
                      std::size_t depth) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const std::size_t lanes = hn::Lanes(d);
  // A transposing copy (columns strided in memory) of a full panel: gather a
  // vector of columns per step instead of one element at a time.
  if (c_stride != 1 && valid == width && width % lanes == 0 &&
      c_stride * width < (std::size_t{1} << 31)) {
    const auto offsets = hn::Mul(
        hn::Iota(di, 0), hn::Set(di, static_cast<std::int32_t>(c_stride)));
    for (std::size_t p = 0; p < depth; ++p) {
      for (std::size_t c = 0; c < width; c += lanes) {
        hn::StoreU(
            hn::GatherIndex(d, src + p * p_stride + c * c_stride, offsets), d,
            panel + p * width + c);
      }
    }
    return;
  }
  for (std::size_t p = 0; p < depth; ++p) {
    float* HWY_RESTRICT row = panel + p * width;
    const float* HWY_RESTRICT from = src + p * p_stride;
    if (c_stride == 1) {
      std::memcpy(row, from, valid * sizeof(float));
    } else {
      for (std::size_t c = 0; c < valid; ++c) row[c] = from[c * c_stride];
    }
    for (std::size_t c = valid; c < width; ++c) row[c] = 0.0f;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_LIB_GEMM_PACK_INL_H_
