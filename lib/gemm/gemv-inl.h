// Products with at most kGemvRows rows of C (kPackedGemvRows with B
// pre-packed, kWalkRows with a large B in place: SuitsRowsWalk; decoding:
// one token per sequence), which are bound by reading B once: B is streamed in
// memory order. Tasks own column ranges of C, cut from the shape only, and
// every sum runs in order of k, so results do not depend on the thread count.
//   Pre-packed B (the layer's weights): a task reads whole panels, each one
//     contiguous run of k x TileCols() values, two side by side, past the
//     micro-kernel's register tile of all rows of C.
//   B in place (row-major): a task sweeps every row of B across its column
//     chunk, with the chunk's sums in an L1-resident buffer; from 5 to
//     kWalkRows rows of C where B is large and its rows share one L1 set
//     (SuitsRowsWalk), each vector of B once, past all of them.
//   B transposed in place (C = A B^T, B's rows contiguous along k): a task
//     streams whole rows of B, each element of C one dot product (DotRows).

#if defined(MHA_LIB_GEMM_GEMV_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_LIB_GEMM_GEMV_INL_H_
#undef MHA_LIB_GEMM_GEMV_INL_H_
#else
#define MHA_LIB_GEMM_GEMV_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "lib/common/buffer_pool.h"
#include "lib/common/cache_sizes.h"
#include "lib/common/dot_rows-inl.h"
#include "lib/common/parallel.h"
#include "lib/common/prefetch.h"
#include "lib/common/storage.h"
#include "lib/gemm/blocking-inl.h"
#include "lib/gemm/epilogue-inl.h"
#include "lib/gemm/gemm_args.h"
#include "lib/gemm/microkernel-inl.h"
#include "lib/gemm/tile_shape-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr std::size_t kGemvRows = 4;
// Pre-packed B streams past all rows at once (GemvPacked): up to the wide
// tile's rows, and at least kGemvRows.
constexpr std::size_t kPackedGemvRows = std::max(kGemvRows, kWideTileRows);
constexpr std::size_t kGemvPrefetchFloats = 384;
// Rows of B in place that GemvRows multiplies in one pass over the sums.
constexpr std::size_t kGemvRowsPerPass = 8;

// B in place, row-major, with 5 to kWalkRows rows of C: the blocked
// product reads such a B badly where it is large and its rows fall into one
// set of L1 (a stride of d_model 1024, 2048 or 4096): packing it costs a
// copy of all of B per call for few rows, and reading it in place, each
// panel's steps evict each other from L1 and L2 (PackBReuse, gemm-inl.h).
// GemvRowsOfA streams it instead, in memory order, once. Zen 5, 1 thread,
// one process alternating, GFLOP/s, this walk against the blocked product:
// 16 x 4096 x 4096 139.8 against 77.9 (oneDNN about 70), 12 x 4096 x 4096
// 124.5 against 79.9, 8 x 4096 x 4096 108.8 against 74.1, 5 x 4096 x 4096
// 62.1 against 23.1; 16 rows on 2 threads 226 against 153; B of 16 MiB
// (16 x 2048 x 2048, 16 x 1024 x 4096, 16 x 4096 x 1024, 8 x 2048 x 2048)
// 1.07-1.16x; but B of 4 MiB (16 x 1024 x 1024, from L3) 0.95x, 16 x 512 x
// 512 0.77x, and 12 x 2000 x 2000 (rows spread over L1's sets) 0.77x.
// Hence B's footprint above kWalkMinBInL2s times L2.
constexpr std::size_t kWalkRows = 16;
constexpr std::size_t kWalkMinBInL2s = 8;

inline std::size_t WalkMinBFloats() {
  return kWalkMinBInL2s * detail::MachineCaches().l2 / sizeof(float);
}

inline bool SuitsRowsWalk(const detail::GemmArgs& g) {
  return !g.packed_b && !g.trans_b && g.m > kGemvRows && g.m <= kWalkRows &&
         RowsShareOneL1Set(g.ldb) && g.k * g.ldb > WalkMinBFloats();
}

template <std::size_t kValue>
using Constant = std::integral_constant<std::size_t, kValue>;

inline bool SuitsGemv(const detail::GemmArgs& g) {
  if (g.k == 0) return false;
  return g.m <= (g.packed_b ? kPackedGemvRows : kGemvRows) || SuitsRowsWalk(g);
}

// op(A) by strides, A(i, p) at a[i * row + p * step]: whether A is
// transposed is settled once, not tested per element in the loops over k.
struct StridedA {
  explicit StridedA(const detail::GemmArgs& g)
      : a(g.a), row(g.trans_a ? 1 : g.lda), step(g.trans_a ? g.lda : 1) {}
  float operator()(std::size_t i, std::size_t p) const {
    return a[i * row + p * step];
  }
  const float* a;
  std::size_t row, step;
};

// The steps [p, p1) left after whole passes of eight, one row of B at a
// time: sums[i][j] += A(i, p) B(p, j0 + j), A's value a_of(i, p).
template <class AOf>
HWY_INLINE void AddRemainingSteps(const detail::GemmArgs& g, std::size_t j0,
                                  std::size_t width, std::size_t p,
                                  std::size_t p1, const AOf& a_of,
                                  float* HWY_RESTRICT sums) {
  const FloatTag d;
  const std::size_t lanes = hn::Lanes(d);
  for (; p < p1; ++p) {
    const float* HWY_RESTRICT b = g.b + p * g.ldb + j0;
    for (std::size_t i = 0; i < g.m; ++i) {
      const FloatVec a = hn::Set(d, a_of(i, p));
      float* HWY_RESTRICT row = sums + i * width;
      for (std::size_t j = 0; j < width; j += lanes) {
        hn::Store(hn::MulAdd(a, hn::LoadU(d, b + j), hn::Load(d, row + j)), d,
                  row + j);
      }
    }
  }
}

// A vector of sums at `sums` += a0 b[0] + ... + a7 b[7 ld], b's eight rows
// ld floats apart: one chain of multiply-adds over the rows in memory order,
// started from zero and added to the sums once, one vector (one 64-byte
// line on AVX-512) of each row a step, as cblas_sgemv's loop reads them (two
// ymm vectors). On Zen 4 with B on huge pages, 1 x 4096 x 4096, one process
// alternating the walks (medians of 41): two vectors a step read 17.8-18.4
// GB/s on 1 thread, one vector 19.5-21.2 (cblas_sgemv 20.5-21.7); on 2,
// 25.2 and 31.1 (32.3); 1 x 4096 x 1024 1.10x and 1.12x. On 4 KiB pages
// the two had run alike (23.4 and 23.9 GB/s, 1 thread), and two chains per
// vector over rows taken by pairs, started from the sums, slower (22.4).
// The reads of the eight lines in the order of B's rows keep the
// prefetchers' streams in step.
HWY_INLINE void AddEightRows(FloatTag d, const float* HWY_RESTRICT b,
                             std::size_t ld, FloatVec a0, FloatVec a1,
                             FloatVec a2, FloatVec a3, FloatVec a4, FloatVec a5,
                             FloatVec a6, FloatVec a7,
                             float* HWY_RESTRICT sums) {
  FloatVec s = hn::Mul(a0, hn::LoadU(d, b));
  s = hn::MulAdd(a1, hn::LoadU(d, b + ld), s);
  s = hn::MulAdd(a2, hn::LoadU(d, b + 2 * ld), s);
  s = hn::MulAdd(a3, hn::LoadU(d, b + 3 * ld), s);
  s = hn::MulAdd(a4, hn::LoadU(d, b + 4 * ld), s);
  s = hn::MulAdd(a5, hn::LoadU(d, b + 5 * ld), s);
  s = hn::MulAdd(a6, hn::LoadU(d, b + 6 * ld), s);
  s = hn::MulAdd(a7, hn::LoadU(d, b + 7 * ld), s);
  hn::Store(hn::Add(hn::Load(d, sums), s), d, sums);
}

// sums[i][j] += sum over p in [p0, p1) of A(i, p) B(p, j0 + j), i < m, for
// the `width` columns (whole vectors) of a chunk, B read in place. Eight rows
// of B per pass over the sums, so that loading and storing a sum serves
// eight multiply-adds, and the prefetchers follow eight streams: on Zen 4,
// 1 x 4096 x 4096 read 15-20 GB/s with four rows per pass and 18-21 with
// eight. The order of the additions is fixed by the shape. Not kept (Zen 4,
// B on huge pages from DRAM, one process alternating the walks, medians of
// 61-151): sixteen rows a pass (two chains of eight, so the sums, which the
// rows' lines evict from the 8-way L1 between passes, come back half as
// often) 1.03-1.07x as fast on 1 thread but 0.86-0.93x on 2; 24 rows 1.00x
// and 32 rows 0.83x on 1 (more streams than the prefetchers follow); the eight
// rows of a pass taken from the eight eighths of [p0, p1), so that each
// stream runs on through memory as the read probe's do, 0.97-1.01x.
// With kPrefetch, each of the eight rows is prefetched kGemvPrefetchFloats
// ahead of its loads: the hardware prefetchers restart on every row of B.
// 1 x 4096 x 4096 on Zen 5, against cblas_sgemv in the same process:
// without it (and chunks of 2048 columns, see Gemv), 0.77-0.89 of its rate
// on 1 thread and 0.60-0.98 on 2; with it 1.5 KiB ahead, 0.84-0.87 and
// 1.08-1.14. From 0.5 to 4 KiB ahead, rates differed by up to 15%; 1.5 KiB
// was best on 2. Gemv says when it pays.
template <bool kPrefetch>
void GemvRows(const detail::GemmArgs& g, std::size_t j0, std::size_t width,
              std::size_t p0, std::size_t p1, float* HWY_RESTRICT sums) {
  const FloatTag d;
  const std::size_t lanes = hn::Lanes(d), ld = g.ldb;
  const StridedA op_a(g);
  std::size_t p = p0;
  static_assert(kGemvRowsPerPass == 8 &&
                    kGemvRowsPerPass == detail::kStreamsThatNeedMoreL1Ways,
                "the pass below names eight rows, the streams that "
                "StreamingPrefetchPays weighs");
  for (; p + 8 <= p1; p += 8) {
    const float* HWY_RESTRICT b = g.b + p * ld + j0;
    for (std::size_t i = 0; i < g.m; ++i) {
      const FloatVec a0 = hn::Set(d, op_a(i, p));
      const FloatVec a1 = hn::Set(d, op_a(i, p + 1));
      const FloatVec a2 = hn::Set(d, op_a(i, p + 2));
      const FloatVec a3 = hn::Set(d, op_a(i, p + 3));
      const FloatVec a4 = hn::Set(d, op_a(i, p + 4));
      const FloatVec a5 = hn::Set(d, op_a(i, p + 5));
      const FloatVec a6 = hn::Set(d, op_a(i, p + 6));
      const FloatVec a7 = hn::Set(d, op_a(i, p + 7));
      float* HWY_RESTRICT row = sums + i * width;
      const auto prefetch = [&](std::size_t j) {
        if constexpr (kPrefetch) {
          for (std::size_t r = 0; r < kGemvRowsPerPass; ++r) {
            hwy::Prefetch(b + r * ld + j + kGemvPrefetchFloats);
          }
        }
      };
      for (std::size_t j = 0; j < width; j += lanes) {
        prefetch(j);
        AddEightRows(d, b + j, ld, a0, a1, a2, a3, a4, a5, a6, a7, row + j);
      }
    }
  }
  AddRemainingSteps(g, j0, width, p, p1, op_a, sums);
}

// op(A) step-major, kWalkRows floats a step (row i of step p at p *
// kWalkRows + i): one line holds a step's values for every row of C, where
// A's own rows, as far apart as B's, would all fall into one set of L1.
inline void CopyStepsOfA(const detail::GemmArgs& g, float* steps) {
  const StridedA op_a(g);
  for (std::size_t p = 0; p < g.k; ++p) {
    for (std::size_t i = 0; i < g.m; ++i) steps[p * kWalkRows + i] = op_a(i, p);
  }
}

// As GemvRows, for the walk of SuitsRowsWalk, A step-major (CopyStepsOfA):
// eight rows of B a pass, each vector loaded once and held in registers
// while every row of C takes its eight multiply-adds, each sum read from
// and written back to L1 once per eight. With kPrefetch, the next pass's
// eight rows are asked for at the same columns (the pass's segments are
// short, a few hundred columns, so the prefetchers start over on every
// row): 16 x 4096 x 4096 on Zen 5 ran 1.44x faster with this prefetch,
// 1.17x with it sixteen rows ahead. The lines go into kLevel (Gemv says
// which).
template <bool kPrefetch, detail::CacheLevel kLevel = detail::CacheLevel::kL1>
void GemvRowsOfA(const detail::GemmArgs& g, const float* HWY_RESTRICT steps,
                 std::size_t j0, std::size_t width, std::size_t p0,
                 std::size_t p1, float* HWY_RESTRICT sums) {
  const FloatTag d;
  const std::size_t lanes = hn::Lanes(d), ld = g.ldb;
  constexpr std::size_t kPass = kGemvRowsPerPass;  // b0 ... b7 below
  std::size_t p = p0;
  for (; p + kPass <= p1; p += kPass) {
    const float* HWY_RESTRICT b = g.b + p * ld + j0;
    const float* HWY_RESTRICT a = steps + p * kWalkRows;
    for (std::size_t j = 0; j < width; j += lanes) {
      if constexpr (kPrefetch) {
        if (p + 2 * kPass <= p1) {
          for (std::size_t r = kPass; r < 2 * kPass; ++r) {
            detail::PrefetchLine<kLevel>(b + r * ld + j);
          }
        }
      }
      const FloatVec b0 = hn::LoadU(d, b + j);
      const FloatVec b1 = hn::LoadU(d, b + ld + j);
      const FloatVec b2 = hn::LoadU(d, b + 2 * ld + j);
      const FloatVec b3 = hn::LoadU(d, b + 3 * ld + j);
      const FloatVec b4 = hn::LoadU(d, b + 4 * ld + j);
      const FloatVec b5 = hn::LoadU(d, b + 5 * ld + j);
      const FloatVec b6 = hn::LoadU(d, b + 6 * ld + j);
      const FloatVec b7 = hn::LoadU(d, b + 7 * ld + j);
      for (std::size_t i = 0; i < g.m; ++i) {
        const float* HWY_RESTRICT ai = a + i;
        float* HWY_RESTRICT row = sums + i * width + j;
        FloatVec s = hn::Load(d, row);
        s = hn::MulAdd(hn::Set(d, ai[0]), b0, s);
        s = hn::MulAdd(hn::Set(d, ai[kWalkRows]), b1, s);
        s = hn::MulAdd(hn::Set(d, ai[2 * kWalkRows]), b2, s);
        s = hn::MulAdd(hn::Set(d, ai[3 * kWalkRows]), b3, s);
        s = hn::MulAdd(hn::Set(d, ai[4 * kWalkRows]), b4, s);
        s = hn::MulAdd(hn::Set(d, ai[5 * kWalkRows]), b5, s);
        s = hn::MulAdd(hn::Set(d, ai[6 * kWalkRows]), b6, s);
        s = hn::MulAdd(hn::Set(d, ai[7 * kWalkRows]), b7, s);
        hn::Store(s, d, row);
      }
    }
  }
  AddRemainingSteps(
      g, j0, width, p, p1,
      [steps](std::size_t i, std::size_t q) {
        return steps[q * kWalkRows + i];
      },
      sums);
}

// C's columns [j0, j0 + width) from the sums (rows of width): alpha * sum +
// beta * C + bias.
inline void GemvStore(const detail::GemmArgs& g, std::size_t j0,
                      std::size_t width, const float* sums) {
  StoreRows(GemmEpilogue::First(g), g.c, g.ldc, g.m, j0, width,
            [&](std::size_t i, std::size_t j, std::size_t count) {
              return LoadPadded(sums + i * width + j, count);
            });
}

// f(std::integral_constant<size_t, rows>()) for a count of 1 to kMax rows.
template <std::size_t kMax, class F>
HWY_INLINE void WithExactRows(std::size_t rows, F&& f) {
  if constexpr (kMax > 1) {
    if (rows < kMax) return WithExactRows<kMax - 1>(rows, f);
  }
  f(std::integral_constant<std::size_t, kMax>());
}

// One row of A against four adjacent pre-packed panels, a 1 x 4 kTileVecs
// register block: B read as four streams at once, each panel a run of depth
// x TileCols() values, `panel_stride` apart. Each vector of C is one chain
// of multiply-adds in order of k, as in MultiplyPanels, so the sums are the
// same bit for bit. first_pair and second_pair store panels 0-1 and 2-3
// (PanelStores). Four streams kept more of DRAM's lines in flight than two,
// eight fewer (measured under GemvPacked).
template <class AOperand, class BElement, class Stores>
HWY_INLINE void MultiplyRowByFourPanels(std::size_t depth, const AOperand& a,
                                        const BElement* HWY_RESTRICT b,
                                        std::size_t panel_stride,
                                        const Stores& first_pair,
                                        const Stores& second_pair) {
  const FloatTag d;
  const std::size_t lanes = hn::Lanes(d), nr = TileCols();
  const BElement* HWY_RESTRICT b1 = b + panel_stride;
  const BElement* HWY_RESTRICT b2 = b1 + panel_stride;
  const BElement* HWY_RESTRICT b3 = b2 + panel_stride;
  FloatVec c0 = hn::Zero(d), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0,
           c6 = c0, c7 = c0;
#pragma GCC unroll 4
  for (std::size_t p = 0; p < depth; ++p) {
    const std::size_t at = p * nr;
    const FloatVec a0 = hn::Set(d, a.At(a.Step(p), 0));
    c0 = hn::MulAdd(a0, LoadWide(d, b + at), c0);
    c1 = hn::MulAdd(a0, LoadWide(d, b + at + lanes), c1);
    c2 = hn::MulAdd(a0, LoadWide(d, b1 + at), c2);
    c3 = hn::MulAdd(a0, LoadWide(d, b1 + at + lanes), c3);
    c4 = hn::MulAdd(a0, LoadWide(d, b2 + at), c4);
    c5 = hn::MulAdd(a0, LoadWide(d, b2 + at + lanes), c5);
    c6 = hn::MulAdd(a0, LoadWide(d, b3 + at), c6);
    c7 = hn::MulAdd(a0, LoadWide(d, b3 + at + lanes), c7);
  }
  first_pair(0, 0, c0, c1);
  first_pair(1, 0, c2, c3);
  second_pair(0, 0, c4, c5);
  second_pair(1, 0, c6, c7);
}

// Pre-packed B (the layer's weights), its elements of type BElement. A task
// owns whole panels and streams each pair of them once, all of k, past one
// register tile of all of C's rows, A read in place: the rows of one step
// share each vector of B loaded, so B is read once from DRAM whatever the
// number of rows (up to the wide tile's kWideTileRows; more rows, up to
// kPackedGemvRows, go in pieces that read each pair again). A batch of
// decoded tokens through d_model 4096 weights (m x 4096 x 4096, B from
// DRAM), Zen 5, one process alternating, GB/s of B (a 4-stream read loop's
// in the same run): this against the loop per row of C that it replaced,
// which read the pair again for every row, 1 thread / 2 threads: m 1 30.0
// against 29.9 (26.8) / 64.4 against 62.5 (57.2); m 2 29.0 against 25.2
// (33.3) / 55.9 against 46.7 (62.6); m 4 29.3 against 16.4 (33.5) / 57.5
// against 31.0 (64.3); and against the blocked product it takes from those
// at 5 and 6 rows, m 6 28.6 against 26.0 (32.3) / 56.2 against 52.3
// (54.4). The layer's decode step for a batch of sequences (d_model 4096,
// 32 heads, 15 cached tokens), two builds alternating, 1 thread / 2
// threads: batch 2 1.21-1.45x / 1.26-1.42x, batch 4 1.82-2.01x / 1.90x,
// batch 6 0.94-1.09x / 0.96-1.09x. The AVX2 target on that VM (a 2 x 4
// wide tile: 3 and 4 rows in two pieces), GEMV against the replaced loop:
// m 1 1.09-1.14x, m 3 1.13-1.28x, m 4 1.42x. Not kept: the panels prefetched 4
// KiB ahead (the replaced loop's did, gaining 1.08-1.13x in some runs of an
// earlier VM): 0.94-1.03x here; 7 to 12 rows by a tile one panel wide
// (kTileRows x 1 panel, one stream, no piece reading B again): 0.70-0.80x
// of the blocked product; by pairs in slices of 64 or 128 steps, which the
// second piece of rows reads again from L1: 0.64-0.98x.
// One row of C (decoding one sequence) takes four panels at a time
// (MultiplyRowByFourPanels): four streams of B instead of two. The layer's
// decode step (d_model 4096, 32 heads, 2047 cached tokens), Zen 5, one
// process alternating, medians of 101, against pairs, 1 thread / 2
// threads: 32 KV heads 0.99-1.02x / 1.00-1.06x, 8 KV heads 0.99-1.05x (6
// runs of 7 at 1.03x or more) / 1.04-1.07x. Eight panels at a time (eight
// streams): 0.97x / 1.00-1.02x.
template <class BElement>
void GemvPacked(const detail::GemmArgs& g) {
  const std::size_t nr = TileCols(), panels = (g.n + nr - 1) / nr;
  const BElement* data = static_cast<const BElement*>(g.packed_b->data);
  // Tasks of 4 panels (128 columns on AVX-512): 16 k x 512 bytes in a row,
  // read four panels at a time for one row of C, two for more.
  constexpr std::size_t kPanelsPerTask = 4;
  const GemmEpilogue epilogue = GemmEpilogue::First(g);
  // Panels j, ..., j + kPanels - 1, all rows, A as the tile reads it.
  const auto panel_run = [&](std::size_t j, auto panel_count, const auto& a) {
    constexpr std::size_t kPanels = decltype(panel_count)::value;
    const auto tile = [&](auto height, std::size_t first) {
      MultiplyPanels<decltype(height)::value, kPanels>(
          g.k, a.Rows(first), data + j * g.k * nr, g.k * nr, nr,
          StoresOfPanels<kPanels>(epilogue, g.c + first * g.ldc, g.ldc, 0, g.n,
                                  j));
    };
    if (g.m <= kWideTileRows) {
      WithExactRows<kWideTileRows>(g.m, [&](auto rows) { tile(rows, 0); });
    } else {
      ForTilePieces<kWideTileRows>(g.m, tile);
    }
  };
  const auto task = [&](std::size_t t, const auto& a) {
    const std::size_t end = std::min(panels, (t + 1) * kPanelsPerTask);
    std::size_t j = t * kPanelsPerTask;
    if (g.m == 1) {
      for (; j + 4 <= end; j += 4) {
        MultiplyRowByFourPanels(
            g.k, a, data + j * g.k * nr, g.k * nr,
            StoresOfPanels<2>(epilogue, g.c, g.ldc, 0, g.n, j),
            StoresOfPanels<2>(epilogue, g.c, g.ldc, 0, g.n, j + 2));
      }
    }
    for (; j + 2 <= end; j += 2) panel_run(j, Constant<2>(), a);
    if (j < end) panel_run(j, Constant<1>(), a);
  };
  detail::ForEachTask((panels + kPanelsPerTask - 1) / kPanelsPerTask,
                      double(g.m) * g.n * g.k, [&](std::size_t t) {
                        if (g.trans_a) {
                          task(t, StepsA{g.a, g.lda});
                        } else {
                          task(t, RowsA{g.a, g.lda});
                        }
                      });
}

// How GemvTransposedB walks B (DotRowsOfB) where StreamingPrefetchPays
// (lib/common/prefetch.h):
// eight rows of B for one row of A, eight streams, each prefetched 1.5 KiB
// ahead. 1 x 4096 x 4096 on Zen 5 against FourRowsOfB: eight rows 1.12x
// (1 thread) / 1.20x (2 threads), the prefetch 2 KiB ahead another 1.17x /
// 1.12x (1.16x / 1.18x in all, 15 and 7 interleaved runs); 1.5 and 2 KiB
// ahead ran within noise, 4 KiB at 0.75x / 0.79x of 2 KiB. On Zen 1 (8-way
// L1) the same walk ran at 0.80-0.90x of FourRowsOfB on 1 thread and
// 0.90-0.98x on 2 (k 4096, and 4000, whose rows fall in different sets of
// L1; eight rows without prefetch 0.91-0.96x and 0.96-1.00x, four rows
// prefetched 0.85-0.89x and 0.93-0.95x).
struct EightPrefetchedRowsOfB {
  template <std::size_t kRowsA>
  static constexpr std::size_t kRowsB = 8 / kRowsA;
  static constexpr std::size_t kPrefetchAhead = kGemvPrefetchFloats;
};

// B transposed in place: C[i, j] is the dot product of row i of A with row
// j of B. A task streams a run of B's rows in memory order past the m rows
// of A, which stay in L1 (copied into rows first when A is transposed too);
// the sums of kRowsPerStore rows of B go to C together, B walked as Walk
// says. 1 x 4096 x 4096 on a second Zen 5 VM, medians of 7 interleaved in
// one process: 39.3 GB/s of B on 1 thread, 75.4 on 2, against
// cblas_sgemv's 36.4 and 51.9 and a read loop's 37.6 and 63.4 (B partly in
// a large L3). On the first Zen 5 VM, the blocked product, which packed B
// for one row of C, read 9.6 GB/s, and one row of B at a time (one sum per
// row of A) 25-29.
template <class Walk>
void GemvTransposedB(const detail::GemmArgs& g) {
  const float* a = g.a;
  std::size_t lda = g.lda;
  const detail::PooledBuffer rows_of_a(g.trans_a ? g.m * g.k : 0);
  if (g.trans_a) {
    const StridedA op_a(g);
    for (std::size_t i = 0; i < g.m; ++i) {
      for (std::size_t p = 0; p < g.k; ++p) {
        rows_of_a.get()[i * g.k + p] = op_a(i, p);
      }
    }
    a = rows_of_a.get();
    lda = g.k;
  }
  // A task reads at least 64 KiB of B (256 rows at k = 64, 64 rows at k =
  // 4096), in runs of whole stores.
  constexpr std::size_t kRowsPerStore = 64, kMinTaskFloats = 1 << 14;
  const std::size_t task_rows =
      RoundUp(std::max(kRowsPerStore, kMinTaskFloats / g.k), kRowsPerStore);
  const RowSegments whole_rows{g.k, 0};
  WithRowCount(g.m, [&](auto rows) {
    detail::ForEachTask(
        (g.n + task_rows - 1) / task_rows, double(g.m) * g.n * g.k,
        [&](std::size_t t) {
          float sums[kGemvRows * kRowsPerStore];
          const std::size_t end = std::min(g.n, (t + 1) * task_rows);
          for (std::size_t j0 = t * task_rows; j0 < end; j0 += kRowsPerStore) {
            const std::size_t width = std::min(kRowsPerStore, end - j0);
            DotRowsOfB<decltype(rows)::value, Walk>(a, lda, g.b + j0 * g.ldb,
                                                    g.ldb, width, g.k,
                                                    whole_rows, sums, width);
            GemvStore(g, j0, width, sums);
          }
        });
  });
}

// B in place. Tasks own (column chunk, range of k): a chunk as wide as half
// of L1 keeps its sums (6144 columns for one row of C in 48 KiB), so that a
// task reads whole rows of B, one contiguous run, when B is that narrow
// (chunks of 2048 columns read 0.83-0.89 of cblas_sgemv's rate on 2 threads
// where whole rows read 1.08-1.14, 1 x 4096 x 4096 on Zen 5); k is split in
// fixed ranges only when there are too few chunks to keep the cores busy,
// and the ranges' partial sums are then added in range order, so the
// result depends on the shape and the machine's L1, never on the threads.
inline void Gemv(const detail::GemmArgs& g) {
  if (g.packed_b) {
    return detail::WithStorageType(g.packed_b->precision, [&](auto element) {
      GemvPacked<decltype(element)>(g);
    });
  }
  if (g.trans_b) {
    return detail::StreamingPrefetchPays()
               ? GemvTransposedB<EightPrefetchedRowsOfB>(g)
               : GemvTransposedB<FourRowsOfB>(g);
  }
  const std::size_t lanes = hn::Lanes(FloatTag());
  constexpr std::size_t kTasksWanted = 4, kMinRange = 256;
  const std::size_t full = g.n / lanes * lanes;  // the rest is a scalar tail
  // Chunks as wide as half of L1 holds sums for. A third of that (2048
  // columns on a 48 KiB L1, 1 x 4096 x 1024 and 1 x 4096 x 4096 in two
  // chunks of two ranges of k, from four ranges): 2 threads 1.054-1.057x
  // but 1 thread 0.953-0.958x (Sapphire Rapids VM, B from L3). The width
  // sets how k is split, so it cannot follow the thread count.
  const std::size_t max_width =
      std::max(lanes, detail::MachineCaches().l1d / 2 / (g.m * sizeof(float)) /
                          lanes * lanes);
  const std::size_t width = std::min(max_width, full);
  const std::size_t chunks = width == 0 ? 0 : (full + width - 1) / width;
  const std::size_t ranges =
      detail::SplitsForTasks(chunks, kTasksWanted, g.k, kMinRange);
  const std::size_t range_k = (g.k + ranges - 1) / ranges;
  const std::size_t stride = g.m * width;  // floats of one task's sums
  detail::PooledBuffer partial(chunks * ranges * stride);
  // Prefetching as StreamingPrefetchPays says. B's rows are usually a
  // multiple of 4 KiB apart, so a pass's eight lines of one column fall into
  // one set of L1, where prefetched lines could also evict the sums; but the
  // walks of B transposed lost as much at a stride that spreads the sets, so
  // that is not the whole cause. On Zen 3 (32 KiB, 8 ways) prefetching 1.5
  // KiB ahead read 15.0-16.1 GB/s where no prefetch read 19.1-20.8
  // (cblas_sgemv 19.2-21.3) on 1 thread, 26.8 and 29.5-32.1 (29.7-31.4) on
  // 2; 1 KiB ahead 16.4-16.7; 256 bytes ahead as none. Zen 5 (48 KiB, 12
  // ways): above. Sapphire Rapids VM (48 KiB, 12 ways), B from L3, 1 x 4096
  // x 1024 and 1 x 4096 x 4096: 0.75, 3 or 6 KiB ahead, or none, all within
  // 1% of 1.5 KiB on 1 and 2 threads.
  //
  // Where it does not pay, the walk of more rows of C than a pass has rows
  // of B still asks for the next pass, into L2: its passes are long enough
  // for the lines to arrive, and into L1 they would evict the pass's own (8
  // lines of one set; into L1, 16 x 4096 x 4096 ran 0.93x). Zen 3, one
  // process alternating, medians of 9-31, 1 thread / 2 threads, x 4096 x
  // 4096: 16 rows 0.99-1.25x (three runs) / 1.29x, 12 rows 1.15-1.19x / 1.19x,
  // 10 rows 1.15x / 1.10x; 16 x 2048 x 2048 1.03x / 1.06x, 16 x 1024 x
  // 4096 1.02x / 1.16x; but 8 rows 0.91-0.98x / 1.05x and 5 rows 0.81-0.83x /
  // 0.90x, kept without. Zen 1 and Zen 4 (8-way L1s too) unmeasured.
  const bool prefetch = detail::StreamingPrefetchPays();
  const bool walk = g.m > kGemvRows;
  detail::PooledBuffer steps(walk ? g.k * kWalkRows : 0);
  if (walk) CopyStepsOfA(g, steps.get());
  detail::ForEachTask(
      chunks * ranges, double(g.m) * g.n * g.k, [&](std::size_t t) {
        const std::size_t chunk = t / ranges, r = t % ranges;
        const std::size_t j0 = chunk * width;
        float* sums = partial.get() + t * stride;
        std::fill(sums, sums + stride, 0.0f);
        const std::size_t w = std::min(width, full - j0), first = r * range_k,
                          end = std::min(g.k, (r + 1) * range_k);
        if (walk) {
          if (prefetch) {
            GemvRowsOfA<true>(g, steps.get(), j0, w, first, end, sums);
          } else if (g.m > kGemvRowsPerPass) {
            GemvRowsOfA<true, detail::CacheLevel::kL2>(g, steps.get(), j0, w,
                                                       first, end, sums);
          } else {
            GemvRowsOfA<false>(g, steps.get(), j0, w, first, end, sums);
          }
        } else if (prefetch) {
          GemvRows<true>(g, j0, w, first, end, sums);
        } else {
          GemvRows<false>(g, j0, w, first, end, sums);
        }
      });
  for (std::size_t chunk = 0; chunk < chunks; ++chunk) {
    const std::size_t j0 = chunk * width, w = std::min(width, full - j0);
    float* sums = partial.get() + chunk * ranges * stride;
    // (A narrow last chunk's sums are rows of w.)
    for (std::size_t r = 1; r < ranges; ++r) {
      const float* more = sums + r * stride;
      for (std::size_t i = 0; i < g.m * w; ++i) sums[i] += more[i];
    }
    GemvStore(g, j0, w, sums);
  }
  if (full == g.n) return;
  // Columns past the last whole vector, summed the same way, one by one.
  const std::size_t tail = g.n - full;
  float sums[kWalkRows * hn::MaxLanes(FloatTag())];
  const StridedA op_a(g);
  for (std::size_t i = 0; i < g.m; ++i) {
    for (std::size_t j = 0; j < tail; ++j) {
      float sum = 0.0f;
      for (std::size_t p = 0; p < g.k; ++p) {
        sum += op_a(i, p) * g.b[p * g.ldb + full + j];
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
