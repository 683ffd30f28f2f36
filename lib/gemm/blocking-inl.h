// Cache blocking of the GEMM for the current target, from the caches the
// machine reports (lib/common/cache_sizes.h), never from constants that fit
// one CPU.
//
// Row-major C = A B, with the micro-tile's rows broadcast from A and its
// columns loaded as vectors from B (BLIS's scheme, transposed):
//   L1 holds an A sliver, kTileRows x kc, reused against every B panel of
//      the block: kc = 3/4 of L1 / (kTileRows * 4 bytes), leaving a quarter
//      to the B panel lines streaming through. On Zen 4 (32 KiB) kc 512
//      ran 2-10% faster than half of L1's 336 (1024^3 103 GFLOP/s against
//      99, 4096 x 512 x 512 106 against 96, 1024 x 768 x 768 106 against
//      103, with slices of equal depth).
//   L2 holds the packed B block, kc x nc, streamed panel by panel past each
//      A sliver: nc = half of L2 / (kc * 4 bytes), in whole panels (at least
//      8 where all of L2 holds them: kMinSliverPanels), for the
//      product's own slice depth (2048 x 2048 x 64, B transposed: 91
//      GFLOP/s with nc from k = 64, 84 with nc from the deepest slice).
//   A task covers all rows x nc columns of C for all of k (k is never
//      split: results do not depend on the thread count), its B block
//      packed once per kc slice; GemmGrid (gemm-inl.h) splits rows and
//      columns further only to give every thread work. (Where A is copied,
//      all tasks run one slice before the next is copied: gemm-inl.h.)
// The sweep by pairs of panels (gemm-inl.h) turns this around for products
// that need several slices: L1 holds an A tile of kWideTileRows rows, so
// slices go deeper (SweepDepth), and L2 a pair of B panels with a chunk of
// A's rows (SweepRows).
// Compare BLIS zen4/zen5 (sgemm 32x12, KC 480, MC 512 columns of our B in a
// 1 MiB L2) and skx (KC 384, MC 480 in 1 MiB): the same balance; OpenBLAS's
// Cooperlake kernel (16x24) keeps GEMM_Q 320 (kc), GEMM_P 640.

#if defined(MHA_LIB_GEMM_BLOCKING_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_LIB_GEMM_BLOCKING_INL_H_
#undef MHA_LIB_GEMM_BLOCKING_INL_H_
#else
#define MHA_LIB_GEMM_BLOCKING_INL_H_
#endif

#include <algorithm>
#include <cstddef>

#include "hwy/highway.h"
#include "lib/common/cache_sizes.h"
#include "lib/gemm/tile_shape-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {

struct GemmBlocking {
  std::size_t kc;  // the deepest slice of k
};

inline GemmBlocking MachineBlocking() {
  const detail::CacheSizes& caches = detail::MachineCaches();
  GemmBlocking b;
  // Depth: the A sliver in 3/4 of L1 (BLIS zen4: 70%), at least 64 steps
  // to amortize a tile's epilogue (C load and store), at most 1024. (kc
  // 256 or 384 instead of 768, Sapphire Rapids VM, 1 thread, one process
  // alternating: 128 x 512 x 512 0.98x, S2's forward 0.98-1.01x.)
  b.kc = std::clamp<std::size_t>(
             caches.l1d * 3 / 4 / (kTileRows * sizeof(float)), 64, 1024) /
         8 * 8;
  return b;
}

// Whether more of `rows` rows of A read in place, `lda` floats apart, fall
// into one set of L1 than the set has ways: each would evict another
// before its next step is read, and every broadcast would come from L2.
// Row strides that are multiples of the "critical stride" (L1 size / ways,
// 4 KiB on current x86 cores) put every row of the sliver in one set.
inline bool SliverRowsThrashL1(std::size_t lda, std::size_t rows) {
  const detail::CacheSizes& caches = detail::MachineCaches();
  const std::size_t sets =
      std::max<std::size_t>(1, caches.l1d / (caches.l1d_ways * caches.line));
  const auto set_of = [&](std::size_t row) {
    return row * lda * sizeof(float) / caches.line % sets;
  };
  for (std::size_t r = 0; r < rows; ++r) {
    std::size_t sharing = 0;
    for (std::size_t q = 0; q < rows; ++q) sharing += set_of(q) == set_of(r);
    if (sharing > caches.l1d_ways) return true;
  }
  return false;
}

// Whether rows `stride` floats apart all fall into one set of L1: the stride
// is a multiple of the critical stride.
inline bool RowsShareOneL1Set(std::size_t stride) {
  const detail::CacheSizes& caches = detail::MachineCaches();
  const std::size_t critical =
      std::max<std::size_t>(1, caches.l1d / caches.l1d_ways);
  return stride * sizeof(float) % critical == 0;
}

inline const GemmBlocking& Blocking() {
  static const GemmBlocking blocking = MachineBlocking();
  return blocking;
}

// B at most kNarrowPanels panels wide (up to 96 columns on AVX-512: P V at
// head_dim 64). An A sliver then serves at most 3 panels, so keeping it in
// L1 across them saves little, while A, read in place, streams row by row
// from L3 or DRAM and each slice restarts those streams. Such products take
// slices as deep as B's panels allow in half of L2. Zen 4, 1 thread,
// GFLOP/s at kc 336 (half of L1) and at this one: 2048 x 64 x 2048 100 and
// 109 (kc 2048); 2048 x 96 x 2048 96 and 104 (1360); 2048 x 32 x 2048 82
// and 95 (4096). Sapphire Rapids VM, slices capped at 1024 steps (one
// process alternating): 1 thread 0.94-1.06x (4096 x 64 x 4096 0.939x), 2
// threads 0.96-1.07x, where products of k <= 1024, which the cap leaves
// alone, moved by up to 8%; at 512 steps 1 thread 0.88-1.06x.
constexpr std::size_t kNarrowPanels = 3;

// The deepest slice of k for the sweep by pairs of panels (gemm-inl.h):
// the A tile, kWideTileRows rows read in place, in 3/4 of L1 (as the
// sliver's, above), and a pair of B panels (4 vectors a step) in a quarter
// of L2, which streams it past every tile of a chunk of rows. 1024 on Zen 5
// (48 KiB L1, 1 MiB L2) and on Zen 4 (32 KiB, 1 MiB): k = 1024 in one
// slice, with no second pass over C. Zen 5, 2048 x 1024 x 1024 on 1
// thread, one process, GFLOP/s: sliver sweep 225 (kc 512), 232 (kc 1024);
// pair sweep 235 (kc 512), 252 (kc 1024); oneDNN on its reordered weights
// 251. 2048^3: 222, pair sweep at kc 688 229, at 1024 232 (oneDNN 217).
// Zen 4, A tile in half of L1 (kc 680) and in 3/4 (kc 1024), % of the FMA
// peak on 1 thread (oneDNN beside them): 1024 x 768 x 768 90 and 94 (94-96),
// 1024^3 89 and 93 (90-91), 2048^3 89 and 92 (90). Sapphire Rapids VM
// (48 KiB L1, 2 MiB L2: 1536 steps, k 2048 in two slices), 1 thread, one
// process alternating, 1024^3, 2048 x 1024 x 1024 and 2048^3: slices of
// 512 steps 0.958-0.973x, of 2048 0.995-1.012x. Slices of 128 to 192
// steps, the pair in L1 across the chunk's tiles and A from L2 (BLIS's
// order, with C read and written 11-16 times): 2048^3 0.68-0.79x, 1024^3
// 0.80-0.87x.
inline std::size_t SweepDepth() {
  const detail::CacheSizes& caches = detail::MachineCaches();
  const std::size_t a_tile_depth =
      caches.l1d * 3 / 4 / (kWideTileRows * sizeof(float));
  const std::size_t pair_depth =
      caches.l2 / 4 / (2 * TileCols() * sizeof(float));
  return std::clamp<std::size_t>(std::min(a_tile_depth, pair_depth), 64, 2048) /
         8 * 8;
}

// The rows of A the sweep by pairs of panels passes each pair over, `kc`
// steps deep, in whole wide tiles: a quarter of L2, beside the task's B
// block in half of it, so that every pair reads the chunk from L2. Zen 5,
// 2048 x 1024 x 1024 at kc 1024: chunks of 60 to 192 rows within 1%.
// Sapphire Rapids VM (2 MiB L2), 1 thread, 1024^3, 2048 x 1024 x 1024 and
// 2048^3, one process alternating: half the chunk 1.004-1.012x, twice it
// 0.986-0.991x.
inline std::size_t SweepRows(std::size_t kc) {
  const std::size_t rows =
      detail::MachineCaches().l2 / 4 / (kc * sizeof(float));
  return std::max(kWideTileRows, rows / kWideTileRows * kWideTileRows);
}

// The deepest slice of k for a product N columns wide, its rows swept by
// pairs of panels or not.
inline std::size_t MaxSliceDepth(std::size_t n, bool sweeps_pairs) {
  if (sweeps_pairs) return SweepDepth();
  const std::size_t nr = TileCols();
  const std::size_t width = RoundUp(n, nr);
  if (width > kNarrowPanels * nr) return Blocking().kc;
  const std::size_t l2_depth =
      detail::MachineCaches().l2 / 2 / (width * sizeof(float)) / 8 * 8;
  return std::max(Blocking().kc, l2_depth);
}

// The depth of the slices of k for an N x k product: as few slices as
// MaxSliceDepth allows, of near-equal depths (a multiple of 8 but the last).
// Each slice after the first reads and writes all of C again: at kc 336,
// k = 1024 made slices of 336, 336, 336 and 16, the last a pass over C for
// 16 steps. A function of the shape only, so that the order of the sums
// never depends on the threads.
inline std::size_t SliceDepth(std::size_t n, std::size_t k, bool sweeps_pairs) {
  const std::size_t max_depth = MaxSliceDepth(n, sweeps_pairs);
  const std::size_t slices = (k + max_depth - 1) / max_depth;
  return RoundUp((k + slices - 1) / slices, 8);
}

// The sliver sweep passes each A sliver, loaded into L1 for the block, over
// at least this many B panels where all of L2 holds them, even if half of it
// does not: the sliver's load is then paid for by 8 panels' FMAs. On Zen 1
// (512 KiB L2, kc 1024: 4 panels of 16 columns in half of L2), 8 panels,
// the block filling L2, ran 1-3% faster at 1024 x 768 x 768, 1024^3, 2048
// x 1024 x 1024 and 2048^3 on 1 thread, in every run (mha / oneDNN in one
// process, 5 interleaved repetitions, 2 runs of each of two builds; 93-96%
// of the FMA peak), and 0-3% on 2 threads in the runs the host left quiet;
// kc 512 with 8 panels in half of L2, 0.98-1.02x. Where half of L2 holds 8
// panels (Zen 4, Sapphire Rapids) this changes nothing; on Zen 5 it makes 8
// of 5 at kc 768: 0.99-1.02x against 5 (one process, alternating, 1 and 2
// threads, 1024 x 768 x 768 to 2048^3, 128 x 512 x 512, Q K^T), kept.
constexpr std::size_t kMinSliverPanels = 8;

// How a task's rows pass its B panels, chosen once per product from its
// shape (the slice depth depends on it, and must not depend on the threads).
enum class Sweep {
  // Each sliver of kTileRows rows (in L1) passes every panel (in L2), by the
  // 12 x 2 tile on 32-register targets.
  kSlivers,
  // The same, two panels at a time by the wide tile (UsesWideTiles).
  kWideSlivers,
  // Each pair of panels (in L2) passes every wide tile of a chunk of rows
  // (SweepPanelPairs).
  kPanelPairs,
};

// The columns of C a task's block is made of: whole pairs of panels for the
// sweep by pairs, whose odd last panel goes by slivers (SweepPanelPairs).
// 1024 x 768 x 768 made blocks of 5 panels (160 columns, the most whose
// 768 steps fit half of L2): a fifth of the product by the 12 x 2 tile.
inline std::size_t ColumnUnit(Sweep sweep) {
  return (sweep == Sweep::kPanelPairs ? 2 : 1) * TileCols();
}

// The columns of B that all of L2 holds `depth` steps deep.
inline std::size_t L2Cols(std::size_t depth) {
  return detail::MachineCaches().l2 / (depth * sizeof(float));
}

// Whether a quarter of L2 holds kMinSliverPanels panels `depth` steps deep:
// room for a sliver sweep's B block beside the next task's (gemm-inl.h,
// AsksNextBlock). Blocks of 4 panels where 8 do not fit (d_model 768 on the
// Sapphire Rapids VM: 5 panels of 768 steps), one process alternating, b1
// L128 d768: 1.03-1.04x on one thread, but with separate inputs 0.94-0.95x
// on two (three runs), whose grid of 160-column blocks balanced worse.
inline bool L2HoldsTwoSliverBlocks(std::size_t depth) {
  return L2Cols(depth) / 4 >= kMinSliverPanels * TileCols();
}

// The columns of a task's B block for slices `depth` deep (nc above), in
// whole ColumnUnits of `sweep`: the sweep by pairs streams one pair at a
// time from L2 past a chunk of A's rows and keeps half of L2; the sliver
// sweeps take at least kMinSliverPanels panels where all of L2 holds them,
// and a quarter of it where the next task's block is asked into L2 beside
// (`beside_next`). (A quarter of L2 instead of half, leaving room for the C
// lines a sliver writes through L2, on Zen 5 in one process, 1 and 2
// threads: Q K^T 0.97x and 1.01x, the other shapes 0.99-1.03x, within the
// host's noise.)
inline std::size_t BlockCols(std::size_t depth, Sweep sweep,
                             bool beside_next = false) {
  const std::size_t unit = ColumnUnit(sweep);
  const std::size_t l2_cols = L2Cols(depth);
  std::size_t cols = l2_cols / (beside_next ? 4 : 2);
  if (sweep != Sweep::kPanelPairs) {
    cols = std::max(cols, std::min(kMinSliverPanels * unit, l2_cols));
  }
  return std::max(unit, cols / unit * unit);
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_LIB_GEMM_BLOCKING_INL_H_
