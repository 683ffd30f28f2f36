// The shape of the register tile for the current Highway target.
//
// The micro-kernel keeps a kTileRows x kTileVecs-vector tile of C in vector
// registers and does rank-1 updates: kTileRows broadcasts of A against
// kTileVecs vectors of B per step of k. Independent accumulators must cover
// FMA latency x FMA pipes (4 x 2 = 8 on current x86 and Arm cores) and, with
// the B vectors and a broadcast, fit the register file.

#if defined(MHA_LIB_GEMM_TILE_SHAPE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_LIB_GEMM_TILE_SHAPE_INL_H_
#undef MHA_LIB_GEMM_TILE_SHAPE_INL_H_
#else
#define MHA_LIB_GEMM_TILE_SHAPE_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using FloatTag = hn::ScalableTag<float>;
using FloatVec = hn::Vec<FloatTag>;

// The wide tile, kWideTileRows x 2 kTileVecs, reads two adjacent B panels
// against half the rows: A's rows, read in place, once per pair of panels,
// and few enough to stay in L1 where a sliver's would not (rows whose
// stride would thrash L1, or narrow B's deep slices: gemm-inl.h).
#if HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128
// Vectors are emulated: there is no register file to fill.
constexpr std::size_t kTileRows = 4;
constexpr std::size_t kWideTileRows = 2;
#elif HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3
// 16 ymm/xmm registers: 6 x 2 accumulators + 2 B vectors + 1 broadcast;
// wide, 2 x 4 + 4 + 1 (3 x 4 would need 17).
constexpr std::size_t kTileRows = 6;
constexpr std::size_t kWideTileRows = 2;
#else
// 32 registers (AVX-512, NEON, SVE): 12 x 2 accumulators + 2 B vectors + 1
// broadcast; wide, 6 x 4 + 4 + 1. (12 x 2 loads 14 values per 24 FMAs and 6
// x 4 loads 10, but 6 x 4 reads each B vector from L2 for 6 FMAs, not 12,
// and its 4-vector B panels are too wide for head_dim 64 on AVX-512 as the
// only tile.)
constexpr std::size_t kTileRows = 12;
constexpr std::size_t kWideTileRows = 6;
#endif
constexpr std::size_t kTileVecs = 2;
// Whether the wide tile is the 6 x 4 of 32-register targets, which fills the
// register file as the 12 x 2 tile does (the 2 x 4 of 16-register targets
// is a fallback for A rows that would thrash L1).
constexpr bool kWideTileIs6x4 = kWideTileRows >= 6;

inline std::size_t RoundUp(std::size_t x, std::size_t multiple) {
  return (x + multiple - 1) / multiple * multiple;
}

// Columns of one micro-tile (the width of a B panel): known at run time
// only on targets whose vectors are sizeless.
inline std::size_t TileCols() { return kTileVecs * hn::Lanes(FloatTag()); }

// How many floats `p` lies past the last vector boundary (0: aligned).
inline std::size_t FloatsPastVectorBoundary(const float* p) {
  return reinterpret_cast<std::uintptr_t>(p) / sizeof(float) %
         hn::Lanes(FloatTag());
}

// Whether rows from `first` on, `stride` floats apart, all start on a vector
// boundary, so that a vector load of them never splits a cache line.
inline bool RowsOnVectorBoundaries(const float* first, std::size_t stride) {
  return FloatsPastVectorBoundary(first) == 0 &&
         stride % hn::Lanes(FloatTag()) == 0;
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_LIB_GEMM_TILE_SHAPE_INL_H_
