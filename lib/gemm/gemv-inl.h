// Products with at most kGemvRows rows of C (decoding: one token per
// sequence), which are bound by reading B once: B is streamed in memory
// order. Tasks own column ranges of C, cut from the shape only, and every
// sum runs in order of k, so results do not depend on the thread count.
//   Pre-packed B (the layer's weights): a task reads whole panels, each one
//     contiguous run of k x TileCols() floats, with the sums in registers.
//   B in place (row-major): a task sweeps every row of B across its column
//     chunk, with the chunk's sums in an L1-resident buffer.

#if defined(MHA_LIB_GEMM_GEMV_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_LIB_GEMM_GEMV_INL_H_
#undef MHA_LIB_GEMM_GEMV_INL_H_
#else
#define MHA_LIB_GEMM_GEMV_INL_H_
#endif

#include <algorithm>
#include <cstddef>

#include "hwy/highway.h"
#include "lib/common/parallel.h"
#include "lib/common/scratch.h"
#include "lib/gemm/epilogue-inl.h"
#include "lib/gemm/gemm_args.h"
#include "lib/gemm/tile_shape-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr std::size_t kGemvRows = 4;

inline bool SuitsGemv(const detail::GemmArgs& g) {
  return g.m <= kGemvRows && g.k > 0 && (g.packed_b || !g.trans_b);
}

// A(i, p) of op(A).
inline float ElementA(const detail::GemmArgs& g, std::size_t i, std::size_t p) {
  return g.trans_a ? g.a[p * g.lda + i] : g.a[i * g.lda + p];
}

// Rows of C against one pre-packed panel (columns [j0, j0 + TileCols())):
// the panel's k steps stream past one pair of sums per row of C, two steps
// at a time into two pairs (even and odd steps), added at the end, so that
// the FMA latency hides behind independent chains.
template <std::size_t kRows>
HWY_INLINE void GemvPanel(const detail::GemmArgs& g, const float* panel,
                          std::size_t j0, const GemmEpilogue& epilogue) {
  const FloatTag d;
  const std::size_t lanes = hn::Lanes(d), nr = TileCols(), k = g.k;
  const TileStore store(epilogue, g.c, g.ldc, j0, std::min(nr, g.n - j0));
  for (std::size_t i = 0; i < kRows; ++i) {
    FloatVec even0 = hn::Zero(d), even1 = hn::Zero(d);
    FloatVec odd0 = hn::Zero(d), odd1 = hn::Zero(d);
    std::size_t p = 0;
    for (; p + 2 <= k; p += 2) {
      const float* step = panel + p * nr;
      const FloatVec a0 = hn::Set(d, ElementA(g, i, p));
      const FloatVec a1 = hn::Set(d, ElementA(g, i, p + 1));
      even0 = hn::MulAdd(a0, hn::LoadU(d, step), even0);
      even1 = hn::MulAdd(a0, hn::LoadU(d, step + lanes), even1);
      odd0 = hn::MulAdd(a1, hn::LoadU(d, step + nr), odd0);
      odd1 = hn::MulAdd(a1, hn::LoadU(d, step + nr + lanes), odd1);
    }
    if (p < k) {
      const FloatVec a0 = hn::Set(d, ElementA(g, i, p));
      even0 = hn::MulAdd(a0, hn::LoadU(d, panel + p * nr), even0);
      even1 = hn::MulAdd(a0, hn::LoadU(d, panel + p * nr + lanes), even1);
    }
    store(i, hn::Add(even0, odd0), hn::Add(even1, odd1));
  }
}

// Rows [0, m) of C, columns [j0, j0 + width) from B in place: sums[i][j] =
// sum_p A(i, p) B(p, j0 + j). width is a whole number of vectors.
inline void GemvChunk(const detail::GemmArgs& g, std::size_t j0,
                      std::size_t width, float* HWY_RESTRICT sums) {
  const FloatTag d;
  const std::size_t lanes = hn::Lanes(d);
  std::fill(sums, sums + g.m * width, 0.0f);
  for (std::size_t p = 0; p < g.k; ++p) {
    const float* HWY_RESTRICT b = g.b + p * g.ldb + j0;
    for (std::size_t i = 0; i < g.m; ++i) {
      const FloatVec a = hn::Set(d, ElementA(g, i, p));
      float* HWY_RESTRICT row = sums + i * width;
      for (std::size_t j = 0; j < width; j += lanes) {
        hn::Store(hn::MulAdd(a, hn::LoadU(d, b + j), hn::Load(d, row + j)), d,
                  row + j);
      }
    }
  }
}

// C's columns [j0, j0 + width) from the sums: alpha * sum + beta * C + bias.
inline void GemvStore(const detail::GemmArgs& g, std::size_t j0,
                      std::size_t width, const float* sums) {
  for (std::size_t i = 0; i < g.m; ++i) {
    float* c = g.c + i * g.ldc + j0;
    for (std::size_t j = 0; j < width; ++j) {
      float x = g.alpha * sums[i * width + j];
      if (g.beta != 0.0f) x += g.beta * c[j];
      if (g.column_bias) x += g.column_bias[j0 + j];
      c[j] = x;
    }
  }
}

inline void GemvPacked(const detail::GemmArgs& g) {
  const std::size_t nr = TileCols(), panels = (g.n + nr - 1) / nr;
  // Tasks of 4 panels (128 columns on AVX-512): 16 k x 512 bytes in a row.
  constexpr std::size_t kPanelsPerTask = 4;
  const GemmEpilogue epilogue{g.alpha, g.beta, g.beta != 0.0f, g.column_bias};
  detail::ForEachTask((panels + kPanelsPerTask - 1) / kPanelsPerTask,
                      double(g.m) * g.n * g.k, [&](std::size_t t) {
                        const std::size_t end =
                            std::min(panels, (t + 1) * kPanelsPerTask);
                        for (std::size_t j = t * kPanelsPerTask; j < end; ++j) {
                          const float* panel = g.packed_b->data + j * g.k * nr;
                          switch (g.m) {
                            case 1:
                              GemvPanel<1>(g, panel, j * nr, epilogue);
                              break;
                            case 2:
                              GemvPanel<2>(g, panel, j * nr, epilogue);
                              break;
                            case 3:
                              GemvPanel<3>(g, panel, j * nr, epilogue);
                              break;
                            default:
                              GemvPanel<4>(g, panel, j * nr, epilogue);
                              break;
                          }
                        }
                      });
}

inline void Gemv(const detail::GemmArgs& g) {
  if (g.packed_b) return GemvPacked(g);
  const std::size_t lanes = hn::Lanes(FloatTag());
  // Chunks of at least 256 columns (1 KiB rows of B), about 16 of them.
  constexpr std::size_t kChunks = 16, kMinWidth = 256, kMaxWidth = 2048;
  const std::size_t full = g.n / lanes * lanes;  // the rest is a scalar tail
  const std::size_t width = std::min(
      kMaxWidth,
      RoundUp(std::max(kMinWidth, (full + kChunks - 1) / kChunks), lanes));
  const std::size_t chunks = (full + width - 1) / width;
  detail::ForEachTask(chunks, double(g.m) * g.n * g.k, [&](std::size_t t) {
    float* sums = detail::ThreadScratch(detail::ScratchSlot::kScores,
                                        kGemvRows * kMaxWidth);
    const std::size_t j0 = t * width, w = std::min(width, full - j0);
    GemvChunk(g, j0, w, sums);
    GemvStore(g, j0, w, sums);
  });
  if (full == g.n) return;
  // Columns past the last whole vector, summed the same way, one by one.
  const std::size_t tail = g.n - full;
  float sums[kGemvRows * hn::MaxLanes(FloatTag())];
  for (std::size_t i = 0; i < g.m; ++i) {
    for (std::size_t j = 0; j < tail; ++j) {
      float sum = 0.0f;
      for (std::size_t p = 0; p < g.k; ++p) {
        sum += ElementA(g, i, p) * g.b[p * g.ldb + full + j];
      }
      sums[i * tail + j] = sum;
    }
  }
  GemvStore(g, full, tail, sums);
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_LIB_GEMM_GEMV_INL_H_
