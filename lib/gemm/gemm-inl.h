// The blocked SGEMM driver (BLIS's loops around the micro-kernel): for each
// nc-wide column block and kc-deep slice of k, B is packed once (in
// parallel), then tasks over (row block, column chunk) pack their block of A
// and sweep micro-tiles. k is never split across tasks, so every element of C
// is computed by the same sequence of operations whatever the thread count.

#if defined(MHA_LIB_GEMM_GEMM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_LIB_GEMM_GEMM_INL_H_
#undef MHA_LIB_GEMM_GEMM_INL_H_
#else
#define MHA_LIB_GEMM_GEMM_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "lib/common/parallel.h"
#include "lib/common/scratch.h"
#include "lib/gemm/blocking-inl.h"
#include "lib/gemm/gemm_args.h"
#include "lib/gemm/gemv-inl.h"
#include "lib/gemm/microkernel-inl.h"
#include "lib/gemm/pack-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// A GEMM of fewer multiply-adds runs on the calling thread: two fork/joins
// per kc slice cost more than a second core saves there.
constexpr double kGemmParallelWork = 1 << 21;

// How results combine with C for one kc slice: the first slice applies beta
// and the bias, later ones add to what the first wrote.
struct GemmEpilogue {
  float alpha, beta;
  bool read_c;
  const float* column_bias;  // at the tile's first column, or null
};

// c = alpha * tile + (read_c ? beta * c : 0) + bias, for the first `rows` x
// `cols` elements of the tile.
// Calls f(std::integral_constant<size_t, R>) with the fewest tile rows R
// that hold `rows`: a GEMV (one row) must not pay for a tile of zero rows.
template <class F>
HWY_INLINE void WithTileRows(std::size_t rows, F&& f) {
  using std::integral_constant;
  if (rows == 1) return f(integral_constant<std::size_t, 1>());
  if (rows <= 2) return f(integral_constant<std::size_t, 2>());
  if constexpr (kTileRows > 4) {
    if (rows <= 4) return f(integral_constant<std::size_t, 4>());
  }
  f(integral_constant<std::size_t, kTileRows>());
}

template <class TileT>
HWY_INLINE void ApplyEpilogue(const TileT& tile, float* HWY_RESTRICT c,
                              std::size_t ldc, std::size_t rows,
                              std::size_t cols, const GemmEpilogue& e) {
  constexpr std::size_t kRows = TileT::kRowCount;
  const FloatTag d;
  const std::size_t lanes = hn::Lanes(d);
  if (rows == kRows && cols == kTileVecs * lanes) {
    const FloatVec alpha = hn::Set(d, e.alpha), beta = hn::Set(d, e.beta);
    for (std::size_t r = 0; r < kRows; ++r) {
      for (std::size_t v = 0; v < kTileVecs; ++v) {
        float* HWY_RESTRICT at = c + r * ldc + v * lanes;
        FloatVec x = hn::Mul(alpha, tile.v[r][v]);
        if (e.read_c) x = hn::MulAdd(beta, hn::LoadU(d, at), x);
        if (e.column_bias)
          x = hn::Add(x, hn::LoadU(d, e.column_bias + v * lanes));
        hn::StoreU(x, d, at);
      }
    }
    return;
  }
  constexpr std::size_t kTileCap = kTileVecs * hn::MaxLanes(FloatTag());
  HWY_ALIGN float values[kRows * kTileCap];
  StoreTile(tile, values, kTileCap);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t j = 0; j < cols; ++j) {
      float x = e.alpha * values[r * kTileCap + j];
      if (e.read_c) x += e.beta * c[r * ldc + j];
      if (e.column_bias) x += e.column_bias[j];
      c[r * ldc + j] = x;
    }
  }
}

// Where the micro-kernel reads panel j of B's current kc x nc block: packed,
// or (for few rows of C, where packing would cost as much as the product)
// straight from B when B is not transposed and the panel is full.
struct BPanels {
  const float* packed;
  const float* direct;
  std::size_t direct_stride, direct_panels, depth;

  const float* Panel(std::size_t j, std::size_t* stride) const {
    if (j < direct_panels) {
      *stride = direct_stride;
      return direct + j * TileCols();
    }
    *stride = TileCols();
    return packed + (j - direct_panels) * depth * TileCols();
  }
};

// Element (p, j) of op(B) lies at b[p * p_stride + j * j_stride].
inline BPanels PrepareB(const detail::GemmArgs& g, std::size_t jc,
                        std::size_t nc, std::size_t pc, std::size_t kc,
                        float* packed) {
  const std::size_t nr = TileCols();
  const std::size_t panels = (nc + nr - 1) / nr;
  const std::size_t j_stride = g.trans_b ? g.ldb : 1;
  const std::size_t p_stride = g.trans_b ? 1 : g.ldb;
  const float* block = g.b + pc * p_stride + jc * j_stride;
  BPanels result{packed, block, p_stride, 0, kc};
  if (!g.trans_b && g.m <= 4 * kTileRows) result.direct_panels = nc / nr;
  const std::size_t first = result.direct_panels;
  detail::ForEachTask(
      panels - first, double(g.m) * g.n * g.k,
      [&](std::size_t i) {
        const std::size_t j = first + i;
        PackPanel(packed + i * kc * nr, nr, block + j * nr * j_stride, j_stride,
                  p_stride, std::min(nr, nc - j * nr), kc);
      },
      kGemmParallelWork);
  return result;
}

// One task: rows [i0, i0 + mc) of C against B panels [j_begin, j_end).
inline void MultiplyBlock(const detail::GemmArgs& g, const BPanels& panels,
                          std::size_t i0, std::size_t mc, std::size_t jc,
                          std::size_t nc, std::size_t j_begin,
                          std::size_t j_end, std::size_t pc,
                          const GemmEpilogue& epilogue) {
  const std::size_t nr = TileCols(), kc = panels.depth;
  const std::size_t i_stride = g.trans_a ? 1 : g.lda;
  const std::size_t p_stride = g.trans_a ? g.lda : 1;
  float* packed_a = detail::ThreadScratch(detail::ScratchSlot::kPackedA,
                                          kRowBlock * kDepthBlock);
  for (std::size_t r0 = 0; r0 < mc; r0 += kTileRows) {
    PackPanel(packed_a + r0 * kc, kTileRows,
              g.a + (i0 + r0) * i_stride + pc * p_stride, i_stride, p_stride,
              std::min(kTileRows, mc - r0), kc);
  }
  for (std::size_t j = j_begin; j < j_end; ++j) {
    std::size_t b_stride;
    const float* b_panel = panels.Panel(j, &b_stride);
    const std::size_t col = jc + j * nr, cols = std::min(nr, jc + nc - col);
    GemmEpilogue e = epilogue;
    if (e.column_bias) e.column_bias += col;
    for (std::size_t r0 = 0; r0 < mc; r0 += kTileRows) {
      const std::size_t rows = std::min(kTileRows, mc - r0);
      WithTileRows(rows, [&](auto tile_rows) {
        Tile<decltype(tile_rows)::value, kTileVecs> tile;
        MultiplyTile(kc, PanelA{packed_a + r0 * kc, kTileRows}, b_panel,
                     b_stride, tile);
        ApplyEpilogue(tile, g.c + (i0 + r0) * g.ldc + col, g.ldc, rows, cols,
                      e);
      });
    }
  }
}

// C = beta * C (+ bias): the whole product when k == 0.
inline void ScaleOnly(const detail::GemmArgs& g) {
  for (std::size_t i = 0; i < g.m; ++i) {
    float* row = g.c + i * g.ldc;
    for (std::size_t j = 0; j < g.n; ++j) {
      row[j] = g.beta == 0.0f ? 0.0f : g.beta * row[j];
      if (g.column_bias) row[j] += g.column_bias[j];
    }
  }
}

inline void GemmBlocked(const detail::GemmArgs& g) {
  if (g.m == 0 || g.n == 0) return;
  if (g.k == 0) return ScaleOnly(g);
  if (SuitsGemv(g)) return Gemv(g);
  const std::size_t nr = TileCols();
  const std::size_t col_block = std::max(nr, kColBlock / nr * nr);
  const std::size_t row_blocks = (g.m + kRowBlock - 1) / kRowBlock;
  // Enough tasks to balance a few cores; a function of the shape only.
  constexpr std::size_t kTasksWanted = 16;
  const std::size_t widest = std::min(col_block, g.n);
  auto packed_b = hwy::AllocateAligned<float>(std::min(kDepthBlock, g.k) *
                                              ((widest + nr - 1) / nr) * nr);
  for (std::size_t jc = 0; jc < g.n; jc += col_block) {
    const std::size_t nc = std::min(col_block, g.n - jc);
    const std::size_t panels = (nc + nr - 1) / nr;
    const std::size_t chunks =
        std::min(panels, (kTasksWanted + row_blocks - 1) / row_blocks);
    const std::size_t chunk_panels = (panels + chunks - 1) / chunks;
    for (std::size_t pc = 0; pc < g.k; pc += kDepthBlock) {
      const std::size_t kc = std::min(kDepthBlock, g.k - pc);
      const BPanels b_panels = PrepareB(g, jc, nc, pc, kc, packed_b.get());
      const GemmEpilogue epilogue =
          pc == 0 ? GemmEpilogue{g.alpha, g.beta, g.beta != 0.0f, g.column_bias}
                  : GemmEpilogue{g.alpha, 1.0f, true, nullptr};
      detail::ForEachTask(
          row_blocks * chunks, double(g.m) * g.n * g.k,
          [&](std::size_t t) {
            const std::size_t i0 = (t / chunks) * kRowBlock;
            const std::size_t j0 = (t % chunks) * chunk_panels;
            MultiplyBlock(g, b_panels, i0, std::min(kRowBlock, g.m - i0), jc,
                          nc, j0, std::min(panels, j0 + chunk_panels), pc,
                          epilogue);
          },
          kGemmParallelWork);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_LIB_GEMM_GEMM_INL_H_
