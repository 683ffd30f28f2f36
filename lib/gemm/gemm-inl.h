// The blocked SGEMM driver. C is cut into blocks of mc rows x nc columns
// (GemmGrid: the cut may follow the thread count, the slices of k never
// do); each block is one task that runs all of k in kc slices, so every
// element of C is computed by the same sequence of operations whatever the
// thread count. Per slice, the task brings its B block into panel form
// (packed, pre-packed, or B's own rows), then sweeps it (Sweep): each A
// sliver (kTileRows rows, copied or read in place) past every B panel, or,
// for products deep and tall enough, each pair of B panels past every wide
// tile of a chunk of rows (blocking-inl.h says which cache holds what).
//
// An operand is packed only where it is reused enough to pay for the copy:
// B's block is used once per A sliver (mc / kTileRows times), an A sliver
// once per B panel (nc / TileCols() times). Small M reads B in place, small
// N reads A in place (as MLAS and oneDNN's brgemm do).

#if defined(MHA_LIB_GEMM_GEMM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_LIB_GEMM_GEMM_INL_H_
#undef MHA_LIB_GEMM_GEMM_INL_H_
#else
#define MHA_LIB_GEMM_GEMM_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "lib/common/buffer_pool.h"
#include "lib/common/parallel.h"
#include "lib/common/scratch.h"
#include "lib/common/storage.h"
#include "lib/gemm/blocking-inl.h"
#include "lib/gemm/epilogue-inl.h"
#include "lib/gemm/gemm_args.h"
#include "lib/gemm/gemv-inl.h"
#include "lib/gemm/microkernel-inl.h"
#include "lib/gemm/pack-inl.h"
#include "lib/gemm/tile_shape-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {

// A GEMM of fewer multiply-adds runs on the calling thread: a fork and join
// costs more than a second core saves there.
constexpr double kGemmParallelWork = 1 << 18;

// A B block serves one A sliver per kTileRows rows: packing it (a read and
// a write of the block) costs about what 16 slivers lose reading B's rows
// in place (measured: 128x512x512 on one thread went from 202 to 217 GFLOP/s
// when B was read in place below that).
constexpr std::size_t kPackBReuse = 16;

// Where B's rows all fall into one set of L1 (RowsShareOneL1Set: d_model
// 1024, 2048 or 4096 make such strides), packing pays from 6 slivers: read
// in place, all of a panel's rows compete for that set's ways with the A
// sliver's lines there. Zen 5, one process alternating, 1 thread / 2
// threads, two runs: 64 x 4096 x 4096 1.04x / 1.06x and 1.06x / 1.09x, 128 x
// 4096 x 4096 1.11x / 1.08x and 1.09x / 1.12x, 64 x 2048 x 2048 1.03x / 1.02x
// and 1.08x / 1.09x, 64 x 1024 x 4096 1.08x / 1.06x and 1.08x / 1.15x;
// 128 x 1024 x 1024 1.06x / 1.02x. Packed, 48 rows (4 slivers) ran
// 0.81-1.04x, and 64 x 1000 x 1000 and 64 x 2000 x 2000, whose rows spread
// over L1's sets, 0.92-0.99x.
constexpr std::size_t kPackBReuseOneSet = 6;

// The bytes of B that a product reads.
inline std::size_t BBytes(const detail::GemmArgs& g) {
  return g.k * g.n * sizeof(float);
}

// B bigger than L2 comes from L3 or DRAM at every call; read in place, a
// panel's steps are short pieces of rows a whole row of B apart, which the
// prefetchers follow poorly, where packing reads B's rows in long runs: it
// then pays from kPackBReuseOneSet slivers too. kPackBReuse was measured with B
// of 1 MiB, which stays in L2 from one call to the next. Sapphire Rapids VM (2
// MiB L2), one process alternating, packed from 6 slivers against from 16, 1
// thread / 2 threads: 128 x 2304 x 768 (the fused Q, K and V projection of
// d_model 768, 0.63x OpenBLAS before) 1.78x / 1.74x, 72 x 2304 x 768 1.62x
// / 1.58x, 128 x 1536 x 768 1.36x / 1.19x, 128 x 1536 x 512 1.23x / 1.10x,
// 128 x 768 x 768 1.10x / 1.03x, 256 x 2304 x 768 (packed before too)
// 1.00x / 0.99x. Below the bound, 128 x 512 x 768 (1.5 MiB) would have
// gained 1.24x, 128 x 512 x 512 (1 MiB) 0.97-0.99x on 1 thread and 1.10x on
// 2; the bound is L2 itself, not a part of it, so that the product that set
// kPackBReuse stays read in place on machines whose L2 is its B's size. Fewer
// slivers than kPackBReuseOneSet keep B in place: here 48 x 2304 x 768 would
// gain 1.5x packed, but Zen 5 ran 48 rows packed at 0.81-1.04x (above), and 24
// x 1536 x 768 ran 0.86x on 2 threads.
inline bool BExceedsL2(const detail::GemmArgs& g) {
  return BBytes(g) > detail::MachineCaches().l2;
}

// A task's block of only part of B's columns reads each of B's rows in
// pieces, in place, and the prefetchers, which fetch the lines beside those
// read and run ahead along a row, also bring in the other blocks' columns:
// packing then pays from kPackBReuseOneSet slivers too. Sapphire Rapids VM,
// one process alternating, 2 threads (whose grid cuts B's columns where one
// thread's does not): 128 x 512 x 512 1.10x (1.07x and 1.19x in other
// runs), 96 x 512 x 512 1.06x, 144 x 512 x 256 1.05x, 128 x 768 x 256
// 1.10x, 160 x 640 x 640 1.06x, 180 x 384 x 384 1.06x, 72 x 512 x 512
// 1.01x; 1 thread, where the blocks of these products are whole rows
// (unchanged, 1.00x) but for 160 x 640 x 640 1.05x and 128 x 512 x 768
// 1.19x (1.11x on 2 threads). Packing from 6 slivers where blocks are whole
// rows too: 1 thread 128 x 512 x 512 0.99x, 96 x 512 x 512 0.94x, 72 x 512
// x 512 0.89x.
inline bool BlockCutsBRows(const detail::GemmArgs& g, std::size_t nc) {
  return nc < g.n;
}

// The A slivers that make packing a B block of nc columns pay.
inline std::size_t PackBReuse(const detail::GemmArgs& g, std::size_t nc) {
  const bool pays_early =
      RowsShareOneL1Set(g.ldb) || BExceedsL2(g) || BlockCutsBRows(g, nc);
  return pays_early ? kPackBReuseOneSet : kPackBReuse;
}

// How one task reaches B's current kc x nc block: panel j at
// first + j * panel_stride, step p at + p * step_stride; elements of type T
// (fp32, or 16-bit for pre-packed weights). The micro-kernel asks for step
// p + kPrefetchSteps at step p where that is not 0 (kFarBPrefetchSteps). With
// kAsksAhead, the tiles of panel j also ask for AheadBytes(kc) bytes from
// ahead + j * AheadBytes(kc) into L2 (AsksNextBlock). With kCopies, they
// also store each step into packed panels from copy_to on (PrepareB).
template <class T, std::size_t kPrefetchSteps = 0, bool kAsksAhead = false,
          bool kCopies = false>
struct BPanels {
  const T* first;
  std::size_t panel_stride, step_stride;
  const char* ahead = nullptr;
  float* copy_to = nullptr;
  const T* Panel(std::size_t j) const { return first + j * panel_stride; }
};

// The same panels, the micro-kernel asking for them as another BPanels type
// does: one way to switch a sweep's prefetching, wherever it changes.
template <std::size_t kPrefetchSteps, bool kAsksAhead = false, class T>
BPanels<T, kPrefetchSteps, kAsksAhead> WithPrefetch(
    const BPanels<T>& b, const char* ahead = nullptr) {
  return {b.first, b.panel_stride, b.step_stride, ahead};
}

// The bytes a tile `kc` steps deep asks for ahead: a line every
// kStepsPerAheadLine steps.
inline std::size_t AheadBytes(std::size_t kc) {
  return (kc + kStepsPerAheadLine - 1) / kStepsPerAheadLine *
         detail::kShortestCacheLine;
}

// The pre-packed B's block of columns [j0, ...), steps [p0, ...): its own
// panels, elements of type T.
template <class T>
BPanels<T> PrePackedB(const detail::PackedB& b, std::size_t j0,
                      std::size_t p0) {
  const std::size_t nr = TileCols();
  return {static_cast<const T*>(b.data) + (j0 / nr * b.k + p0) * nr, b.k * nr,
          nr};
}

// B's rows read in place at least kFarBRowFloats apart put each step of a
// panel a row of B further on, a stride the hardware prefetchers follow
// poorly (Intel's stride prefetcher detects up to 2 KiB, the streamers stop
// at a page's end): the micro-kernel asks for its step kFarBPrefetchSteps
// ahead instead. Sapphire Rapids VM, one process alternating, 1 thread / 2
// threads: 12 x 2304 x 768 1.21x / 1.21x, 36 x 1536 x 512 1.15x / 1.25x, 60
// x 2304 x 768 1.26x / 1.21x, 20 x 1536 x 512 1.17x / 1.17x, 20 x 768 x 768
// 1.14x / 1.05x, 48 x 768 x 768 1.14x, 40 x 256 x 2048 1.10x, 64 x 384 x
// 768 1.02x. With B of 1 MiB (PrefetchesFarB), two builds alternating
// process by process: 20 x 512 x 512 0.98x / 1.02x, 48 x 512 x 512 0.97x,
// 128 x 512 x 512 1.01x; 96 x 512 x 512 1.04x / 1.02x in one process.
// Prefetching 4 or 16 steps ahead instead of 8: 48 x 1536 x 768 1.07x and
// 1.15x (8: 1.15x), 48 x 768 x 768 1.03x and 1.16x (1.14x).
constexpr std::size_t kFarBRowFloats = 256;
constexpr std::size_t kFarBPrefetchSteps = 8;

// Whether B, its rows far apart in place, is prefetched: where it is more
// than half of L2, which then does not keep it, with A and C, from one call
// to the next. Where it does, the prefetches cost more than they save
// (the 1 MiB B of 20 x 512 x 512 and 48 x 512 x 512 above, 2 MiB L2).
inline bool PrefetchesFarB(const detail::GemmArgs& g) {
  return 2 * BBytes(g) > detail::MachineCaches().l2;
}

// The steps ahead that the sliver packing B's rows as it reads them
// (PrepareB) asks for. Zen 5, one process alternating, 1 thread / 2
// threads, against 8 steps ahead: 128 x 2304 x 768 1.01x / 1.02x; 128
// steps: 64 x 1024 x 1024 0.96x on 1 thread.
constexpr std::size_t kPackingSliverAheadSteps = 32;

// Whether the first sliver of a block packs B's rows as it reads them
// (PrepareB), rather than a copy of the block before it: where B is at most
// kSliverPacksBL2s L2s. Larger B comes from DRAM or a far L3, and the
// sliver, reading a piece of two lines from each row in turn (rows 16 KiB
// apart at 4096 columns), waits on each: in 64 x 4096 x 4096 on 1 thread
// it held half of perf's samples for a fifth of the multiply-adds, where
// the copy reads each row's block whole, as the prefetchers follow.
// Emerald Rapids VM, one process alternating, copied against packed by the
// sliver, 1 thread / 2 threads: 64 x 4096 x 4096 (B of 64 MiB) 1.30x /
// 1.12-1.13x, 96 x 4096 x 4096 1.23-1.24x / 1.14-1.23x, 96 x 4096 x 2048
// (32 MiB) 1.10x / 1.06x, 64 x 2048 x 4096 1.06x / 1.02x, 96 x 3072 x 2048
// (24 MiB) 1.09x / 1.10x, 64 x 4096 x 1024 (16 MiB) 1.05x / 1.08x, 96 x
// 2304 x 1024 (9 MiB) 1.02x / 1.03x, 128 x 2304 x 768 (7 MiB) 1.01x /
// 1.06x, but 64 x 1024 x 1024 (4 MiB) 0.96x / 0.97-0.99x, 256^3 0.96x /
// 0.95-0.96x. On Zen 5 (1 MiB L2, the measurements above) the sliver was
// the faster at 128 x 2304 x 768 (7 L2s, 1.03x / 1.02x) and at 96 x 4096 x
// 4096 on 2 threads (64 L2s, 0.99x / 1.04x): the bound, 8 L2s, keeps the
// sliver there up to 8 MiB and gives the copy the products beyond 16 MiB
// here. On Zen 3 (512 KiB L2: the bound is 4 MiB; 32 MiB L3), the sliver
// beyond the bound against the copy, one process alternating, 1 thread / 2
// threads: 32 x 2304 x 768 (7 MiB) 0.95x / 1.01x, 128 x 2304 x 768 0.90x /
// 1.05x, 96 x 4096 x 2048 (32 MiB) 0.80x / 0.83x, 64 x 4096 x 4096 0.77x /
// 0.84x: the copy there too, though 7 MiB of B stays in L3.
constexpr std::size_t kSliverPacksBL2s = 8;

inline bool SliverPacksB(const detail::GemmArgs& g) {
  return BBytes(g) <= kSliverPacksBL2s * detail::MachineCaches().l2;
}

// A task's B block as its slivers read it: `panels`; and, where its first
// sliver packs them (first_sliver.first not null), B's rows in place as that
// sliver reads them, each step copied into `panels` on the way.
struct PreparedB {
  BPanels<float> panels;
  BPanels<float, kPackingSliverAheadSteps, false, true> first_sliver{};
};

// B's block of columns [j0, j0 + nc), steps [p0, p0 + kc), in panel form:
// pre-packed panels as they are; B's own rows in place (whole panels only)
// when few A slivers will use them and the sweep is by slivers, or when the
// wide tile reads them: its step is one run of 2 TileCols() floats of a B
// row, which packing would only copy (Zen 5, packed against in place,
// GFLOP/s, 1 thread / 2 threads: 4096 x 64 x 4096 227 / 448 against 236 /
// 466, 1024 x 64 x 1024 on 2 threads 474 against 489, 2048 x 64 x 2048
// within 1%); else packed into scratch. For the wide tile, from kPackBReuse
// slivers on, rows that do not start on vector boundaries (a std::vector's
// 16 bytes) are copied as rows into aligned scratch first: read in place,
// each of their vector loads straddled two lines. Sapphire Rapids VM, one
// process alternating, copied against in place, B 16 bytes off, 1 thread / 2
// threads: 2048 x 64 x 2048 1.10x / 1.26x, 4096 x 64 x 4096 1.11x / 1.28x, 1024
// x 64 x 1024 1.08x / 1.12x; with B's rows aligned, copying them anyway ran
// 0.98-0.99x on 1 thread (and 1.0-1.2x on 2, where the two threads' reads of
// one B in their own L2s slowed each other: not a rule the machine reports).
// On Zen 5, where loads across two lines cost little, in place ran 0.98-1.04x
// / 1.01-1.07x as fast as copied (same three products): no cache size tells
// the two machines apart, and the copy stays. Fewer slivers do not repay the
// copy: 128 x 64 x 128 0.93x on 1 thread, 64 x 64 x 64 0.94x and 256 x 32 x
// 256 (tasks of 6 slivers) 0.96x on 2; Zen 5, 1 thread, B 16 bytes off, one
// process alternating: 64^3 0.92x, 32 x 64 x 64 0.88x, 128 x 64 x 128 0.97x.
//
// Whole panels of B's rows (not transposed) are packed by the sliver sweep's
// first sliver, which reads them in place and stores each step's vectors
// into the panels as it goes, rather than by a copy of the block before it:
// the copy ran at about 18 GB/s (PackPanels), 14% of 128 x 2304 x 768 on 1
// thread of Zen 5, where the sliver overlaps its reads of B with its FMAs.
// Zen 5, one process alternating, medians of 21, 1 thread / 2 threads: 128
// x 512 x 512 1.01x / 1.17x (B's columns split between tasks), 128 x 2304 x
// 768 1.03x / 1.02x, 96 x 4096 x 4096 0.99x / 1.04x, 20 x 512 x 512 1.02x /
// 1.03x, 256^3 1.01x / 1.02x, 512^3 1.01x / 1.02x, 1024 x 768 x 768 1.00x /
// 1.01x, 1024^3 and 2048^3 within 1%. B beyond kSliverPacksBL2s L2s is
// copied instead (SliverPacksB).
inline PreparedB PrepareB(const detail::GemmArgs& g, Sweep sweep,
                          std::size_t j0, std::size_t nc, std::size_t p0,
                          std::size_t kc, std::size_t slivers) {
  const std::size_t nr = TileCols();
  if (g.packed_b != nullptr) return {PrePackedB<float>(*g.packed_b, j0, p0)};
  const std::size_t j_stride = g.trans_b ? g.ldb : 1;
  const std::size_t p_stride = g.trans_b ? 1 : g.ldb;
  const float* block = g.b + p0 * p_stride + j0 * j_stride;
  const bool wide = sweep == Sweep::kWideSlivers;
  const bool in_place =
      wide || (sweep == Sweep::kSlivers && slivers < PackBReuse(g, nc));
  if (!g.trans_b && in_place && nc % nr == 0) {
    if (!wide || slivers < kPackBReuse ||
        RowsOnVectorBoundaries(block, g.ldb)) {
      return {{block, nr, g.ldb}};
    }
    // One packed panel nc wide: B's rows as they are, on vector boundaries.
    float* rows = detail::ThreadScratch(detail::ScratchSlot::kGemmB, kc * nc);
    PackPanels(rows, nc, block, 1, g.ldb, nc, kc);
    return {{rows, nr, nc}};
  }
  float* packed =
      detail::ThreadScratch(detail::ScratchSlot::kGemmB, kc * RoundUp(nc, nr));
  const BPanels<float> panels{packed, kc * nr, nr};
  if (!g.trans_b && sweep == Sweep::kSlivers && nc % nr == 0 &&
      SliverPacksB(g)) {
    return {panels, {block, nr, g.ldb, nullptr, packed}};
  }
  PackPanels(packed, nr, block, j_stride, p_stride, nc, kc);
  return {panels};
}

// Rows [0, rows) of a sliver against kPanels (1 or 2) B panels from panel j
// on, into C's columns from j0 + j * TileCols() (whole panels if kWhole).
template <std::size_t kPanels, bool kWhole = false, class AOperand, class T,
          std::size_t kPrefetchSteps, bool kAsksAhead, bool kCopies>
HWY_INLINE void MultiplyPanelRun(
    const AOperand& a, std::size_t rows, std::size_t kc,
    const BPanels<T, kPrefetchSteps, kAsksAhead, kCopies>& b, std::size_t j,
    std::size_t j0, std::size_t nc, float* c, std::size_t ldc,
    const GemmEpilogue& epilogue) {
  // Each tile's stores are made for it from these values, not copied from
  // one object: the copies (16-byte stack stores reloaded as 32 bytes)
  // stalled store forwarding, 12% of 2048 x 2048 x 64 in one build, and a
  // reference to one object made GCC 12 add 26 register moves to the 12 x 2
  // tile's loop (4% of 2048 x 2048 x 64).
  const auto stores_from = [&](std::size_t first) {
    return StoresOfPanels<kPanels, kWhole>(epilogue, c + first * ldc, ldc, j0,
                                           nc, j);
  };
  if (epilogue.read_c) {
    for (const auto& store : stores_from(0).stores) store.Prefetch(rows);
  }
  constexpr std::size_t kMaxRows = kPanels == 1 ? kTileRows : kWideTileRows;
  // (The tiles of a sliver cut in pieces all ask for the same lines: the
  // second asks L2 for lines it holds.)
  const char* ahead = kAsksAhead ? b.ahead + j * AheadBytes(kc) : nullptr;
  float* copy = kCopies ? b.copy_to + j * kc * TileCols() : nullptr;
  if (rows == kTileRows) {  // the common case, inlined here
    for (std::size_t first = 0; first < kTileRows; first += kMaxRows) {
      MultiplyPanels<kMaxRows, kPanels, kTileVecs, kPrefetchSteps, kAsksAhead,
                     kCopies>(kc, a.Rows(first), b.Panel(j), b.panel_stride,
                              b.step_stride, stores_from(first), ahead, copy);
    }
    return;
  }
  ForTilePieces<kMaxRows>(rows, [&](auto height, std::size_t first) {
    MultiplyPanels<decltype(height)::value, kPanels, kTileVecs, kPrefetchSteps,
                   kAsksAhead, kCopies>(kc, a.Rows(first), b.Panel(j),
                                        b.panel_stride, b.step_stride,
                                        stores_from(first), ahead, copy);
  });
}

// The first `rows` rows and `kc` steps of `a` against the B panels of
// columns [j0, j0 + nc), stored through `epilogue`: by pairs of panels
// with the wide tile (kWide), else one panel at a time.
//
// A pair of whole panels stores its tiles without the ragged path
// (TileStore's kWhole), which, inlined beside the 6 x 4 tile, made GCC 12
// spill 10 of its 24 accumulators after every tile and test the width at
// every row. Emerald Rapids VM, one process alternating, medians of 21, 1
// thread / 2 threads: 64^3 1.010-1.021x / 1.020x, 36 x 64 x 64 1.010x, 128 x
// 64 x 128 1.005-1.012x, 1024 x 64 x 1024 1.015x / 1.010x, 2048 x 64 x 2048
// 1.001x / 1.013x, 64 x 96 x 512 1.007x. The 12 x 2 tile's single panels the
// same way ran 0.99-1.01x (1024^3, 128 x 2304 x 768, 4096 x 512 x 512, 256^3,
// 2048 x 2048 x 64 with B transposed, 1 and 2 threads): not taken, one
// instantiation fewer of each of its kernels.
template <bool kWide, class AOperand, class Panels>
HWY_INLINE void MultiplySliver(const AOperand& a, std::size_t rows,
                               std::size_t kc, const Panels& b, std::size_t j0,
                               std::size_t nc, float* c, std::size_t ldc,
                               const GemmEpilogue& epilogue) {
  const std::size_t panels = (nc + TileCols() - 1) / TileCols();
  std::size_t j = 0;
  if constexpr (kWide) {
    for (; j + 2 <= panels; j += 2) {
      if ((j + 2) * TileCols() <= nc) {
        MultiplyPanelRun<2, true>(a, rows, kc, b, j, j0, nc, c, ldc, epilogue);
      } else {
        MultiplyPanelRun<2>(a, rows, kc, b, j, j0, nc, c, ldc, epilogue);
      }
    }
  }
  for (; j < panels; ++j) {
    MultiplyPanelRun<1>(a, rows, kc, b, j, j0, nc, c, ldc, epilogue);
  }
}

// op(A)'s rows [i0, i0 + rows) and steps [p0, p0 + kc) as the micro-kernel
// reads them: A^T in place (one step's rows are contiguous already), A's
// rows in place, or A's rows copied (copied_a: all of A's rows for this
// slice, `copy_stride` floats apart).
//
// A's slice is copied, in parallel before the tasks run, in two cases:
// - It serves many column blocks. A sliver stays in L1 across the panels of
//   one block either way, but each block reads the slice again, and with
//   many blocks (a wide N) the streams of B and C have evicted it from L3 by
//   then, where 12 strided rows are slow to come back (S6's K and V
//   projections, 2048 x 4096 x 4096, 16 blocks of 256 columns: 2.5% faster
//   copied). With fewer blocks the copy is the loss (copying from 4 blocks
//   on: 2048 x 1024 x 1024 0.97x, 4096 x 512 x 512 0.92x from 2).
// - A sliver's rows in place would thrash L1 (SliverRowsThrashL1: a stride
//   of 1024 floats on an 8-way L1) and it serves enough panels to pay for
//   the copy, which waits on A's rows where the micro-kernel's loads would
//   overlap them with its FMAs. Measured on Zen 4 (32 KiB 8-way L1): 1024 x
//   N x 1024 2-5% faster copied from N = 128 (4 panels), 2048 x 64 x 2048
//   (2 panels) 20% slower. On Zen 5's 12-way L1, 12 rows 4 KiB apart fill
//   one set exactly, which does not count as thrashing; copying them anyway
//   (a way left for B's lines) was not kept: one process alternating, 1
//   thread / 2 threads, 64 x 1024 x 1024 1.02-1.06x / 0.96x, 128 x 1024 x
//   1024 1.03-1.04x / 0.98x, 128 x 2048 x 2048 1.04x / 1.10x, but 1024^3
//   0.98x / 0.96x, 2048 x 1024 x 1024 0.98x / 0.96x, 2048^3 0.99x / 0.98x.
constexpr std::size_t kCopyAColBlocks = 16;
constexpr std::size_t kCopyAMinPanels = 4;
static_assert(kCopyAMinPanels > kNarrowPanels, "narrow B reads A in place");

inline bool CopiesA(const detail::GemmArgs& g, std::size_t depth,
                    std::size_t panels_per_block) {
  if (g.trans_a) return false;
  const std::size_t block_cols = BlockCols(depth, Sweep::kSlivers);
  const std::size_t col_blocks = (g.n + block_cols - 1) / block_cols;
  return col_blocks >= kCopyAColBlocks ||
         (panels_per_block >= kCopyAMinPanels &&
          SliverRowsThrashL1(g.lda, kTileRows));
}

struct SliceOfA {
  const detail::GemmArgs& g;
  const float* copied_a;  // null: read in place
  std::size_t copy_stride, p0, kc;
  Sweep sweep;

  template <class F>
  void With(std::size_t i0, F&& f) const {
    if (g.trans_a) return f(StepsA{g.a + p0 * g.lda + i0, g.lda});
    if (copied_a) return f(RowsA{copied_a + i0 * copy_stride, copy_stride});
    f(RowsA{g.a + i0 * g.lda + p0, g.lda});
  }
};

// Whether A's slivers are read by the wide tile, two panels at a time: B is
// narrow (A's rows are then never copied, and a sliver serves each of its
// few panels in turn) and kWideTileRows rows of A in place stay in L1. With
// a 6 x 4 wide tile (32 registers) it is always the better read: narrow B
// takes slices as deep as L2 allows (MaxSliceDepth), so a 12-row sliver
// does not fit L1 and the second panel reads it again from L2, where the
// wide tile reads A once and loads 10 values per 24 FMAs against 14. Zen 5
// (48 KiB 12-way L1, where 12 rows 8 KiB apart do not thrash), GFLOP/s,
// 12 x 2 against 6 x 4, 1 thread / 2 threads: 2048 x 64 x 2048 (P V) 227 /
// 476 against 248 / 485; 4096 x 64 x 4096 222 / 431 against 234 / 458;
// 2048 x 80 x 2048 4% faster; 2048 x 96 x 2048 within 2%. The 2 x 4 wide
// tile of 16-register targets pays only where 12 rows would thrash L1.
// Zen 4 (8-way L1), 2048 x 64 x 2048, kc 2048: 110 against 102 on 1
// thread, 217 against 202 on 2. The Sapphire Rapids VM (the same 48 KiB
// 12-way L1 as Zen 5, 2 MiB L2) went the other way while the wide tile read
// B 16 bytes off in place (PrepareB now copies such rows), 12 x 2 against
// 6 x 4, one process alternating, 1 thread / 2 threads: 2048 x 64 x 2048 1.03x
// / 1.06-1.08x, 4096 x 64 x 4096 0.95x / 1.08x, 1024 x 64 x 1024 1.03x / 1.01x,
// 2048 x 96 x 2048 1.06x / 1.09x, 2048 x 80 x 2048 0.98x / 0.99x. Nothing the
// machine reports tells the two apart, and no choice timed at run time on a
// small product could: there fewer rows reverse the order, 12 x 2 against 6 x 4
// on 1 thread / 2 threads, 96 x 64 x 2048 0.98x / 0.99x, 192 x 64 x 2048 0.96x
// / 0.98x, 512 x 64 x 2048 1.02x / 0.97x, 384 x 64 x 1024 1.00x / 0.97x.
inline bool UsesWideTiles(const detail::GemmArgs& g) {
  if (g.trans_a || g.n > kNarrowPanels * TileCols() ||
      SliverRowsThrashL1(g.lda, kWideTileRows)) {
    return false;
  }
  return kWideTileIs6x4 || SliverRowsThrashL1(g.lda, kTileRows);
}

// A's rows for steps [p0, p0 + kc), `stride` floats apart, copied in
// parallel a sliver per task.
inline void CopyA(const detail::GemmArgs& g, std::size_t p0, std::size_t kc,
                  std::size_t stride, float* copy) {
  const std::size_t slivers = (g.m + kTileRows - 1) / kTileRows;
  detail::ForEachTask(
      slivers, double(g.m) * g.n * g.k,
      [&](std::size_t s) {
        const std::size_t rows = std::min(kTileRows, g.m - s * kTileRows);
        for (std::size_t r = s * kTileRows; r < s * kTileRows + rows; ++r) {
          std::memcpy(copy + r * stride, g.a + r * g.lda + p0,
                      kc * sizeof(float));
        }
      },
      kGemmParallelWork);
}

// Whether a product's rows are swept by pairs of panels: on targets with a
// 6 x 4 wide tile, B wider than kNarrowPanels panels (narrow B keeps its
// slivers: they serve few panels), and either
// - enough rows to pay for packing B's block (kPackBReuse slivers), which
//   this sweep cannot read in place, and k deeper than one slice of the
//   sliver sweep, where the deeper slices of this one save passes over C,
//   or B pre-packed (the layer's weights, which neither sweep packs). Where
//   both take one slice and B is packed by the product, slivers are as fast
//   or faster: Zen 5, 1 thread, by pairs against by slivers, 1024 x 768 x
//   768 1.00x, 4096 x 1536 x 512 1.00x, 2048 x 2048 x 64 (Q K^T) 0.93x.
//   With pre-packed B, forward, two runs of interleaved medians, 1 thread /
//   2 threads: S3 (1024 x 768 x 768 projections) 1.01-1.03x / 1.01-1.02x,
//   as self-attention 1.00x / 0.99-1.02x; S5 (4096 x 512 x 512) 0.99-1.01x
//   / 1.02x.
// - or, at any number of rows, B pre-packed and k deeper than one slice of
//   the sliver sweep: a short prompt through large weights (d_model 1024
//   and up), which stream from L3 or DRAM. Zen 5, self-attention forward,
//   one process alternating the sweeps, 1 thread / 2 threads: d 4096, L 6
//   1.33x / 1.37x, L 16 1.36x / 1.30x, L 64 1.17x / 1.14x (separate inputs
//   1.14x / 1.11x), L 128 1.09x / 1.11x; d 2048, L 20 1.29x / 1.42x, L 64
//   1.15x / 1.17x; d 1024, L 64 1.19x / 1.18x. At one slice for both sweeps
//   (k 768 or less on Zen 5) it did not pay: d 512, L 20 0.97x / 0.99x,
//   L 64 1.00x / 1.01x; d 768, L 20 0.96x / 1.06x. B packed by the product
//   keeps the bound on rows: packing it for few rows lost (16 x 4096 x 4096
//   0.87x) or barely paid (64 rows 1.02x / 1.04x). From 48 rows where B is
//   pre-packed (S2's 128-row projections by pairs), Sapphire Rapids VM, S2's
//   forward, one process alternating, four runs: 0.98-1.05x on 1 thread,
//   0.93-1.01x on 2, separate inputs and self-attention: not kept.
constexpr bool kHasPairSweep = kWideTileIs6x4;
constexpr std::size_t kSweepPairsMinRows = kPackBReuse * kTileRows;

inline bool SweepsPanelPairs(const detail::GemmArgs& g) {
  if (!kHasPairSweep || g.n <= kNarrowPanels * TileCols()) return false;
  const bool deep = g.k > Blocking().kc;
  if (g.packed_b != nullptr) return deep || g.m >= kSweepPairsMinRows;
  return deep && g.m >= kSweepPairsMinRows;
}

// Whether the product's tasks are chunks of rows, each running all the
// slices of k in turn: B pre-packed (the layer's weights), its rows swept by
// pairs of panels, k deeper than one slice. A task that covers all rows for
// one slice, as elsewhere, writes a C block of m x nc (2048 x 128 floats,
// 1 MiB, in the K and V projections of S6's shape, 2048 x 4096 x 4096 in 4
// slices) that
// the next slice reads back from DRAM: perf put 6% of the sweep on those
// loads of C. Here a task's C block (two chunks, 120 x 128 floats on Zen 5)
// stays in L2 from one slice to the next, its B column block (pre-packed:
// nothing to pack per task) comes from L3 for the first tile of each pair
// and from L2 for the rest, and A is read in place (copying all of A for
// every slice at once, before the tasks, cost what it saved). Zen 5, S6's
// forward in the standard order (since computed in the absorbed order,
// lib/layer/), interleaved medians, against whole-row tasks: 1.04-1.05x on 1
// thread, 1.11-1.14x on 2; one chunk per task 1.04x / 1.11x, four 1.03x /
// 1.11x. B packed by the product itself would be packed again by every
// task: the other products keep whole-row tasks (packing all of B first,
// 16 MiB at 2048^3, gained 1-2%, within the noise).
constexpr std::size_t kChunksPerRowTask = 2;

inline bool RunsRowChunks(const detail::GemmArgs& g, Sweep sweep,
                          std::size_t depth) {
  return g.packed_b != nullptr && sweep == Sweep::kPanelPairs && g.k > depth;
}

// Rows [0, mc) of `rows_a` (a block's A, kc steps) against the block's B
// panels by pairs, as oneDNN's brgemm reads its reordered weights (6 rows x
// 64 columns): each pair (4 vectors a step, from L2) passes every wide tile
// of a chunk of SweepRows rows (from L2) before the next pair. The 6 x 4
// tile loads 4 B vectors and 6 broadcasts per 24 FMAs, against 2 and 12 for
// the 12 x 2 tile, and its A tile, half the sliver, leaves L1 room for
// deeper slices (SweepDepth: 1024 steps against 768 on Zen 5). An odd last
// panel goes by slivers. C's rows from c. With few rows (a 64-token prompt
// through d_model 4096) the first tile of each pair reads it from DRAM;
// asking for the next pair a share per tile, into L2 or L1, ran 0.96-0.99x
// (Zen 5, the layer's forward, one process alternating). Each tile asking
// for its pair's lines 4, 8 or 16 steps ahead into L1 (four prefetches a
// step) ran 0.96-0.99x (Sapphire Rapids VM, 1024^3 to 2048^3, 1 thread):
// the hardware already keeps the pair's two streams ahead of the tile.
//
// The loops are plain loops in one function, the tile inlined: the same
// sweep through ForTilePieces and SliceOfA::With per tile (a call per
// tile) ran 2-3% slower. The function itself stays out of MultiplyBlock
// (one call per block), whose 12 x 2 loop's register allocation proved
// sensitive to what else that function holds (MultiplyPanelRun).
template <class AOperand, class T>
HWY_NOINLINE void SweepPanelPairs(const AOperand& rows_a, std::size_t mc,
                                  std::size_t kc, const BPanels<T>& b,
                                  std::size_t j0, std::size_t nc, float* c,
                                  std::size_t ldc,
                                  const GemmEpilogue& epilogue) {
  const std::size_t panels = (nc + TileCols() - 1) / TileCols();
  const std::size_t chunk = SweepRows(kc);
  for (std::size_t m0 = 0; m0 < mc; m0 += chunk) {
    const std::size_t end = std::min(mc, m0 + chunk);
    std::size_t j = 0;
    for (; j + 2 <= panels; j += 2) {
      const auto sweep_pair = [&](auto whole) {
        // The stores made per tile, as in MultiplyPanelRun.
        const auto stores_from = [&](std::size_t first) {
          return StoresOfPanels<2, decltype(whole)::value>(
              epilogue, c + first * ldc, ldc, j0, nc, j);
        };
        const T* pair = b.Panel(j);
        std::size_t i = m0;
        for (; i + kWideTileRows <= end; i += kWideTileRows) {
          MultiplyPanels<kWideTileRows, 2>(kc, rows_a.Rows(i), pair,
                                           b.panel_stride, b.step_stride,
                                           stores_from(i));
        }
        ForTilePieces<kWideTileRows>(end - i, [&](auto height, std::size_t r) {
          MultiplyPanels<decltype(height)::value, 2>(
              kc, rows_a.Rows(i + r), pair, b.panel_stride, b.step_stride,
              stores_from(i + r));
        });
      };
      if ((j + 2) * TileCols() <= nc) {
        sweep_pair(std::true_type());
      } else {
        sweep_pair(std::false_type());
      }
    }
    if (j == panels) continue;
    for (std::size_t r0 = m0; r0 < end; r0 += kTileRows) {
      MultiplyPanelRun<1>(rows_a.Rows(r0), std::min(kTileRows, end - r0), kc, b,
                          j, j0, nc, c + r0 * ldc, ldc, epilogue);
    }
  }
}

// Pre-packed B (the layer's weights) comes from L3 at every call: S2's Q, K
// and V projected together (128 x 1536 x 512) read 3 MiB of weights, more
// than L2 holds, and the first sliver of each B block, which waits on L3
// for every line, took 1.5-2.1x as long as each of the others (Sapphire
// Rapids VM, 1 thread, cycles per sliver in S2's forward). Two remedies,
// both in the sliver sweep (MultiplyBlock):
// - The first sliver asks for the steps kFirstSliverAheadSteps ahead of
//   those it reads, into L1 (the micro-kernel's kPrefetchSteps), so that
//   more of its lines are in flight at once.
// - Where L2 holds two B blocks (AsksNextBlock), blocks are a quarter of
//   L2 wide (BlockCols) and the slivers after the first ask for the next
//   task's block into L2, a line every kStepsPerAheadLine steps of each
//   tile, until it is covered: its first sliver then finds it there (1.07-
//   1.18x the others' time, from 1.5-1.6x).
// Against neither, one process alternating, medians of 31-61, 1 thread / 2
// threads: S2's forward as self-attention 1.004-1.036x / 0.996-1.040x
// (three runs), with separate inputs 1.010-1.012x / 0.986-1.017x; S1's
// (2 x 10 tokens) 1.035-1.052x / 1.025-1.048x; b1 L64 d512 self 1.014x /
// 0.986x; b1 L128 d768 self (the first remedy alone: L2 holds one block of
// 768 steps) 1.041x / 1.014x. Asking for the next block alone: S2 self
// 1.010-1.022x / 0.994-1.063x, S1 1.010-1.022x / 1.000-1.008x. Builds
// alternating process by process (five each): S2 self on 1 thread 1.03x;
// with BF16 weights (half the bytes from L3) S2 self 1.00x on 1 and 2
// threads, S1 1.00x. The first remedy for the first wide tile of each
// pair in the pair sweep: S3's forward 0.996-1.010x, not kept. The second
// for B read in place and packed by the first sliver (PrepareB), the later
// slivers asking for the next block's rows (the same columns' next slice)
// into L2, blocks of 8 panels: Emerald Rapids VM, one process alternating,
// 64 and 96 x 4096 x 4096 1.00-1.03x on 1 thread, 0.91-0.97x on 2 (the
// first sliver, waiting on B's rows 16 KiB apart, went from 49% of the
// samples to 40%, the others took the rest), not kept.
constexpr std::size_t kFirstSliverAheadSteps = 128;

inline bool AsksNextBlock(const detail::GemmArgs& g, Sweep sweep,
                          std::size_t depth) {
  return g.packed_b != nullptr && sweep == Sweep::kSlivers && g.k <= depth &&
         L2HoldsTwoSliverBlocks(depth);
}

// The B block of the task after this one in the grid's order, columns [j0,
// j0 + nc) (none if nc is 0): the block a thread runs next where it runs
// the tasks alone, and mostly where oneTBB hands each thread a run of them.
struct NextColumns {
  std::size_t j0 = 0, nc = 0;
};

// One task of one slice: rows [i0, i0 + mc) x columns [j0, j0 + nc) of C,
// B's elements of type BElement (16-bit only when pre-packed); `next`: the
// block it asks into L2 (AsksNextBlock, kFirstSliverAheadSteps).
template <class BElement>
void MultiplyBlock(const detail::GemmArgs& g, const SliceOfA& a, std::size_t i0,
                   std::size_t mc, std::size_t j0, std::size_t nc,
                   const NextColumns& next, const GemmEpilogue& epilogue) {
  const std::size_t slivers = (mc + kTileRows - 1) / kTileRows;
  BPanels<BElement> b;
  [[maybe_unused]] PreparedB prepared;
  if constexpr (std::is_same_v<BElement, float>) {
    prepared = PrepareB(g, a.sweep, j0, nc, a.p0, a.kc, slivers);
    b = prepared.panels;
  } else {
    b = PrePackedB<BElement>(*g.packed_b, j0, a.p0);
  }
  if constexpr (kHasPairSweep) {
    if (a.sweep == Sweep::kPanelPairs) {
      return a.With(i0, [&](const auto& rows_a) {
        SweepPanelPairs(rows_a, mc, a.kc, b, j0, nc, g.c + i0 * g.ldc, g.ldc,
                        epilogue);
      });
    }
  }
  // What sliver s asks for of the next block (AsksNextBlock): from the
  // second on, a piece per panel, while its pieces all lie in the block;
  // else null.
  const auto ahead_of = [&](std::size_t s) -> const char* {
    if (next.nc == 0 || s == 0) return nullptr;
    const std::size_t nr = TileCols();
    const std::size_t pieces = (nc + nr - 1) / nr * AheadBytes(a.kc);
    const std::size_t offset = (s - 1) * pieces;
    const std::size_t bytes =
        (next.nc + nr - 1) / nr * a.kc * nr * sizeof(BElement);
    if (offset + pieces > bytes) return nullptr;
    return reinterpret_cast<const char*>(
               PrePackedB<BElement>(*g.packed_b, next.j0, a.p0).first) +
           offset;
  };
  const auto by_slivers = [&](auto wide, const auto& panels) {
    for (std::size_t s = 0; s < slivers; ++s) {
      const std::size_t r0 = i0 + s * kTileRows;
      const std::size_t rows = std::min(kTileRows, i0 + mc - r0);
      const auto multiply = [&](const auto& sliver_panels) {
        a.With(r0, [&](const auto& sliver) {
          MultiplySliver<decltype(wide)::value>(
              sliver, rows, a.kc, sliver_panels, j0, nc, g.c + r0 * g.ldc,
              g.ldc, epilogue);
        });
      };
      using Panels = std::decay_t<decltype(panels)>;
      if constexpr (!decltype(wide)::value &&
                    std::is_same_v<Panels, BPanels<BElement>>) {
        if constexpr (std::is_same_v<BElement, float>) {
          if (s == 0 && prepared.first_sliver.first != nullptr) {
            multiply(prepared.first_sliver);
            continue;
          }
        }
        if (g.packed_b != nullptr && s == 0) {
          multiply(WithPrefetch<kFirstSliverAheadSteps>(panels));
          continue;
        }
        if (const char* ahead = ahead_of(s)) {
          multiply(WithPrefetch<0, true>(panels, ahead));
          continue;
        }
      }
      multiply(panels);
    }
  };
  const auto sweep = [&](auto wide) {
    if constexpr (std::is_same_v<BElement, float>) {
      if (b.step_stride >= kFarBRowFloats && PrefetchesFarB(g)) {
        return by_slivers(wide, WithPrefetch<kFarBPrefetchSteps>(b));
      }
    }
    by_slivers(wide, b);
  };
  if (a.sweep == Sweep::kWideSlivers) return sweep(std::true_type());
  sweep(std::false_type());
}

// C = beta * C (+ bias): the whole product when k == 0, the epilogue's sums
// all zero (and alpha 1, so that alpha does not count, NaN or not).
inline void ScaleOnly(const detail::GemmArgs& g) {
  GemmEpilogue epilogue = GemmEpilogue::First(g);
  epilogue.alpha = 1.0f;
  StoreRows(epilogue, g.c, g.ldc, g.m, 0, g.n,
            [](std::size_t, std::size_t, std::size_t) {
              return hn::Zero(FloatTag());
            });
}

// The task grid of a slice: column blocks of at most nc (each task packs its B
// block once and sweeps every A sliver of its rows past it), of all rows or,
// for row-chunk products (RunsRowChunks), of kChunksPerRowTask chunks of rows,
// split further -- in whole column units (ColumnUnit) or in whole tiles,
// whichever reads less -- while there are fewer than TasksPerThread tasks per
// thread of the caller's arena, each of at least kMinTaskWork multiply-adds.
// Every column block reads all the rows of A in its block row and every row
// block all the columns of B in its block column, so splitting columns reads A
// again and splitting rows reads (and packs) B again: 1024 x 1024 x 1024 on two
// threads of Zen 4 ran at 174 GFLOP/s as 6 column blocks of 192 and at 196 as 2
// x 3 blocks of 516 x 384 (4096 x 512 x 512: 172 and 209). Splitting goes on,
// by the same choice, while the last round of tasks would leave more than 1/16
// of the threads' time idle (9 column blocks would run as 5 and 4 on two
// threads). Rows alone were split there before, so that each of two row
// blocks read and packed all of B: Zen 5, 2 threads, one process alternating,
// against that (9 column blocks of 256 in 2 row blocks, now 18 of 128 in one):
// 128 x 2304 x 768 1.14-1.16x (4 runs; 0.87-0.90x oneDNN before), 64 x 2304 x
// 2048 1.81x, 16 x 2304 x 768 1.35x, 96 x 2304 x 1024 1.20x, 192 x 2304 x 768
// 1.07x, 48 x 2304 x 512 1.02x, 384 x 2304 x 256 1.00x. No grid of the
// layer's products at S1-S6 and P64 changed on 2 threads; on 3, 4 and 8 the
// grids of 164, 46 and 46 of 540 products (m 16-1024, n 256-4096, k
// 256-2048) change, unmeasured (a 2-core machine). How C is cut does not change
// any of its elements (each is the same sequence of FMAs in any task), so the
// grid may follow the thread count; only k must not be split.
struct GemmGrid {
  std::size_t mc, nc, row_blocks, col_blocks;
  // Tasks in order of columns, then rows (RunsRowChunks: consecutive tasks
  // share B's column block), else of rows, then columns. Columns first for
  // every product with M > N, so that the two threads read the same rows of
  // A at once, from one copy in L3, was not kept: Zen 4, 2 threads, 4096 x
  // 512 x 512 1.00-1.03x and 1024 x 768 x 768 1.00-1.02x in A/B runs where
  // oneDNN itself moved by 3-5% between the two binaries.
  bool columns_outer;
  static constexpr double kMinTaskWork = 1 << 20;

  // Two tasks per thread, four where B is pre-packed, so that a thread the
  // host slows (a VM's vCPUs run unevenly, a neighbour on the core's other
  // hardware thread takes its load ports for minutes) hands work over:
  // oneTBB rebalances only whole tasks. One per thread, Zen 5, 2 threads, one
  // process alternating: 256^3 1.03-1.11x, 512^3 1.02-1.05x, but 2048 x 2048 x
  // 64 (B transposed) 0.90x, 192 x 768 x 768 0.95-0.97x, 256 x 288 x 256 0.93x,
  // 200^3 0.93-1.05x: not kept. Four where B is pre-packed (the layer's
  // weights), whose extra row blocks read B again but pack nothing: Emerald
  // Rapids VM, 2 threads, forward alternating with two per thread in one
  // process, an hour when the 12 x 2 tile's loop ran at 77% of its quiet speed:
  // S2 (b1 L128 d512) 0.95-1.12x (4 runs), as self-attention 1.03-1.10x,
  // S3 (b8 L128 d768) 1.03-1.09x, self 0.99-1.08x (14 of the 16 above
  // 1.0), S4 and S5 0.97-1.11x; in a quiet half hour S2 1.00x (self
  // 0.99x), S3 0.99x (self 1.02x).
  // Where the product packs B, each extra row block packs it again: quiet,
  // 2 threads, 1024 x 768 x 768 0.97x and 0.99x, 2048 x 1024 x 1024 0.97x
  // and 0.99x, 1024^3 0.97x, 2048^3 0.98x and 1.05x (two builds' same
  // code alternating: 0.93-1.02x).
  static std::size_t TasksPerThread(const detail::GemmArgs& g) {
    return g.packed_b != nullptr ? 4 : 2;
  }

  // `depth`: the product's slice depth (SliceDepth); `row_chunks`: whether
  // its tasks are chunks of rows (RunsRowChunks); `sweep`: how its rows pass
  // B's panels; `beside_next`: whether its tasks ask for the next task's B
  // block into L2 (AsksNextBlock), which then takes a quarter of it.
  GemmGrid(const detail::GemmArgs& g, std::size_t depth, bool row_chunks,
           Sweep sweep, bool beside_next)
      : columns_outer(row_chunks) {
    const std::size_t col_unit = ColumnUnit(sweep);
    const std::size_t threads = detail::ArenaThreads();
    const std::size_t tasks_wanted =
        threads > 1 ? TasksPerThread(g) * threads : 1;
    mc = row_chunks ? std::min(RoundUp(g.m, kTileRows),
                               kChunksPerRowTask * SweepRows(depth))
                    : RoundUp(g.m, kTileRows);
    nc = EvenBlock(g.n, Blocks(g.n, BlockCols(depth, sweep, beside_next)),
                   col_unit);
    for (;;) {
      row_blocks = Blocks(g.m, mc);
      col_blocks = Blocks(g.n, nc);
      const double task_work = double(mc) * nc * depth;
      if (task_work < 2 * kMinTaskWork) break;
      const std::size_t half_mc = EvenBlock(g.m, 2 * row_blocks, kTileRows);
      const std::size_t half_nc = EvenBlock(g.n, 2 * col_blocks, col_unit);
      const bool rows_split = Blocks(g.m, half_mc) > row_blocks;
      const bool cols_split = Blocks(g.n, half_nc) > col_blocks;
      if (tasks() >= tasks_wanted && Balanced(threads)) break;
      if (cols_split &&
          (!rows_split || Reads(g, mc, half_nc) <= Reads(g, half_mc, nc))) {
        nc = half_nc;
      } else if (rows_split) {
        mc = half_mc;
      } else {
        break;
      }
    }
    if (threads > 1) BalanceColumns(g, depth, col_unit, threads);
  }
  // Column blocks of one width leave the last one ragged, so that tasks
  // differ in work where counting them (Balanced) sees none: S3's Q, K and
  // V projected together (1024 x 2304 x 768, B pre-packed) ran as 7 blocks
  // of 320 columns and one of 64, 4 blocks on one thread against 3.2 on the
  // other. Narrower blocks, up to twice as many, are taken where they keep
  // the threads busier by more than 1/64 of the time, while each task keeps
  // kMinTaskWork multiply-adds at least: there 12 of 192, and
  // S3's self-attention forward on 2 threads of Sapphire Rapids ran 1.04x,
  // 1.10x and 1.04x as fast (3 alternating runs, medians of 7); 96 x 4096
  // x 4096, 11 blocks of 352 and one of 224 before, 16 of 256 now, 1.03x,
  // 1.04x and 1.07x (64 rows: 0.98x, 1.01x and 1.06x). No other grid of
  // the SGEMM table's products or of S1-S5 and P64's layers changes.
  void BalanceColumns(const detail::GemmArgs& g, std::size_t depth,
                      std::size_t unit, std::size_t threads) {
    const std::size_t blocks_now = col_blocks;
    double best = Busy(g, threads);
    for (std::size_t blocks = blocks_now + 1; blocks <= 2 * blocks_now;
         ++blocks) {
      GemmGrid trial = *this;
      trial.nc = EvenBlock(g.n, blocks, unit);
      trial.col_blocks = Blocks(g.n, trial.nc);
      if (double(mc) * trial.nc * depth < kMinTaskWork) break;
      const double busy = trial.Busy(g, threads);
      if (busy > best + 1.0 / 64) {
        best = busy;
        nc = trial.nc;
        col_blocks = trial.col_blocks;
      }
    }
  }
  // The fraction of `threads` threads' time that the tasks, taken in
  // rounds, keep busy.
  double Busy(const detail::GemmArgs& g, std::size_t threads) const {
    const std::size_t rounds = (tasks() + threads - 1) / threads;
    return double(g.m) * double(g.n) /
           (double(threads) * double(rounds) * double(mc) * double(nc));
  }
  static std::size_t Blocks(std::size_t extent, std::size_t block) {
    return (extent + block - 1) / block;
  }
  // The size of `blocks` near-equal blocks of `extent`, in whole `unit`s:
  // halving 384 columns of 512 would leave 192 + 192 + 128, three tasks for
  // two threads.
  static std::size_t EvenBlock(std::size_t extent, std::size_t blocks,
                               std::size_t unit) {
    return RoundUp(Blocks(extent, blocks), unit);
  }
  // Floats of A and B the tasks of an mc x nc grid read per step of k.
  static double Reads(const detail::GemmArgs& g, std::size_t mc,
                      std::size_t nc) {
    return double(g.m) * Blocks(g.n, nc) + double(g.n) * Blocks(g.m, mc);
  }
  std::size_t tasks() const { return row_blocks * col_blocks; }
  // The first row and column of a task's block.
  std::size_t FirstRow(std::size_t task) const {
    return (columns_outer ? task % row_blocks : task / col_blocks) * mc;
  }
  std::size_t FirstCol(std::size_t task) const {
    return (columns_outer ? task / row_blocks : task % col_blocks) * nc;
  }
  // Whether `threads` threads taking the tasks in rounds idle at most 1/16
  // of the time.
  bool Balanced(std::size_t threads) const {
    const std::size_t slots = (tasks() + threads - 1) / threads * threads;
    return 16 * (slots - tasks()) <= slots;
  }
};

// The blocked product, B's elements of type BElement, its rows passing B
// by `sweep`, its first slice's plain stores streamed from C's size of
// `stream_c_bytes` on (StreamsC). Each task runs all the slices of its block,
// unless A is copied (a slice at a time, for all tasks): the C block it reads
// back for its next slice is then the one it has just written, not one written
// a whole pass over C earlier (2048^3 on 1 thread of Zen 5: 224 -> 231 GFLOP/s
// with the sliver sweep).
template <class BElement>
void GemmSlices(const detail::GemmArgs& g, Sweep sweep,
                std::size_t stream_c_bytes) {
  const std::size_t depth = SliceDepth(g.n, g.k, sweep == Sweep::kPanelPairs);
  const bool row_chunks = RunsRowChunks(g, sweep, depth);
  const bool asks_next = AsksNextBlock(g, sweep, depth);
  const GemmGrid grid(g, depth, row_chunks, sweep, asks_next);
  const bool copy_a = !row_chunks && CopiesA(g, depth, grid.nc / TileCols());
  // The rows of a copied sliver in distinct sets of L1.
  const std::size_t copy_stride = detail::OddLinesStride(depth);
  GemmEpilogue first = GemmEpilogue::First(g);
  first.stream_c = !row_chunks && StreamsC(g, stream_c_bytes);
  const auto multiply = [&](std::size_t task, std::size_t p0,
                            const float* copied_a) {
    const SliceOfA a{g,    copied_a, copy_stride, p0, std::min(depth, g.k - p0),
                     sweep};
    const std::size_t i0 = grid.FirstRow(task), j0 = grid.FirstCol(task);
    NextColumns next;
    if (asks_next && task + 1 < grid.tasks() && grid.FirstCol(task + 1) != j0) {
      next.j0 = grid.FirstCol(task + 1);
      next.nc = std::min(grid.nc, g.n - next.j0);
    }
    MultiplyBlock<BElement>(g, a, i0, std::min(grid.mc, g.m - i0), j0,
                            std::min(grid.nc, g.n - j0), next,
                            p0 == 0 ? first : first.Accumulating());
    // Streamed rows are ordered after nothing else: fence them before the
    // task ends, so that whoever waits on it (the next slice, the caller)
    // reads them. (Row-chunk tasks read their C block back from L2 for the
    // next slice: they never stream it away.)
    if (p0 == 0 && first.stream_c) hwy::FlushStream();
  };
  const double work = double(g.m) * g.n * g.k;
  if (!copy_a) {
    return detail::ForEachTask(
        grid.tasks(), work,
        [&](std::size_t t) {
          for (std::size_t p0 = 0; p0 < g.k; p0 += depth) {
            multiply(t, p0, nullptr);
          }
        },
        kGemmParallelWork);
  }
  detail::PooledBuffer copied_a(g.m * copy_stride);
  for (std::size_t p0 = 0; p0 < g.k; p0 += depth) {
    CopyA(g, p0, std::min(depth, g.k - p0), copy_stride, copied_a.get());
    detail::ForEachTask(
        grid.tasks(), work,
        [&](std::size_t t) { multiply(t, p0, copied_a.get()); },
        kGemmParallelWork);
  }
}

// GemmSlices' instantiations are compiled in objects of their own
// (gemm_slices-inl.h says why).
extern template void GemmSlices<float>(const detail::GemmArgs& g, Sweep sweep,
                                       std::size_t stream_c_bytes);
extern template void GemmSlices<detail::BF16>(const detail::GemmArgs& g,
                                              Sweep sweep,
                                              std::size_t stream_c_bytes);
extern template void GemmSlices<detail::F16>(const detail::GemmArgs& g,
                                             Sweep sweep,
                                             std::size_t stream_c_bytes);

// How the product's rows pass B (Sweep).
inline Sweep ChooseSweep(const detail::GemmArgs& g) {
  if (SweepsPanelPairs(g)) return Sweep::kPanelPairs;
  return UsesWideTiles(g) ? Sweep::kWideSlivers : Sweep::kSlivers;
}

// The product's columns [j0, j0 + n) alone (B not pre-packed).
inline detail::GemmArgs ColumnsOf(const detail::GemmArgs& g, std::size_t j0,
                                  std::size_t n) {
  detail::GemmArgs columns = g;
  columns.n = n;
  columns.b += j0;
  columns.c += j0;
  if (columns.column_bias) columns.column_bias += j0;
  return columns;
}

// B read in place whose rows all start the same number of floats past a
// vector boundary (ldb a multiple of the lanes, as d_model makes it) puts
// every vector load of a panel across two lines of L1. The product then
// runs in two: the columns up to B's first boundary, and from there, where
// every panel's loads are aligned (each element of C is the same sum either
// way). Sapphire Rapids VM, 1 thread, B 16 bytes past a 64-byte boundary
// (as malloc returns large blocks), GFLOP/s before and after: 24 x 2304 x
// 768 82 and 110, 32 x 2304 x 768 86 and 113-118, 48 x 2304 x 768 92 and
// 122-128, 48 x 1024 x 1024 95 and 117, 36 x 1536 x 512 117 and 121 (with
// B aligned: 127, 128, 138, 137, 150). The head's product, a few columns
// wide, runs at about 20 GFLOP/s, a seventh of the rest: it is split off
// only where it is at most 1/64 of the columns (up to 11% more time), and
// where B, beyond half of L2 (PrefetchesFarB), is not in L2 already: 20 x
// 512 x 512 ran 150 GFLOP/s with B aligned or not, 80 split. Taken where
// every block reads B in place: fewer slivers than any product packs B from
// (PackBReuse).
constexpr std::size_t kMaxHeadColsShare = 64;

inline std::size_t ColumnsBeforeAlignedB(const detail::GemmArgs& g,
                                         Sweep sweep) {
  const std::size_t lanes = hn::Lanes(FloatTag());
  const std::size_t slivers = (g.m + kTileRows - 1) / kTileRows;
  if (g.trans_b || g.packed_b || g.ldb % lanes != 0 ||
      sweep != Sweep::kSlivers || slivers >= kPackBReuseOneSet ||
      !PrefetchesFarB(g)) {
    return 0;
  }
  const std::size_t misaligned = FloatsPastVectorBoundary(g.b);
  const std::size_t head = misaligned == 0 ? 0 : lanes - misaligned;
  return head * kMaxHeadColsShare <= g.n ? head : 0;
}

inline void GemmBlocked(const detail::GemmArgs& g) {
  HWY_DASSERT(g.c_block_cols == 0 ||
              (g.packed_b && g.k > 0 && g.c_block_cols % TileCols() == 0));
  if (g.m == 0 || g.n == 0) return;
  if (g.k == 0) return ScaleOnly(g);
  if (SuitsGemv(g)) return Gemv(g);
  const Sweep sweep = ChooseSweep(g);
  if (const std::size_t head = ColumnsBeforeAlignedB(g, sweep); head != 0) {
    GemmBlocked(ColumnsOf(g, 0, head));
    return GemmBlocked(ColumnsOf(g, head, g.n - head));
  }
  if (g.packed_b == nullptr) {
    return GemmSlices<float>(g, sweep, StreamedCBytes(g));
  }
  detail::WithStorageType(g.packed_b->precision, [&](auto element) {
    GemmSlices<decltype(element)>(g, sweep, StreamedCBytes(g));
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_LIB_GEMM_GEMM_INL_H_
