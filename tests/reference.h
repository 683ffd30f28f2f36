// Plain double-precision references for every kernel, written for clarity,
// not speed: the loops of the definitions, nothing shared with the library.
#ifndef MHA_TESTS_REFERENCE_H_
#define MHA_TESTS_REFERENCE_H_

#include <cstddef>
#include <vector>

#include "mha/mha.h"

namespace mha_test {

// C = alpha * op(A) op(B) + beta * C (C read only when beta != 0).
std::vector<double> ReferenceGemm(bool trans_a, bool trans_b, std::size_t m,
                                  std::size_t n, std::size_t k, double alpha,
                                  const float* a, std::size_t lda,
                                  const float* b, std::size_t ldb, double beta,
                                  const float* c, std::size_t ldc);

std::vector<double> ReferenceSoftmax(const float* x, std::size_t ldx,
                                     std::size_t rows, std::size_t cols,
                                     double scale);

struct ReferenceAttentionResult {
  std::vector<double> out;      // [batch, num_heads, q_len, head_dim]
  std::vector<double> weights;  // [batch, num_heads, q_len, kv_len]
  // Per query row [batch, num_heads, q_len], over the keys the row sees: the
  // largest scale * sum_c |q_c k_c| (S) and the largest |logit| (L), the
  // magnitudes attention.h's error bound of the weights is stated in.
  std::vector<double> abs_products, abs_logits;
};

ReferenceAttentionResult ReferenceAttention(const mha::AttentionShape& s,
                                            const float* q, mha::Layout ql,
                                            const float* k, mha::Layout kl,
                                            const float* v, mha::Layout vl,
                                            const mha::AttentionMask& mask,
                                            double scale);

// The layer's weights as plain [in, out] matrices and bias vectors.
struct ReferenceWeights {
  std::vector<float> w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o;
};

// forward() of the seed documents, in double: output [batch, q_len, d_model].
std::vector<double> ReferenceForward(const mha::MultiHeadAttentionConfig& c,
                                     const ReferenceWeights& w,
                                     const float* query, const float* key,
                                     const float* value, std::size_t batch,
                                     std::size_t q_len, std::size_t kv_len,
                                     const mha::AttentionMask& mask,
                                     std::vector<double>* weights = nullptr);

}  // namespace mha_test

#endif  // MHA_TESTS_REFERENCE_H_
