// The GEMM's one epilogue: how a finished tile row combines with C.
//   first kc slice:  C = alpha * acc + beta * C + bias  (C not read if beta 0)
//   later slices:    C = C + alpha * acc
// Ragged columns (a tile wider than what is left of C) go through a buffer,
// so that no store touches C past its last column: another task may own it.

#if defined(MHA_LIB_GEMM_EPILOGUE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_LIB_GEMM_EPILOGUE_INL_H_
#undef MHA_LIB_GEMM_EPILOGUE_INL_H_
#else
#define MHA_LIB_GEMM_EPILOGUE_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "lib/common/cache_sizes.h"
#include "lib/gemm/gemm_args.h"
#include "lib/gemm/tile_shape-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The size of C from which whole tile rows that go to it as they are
// (TileStore) bypass the caches, by non-temporal stores: a quarter of the
// last-level cache (the threshold of glibc's memcpy for non-temporal stores
// since 2.38). Such a C would not stay there for its reader anyway, and an
// ordinary store first reads C's line from DRAM, then evicts A's and B's
// lines with it. Zen 4 (32 MiB L3), 1 thread, C 64-byte aligned, GFLOP/s
// ordinary / streamed, interleaved medians: 4096 x 512 x 512 (8 MiB of C)
// 108.3 / 111.8, 8192 x 512 x 512 107.6 / 111.6, 2048 x 2048 x 2048 107.6 /
// 109.5; smaller C gained less (1024 x 512 x 512, 2 MiB, 111.9 / 113.0) and
// is more likely read from the caches next. In the benchmark binary, 5
// alternating runs: 4096 x 512 x 512 1.05x on 1 and 2 threads, 2048 x 2048 x
// 64 with B transposed (Q K^T, 64 steps per tile) 1.07x / 1.06x; the
// layer's forward at S4 and S5 (projections of 8 MiB, no bias) 0.99-1.02x.
// Where attention reads the projections next, from L3 if they stay there:
// S3 as self-attention (9 MiB of Q|K|V), Zen 4, one process, ordinary
// stores ran 0.99x as fast as streamed on 1 thread, 1.00x on 2.
//
// A VM may report its host socket's L3 (508 MiB on the Zen 5 VMs, whose
// cores share 32 MiB), and no C then streams. Products at most
// kShallowStreamDepth steps deep, whose stores are a large share of their
// traffic (Q K^T at head_dim 64: a line of C per 64 multiply-adds of a
// tile row), also stream from kShallowStreamL2s times L2, a size no L3
// report moves. Zen 5 VM, one process alternating, streamed from 8 MiB
// against not at all, 1 thread / 2 threads: 2048 x 2048 x 64 with B
// transposed 1.035x / 1.017x, plain 1.016x / 1.027x; 2048 x 2048 x 128
// 1.043x / 1.042x; 4096 x 4096 x 64 1.039x / 1.040x; 2048 x 4096 x 64
// 1.023x / 1.041x. Deeper products gained nothing: 4096 x 512 x 256 0.993x
// / 1.008x, 4096 x 512 x 512 0.996x / 1.005x, 2048 x 2048 x 256 1.012x /
// 1.008x, 2048^3 1.005x / 0.987x. On Intel's CPUs, whose L3 is one cache
// per socket (CacheSizes::l3_fills_from_one_core), the L3 report alone
// decides: on the Emerald Rapids VM (2 MiB L2s, 260 MiB L3 reported) C
// stays in L3 from one call to the next, and streaming it from 8 L2s was
// the loss. One process alternating (an experiment build switching the
// streaming off, results bitwise equal), C aligned, stored plainly against
// streamed, 1 thread / 2 threads: 2048 x 2048 x 64 with B transposed 1.075x
// / 1.052x, plain 1.093x / 1.053x; 2048 x 2048 x 128 1.051x / 1.075x; 4096
// x 4096 x 64 1.071x / 1.370x; 2048 x 4096 x 64 1.065x / 1.066x; deeper,
// 4096 x 8192 x 256 (128 MiB of C, past a quarter of L3: still streamed)
// 1.01x / 1.02x, within the noise. (An earlier comparison there against C 16
// bytes off, which no store streams, had put it at 0.95-1.00x: the misalignment
// cost as much.)
constexpr std::size_t kShallowStreamDepth = 128;
constexpr std::size_t kShallowStreamL2s = 8;

inline std::size_t StreamedCBytes(const detail::GemmArgs& g) {
  const detail::CacheSizes& caches = detail::MachineCaches();
  const std::size_t from_l3 = caches.l3 / 4;
  if (g.k > kShallowStreamDepth || caches.l3_fills_from_one_core) {
    return from_l3;
  }
  return std::min(from_l3, kShallowStreamL2s * caches.l2);
}

// Whether the plain stores of `g`'s first slice stream: C of at least
// `min_bytes` and every tile row on a vector boundary.
inline bool StreamsC(const detail::GemmArgs& g, std::size_t min_bytes) {
  const bool aligned = RowsOnVectorBoundaries(g.c, g.ldc) &&
                       g.c_block_stride % hn::Lanes(FloatTag()) == 0;
  return aligned && double(g.m) * g.n * sizeof(float) >= double(min_bytes);
}

struct GemmEpilogue {
  float alpha, beta;
  bool read_c;    // false when beta == 0 on the first slice
  bool stream_c;  // StreamsC: set by the blocked product for its first slice
  const float* column_bias;  // at C's first column, or null
  // C's blocks of columns (GemmArgs::c_block_cols; 0: none).
  std::size_t c_block_cols, c_block_stride;

  // The epilogue of the first slice of `g`.
  static GemmEpilogue First(const detail::GemmArgs& g) {
    return {g.alpha,       g.beta,         g.beta != 0.0f,  false,
            g.column_bias, g.c_block_cols, g.c_block_stride};
  }
  // The epilogue of every slice after the first (which reads C: its stores
  // stay ordinary).
  GemmEpilogue Accumulating() const {
    return {alpha, 1.0f, true, false, nullptr, c_block_cols, c_block_stride};
  }
  // Where column `col` of a row of C starts, from the row's first element.
  std::size_t ColumnOffset(std::size_t col) const {
    if (c_block_cols == 0) return col;
    return col / c_block_cols * c_block_stride + col % c_block_cols;
  }
};

// Stores tile rows into C at (row0, col0), `cols` (<= TileCols()) valid, all
// in one of C's blocks of columns;
// kWhole: `cols` is TileCols(), known when the store is chosen, and the
// ragged path (through a stack buffer) is left out. Inlined into the 6 x 4
// tile, that path made GCC 12 spill its accumulators inside the k loop (24
// reloads per 4 steps); out of line, its call in every tile made the 12 x 2
// tile of 2048 x 2048 x 64 7% slower. Holds `e` by reference: it must
// outlive the store.
template <bool kWhole = false>
class TileStore {
 public:
  TileStore(const GemmEpilogue& e, float* c, std::size_t ldc, std::size_t col0,
            std::size_t cols)
      : e_(e),
        c_(c + e.ColumnOffset(col0)),
        ldc_(ldc),
        cols_(cols),
        bias_(e.column_bias ? e.column_bias + col0 : nullptr),
        write_(e.alpha != 1.0f || e.read_c || bias_ ? RowWrite::kCombined
               : e.stream_c                         ? RowWrite::kStreamed
                                                    : RowWrite::kAsIs) {}

  // Asks for the tile's rows of C ahead of an epilogue that reads them
  // (every slice after the first, or beta != 0), which would otherwise wait
  // on them: C is usually far from L1. A tile that only writes C is better
  // off without (1-3% on 2048 x 2048 x 64 and 4096 x 512 x 512), even with
  // prefetchw, which fetches the lines for writing: on Zen 5, 2048 x 2048 x
  // 64 (B transposed, whose tile-end stores took 6% of perf's samples)
  // 0.99-1.00x on 1 thread and 0.99-1.05x on 2, other shapes 0.99-1.01x.
  void Prefetch(std::size_t rows) const {
    const std::size_t lanes = hn::Lanes(FloatTag());
    for (std::size_t r = 0; r < rows; ++r) {
      hwy::Prefetch(c_ + r * ldc_);
      hwy::Prefetch(c_ + r * ldc_ + lanes);
    }
  }

  HWY_INLINE void operator()(std::size_t r, FloatVec v0, FloatVec v1) const {
    const FloatTag d;
    const std::size_t lanes = hn::Lanes(d);
    float* row = c_ + r * ldc_;
    if (kWhole || cols_ == 2 * lanes) {
      if (write_ == RowWrite::kStreamed) {
        hn::Stream(v0, d, row);
        hn::Stream(v1, d, row + lanes);
      } else if (write_ == RowWrite::kAsIs) {
        hn::StoreU(v0, d, row);
        hn::StoreU(v1, d, row + lanes);
      } else {
        hn::StoreU(Combine(v0, row, 0), d, row);
        hn::StoreU(Combine(v1, row + lanes, lanes), d, row + lanes);
      }
      return;
    }
    HWY_ALIGN float buffer[2 * hn::MaxLanes(FloatTag())];
    std::memcpy(buffer, row, cols_ * sizeof(float));
    hn::Store(Combine(v0, buffer, 0), d, buffer);
    hn::Store(Combine(v1, buffer + lanes, lanes), d, buffer + lanes);
    std::memcpy(row, buffer, cols_ * sizeof(float));
  }

 private:
  // alpha * acc (+ beta * the current values at `at`) (+ bias from column j).
  HWY_INLINE FloatVec Combine(FloatVec acc, const float* at,
                              std::size_t j) const {
    const FloatTag d;
    FloatVec x = hn::Mul(hn::Set(d, e_.alpha), acc);
    if (e_.read_c) x = hn::MulAdd(hn::Set(d, e_.beta), hn::LoadU(d, at), x);
    if (bias_) x = hn::Add(x, LoadBias(j));
    return x;
  }
  FloatVec LoadBias(std::size_t j) const {
    const FloatTag d;
    if (j + hn::Lanes(d) <= cols_) return hn::LoadU(d, bias_ + j);
    HWY_ALIGN float lanes[hn::MaxLanes(FloatTag())] = {};
    if (j < cols_) std::memcpy(lanes, bias_ + j, (cols_ - j) * sizeof(float));
    return hn::Load(d, lanes);
  }

  // A reference, not a copy: with a copy, 2048 x 2048 x 64 ran 6-13% slower
  // (the micro-kernel's loop, in the same function, spilled accumulators).
  const GemmEpilogue& e_;
  float* c_;
  std::size_t ldc_, cols_;
  const float* bias_;
  // How whole tile rows go to C, chosen once per tile: as they are (alpha 1,
  // no bias, C only written: the first slice of a plain product), the same
  // by non-temporal stores where StreamsC, or combined with alpha, beta and
  // the bias. A row as it is needs no multiply by alpha (an FMA-port
  // operation per vector) and no loads of alpha and beta through e_, which
  // the compiler repeats after every store to C (a float store may alias
  // them). 2048 x 2048 x 64, B transposed (64 steps per tile), 1 thread on
  // Zen 5, interleaved against oneDNN: 0.96-0.97x of its rate before,
  // 0.98-0.99x after. A case adding rows to C (later slices) made
  // multi-slice products slower: 2048 x 4096 x 4096 and S6 by 2-5%.
  enum class RowWrite : unsigned char { kAsIs, kStreamed, kCombined };
  RowWrite write_;
};

// The stores of a tile on kPanels adjacent panels, whole panels only if kWhole
// (TileStore). A struct holding only the TileStores it uses, always inlined:
// with a lambda over an array of two, 2048 x 2048 x 64 ran 6-13% slower,
// its loop spilling accumulators.
template <std::size_t kPanels, bool kWhole = false>
struct PanelStores {
  TileStore<kWhole> stores[kPanels];

  HWY_INLINE void operator()(std::size_t panel, std::size_t r, FloatVec v0,
                             FloatVec v1) const {
    stores[panel](r, v0, v1);
  }
};

// The stores of panels j, ..., j + kPanels - 1 of a block of nc columns at
// C's column j0 (whole panels if kWhole).
template <std::size_t kPanels, bool kWhole = false>
PanelStores<kPanels, kWhole> StoresOfPanels(const GemmEpilogue& epilogue,
                                            float* c, std::size_t ldc,
                                            std::size_t j0, std::size_t nc,
                                            std::size_t j) {
  const std::size_t nr = TileCols();
  const auto store = [&](std::size_t panel) {
    return TileStore<kWhole>(epilogue, c, ldc, j0 + panel * nr,
                             std::min(nr, nc - panel * nr));
  };
  if constexpr (kPanels == 1) {
    return {{store(j)}};
  } else {
    return {{store(j), store(j + 1)}};
  }
}

// Columns [col0, col0 + width) of rows [0, rows) of C through the epilogue,
// a tile's width at a time, each row's sums from sums(i, j, count): a
// vector of row i's sums from column j on, `count` (<= lanes) of them. For
// products that sum outside the micro-kernel (the GEMV's paths over B in
// place) and for k == 0.
template <class Sums>
void StoreRows(const GemmEpilogue& e, float* c, std::size_t ldc,
               std::size_t rows, std::size_t col0, std::size_t width,
               Sums&& sums) {
  const std::size_t lanes = hn::Lanes(FloatTag()), nr = TileCols();
  for (std::size_t j = 0; j < width; j += nr) {
    const std::size_t cols = std::min(nr, width - j);
    const std::size_t second = cols > lanes ? cols - lanes : 0;
    const TileStore<> store(e, c, ldc, col0 + j, cols);
    for (std::size_t i = 0; i < rows; ++i) {
      store(i, sums(i, j, std::min(cols, lanes)), sums(i, j + lanes, second));
    }
  }
}

// `count` (<= lanes) floats from `from` in a vector, zeros past them.
inline FloatVec LoadPadded(const float* from, std::size_t count) {
  const FloatTag d;
  if (count == hn::Lanes(d)) return hn::LoadU(d, from);
  if (count == 0) return hn::Zero(d);  // `from` may be past the sums' end
  HWY_ALIGN float padded[hn::MaxLanes(FloatTag())] = {};
  std::memcpy(padded, from, count * sizeof(float));
  return hn::Load(d, padded);
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_LIB_GEMM_EPILOGUE_INL_H_
