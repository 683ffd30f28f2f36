// The arguments of one GEMM, as the kernels of every target take them.
#ifndef MHA_LIB_GEMM_GEMM_ARGS_H_
#define MHA_LIB_GEMM_GEMM_ARGS_H_

#include <cstddef>

namespace mha::detail {

// C = alpha * op(A) * op(B) + beta * C (+ column_bias broadcast over rows).
// Validated by the caller; sizes as in mha::sgemm.
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
};

// Runs a validated GEMM on the target of a ChosenTargetIndex().
void RunGemm(std::size_t target_index, const GemmArgs& args);

}  // namespace mha::detail

#endif  // MHA_LIB_GEMM_GEMM_ARGS_H_
