// The register-blocked micro-kernel: a kRows x 2-vector tile of A * B (1
// vector for panels that narrow), or kRows x 4 vectors over two B panels,
// accumulated in vector registers by rank-1 updates (kRows broadcasts of A
// against the B vectors per step of the depth), handed row by row to an
// epilogue that stores it.
//
// The accumulators are named variables (c0a, c0b, c1a, ...), not an array:
// on targets whose vectors are sizeless (Arm SVE) vectors cannot be array
// elements or struct members. Rows past kRows are never touched, so the
// compiler drops them.
//
// A is read by broadcasts and may lie in memory two ways (StepsA: the rows of
// one step contiguous, as in a packed panel or a transposed matrix; RowsA:
// rows in place, steps contiguous). B is read by vectors: b + p * b_stride
// holds the vectors of step p (a packed panel, or B's own rows in place),
// stored as fp32 or, for weights packed in 16 bits, widened as loaded.

#if defined(MHA_LIB_GEMM_MICROKERNEL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_LIB_GEMM_MICROKERNEL_INL_H_
#undef MHA_LIB_GEMM_MICROKERNEL_INL_H_
#else
#define MHA_LIB_GEMM_MICROKERNEL_INL_H_
#endif

#include <cstddef>
#include <type_traits>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "lib/common/prefetch.h"
#include "lib/common/wide_load-inl.h"
#include "lib/gemm/tile_shape-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// A whose kRows values of one step are contiguous and steps are
// `step_stride` apart: element (r, p) at base[p * step_stride + r]. A packed
// panel (step_stride == kTileRows) or a transposed matrix read in place.
// Each kind also gives the same A from row `first` on (Rows), for tiles
// that cover part of a sliver.
struct StepsA {
  const float* base;
  std::size_t step_stride;
  const float* Step(std::size_t p) const { return base + p * step_stride; }
  float At(const float* step, std::size_t r) const { return step[r]; }
  StepsA Rows(std::size_t first) const { return {base + first, step_stride}; }
};

// A read in place by rows: element (r, p) at base[r * row_stride + p].
//
// A step is addressed from four pointers, one per three rows, and the row
// stride: rows 3g, 3g + 1, 3g + 2 at group[g][0], [stride], [2 stride] (x86
// scales an index by 1, 2, 4 or 8). With a pointer per row, or offsets
// r * row_stride, GCC 12 ran out of the 16 general registers and reloaded
// 7 of the 12 offsets every step, from the stack or through vmovq from
// vector registers (on AVX-512 a port the FMAs need).
struct RowsA {
  const float* base;
  std::size_t row_stride;

  struct StepRows {
    const float *g0, *g1, *g2, *g3;
    std::size_t stride;
  };
  StepRows Step(std::size_t p) const {
    const float* first = base + p;
    return {first, first + 3 * row_stride, first + 6 * row_stride,
            first + 9 * row_stride, row_stride};
  }
  float At(const StepRows& step, std::size_t r) const {
    const std::size_t g = r / 3;
    const float* group = g == 0   ? step.g0
                         : g == 1 ? step.g1
                         : g == 2 ? step.g2
                                  : step.g3;
    return group[r % 3 * step.stride];
  }
  RowsA Rows(std::size_t first) const {
    return {base + first * row_stride, row_stride};
  }
};

// How a row's value of A becomes a vector in MultiplyPanels: a broadcast
// (x86's vbroadcastss from memory), or on NEON, where A's rows of a step are
// contiguous, a lane of a vector of four rows, which fmla multiplies by
// (fmla v.4s, v.4s, v.s[lane]). With a broadcast per row GCC 12 kept each
// row's value in a register of its own on NEON: 12 beside the 24
// accumulators and 2 B vectors of the 12 x 2 tile, 38 of 32, and 25 to 37
// stack loads and stores per 96 FMAs (scripts/spilled-loops.py); by lanes,
// 2 (the 6 x 4 tile's: 12). Over gemm_slices_f32.cc's NEON loops of this
// kind, 70 stack accesses instead of 223. Unmeasured on Arm hardware. A
// macro rather than a function, so that x86's code stays as it was
// measured: through a function, GCC 12 spilled 5 more loops there.
#if HWY_TARGET == HWY_NEON
template <std::size_t kRows, std::size_t r, class AOperand, class Step>
HWY_INLINE FloatVec RowOfA(FloatTag d, const AOperand& a, const Step& step) {
  if constexpr (std::is_same_v<AOperand, StepsA> && kRows >= 4) {
    // Rows 4g to 4g + 3, or the last four (6 rows: 0-3, then 2-5).
    constexpr std::size_t kFirst =
        r / 4 * 4 + 4 <= kRows ? r / 4 * 4 : kRows - 4;
    return hn::Broadcast<r - kFirst>(hn::LoadU(d, step + kFirst));
  } else {
    return hn::Set(d, a.At(step, r));
  }
}
#define MHA_ROW_OF_A(r) RowOfA<kRows, r>(d, a, step)
#else
#define MHA_ROW_OF_A(r) hn::Set(d, a.At(step, r))
#endif

// Lists the tile's row indices for the macros below.
#define MHA_TILE_ROWS(X) \
  X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
static_assert(kTileRows <= 12, "MHA_TILE_ROWS names 12 rows");

// On the emulated targets GCC 12's SLP vectorizer packs the scalar tile of
// a step into 4-lane products, and loads each pair of A (and of B) with a
// movq + movhps whose upper half reads the *next* step, unused: at the last
// step that reads 8 bytes past the end of A (valgrind; a segfault when A
// ends at a page edge). These targets have no register tile to feed, so they
// lose nothing by keeping the kernel out of line and unvectorized.
#if (HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128) && \
    HWY_COMPILER_GCC_ACTUAL
#define MHA_TILE_KERNEL \
  HWY_NOINLINE __attribute__((optimize("no-tree-vectorize")))
#else
#define MHA_TILE_KERNEL HWY_INLINE
#endif

// tile = sum over p < depth of A(r, p) * B(p, :), in order of p with one FMA
// per step, so the result never depends on how work is split or on the
// tile's shape; then epilogue(panel, r, first vector, second vector) for
// each row r < kRows of each of the kPanels panels. B's panels (kVecs
// vectors wide each: 2, or 1 for a lone panel, whose second vector is then
// zero) are `panel_stride` apart: a tile two panels wide reads an A sliver
// once for 4 vectors of columns. With kPrefetchSteps, the lines of B's step
// p + kPrefetchSteps are asked for at step p (B's rows read in place far
// apart, where the hardware prefetchers do not follow: gemm-inl.h,
// kFarBPrefetchSteps). With kAsksAhead, line i from `l2_ahead` on is asked
// into L2 at step i * kStepsPerAheadLine (the next task's B: gemm-inl.h,
// AsksNextBlock). With kCopiesB (one panel), the B vectors of each step are
// also stored at `b_copy` as a packed panel (step p at b_copy + p *
// TileCols()): the first sliver of a block packs B's rows as it reads them in
// place (gemm-inl.h, PrepareB).
constexpr std::size_t kStepsPerAheadLine = 4;

template <std::size_t kRows, std::size_t kPanels, std::size_t kVecs = kTileVecs,
          std::size_t kPrefetchSteps = 0, bool kAsksAhead = false,
          bool kCopiesB = false, class AOperand, class BElement, class Epilogue>
MHA_TILE_KERNEL void MultiplyPanels(std::size_t depth, const AOperand& a,
                                    const BElement* HWY_RESTRICT b,
                                    std::size_t panel_stride,
                                    std::size_t b_stride, Epilogue&& epilogue,
                                    const char* l2_ahead = nullptr,
                                    float* HWY_RESTRICT b_copy = nullptr) {
  static_assert(kPanels == 1 || kPanels == 2, "one or two panels");
  static_assert(kVecs == kTileVecs || (kVecs == 1 && kPanels == 1),
                "one-vector tiles span one panel");
  static_assert(kRows >= 1 && kRows * kPanels <= kTileRows, "registers");
  const FloatTag d;
  const std::size_t lanes = hn::Lanes(d);
  [[maybe_unused]] const BElement* HWY_RESTRICT b_next = b + panel_stride;
#define MHA_DECLARE_ROW(r)                                                \
  [[maybe_unused]] FloatVec c##r##a = hn::Zero(d), c##r##b = hn::Zero(d), \
                            c##r##c = hn::Zero(d), c##r##d = hn::Zero(d);
  MHA_TILE_ROWS(MHA_DECLARE_ROW)
#undef MHA_DECLARE_ROW
  // Unrolled so that the loop's own instructions do not compete with the
  // 2 kPanels loads, kRows broadcasts and 2 kPanels kRows FMAs of a step.
  // Unrolled by 8: 0.966-0.972x at 1024^3, 2048 x 1024 x 1024 and 2048^3,
  // 0.999x at 1024 x 768 x 768 (Sapphire Rapids VM, 1 thread, two builds
  // alternating). By 2: 1024^3 0.96x, 2048^3 0.985x, the prefill core at
  // L4096 0.985x, S3's core 1.01x; not unrolled, L4096 0.95x. Each wide
  // tile asking for its A rows 64 or 256 floats ahead, every 16 steps:
  // 2048 x 64 x 2048 0.93x on 1 thread, 0.92x on 2.
#pragma GCC unroll 4
  for (std::size_t p = 0; p < depth; ++p) {
    const BElement* HWY_RESTRICT b_step = b + p * b_stride;
    if constexpr (kPrefetchSteps != 0) {
      const BElement* ahead = b_step + kPrefetchSteps * b_stride;
      hwy::Prefetch(ahead);
      if constexpr (kVecs == 2) hwy::Prefetch(ahead + lanes);
      if constexpr (kPanels == 2) {
        hwy::Prefetch(ahead + panel_stride);
        hwy::Prefetch(ahead + panel_stride + lanes);
      }
    }
    if constexpr (kAsksAhead) {
      if (p % kStepsPerAheadLine == 0) {
        detail::PrefetchLine<detail::CacheLevel::kL2>(
            l2_ahead + p / kStepsPerAheadLine * detail::kShortestCacheLine);
      }
    }
    const FloatVec b0 = LoadWide(d, b_step);
    [[maybe_unused]] FloatVec b1, b2, b3;
    if constexpr (kVecs == 2) b1 = LoadWide(d, b_step + lanes);
    if constexpr (kPanels == 2) {
      b2 = LoadWide(d, b_next + p * b_stride);
      b3 = LoadWide(d, b_next + p * b_stride + lanes);
    }
    if constexpr (kCopiesB) {
      static_assert(kPanels == 1 && kVecs == kTileVecs, "one whole panel");
      float* HWY_RESTRICT to = b_copy + p * kTileVecs * lanes;
      hn::Store(b0, d, to);
      hn::Store(b1, d, to + lanes);
    }
    const auto step = a.Step(p);
#define MHA_UPDATE_ROW(r)                     \
  if constexpr (r < kRows) {                  \
    const FloatVec a_r = MHA_ROW_OF_A(r);     \
    c##r##a = hn::MulAdd(a_r, b0, c##r##a);   \
    if constexpr (kVecs == 2) {               \
      c##r##b = hn::MulAdd(a_r, b1, c##r##b); \
    }                                         \
    if constexpr (kPanels == 2) {             \
      c##r##c = hn::MulAdd(a_r, b2, c##r##c); \
      c##r##d = hn::MulAdd(a_r, b3, c##r##d); \
    }                                         \
  }
    MHA_TILE_ROWS(MHA_UPDATE_ROW)
#undef MHA_UPDATE_ROW
#undef MHA_ROW_OF_A
  }
#define MHA_FINISH_ROW(r)                                         \
  if constexpr (r < kRows) {                                      \
    epilogue(std::size_t{0}, std::size_t{r}, c##r##a, c##r##b);   \
    if constexpr (kPanels == 2) {                                 \
      epilogue(std::size_t{1}, std::size_t{r}, c##r##c, c##r##d); \
    }                                                             \
  }
  MHA_TILE_ROWS(MHA_FINISH_ROW)
#undef MHA_FINISH_ROW
}

// An epilogue of one panel, epilogue(r, first vector, second vector), as
// MultiplyPanels calls it. A struct, not a lambda, so that it is always
// inlined: GCC 12 left such a lambda out of line, 21% of 2048 x 2048 x 64.
template <class Epilogue>
struct OnePanelEpilogue {
  Epilogue& epilogue;
  HWY_INLINE void operator()(std::size_t, std::size_t r, FloatVec v0,
                             FloatVec v1) const {
    epilogue(r, v0, v1);
  }
};

// The tile one panel (of kVecs vectors) wide: epilogue(r, first vector,
// second vector).
template <std::size_t kRows, std::size_t kVecs = kTileVecs, class AOperand,
          class BElement, class Epilogue>
HWY_INLINE void MultiplyTile(std::size_t depth, const AOperand& a,
                             const BElement* HWY_RESTRICT b,
                             std::size_t b_stride, Epilogue&& epilogue) {
  MultiplyPanels<kRows, 1, kVecs>(depth, a, b, 0, b_stride,
                                  OnePanelEpilogue<Epilogue>{epilogue});
}
#undef MHA_TILE_KERNEL

// Covers rows [0, rows) with tiles of exact heights from a short list
// (kMaxRows, 8, 4, 2, 1: five kernels, not one per height), calling
// f(std::integral_constant<size_t, R>(), first_row) for each, largest first.
// Exact heights never read A past its last row, and a ragged panel of 10 rows
// costs an 8-row and a 2-row tile rather than a full one.
template <std::size_t kMaxRows = kTileRows, class F>
HWY_INLINE void ForTilePieces(std::size_t rows, F&& f) {
  std::size_t first = 0;
  auto pieces_of = [&](auto height) {
    for (; rows - first >= height(); first += height()) f(height, first);
  };
  pieces_of(std::integral_constant<std::size_t, kMaxRows>());
  if constexpr (kMaxRows > 8)
    pieces_of(std::integral_constant<std::size_t, 8>());
  if constexpr (kMaxRows > 4)
    pieces_of(std::integral_constant<std::size_t, 4>());
  pieces_of(std::integral_constant<std::size_t, 2>());
  pieces_of(std::integral_constant<std::size_t, 1>());
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_LIB_GEMM_MICROKERNEL_INL_H_
