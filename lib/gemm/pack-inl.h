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
#include "lib/common/prefetch.h"

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

// One step of a panel `width` floats wide from `valid` contiguous floats:
// to[c] = from[c] for c < valid, zero for valid <= c < width.
inline void CopyStep(float* HWY_RESTRICT to, const float* HWY_RESTRICT from,
                     std::size_t valid, std::size_t width) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::ScalableTag<float> d;
  const std::size_t lanes = hn::Lanes(d);
  std::size_t c = 0;
  for (; c + lanes <= valid; c += lanes) {
    hn::StoreU(hn::LoadU(d, from + c), d, to + c);
  }
  for (; c < valid; ++c) to[c] = from[c];
  for (; c < width; ++c) to[c] = 0.0f;
}

// Panels `width` floats wide and `depth` steps deep from columns [0, cols)
// of src, element (p, c) at src[c * c_stride + p * p_stride]: panel j at
// panels + j * depth * width, panel[p * width + c] = element (p, j * width +
// c), zero past the last column. Either a step's columns are contiguous
// (c_stride == 1) or a column's steps are (p_stride == 1, a transposing
// copy). Writes nothing past the last panel's end.
//
// Contiguous steps are copied a step at a time across all the panels, so
// that each row of the source is read once, in order: panel by panel read
// 128 bytes of each of 688 rows 16 KiB apart (B's block in a 64 x 4096 x
// 4096 product), a pattern the hardware prefetchers do not follow, and
// packing took a quarter of the product's time. Zen 5, 1 thread, against
// panel by panel: 64 x 4096 x 4096 1.08-1.15x, 96 x 4096 x 4096 1.07-1.09x,
// 64 x 1024 x 1024 1.10-1.14x, 256 x 4096 x 4096 1.05x, 1024^3 to 2048^3
// 1.00-1.02x. (Prefetching the source 4 to 64 steps ahead changed nothing
// there: the copy stays at about 18 GB/s, against 26 for reading the same
// rows.)
//
// On Zen 3 (512 KiB L2, B's block copied from L3 or DRAM: SliverPacksB),
// the copy held 36% of 32 x 2304 x 768's samples, and asking for the row
// kPackAheadSteps steps ahead into L2 paid. One process alternating, 1
// thread / 2 threads: 32 x 2304 x 768 1.10x / 1.02x, 128 x 2304 x 768 1.11x
// / 1.03x, 64 x 4096 x 4096 1.13x / 1.07x, 96 x 4096 x 2048 1.07x / 1.06x,
// 2048^3 1.00x; into L1 1.07-1.17x on 1 thread, 16 steps ahead 1.04-1.10x.
// The same copy of V's rows in the prefill core (prefill_tile-inl.h) and of
// B's rows for the wide tile (PrepareB) asks for them too, unmeasured there.
constexpr std::size_t kPackAheadSteps = 8;

inline void PackPanels(float* HWY_RESTRICT panels, std::size_t width,
                       const float* HWY_RESTRICT src, std::size_t c_stride,
                       std::size_t p_stride, std::size_t cols,
                       std::size_t depth) {
  const std::size_t count = (cols + width - 1) / width;
  if (c_stride == 1) {
    for (std::size_t p = 0; p < depth; ++p) {
      if (p + kPackAheadSteps < depth) {
        detail::PrefetchBytes<detail::CacheLevel::kL2>(
            src + (p + kPackAheadSteps) * p_stride, cols * sizeof(float));
      }
      for (std::size_t j = 0; j < count; ++j) {
        CopyStep(panels + (j * depth + p) * width,
                 src + p * p_stride + j * width,
                 std::min(width, cols - j * width), width);
      }
    }
    return;
  }
  HWY_DASSERT(p_stride == 1);
  for (std::size_t j = 0; j < count; ++j) {
    float* HWY_RESTRICT panel = panels + j * depth * width;
    const std::size_t valid = std::min(width, cols - j * width);
    for (std::size_t c = 0; c < valid; c += 4) {
      const std::size_t rows_now = std::min<std::size_t>(4, valid - c);
      const float* rows[4];
      for (std::size_t i = 0; i < rows_now; ++i) {
        rows[i] = src + (j * width + c + i) * c_stride;
      }
      TransposeRowsIntoPanel(panel + c, width, rows, rows_now, depth, 1.0f);
    }
    for (std::size_t p = 0; p < depth; ++p) {
      std::fill(panel + p * width + valid, panel + (p + 1) * width, 0.0f);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_LIB_GEMM_PACK_INL_H_
