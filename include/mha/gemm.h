// Single-precision general matrix multiply (SGEMM), row-major.
#ifndef MHA_GEMM_H_
#define MHA_GEMM_H_

#include <cstddef>

namespace mha {

enum class Transpose : bool { No = false, Yes = true };

// C = alpha * op(A) * op(B) + beta * C, all row-major. op(A) is m x k, op(B)
// is k x n, C is m x n. A is stored m x k (lda >= k) or, transposed, k x m
// (lda >= m); B is stored k x n (ldb >= n) or, transposed, n x k (ldb >= k);
// ldc >= n.
//
// Zero sizes: m == 0 or n == 0 does nothing; k == 0 computes C = beta * C
// (zeros when beta == 0); pointers a size does not govern may then be null.
// When beta == 0 (either sign), C is not read: NaN or Inf already in C does
// not propagate. alpha and beta may be any float, applied as IEEE arithmetic
// dictates: alpha == 0 still forms op(A) op(B), so NaN or Inf in A or B
// gives NaN (reference BLAS skips the product instead); a NaN alpha gives
// all NaN (unless k == 0), a NaN beta too; beta = Inf turns a 0 of C into
// NaN.
// Elements between rows (past the row width) are neither read nor written.
//
// Accuracy: each element is a sum of k products accumulated in fp32 with FMA,
// in blocks of a fixed order, so |error| <= about k * 2^-24 * sum|a_ip * b_pj|
// (plus the rounding of the alpha/beta epilogue). NaN and Inf in A or B
// propagate as IEEE arithmetic dictates. The result is bitwise identical
// whatever the number of threads, for a given target.
//
// Parallel over tiles of C with oneTBB, in the caller's task_arena.
// Throws std::invalid_argument (writing nothing) for a too-small leading
// dimension, a null pointer that has work to do, a matrix whose extent
// ((rows - 1) * ld + cols elements) overflows, or C overlapping the memory
// of A or B (each taken as the range from its first to its last element).
void sgemm(Transpose trans_a, Transpose trans_b, std::size_t m, std::size_t n,
           std::size_t k, float alpha, const float* a, std::size_t lda,
           const float* b, std::size_t ldb, float beta, float* c,
           std::size_t ldc);

}  // namespace mha

#endif  // MHA_GEMM_H_
