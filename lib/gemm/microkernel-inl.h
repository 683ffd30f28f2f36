// The register-blocked micro-kernel: a kRows x kVecs-vector tile of A * B
// accumulated in vector registers by rank-1 updates (kRows broadcasts of A
// against kVecs vectors of B per step of the depth), and the store of a tile.
// A is read by broadcasts, so it may lie in memory two ways (PanelA, RowsA);
// B is read by vectors: b + p * b_stride holds the kVecs vectors of step p.

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

template <std::size_t kRows, std::size_t kVecs>
struct Tile {
  static constexpr std::size_t kRowCount = kRows, kVecCount = kVecs;
  FloatVec v[kRows][kVecs];
};

// A where the kRows values of one step are contiguous and steps are
// `step_stride` apart: element (r, p) at base[p * step_stride + r], as in a
// packed A panel (step_stride == kRows).
struct PanelA {
  const float* base;
  std::size_t step_stride;
  const float* Step(std::size_t p) const { return base + p * step_stride; }
  float At(const float* step, std::size_t r) const { return step[r]; }
};

// A given as kRows row pointers: element (r, p) at rows[r][p] (query or
// score rows read in place, whatever their layout).
template <std::size_t kRows>
struct RowsA {
  const float* rows[kRows];
  std::size_t Step(std::size_t p) const { return p; }
  float At(std::size_t p, std::size_t r) const { return rows[r][p]; }
};

// tile = sum over p < depth of A(r, p) * B(p, :), in order of p with one FMA
// per step, so the result never depends on how work is split.
template <class TileT, class AOperand>
HWY_INLINE void MultiplyTile(std::size_t depth, const AOperand& a,
                             const float* HWY_RESTRICT b, std::size_t b_stride,
                             TileT& tile) {
  constexpr std::size_t kRows = TileT::kRowCount, kVecs = TileT::kVecCount;
  const FloatTag d;
  const std::size_t lanes = hn::Lanes(d);
  for (std::size_t r = 0; r < kRows; ++r) {
    for (std::size_t v = 0; v < kVecs; ++v) tile.v[r][v] = hn::Zero(d);
  }
  for (std::size_t p = 0; p < depth; ++p) {
    FloatVec b_vecs[kVecs];
    for (std::size_t v = 0; v < kVecs; ++v) {
      b_vecs[v] = hn::LoadU(d, b + p * b_stride + v * lanes);
    }
    const auto step = a.Step(p);
    for (std::size_t r = 0; r < kRows; ++r) {
      const FloatVec a_r = hn::Set(d, a.At(step, r));
      for (std::size_t v = 0; v < kVecs; ++v) {
        tile.v[r][v] = hn::MulAdd(a_r, b_vecs[v], tile.v[r][v]);
      }
    }
  }
}

// Calls f(vector, address) for every vector of the tile, placed in rows of
// `ld` floats from `out`.
template <class TileT, class F>
HWY_INLINE void ForEachTileVector(const TileT& tile, float* HWY_RESTRICT out,
                                  std::size_t ld, F&& f) {
  const std::size_t lanes = hn::Lanes(FloatTag());
  for (std::size_t r = 0; r < TileT::kRowCount; ++r) {
    for (std::size_t v = 0; v < TileT::kVecCount; ++v) {
      f(tile.v[r][v], out + r * ld + v * lanes);
    }
  }
}

template <class TileT>
HWY_INLINE void StoreTile(const TileT& tile, float* HWY_RESTRICT out,
                          std::size_t ld) {
  const FloatTag d;
  ForEachTileVector(tile, out, ld,
                    [d](FloatVec v, float* at) { hn::StoreU(v, d, at); });
}

template <class TileT>
HWY_INLINE void AddTile(const TileT& tile, float* HWY_RESTRICT out,
                        std::size_t ld) {
  const FloatTag d;
  ForEachTileVector(tile, out, ld, [d](FloatVec v, float* at) {
    hn::StoreU(hn::Add(hn::LoadU(d, at), v), d, at);
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_LIB_GEMM_MICROKERNEL_INL_H_
