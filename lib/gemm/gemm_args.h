// The arguments of one GEMM, as the kernels of every target take them.
#ifndef MHA_LIB_GEMM_GEMM_ARGS_H_
#define MHA_LIB_GEMM_GEMM_ARGS_H_

#include <cstddef>

#include "mha/precision.h"

namespace mha::detail {

// B already in the kernel's panel format, as the layer keeps its weights:
// column panels of `panel_cols` columns (zero-padded at the end), each all
// k steps deep, panel_cols elements a step: element (p, j) at
// data[(j / panel_cols * k + p) * panel_cols + j % panel_cols]. The panel
// width is the target's TileCols(), so a packing serves one target. The
// elements are of `precision` (fp32, or 16-bit, widened as they are loaded).
struct PackedB {
  const void* data;
  std::size_t k, n, panel_cols;
  Precision precision = Precision::F32;
};

// C = alpha * op(A) * op(B) + beta * C (+ column_bias broadcast over rows).
// Validated by the caller; sizes as in mha::sgemm. When packed_b is given,
// it is B (b, ldb and trans_b are then unused).
struct GemmArgs {
  std::size_t m, n, k;
  float alpha;
  const float* a;
  std::size_t lda;
  bool trans_a;
  const float* b;
  std::size_t ldb;
  bool trans_b;
  float beta;
  float* c;
  std::size_t ldc;
  const float* column_bias = nullptr;  // optional [n], added once per element
  const PackedB* packed_b = nullptr;
  // C in blocks of columns (the layer's projections, one block per head):
  // when c_block_cols is not 0, element (i, j) is at c[j / c_block_cols *
  // c_block_stride + i * ldc + j % c_block_cols]. Only with packed_b, k > 0
  // and c_block_cols a multiple of the panel width, so that no tile's row
  // crosses a block.
  std::size_t c_block_cols = 0, c_block_stride = 0;
};

// Runs a validated GEMM on the target of a ChosenTargetIndex().
void RunGemm(std::size_t target_index, const GemmArgs& args);

// The panel width (columns of a micro-tile) of the target of an index: what
// a PackedB for that target must have.
std::size_t PanelCols(std::size_t target_index);

// A validated GEMM (no pre-packed B) whose A slivers are all read by the
// wide tile, which the machine's L1 may never call for: its tests.
void RunGemmWithWideTilesForTest(std::size_t target_index,
                                 const GemmArgs& args);

// A validated GEMM (no pre-packed B, no GEMV shape) whose first slice
// streams its plain stores to C past the caches whatever C's size, where
// C's rows are vector-aligned, which large products alone call for: its
// tests. Returns whether C's rows were aligned (the stores streamed).
bool RunGemmStreamingCForTest(std::size_t target_index, const GemmArgs& args);

// The register tile and cache blocks of the target in force (for tests that
// sweep sizes around every boundary): kc for B wider than 3 panels and nc
// for slices kc deep, narrow_kc for B 2 panels wide.
struct GemmShapeParams {
  std::size_t tile_rows, tile_cols, kc, nc, narrow_kc;
  // The panel-pair sweep: from how many rows (0: not on this target), its
  // slice depth and its chunk of rows.
  std::size_t pair_sweep_min_rows, pair_sweep_kc, pair_sweep_rows;
  // The most rows the matrix-vector path takes with B pre-packed.
  std::size_t packed_gemv_rows;
  // The most rows of the walk of B in place past all rows of C, and the
  // fewest floats of B (k x ldb) it takes.
  std::size_t walk_rows, walk_min_b_floats;
  // The most floats of B (k x n) that the sliver sweep reads in place from
  // as many slivers as where B's rows share one set of L1 (BExceedsL2).
  std::size_t in_place_b_max_floats;
  // The most floats of B (k x n) whose blocks the sliver sweep's first
  // sliver packs as it reads them; beyond, each block is copied first.
  std::size_t sliver_packs_b_max_floats;
  // The deepest B, pre-packed and one slice of the sliver sweep deep, whose
  // tasks ask for the next task's block into L2 (0: none), and the width of
  // their blocks.
  std::size_t asks_next_kc, asks_next_nc;
  // The fewest rows of a task whose wide tiles read B's rows copied into
  // aligned scratch where they lie off vector boundaries.
  std::size_t wide_b_copy_rows;
};
GemmShapeParams GemmShapeParamsForTest();

}  // namespace mha::detail

#endif  // MHA_LIB_GEMM_GEMM_ARGS_H_
