// Register and cache blocking for the current Highway target.
//
// The micro-kernel keeps a kRows x kVecs tile of C in vector registers and
// does rank-1 updates: kRows broadcasts of A against kVecs vectors of B per
// step of k. Accumulators must outnumber FMA latency x FMA pipes (4 x 2) and,
// with the B vectors and one broadcast, fit the register file.

#if defined(MHA_LIB_GEMM_BLOCKING_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_LIB_GEMM_BLOCKING_INL_H_
#undef MHA_LIB_GEMM_BLOCKING_INL_H_
#else
#define MHA_LIB_GEMM_BLOCKING_INL_H_
#endif

#include <cstddef>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using FloatTag = hn::ScalableTag<float>;
using FloatVec = hn::Vec<FloatTag>;

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// 32 zmm registers: 12 x 2 accumulators + 2 B vectors + 1 broadcast.
constexpr std::size_t kTileRows = 12;
#elif HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128
// Vectors are emulated: keep the tile small, there is no register file.
constexpr std::size_t kTileRows = 4;
#else
// 16 ymm/xmm registers: 6 x 2 accumulators + 2 B vectors + 1 broadcast.
constexpr std::size_t kTileRows = 6;
#endif
constexpr std::size_t kTileVecs = 2;

inline std::size_t RoundUp(std::size_t x, std::size_t multiple) {
  return (x + multiple - 1) / multiple * multiple;
}

// Columns of one micro-tile (the width of a packed B panel).
inline std::size_t TileCols() { return kTileVecs * hn::Lanes(FloatTag()); }

// Cache blocking (BLIS's KC, MC, NC): the micro-kernel sweeps an mc x kc
// block of A held in L2 against kc x tile-cols slivers of B, and a kc x nc
// block of packed B lives in L3. A deep kc matters more than an L1-sized
// sliver: each kc slice costs a pass over C, and the sliver streams well
// from L2 (measured: kc 512 beats 256 by 15-25% on 512..2048 cubes).
constexpr std::size_t kDepthBlock = 512;           // KC
constexpr std::size_t kRowBlock = kTileRows * 16;  // MC
constexpr std::size_t kColBlock = 4096;            // NC, rounded to panels

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_LIB_GEMM_BLOCKING_INL_H_
