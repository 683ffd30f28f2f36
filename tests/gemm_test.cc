// sgemm against the double reference on every target: ragged sizes, all
// transpose cases, alpha/beta, padded leading dimensions, k == 0, errors.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "lib/dispatch/dispatch.h"
#include "lib/gemm/gemm_args.h"
#include "reference.h"
#include "test_util.h"

namespace mha_test {
namespace {

using mha::Transpose;

class GemmTest : public PerTarget {
 protected:
  // A random rows x cols matrix with rows `stride` apart, NaN between them;
  // the last row ends at its last element (where the guard page begins).
  static std::vector<float> PaddedRandom(std::size_t rows, std::size_t cols,
                                         std::size_t stride,
                                         std::uint32_t seed) {
    if (rows == 0) return {};
    std::vector<float> matrix = RandomVector((rows - 1) * stride + cols, seed);
    for (std::size_t i = 0; i + 1 < rows; ++i)
      for (std::size_t p = cols; p < stride; ++p) matrix[i * stride + p] = kNaN;
    return matrix;
  }

  // How a product is run: through mha::sgemm, with every A sliver read by
  // the wide tile (which only some L1s call for), or with B pre-packed as the
  // layer packs its weights, plus a column bias (added once, by the first
  // slice's epilogue), C as it is or in blocks of two panels' columns (as
  // the layer writes its projections head-major).
  // kStreamedC: plain stores of the first slice streamed past the caches,
  // as for a C larger than a quarter of L3, with C's rows vector-aligned.
  enum class Route {
    kPublic,
    kWideTiles,
    kPrePackedB,
    kPrePackedBBlockedC,
    kStreamedC
  };

  // Where C's elements lie: rows ldc apart, or, with block_cols, blocks of
  // block_cols columns block_stride apart.
  struct CLayout {
    std::size_t m, n, ldc, block_cols = 0, block_stride = 0;

    std::size_t At(std::size_t i, std::size_t j) const {
      if (block_cols == 0) return i * ldc + j;
      return j / block_cols * block_stride + i * ldc + j % block_cols;
    }
    // Floats from the first element to the last.
    std::size_t Extent() const { return At(m - 1, n - 1) + 1; }
  };

  // op(B), k x n, in the panel format of mha::detail::PackedB: panels of nr
  // columns (the target's PanelCols()), each all k steps deep, the last one
  // zero-padded.
  static std::vector<float> PackPanels(const float* b, std::size_t ldb, bool tb,
                                       std::size_t k, std::size_t n,
                                       std::size_t nr) {
    const std::size_t panels = (n + nr - 1) / nr;
    std::vector<float> packed(panels * k * nr, 0.0f);
    for (std::size_t p = 0; p < k; ++p) {
      for (std::size_t j = 0; j < n; ++j) {
        packed[(j / nr * k + p) * nr + j % nr] =
            tb ? b[j * ldb + p] : b[p * ldb + j];
      }
    }
    return packed;
  }

  // Runs one product with leading dimensions padded by `pad` (padding NaN)
  // and checks it against the reference; padding must stay untouched. Each
  // operand ends at a guard page, so reading past its end crashes.
  void Check(std::size_t m, std::size_t n, std::size_t k, bool ta, bool tb,
             float alpha, float beta, std::size_t pad = 3,
             Route route = Route::kPublic) {
    const std::size_t a_rows = ta ? k : m, a_cols = ta ? m : k;
    const std::size_t b_rows = tb ? n : k, b_cols = tb ? k : n;
    const std::size_t lda = a_cols + pad, ldb = b_cols + pad;
    const std::size_t nr =
        mha::detail::PanelCols(mha::detail::ChosenTargetIndex());
    CLayout out{m, n, n + pad};
    if (route == Route::kPrePackedBBlockedC) {
      out.block_cols = 2 * nr;
      out.ldc = out.block_cols + pad;
      out.block_stride = m * out.ldc + pad;
    }
    // C ends at a guard page (page-aligned): a size that is a multiple of
    // kVectorAlign floats puts its first element, and with ldc a multiple
    // of it every row, on a boundary of the widest vector (2048-bit SVE).
    constexpr std::size_t kVectorAlign = 64;
    std::size_t c_tail = 0;
    if (route == Route::kStreamedC) {
      out.ldc = (n + pad + kVectorAlign - 1) / kVectorAlign * kVectorAlign;
      c_tail = (kVectorAlign - out.Extent() % kVectorAlign) % kVectorAlign;
    }
    GuardedFloats a(PaddedRandom(a_rows, a_cols, lda, 1));
    GuardedFloats b(PaddedRandom(b_rows, b_cols, ldb, 2));
    const std::vector<float> c_values = RandomVector(m * n, 3);
    std::vector<float> c_initial(out.Extent() + c_tail, kNaN);
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < n; ++j)
        c_initial[out.At(i, j)] = c_values[i * n + j];
    GuardedFloats c(c_initial);
    std::vector<double> want =
        ReferenceGemm(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb,
                      beta, c_values.data(), n);
    const std::size_t ldc = out.ldc;
    if (route == Route::kPrePackedB || route == Route::kPrePackedBBlockedC) {
      const std::vector<float> bias = RandomVector(n, 4);
      for (std::size_t i = 0; i < m; ++i)
        for (std::size_t j = 0; j < n; ++j) want[i * n + j] += bias[j];
      const std::vector<float> packed = PackPanels(b.data(), ldb, tb, k, n, nr);
      const mha::detail::PackedB packed_b{packed.data(), k, n, nr};
      mha::detail::GemmArgs args{
          m, n,     k,    alpha,    a.data(), lda,         ta,       nullptr,
          0, false, beta, c.data(), ldc,      bias.data(), &packed_b};
      args.c_block_cols = out.block_cols;
      args.c_block_stride = out.block_stride;
      mha::detail::RunGemm(mha::detail::ChosenTargetIndex(), args);
    } else if (route == Route::kPublic) {
      mha::sgemm(ta ? Transpose::Yes : Transpose::No,
                 tb ? Transpose::Yes : Transpose::No, m, n, k, alpha, a.data(),
                 lda, b.data(), ldb, beta, c.data(), ldc);
      ExpectRanOnTarget();
    } else if (route == Route::kStreamedC) {
      ASSERT_TRUE(mha::detail::RunGemmStreamingCForTest(
          mha::detail::ChosenTargetIndex(),
          {m, n, k, alpha, a.data(), lda, ta, b.data(), ldb, tb, beta, c.data(),
           ldc}))
          << "C's rows not vector-aligned: nothing streamed";
    } else {
      mha::detail::RunGemmWithWideTilesForTest(
          mha::detail::ChosenTargetIndex(),
          {m, n, k, alpha, a.data(), lda, ta, b.data(), ldb, tb, beta, c.data(),
           ldc});
    }
    std::vector<float> got(m * n);
    std::vector<bool> element(c.size(), false);
    for (std::size_t i = 0; i < m; ++i) {
      for (std::size_t j = 0; j < n; ++j) {
        got[i * n + j] = c[out.At(i, j)];
        element[out.At(i, j)] = true;
      }
    }
    for (std::size_t x = 0; x < c.size(); ++x) {
      ASSERT_TRUE(element[x] || std::isnan(c[x])) << "padding written at " << x;
    }
    const double tolerance = 4.0 * (k + 4) * 0x1.0p-24;
    EXPECT_LE(RelativeError("sgemm", got.data(), want.data(), got.size()),
              tolerance)
        << "m=" << m << " n=" << n << " k=" << k << " ta=" << ta
        << " tb=" << tb;
  }
};

TEST_P(GemmTest, RaggedSizesAllTransposes) {
  const std::size_t sizes[][3] = {
      {1, 1, 1},    {1, 17, 5},  {2, 3, 7},    {5, 1, 13},   {7, 33, 16},
      {13, 31, 29}, {6, 64, 64}, {24, 65, 33}, {37, 100, 1}, {97, 47, 300}};
  for (const auto& s : sizes) {
    for (int t = 0; t < 4; ++t)
      Check(s[0], s[1], s[2], t & 1, t & 2, 1.5f, 0.5f);
  }
}

TEST_P(GemmTest, AlphaBetaCombinations) {
  for (float alpha : {1.0f, -2.0f, 0.0f}) {
    for (float beta : {0.0f, 1.0f, -0.75f})
      Check(19, 23, 41, false, false, alpha, beta);
  }
}

TEST_P(GemmTest, ManyBlocksInEveryDimension) {
  Check(401, 71, 45, false, false, 1.0f, 0.0f);  // several row blocks
  Check(11, 4099, 7, false, true, 1.0f, 1.0f);   // several column blocks
  Check(29, 37, 777, true, false, 1.0f, 0.25f);  // several depth blocks
}

TEST_P(GemmTest, MatrixVectorShapes) {  // few rows: B streamed by column chunks
  for (std::size_t m : {1, 2, 3, 4, 5}) {
    for (int t = 0; t < 4; ++t) Check(m, 4100, 33, t & 1, t & 2, 0.75f, 0.5f);
    Check(m, 7, 300, false, false, 1.0f, 0.0f);
  }
  // Chunks are half of L1 wide (6144 columns for one row at 48 KiB): one row
  // of C across several chunks, with a ragged last one.
  Check(1, 16400, 20, false, false, 1.0f, 0.5f);
}

// At most four rows with B transposed: dot products of A's rows with B's
// (lib/common/dot_rows-inl.h). Depths below, at and past a vector, with a
// ragged tail, and deep; rows of B in groups of eight (one row of A), four
// or two with a tail of single rows, across stores of 64 rows and tasks; A
// transposed too (copied into rows first).
TEST_P(GemmTest, FewRowsTimesBTransposed) {
  for (std::size_t m : {1, 2, 3, 4}) {
    for (std::size_t k : {1, 5, 16, 33, 64}) {
      for (std::size_t n : {1, 3, 13, 67, 4101}) {
        Check(m, n, k, (m + n + k) % 2 == 1, true, 0.75f, 0.5f);
      }
    }
    Check(m, 67, 1000, false, true, 1.0f, 0.0f);
    Check(m, 131, 1000, true, true, -1.5f, 1.0f);
  }
}

// Sizes on both sides of every blocking boundary of the target in force:
// the register tile's rows (with the 8/4/2/1-row tiles of ragged panels)
// and columns, the depth of a slice kc and the task width nc; each product
// with beta and alpha, A and B in place or packed, and all transposes.
TEST_P(GemmTest, EveryBlockingBoundary) {
  const mha::detail::GemmShapeParams p = mha::detail::GemmShapeParamsForTest();
  const std::size_t mr = p.tile_rows, nr = p.tile_cols;
  for (std::size_t m : {mr - 1, mr + 1, 2 * mr + 7, 4 * mr + 1}) {
    for (std::size_t n : {nr - 1, nr + 1, 4 * nr, p.nc + 1}) {
      for (std::size_t k : {p.kc - 1, p.kc + 1}) {
        const int t = static_cast<int>(m + n + k) % 4;  // vary transposes
        Check(m, n, k, t & 1, t & 2, 0.5f, 0.25f);
      }
    }
  }
  Check(2 * mr, 3 * nr, 2 * p.kc + 3, true, true, 1.0f, 0.0f);  // 3 slices
  Check(4 * mr + 3, p.nc + nr + 5, p.kc, false, false, 1.0f, 1.0f);
  // Wide enough (16 column blocks) that A's slices are copied, shared.
  Check(mr + 5, 16 * p.nc + 5, 2 * p.kc, false, false, 1.0f, 0.5f);
  // A's rows 4096 floats apart, all in one set of L1: copied first where L1
  // has fewer ways than a sliver has rows (8-way L1s), over two slices.
  const std::size_t k = 2 * p.kc + 3;
  Check(401, 8 * nr + 3, k, false, false, 0.5f, 0.25f, 4096 - k);
}

// B at most 3 panels wide (P V) takes slices of narrow_kc and is read in
// place by the wide tile on 32-register targets; on 16-register ones, A's
// rows a multiple of 1024 floats apart (P of 2048 keys) on 8-way L1s call
// for the wide tile.
TEST_P(GemmTest, NarrowProducts) {
  const mha::detail::GemmShapeParams p = mha::detail::GemmShapeParamsForTest();
  const std::size_t mr = p.tile_rows, nr = p.tile_cols;
  for (std::size_t k : {p.narrow_kc - 1, p.narrow_kc + 1}) {
    Check(2 * mr + 7, 2 * nr, k, false, false, 0.5f, 0.25f);
    Check(mr + 1, 2 * nr - 1, k, true, true, 1.0f, 0.0f);
  }
  const auto pad_to_4_kib = [](std::size_t k) { return 1024 - k % 1024; };
  const std::size_t k = 2 * p.narrow_kc + 3;
  Check(3 * mr + 5, 2 * nr, k, false, false, 1.0f, 0.5f, pad_to_4_kib(k));
  Check(4 * mr + 1, 3 * nr - 2, 300, false, true, 1.0f, 0.0f,
        pad_to_4_kib(300));
}

// The wide tile, two panels at a time with 1, 2, 4, ... rows, on every
// target: ragged rows and columns (a ragged pair, whole pairs before a ragged
// odd panel), every transpose, C stored as it is and combined with alpha
// and beta, the epilogue of the first slice and of later ones.
TEST_P(GemmTest, WideTiles) {
  const mha::detail::GemmShapeParams p = mha::detail::GemmShapeParamsForTest();
  const std::size_t mr = p.tile_rows, nr = p.tile_cols;
  for (std::size_t m : {std::size_t{1}, mr / 2 + 1, mr + 3, 5 * mr - 1}) {
    for (std::size_t n : {2 * nr - 3, 2 * nr, 2 * nr + 1, 5 * nr - 3}) {
      const int t = static_cast<int>(m + n) % 4;
      Check(m, n, p.kc + 5, t & 1, t & 2, 0.5f, 0.25f, 3, Route::kWideTiles);
      Check(m, n, p.kc + 5, t & 2, t & 1, 1.0f, 0.0f, 3, Route::kWideTiles);
    }
  }
  Check(2 * mr, 4 * nr, 2 * p.kc + 1, false, false, 1.0f, 1.0f, 3,
        Route::kWideTiles);
  // On one thread (one task of all rows): B's rows on vector boundaries (no
  // padding: B ends at a page, so it starts on one), read in place, and one
  // float off them, copied as rows into aligned scratch first from
  // wide_b_copy_rows rows on, read in place below; 2 and 3 panels.
  const std::size_t copy_rows = p.wide_b_copy_rows;
  InArena(1, [&] {
    for (std::size_t pad : {0, 1}) {
      Check(copy_rows + 5, 2 * nr, p.kc + 7, false, false, 1.0f, 0.5f, pad,
            Route::kWideTiles);
      Check(copy_rows, 3 * nr, 2 * p.kc + 9, false, false, 0.5f, 0.0f, pad,
            Route::kWideTiles);
    }
    Check(copy_rows - mr, 2 * nr, p.kc + 7, false, false, 1.0f, 0.5f, 1,
          Route::kWideTiles);
  });
}

// B's rows 1024 floats apart (4 KiB, a multiple of the critical stride of
// every L1 of 4 KiB per way or less), where all of them fall into one set:
// packed from fewer slivers than elsewhere. Just below that many slivers (in
// place) and at it (packed), ragged rows and panels, one slice and several.
TEST_P(GemmTest, BRowsInOneL1Set) {
  const mha::detail::GemmShapeParams p = mha::detail::GemmShapeParamsForTest();
  const std::size_t n = 5 * p.tile_cols + 3, pad = 1024 - n;
  for (std::size_t slivers : {5, 6}) {
    for (std::size_t k : {p.kc - 1, 2 * p.kc + 1}) {
      for (int threads : {1, 2}) {
        InArena(threads, [&] {
          Check(slivers * p.tile_rows - 1, n, k, false, false, 1.0f, 0.5f, pad);
        });
      }
    }
  }
}

// B packed from as few slivers as in BRowsInOneL1Set where it has more
// floats than L2 holds (k x n), or where a task's block holds only part of
// its columns: below that many slivers (in place) and at it, on 1 and 2
// threads; and B of just as many floats as L2 holds, read in place.
TEST_P(GemmTest, BPackedFromFewerSlivers) {
  const mha::detail::GemmShapeParams p = mha::detail::GemmShapeParamsForTest();
  const std::size_t n = 5 * p.tile_cols + 3;
  const std::size_t in_l2 = p.in_place_b_max_floats / n, beyond = in_l2 + 1;
  const auto rows = [&](std::size_t slivers) {
    return slivers * p.tile_rows - 1;
  };
  Check(rows(5), n, beyond, false, false, 1.0f, 0.5f);
  for (int threads : {1, 2}) {
    InArena(threads, [&] {
      Check(rows(6), n, beyond, false, false, 1.0f, 0.5f);
      Check(rows(6), 2 * p.nc + 5, p.kc + 1, false, false, 1.0f, 0.5f);
    });
  }
  Check(rows(6), n, in_l2, false, false, 0.5f, 0.0f);
}

// B beyond the size whose blocks the first sliver packs as it reads them,
// whole panels wide, from the fewest slivers that pack B: each block copied
// before its slivers, on 1 and 2 threads, with beta.
TEST_P(GemmTest, LargeBBlocksCopied) {
  const mha::detail::GemmShapeParams p = mha::detail::GemmShapeParamsForTest();
  const std::size_t n = 4 * p.tile_cols;
  const std::size_t k = p.sliver_packs_b_max_floats / n + 1;
  for (int threads : {1, 2}) {
    InArena(threads, [&] {
      Check(6 * p.tile_rows - 1, n, k, false, false, 1.0f, 0.5f);
    });
  }
}

// B read in place with rows far apart (300 floats of padding: at least
// kFarBRowFloats) and more than half as many floats as L2 holds, which the
// micro-kernel prefetches step by step: slivers of one panel and, for narrow
// B, of two (the wide tile), ragged rows, on 1 and 2 threads.
TEST_P(GemmTest, FarBRowsPrefetched) {
  const mha::detail::GemmShapeParams p = mha::detail::GemmShapeParamsForTest();
  const std::size_t pad = 300;
  for (std::size_t n : {5 * p.tile_cols + 3, 2 * p.tile_cols}) {
    const std::size_t k = p.in_place_b_max_floats / (2 * n) + 1;
    for (int threads : {1, 2}) {
      InArena(threads, [&] {
        Check(2 * p.tile_rows + 5, n, k, false, false, 1.0f, 0.5f, pad);
      });
    }
  }
}

// B read in place with rows a multiple of 64 floats apart, all starting
// past a vector boundary, beyond half of L2 and wide enough that the
// columns before B's first boundary run as a product of their own (its
// base, the unpadded last row ending at a guard page, lies 1027 mod 64
// floats short of a boundary): ragged rows, alpha and beta, 1 and 2 threads.
TEST_P(GemmTest, MisalignedBRowsSplit) {
  const mha::detail::GemmShapeParams p = mha::detail::GemmShapeParamsForTest();
  const std::size_t n = 1027, pad = 1088 - n;  // B's last row unpadded
  const std::size_t k = p.in_place_b_max_floats / (2 * n) + 1;
  for (int threads : {1, 2}) {
    InArena(threads, [&] {
      Check(3 * p.tile_rows - 1, n, k, false, false, 1.0f, 0.5f, pad);
    });
  }
}

// Rows swept by pairs of packed B panels (targets with the 6 x 4 tile; the
// others sweep slivers, which EveryBlockingBoundary covers, and skip this:
// its shapes, sized by the caches, took 25 s per target under a 2 MiB L2):
// from the fewest rows that take this sweep, across its chunks of rows; two
// pairs, two pairs and a ragged odd panel, a ragged pair; B in place (packed
// by this sweep) and transposed; one slice of its depth and three, with
// beta. On one thread, so that no task's rows are cut below a chunk.
TEST_P(GemmTest, PanelPairSweep) {
  const mha::detail::GemmShapeParams p = mha::detail::GemmShapeParamsForTest();
  if (p.pair_sweep_min_rows == 0) {
    GTEST_SKIP() << "this target sweeps slivers only";
  }
  const std::size_t nr = p.tile_cols, chunk = p.pair_sweep_rows;
  const std::size_t first = std::max(p.pair_sweep_min_rows, 3 * chunk);
  // Chunks of whole tiles, then ragged last chunks ending in tiles of 4
  // and 1 rows, and of 2 and 1 (with a wide tile of 6 rows).
  const std::size_t rows[] = {first, first + chunk + 5, first + 2 * chunk + 3};
  const std::size_t cols[] = {4 * nr, 5 * nr - 3, 6 * nr + 1};
  for (std::size_t m : rows) {
    for (std::size_t n : cols) {
      const bool deep = (m + n) % 2 == 1;
      InArena(1, [&] {
        Check(m, n, deep ? 2 * p.pair_sweep_kc + 1 : p.pair_sweep_kc - 1,
              m % 2 == 0, n % 2 == 0, 0.5f, deep ? 1.0f : 0.0f);
      });
    }
  }
  // Wide enough (16 column blocks or more) that A's slice is copied.
  InArena(1, [&] {
    Check(first + 7, 16 * p.nc + 5, p.pair_sweep_kc - 1, false, false, 1.0f,
          0.5f);
  });
}

// C written by non-temporal stores (where C is large): in one slice and in
// several (the first streamed, the next reading it back), by every sweep,
// with a ragged last panel (ordinary stores beside streamed ones), with A
// copied a slice at a time for all tasks (where rows a multiple of 4 KiB
// apart thrash L1), on one thread and two.
TEST_P(GemmTest, StreamedC) {
  const mha::detail::GemmShapeParams p = mha::detail::GemmShapeParamsForTest();
  const std::size_t nr = p.tile_cols;
  const std::size_t pair_rows =
      std::max<std::size_t>(p.pair_sweep_min_rows, 40);
  for (int threads : {1, 2}) {
    InArena(threads, [&] {
      Check(50, 3 * nr + 5, p.kc / 2 + 1, false, false, 1.0f, 0.0f, 3,
            Route::kStreamedC);
      Check(50, 5 * nr - 3, 2 * p.kc + 1, false, true, 1.0f, 0.0f, 3,
            Route::kStreamedC);
      Check(40, 2 * nr + 3, p.narrow_kc + 7, false, false, 1.0f, 0.0f, 3,
            Route::kStreamedC);
      Check(pair_rows + 7, 5 * nr - 3, 2 * p.pair_sweep_kc + 1, false, false,
            1.0f, 0.0f, 3, Route::kStreamedC);
      const std::size_t deep = 2 * p.kc + 1;
      Check(50, 4 * nr + 3, deep, false, false, 1.0f, 0.0f,
            (deep + 1023) / 1024 * 1024 - deep, Route::kStreamedC);
    });
  }
}

// B pre-packed as the layer's weights, with a column bias: within one slice
// of the sliver sweep, below and above the depth of one pair-sweep slice
// (several slices, on targets with the 6 x 4 tile: tasks of chunks of rows
// that run all their slices in turn, with ragged last chunks and columns),
// on every thread count's grid.
TEST_P(GemmTest, PrePackedB) {
  const mha::detail::GemmShapeParams p = mha::detail::GemmShapeParamsForTest();
  const std::size_t nr = p.tile_cols, chunk = p.pair_sweep_rows;
  const std::size_t first = std::max(p.pair_sweep_min_rows, 3 * chunk);
  for (std::size_t k :
       {p.kc / 2 + 1, p.pair_sweep_kc - 1, 2 * p.pair_sweep_kc + 1}) {
    Check(first + 2 * chunk + 5, 6 * nr + 3, k, k % 2 == 1, false, 0.5f, 0.25f,
          3, Route::kPrePackedB);
    InArena(1, [&] {
      Check(first + 7, 5 * nr - 1, k, false, true, 1.0f, 0.0f, 3,
            Route::kPrePackedB);
    });
  }
  Check(7, 3 * nr + 1, 2 * p.kc + 1, false, false, 1.0f, 1.0f, 3,
        Route::kPrePackedB);
  // Few rows (more than the matrix-vector path's 4) through weights one
  // slice of the sliver sweep deep (slivers) and a step deeper (pairs of
  // panels on targets with the 6 x 4 tile): whole wide tiles and ragged
  // pieces (5 = 4 + 1, 11 = 6 + 4 + 1, 20 = 3 x 6 + 2), on each grid.
  for (std::size_t m : {5, 6, 11, 20}) {
    for (std::size_t k : {p.kc, p.kc + 1}) {
      for (int threads : {1, 2}) {
        InArena(threads, [&] {
          Check(m, 5 * nr - 3, k, false, false, 1.0f, m % 2 ? 0.5f : 0.0f, 3,
                Route::kPrePackedB);
        });
      }
    }
  }
}

// B pre-packed one slice deep where the sliver sweep's tasks, in blocks of
// a quarter of L2, ask for the next task's block into L2 while they sweep
// their own (the first sliver asks for its own steps ahead): a block's
// first sliver and a piece, and slivers enough to cover the next block;
// three whole blocks and a ragged fourth; that depth and a ragged one; on
// each grid. (What the prefetches fetch is unseen here: this checks the
// products through those paths.)
TEST_P(GemmTest, PrePackedBAskedAhead) {
  const mha::detail::GemmShapeParams p = mha::detail::GemmShapeParamsForTest();
  if (p.asks_next_kc == 0) GTEST_SKIP() << "L2 holds no two sliver blocks";
  const std::size_t mr = p.tile_rows, nr = p.tile_cols;
  const std::size_t n = 3 * p.asks_next_nc + nr + 3;
  for (std::size_t m : {mr + 1, 9 * mr + 5}) {
    for (std::size_t k : {p.asks_next_kc, p.asks_next_kc - 5}) {
      for (int threads : {1, 2}) {
        InArena(threads, [&] {
          Check(m, n, k, false, false, 1.0f, m % 2 ? 0.5f : 0.0f, 3,
                Route::kPrePackedB);
        });
      }
    }
  }
}

// The matrix-vector path over pre-packed B (a batch of decoded tokens
// through the layer's weights): every row count it takes, each in one
// register tile or in pieces, and the first count past it; A in place and
// transposed, shallow and deep, on each grid. Ragged columns in the last of
// four panels (one row takes four at a time) and in a fifth panel past them.
TEST_P(GemmTest, PrePackedBFewRows) {
  const mha::detail::GemmShapeParams p = mha::detail::GemmShapeParamsForTest();
  const std::size_t nr = p.tile_cols;
  for (std::size_t m = 1; m <= p.packed_gemv_rows + 1; ++m) {
    for (bool ta : {false, true}) {
      const std::size_t k = ta ? p.kc + 1 : 37;
      for (const std::size_t n : {4 * nr - 3, 5 * nr - 3}) {
        for (int threads : {1, 2}) {
          InArena(threads, [&] {
            Check(m, n, k, ta, false, 0.5f, m % 2 ? 0.25f : 0.0f, 3,
                  Route::kPrePackedB);
          });
        }
      }
    }
  }
}

// The same routes writing C in blocks of columns (the layer's head-major
// projections), with ragged last blocks: pair sweep in row chunks over one
// slice and several, slivers over several slices, and the matrix-vector
// path.
TEST_P(GemmTest, PrePackedBIntoBlocksOfColumns) {
  const mha::detail::GemmShapeParams p = mha::detail::GemmShapeParamsForTest();
  const std::size_t nr = p.tile_cols, chunk = p.pair_sweep_rows;
  const std::size_t first = std::max(p.pair_sweep_min_rows, 3 * chunk);
  for (std::size_t k : {p.pair_sweep_kc - 1, 2 * p.pair_sweep_kc + 1}) {
    Check(first + chunk + 5, 7 * nr + 3, k, false, false, 1.0f, 0.0f, 3,
          Route::kPrePackedBBlockedC);
  }
  Check(7, 5 * nr + 1, 2 * p.kc + 1, false, false, 0.5f, 1.0f, 3,
        Route::kPrePackedBBlockedC);
  for (std::size_t m : {1, 3}) {
    Check(m, 5 * nr - 2, 300, false, false, 1.0f, 0.0f, 3,
          Route::kPrePackedBBlockedC);
  }
}

// Products of at most 4 rows stream B; when there are too few column chunks
// for the cores, k is split in fixed ranges added in order.
TEST_P(GemmTest, MatrixVectorWithSplitDepth) {
  for (std::size_t m : {1, 3}) {
    Check(m, 40, 3000, false, false, 1.0f, 0.5f);
    Check(m, 2053, 1100, m == 3, false, 0.75f, 0.0f);
  }
}

// 5 to walk_rows rows of C through a large B whose rows share one L1 set
// stream B past all rows at once: the fewest and most rows, A in place and
// transposed, k past whole passes of eight, columns past whole vectors, on
// 1 thread and (all rows) 2; one row past the walk goes to the blocked
// product.
TEST_P(GemmTest, FewRowsWalkLargeB) {
  const mha::detail::GemmShapeParams p = mha::detail::GemmShapeParamsForTest();
  constexpr std::size_t kLdb = 2048;  // 8 KiB: one L1 set on every target
  const std::size_t k = p.walk_min_b_floats / kLdb + 3;
  for (std::size_t m :
       {std::size_t{5}, std::size_t{8}, p.walk_rows, p.walk_rows + 1}) {
    const std::size_t n = m % 2 ? kLdb - 13 : kLdb - 64;
    for (int threads : {1, 2}) {
      if (threads == 2 && m != p.walk_rows) continue;
      InArena(threads, [&] {
        Check(m, n, k, m % 3 == 1, false, 0.5f, m % 2 ? 0.25f : 0.0f, kLdb - n);
      });
    }
  }
}

TEST_P(GemmTest, BetaZeroDoesNotReadC) {
  const std::size_t m = 9, n = 21, k = 5;
  const std::vector<float> a = RandomVector(m * k, 4),
                           b = RandomVector(k * n, 5);
  std::vector<float> c(m * n, kNaN);
  mha::sgemm(Transpose::No, Transpose::No, m, n, k, 1.0f, a.data(), k, b.data(),
             n, 0.0f, c.data(), n);
  for (float x : c) ASSERT_TRUE(std::isfinite(x));
}

// alpha and beta apply as IEEE arithmetic, as gemm.h says: alpha 0 still
// forms the product (0 x Inf is NaN), NaN alpha or beta gives NaN, beta Inf
// turns a zero of C into NaN and the rest into Inf, beta -0 does not read C.
// The matrix-vector path (m = 1) and the blocked one, depth in one slice
// and split.
TEST_P(GemmTest, NonFiniteAlphaAndBetaFollowIeee) {
  struct Case {
    float alpha, beta;
    bool inf_in_a;
  };
  const Case cases[] = {{0.0f, 0.0f, true},  {0.0f, 1.0f, true},
                        {kNaN, 0.0f, false}, {1.0f, kInf, false},
                        {1.0f, kNaN, false}, {2.0f, -0.0f, false}};
  const std::size_t n = 21;
  for (const std::size_t m : {1, 9}) {
    for (const std::size_t k : {5, 3000}) {
      for (const Case& t : cases) {
        std::vector<float> a = RandomVector(m * k, 7);
        if (t.inf_in_a) a[k / 2] = kInf;  // row 0
        const std::vector<float> b = RandomVector(k * n, 8);
        std::vector<float> c = RandomVector(m * n, 9);
        c[n / 2] = 0.0f;
        if (t.beta == 0.0f) std::fill(c.begin(), c.end(), kNaN);
        const std::vector<double> want =
            ReferenceGemm(false, false, m, n, k, t.alpha, a.data(), k, b.data(),
                          n, t.beta, c.data(), n);
        mha::sgemm(Transpose::No, Transpose::No, m, n, k, t.alpha, a.data(), k,
                   b.data(), n, t.beta, c.data(), n);
        for (std::size_t i = 0; i < m * n; ++i) {
          const std::string where =
              "element " + std::to_string(i) + " m " + std::to_string(m) +
              " k " + std::to_string(k) + " alpha " + std::to_string(t.alpha) +
              " beta " + std::to_string(t.beta);
          if (std::isfinite(want[i])) {
            ASSERT_NEAR(c[i], want[i], 1e-3 * (1.0 + std::fabs(want[i])))
                << where;
          } else if (std::isnan(want[i])) {
            ASSERT_TRUE(std::isnan(c[i])) << where;
          } else {
            ASSERT_EQ(c[i], want[i]) << where;
          }
        }
      }
    }
  }
}

TEST_P(GemmTest, ZeroDepthScalesC) {
  std::vector<float> c = RandomVector(12, 6);
  const std::vector<float> before = c;
  mha::sgemm(Transpose::No, Transpose::No, 3, 4, 0, 1.0f, nullptr, 0, nullptr,
             0, 2.0f, c.data(), 4);
  for (std::size_t i = 0; i < c.size(); ++i) EXPECT_EQ(c[i], 2.0f * before[i]);
  std::fill(c.begin(), c.end(), kNaN);
  mha::sgemm(Transpose::No, Transpose::No, 3, 4, 0, 1.0f, nullptr, 0, nullptr,
             0, 0.0f, c.data(), 4);
  for (float x : c) EXPECT_EQ(x, 0.0f);
}

TEST_P(GemmTest, EmptyProductDoesNothing) {
  EXPECT_NO_THROW(mha::sgemm(Transpose::No, Transpose::No, 0, 5, 5, 1.0f,
                             nullptr, 0, nullptr, 0, 0.0f, nullptr, 0));
  EXPECT_NO_THROW(mha::sgemm(Transpose::Yes, Transpose::Yes, 5, 0, 5, 1.0f,
                             nullptr, 0, nullptr, 0, 0.0f, nullptr, 0));
}

MHA_INSTANTIATE_PER_TARGET(GemmTest);

// Each bad argument throws invalid_argument naming it, and C is untouched.
TEST(GemmErrors, BadArgumentsThrowAndWriteNothing) {
  const std::vector<float> a(64, 1.0f), b(64, 1.0f);
  std::vector<float> c(64, 7.0f);
  struct Case {
    const char* name;
    Transpose ta, tb;
    std::size_t lda, ldb, ldc;
    const float *a, *b;
    float* c;
  };
  const Case cases[] = {
      {"lda (3)", Transpose::No, Transpose::No, 3, 8, 8, a.data(), b.data(),
       c.data()},
      {"lda (5)", Transpose::Yes, Transpose::No, 5, 8, 8, a.data(), b.data(),
       c.data()},
      {"ldb (6)", Transpose::No, Transpose::No, 4, 6, 8, a.data(), b.data(),
       c.data()},
      {"ldb (3)", Transpose::No, Transpose::Yes, 4, 3, 8, a.data(), b.data(),
       c.data()},
      {"ldc (7)", Transpose::No, Transpose::No, 4, 8, 7, a.data(), b.data(),
       c.data()},
      {"a must not be null", Transpose::No, Transpose::No, 4, 8, 8, nullptr,
       b.data(), c.data()},
      {"b must not be null", Transpose::No, Transpose::No, 4, 8, 8, a.data(),
       nullptr, c.data()},
      {"c must not be null", Transpose::No, Transpose::No, 4, 8, 8, a.data(),
       b.data(), nullptr},
  };
  for (const Case& t : cases) {
    try {
      mha::sgemm(t.ta, t.tb, 6, 8, 4, 1.0f, t.a, t.lda, t.b, t.ldb, 0.0f, t.c,
                 t.ldc);
      ADD_FAILURE() << "no exception for " << t.name;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(t.name), std::string::npos)
          << e.what();
    }
    for (float x : c) ASSERT_EQ(x, 7.0f);
  }
}

}  // namespace
}  // namespace mha_test
