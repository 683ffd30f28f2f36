// Matrix-vector products (C with at most kGemvRows rows, B not transposed),
// which are bound by reading B: B is streamed in memory order, each task
// owning a chunk of columns and sweeping every row of B across it, with the
// sums of its chunk in an L1-resident buffer. The chunks depend on the shape
// only and every sum runs in order of k, so results do not depend on threads.

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
#include "lib/gemm/blocking-inl.h"
#include "lib/gemm/gemm_args.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr std::size_t kGemvRows = 4;

inline bool SuitsGemv(const detail::GemmArgs& g) {
  return g.m <= kGemvRows && !g.trans_b && g.k > 0;
}

// Rows [0, m) of C, columns [j0, j0 + width): sums[i][j] = sum_p A(i, p)
// B(p, j0 + j), then the epilogue. width is a whole number of vectors.
inline void GemvChunk(const detail::GemmArgs& g, std::size_t j0,
                      std::size_t width, float* HWY_RESTRICT sums) {
  const FloatTag d;
  const std::size_t lanes = hn::Lanes(d);
  std::fill(sums, sums + g.m * width, 0.0f);
  for (std::size_t p = 0; p < g.k; ++p) {
    const float* HWY_RESTRICT b = g.b + p * g.ldb + j0;
    for (std::size_t i = 0; i < g.m; ++i) {
      const FloatVec a =
          hn::Set(d, g.trans_a ? g.a[p * g.lda + i] : g.a[i * g.lda + p]);
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

inline void Gemv(const detail::GemmArgs& g) {
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
        const float a = g.trans_a ? g.a[p * g.lda + i] : g.a[i * g.lda + p];
        sum += a * g.b[p * g.ldb + full + j];
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
