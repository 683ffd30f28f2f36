// The register-blocked micro-kernel: a kTileRows x TileCols() tile of
// A_panel * B_panel accumulated in vector registers, plus the stores that
// turn the accumulators into results.

#if defined(MHA_LIB_GEMM_MICROKERNEL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_LIB_GEMM_MICROKERNEL_INL_H_
#undef MHA_LIB_GEMM_MICROKERNEL_INL_H_
#else
#define MHA_LIB_GEMM_MICROKERNEL_INL_H_
#endif

#include <cstddef>

#include "hwy/highway.h"
#include "lib/gemm/blocking-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

struct Tile {
  FloatVec v[kTileRows][kTileVecs];
};

// tile = sum over p < depth of a_panel[p][r] * b(p)[c], where a_panel is a
// packed A panel (kTileRows floats per step) and b(p) = b + p * b_stride holds
// TileCols() floats (a packed B panel has b_stride == TileCols()). The sum
// runs in order of p with one FMA per step, so it never depends on threads.
HWY_INLINE void MultiplyPanels(std::size_t depth,
                               const float* HWY_RESTRICT a_panel,
                               const float* HWY_RESTRICT b,
                               std::size_t b_stride, Tile& tile) {
  const FloatTag d;
  const std::size_t lanes = hn::Lanes(d);
  for (std::size_t r = 0; r < kTileRows; ++r) {
    for (std::size_t v = 0; v < kTileVecs; ++v) tile.v[r][v] = hn::Zero(d);
  }
  for (std::size_t p = 0; p < depth; ++p) {
    FloatVec b_vecs[kTileVecs];
    for (std::size_t v = 0; v < kTileVecs; ++v) {
      b_vecs[v] = hn::LoadU(d, b + p * b_stride + v * lanes);
    }
    const float* HWY_RESTRICT a_step = a_panel + p * kTileRows;
    for (std::size_t r = 0; r < kTileRows; ++r) {
      const FloatVec a_r = hn::Set(d, a_step[r]);
      for (std::size_t v = 0; v < kTileVecs; ++v) {
        tile.v[r][v] = hn::MulAdd(a_r, b_vecs[v], tile.v[r][v]);
      }
    }
  }
}

// Stores the whole tile to rows of `ld` floats.
HWY_INLINE void StoreTile(const Tile& tile, float* HWY_RESTRICT out,
                          std::size_t ld) {
  const FloatTag d;
  const std::size_t lanes = hn::Lanes(d);
  for (std::size_t r = 0; r < kTileRows; ++r) {
    for (std::size_t v = 0; v < kTileVecs; ++v) {
      hn::StoreU(tile.v[r][v], d, out + r * ld + v * lanes);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_LIB_GEMM_MICROKERNEL_INL_H_
