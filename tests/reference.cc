#include "reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mha_test {

std::vector<double> ReferenceGemm(bool trans_a, bool trans_b, std::size_t m,
                                  std::size_t n, std::size_t k, double alpha,
                                  const float* a, std::size_t lda,
                                  const float* b, std::size_t ldb, double beta,
                                  const float* c, std::size_t ldc) {
  std::vector<double> result(m * n);
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      double sum = 0.0;
      for (std::size_t p = 0; p < k; ++p) {
        const double a_ip = trans_a ? a[p * lda + i] : a[i * lda + p];
        const double b_pj = trans_b ? b[j * ldb + p] : b[p * ldb + j];
        sum += a_ip * b_pj;
      }
      result[i * n + j] =
          alpha * sum + (beta != 0.0 ? beta * c[i * ldc + j] : 0.0);
    }
  }
  return result;
}

namespace {

// Softmax of logits where hidden entries (those marked, and -inf) get 0 and
// all hidden gives all zeros; a logit of a visible entry that is not finite
// (NaN or Inf: exp(inf - inf) is NaN) makes every visible entry NaN (hidden
// ones stay exactly 0).
std::vector<double> SoftmaxOf(const std::vector<double>& logits,
                              const std::vector<bool>& hidden) {
  const double kNegInf = -std::numeric_limits<double>::infinity();
  double max = kNegInf;
  for (std::size_t j = 0; j < logits.size(); ++j) {
    if (hidden[j] || logits[j] == kNegInf) continue;
    if (!std::isfinite(logits[j])) {
      std::vector<double> p(logits.size(), 0.0);
      for (std::size_t i = 0; i < p.size(); ++i) {
        if (!hidden[i] && logits[i] != kNegInf) {
          p[i] = std::numeric_limits<double>::quiet_NaN();
        }
      }
      return p;
    }
    max = std::max(max, logits[j]);
  }
  std::vector<double> p(logits.size(), 0.0);
  if (max == kNegInf) return p;
  double sum = 0.0;
  for (std::size_t j = 0; j < logits.size(); ++j) {
    if (!hidden[j]) sum += p[j] = std::exp(logits[j] - max);
  }
  for (double& x : p) x /= sum;
  return p;
}

}  // namespace

std::vector<double> ReferenceSoftmax(const float* x, std::size_t ldx,
                                     std::size_t rows, std::size_t cols,
                                     double scale) {
  std::vector<double> result;
  for (std::size_t r = 0; r < rows; ++r) {
    std::vector<double> logits(cols);
    // softmax's -inf entries get 0 whatever the scale; NaN and +inf after
    // scaling make the row NaN.
    for (std::size_t j = 0; j < cols; ++j) {
      const float v = x[r * ldx + j];
      logits[j] = v == -std::numeric_limits<float>::infinity()
                      ? -std::numeric_limits<double>::infinity()
                      : scale * v;
    }
    const std::vector<double> p =
        SoftmaxOf(logits, std::vector<bool>(cols, false));
    result.insert(result.end(), p.begin(), p.end());
  }
  return result;
}

ReferenceAttentionResult ReferenceAttention(const mha::AttentionShape& s,
                                            const float* q, mha::Layout ql,
                                            const float* k, mha::Layout kl,
                                            const float* v, mha::Layout vl,
                                            const mha::AttentionMask& mask,
                                            double scale) {
  const double kNegInf = -std::numeric_limits<double>::infinity();
  ReferenceAttentionResult r;
  r.out.assign(s.batch * s.num_heads * s.q_len * s.head_dim, 0.0);
  r.weights.assign(s.batch * s.num_heads * s.q_len * s.kv_len, 0.0);
  r.abs_products.assign(s.batch * s.num_heads * s.q_len, 0.0);
  r.abs_logits.assign(r.abs_products.size(), 0.0);
  const std::size_t group = s.num_heads / s.num_kv_heads;
  for (std::size_t b = 0; b < s.batch; ++b) {
    for (std::size_t h = 0; h < s.num_heads; ++h) {
      const std::size_t kvh = h / group;
      for (std::size_t i = 0; i < s.q_len; ++i) {
        const std::size_t row = (b * s.num_heads + h) * s.q_len + i;
        std::vector<double> logits(s.kv_len, kNegInf);
        std::vector<bool> hidden(s.kv_len, true);
        for (std::size_t j = 0; j < s.kv_len; ++j) {
          const long long last = static_cast<long long>(i) +
                                 static_cast<long long>(s.kv_len) -
                                 static_cast<long long>(s.q_len);
          if (mask.causal && static_cast<long long>(j) > last) continue;
          if (mask.kv_lengths &&
              j >= static_cast<std::size_t>(mask.kv_lengths[b]))
            continue;
          // A -inf bias hides the key: its K and V are never read.
          if (mask.bias && mask.bias[i * s.kv_len + j] == kNegInf) continue;
          hidden[j] = false;
          double dot = 0.0, abs_dot = 0.0;
          for (std::size_t c = 0; c < s.head_dim; ++c) {
            const double product =
                static_cast<double>(
                    q[b * ql.batch + h * ql.head + i * ql.token + c]) *
                k[b * kl.batch + kvh * kl.head + j * kl.token + c];
            dot += product;
            abs_dot += std::fabs(product);
          }
          logits[j] =
              scale * dot + (mask.bias ? mask.bias[i * s.kv_len + j] : 0.0);
          r.abs_products[row] =
              std::max(r.abs_products[row], std::fabs(scale) * abs_dot);
          r.abs_logits[row] = std::max(r.abs_logits[row], std::fabs(logits[j]));
          // NaN or Inf in q or k, or a NaN or +inf bias: the row is NaN.
          if (!std::isfinite(logits[j]))
            logits[j] = std::numeric_limits<double>::quiet_NaN();
        }
        const std::vector<double> p = SoftmaxOf(logits, hidden);
        for (std::size_t j = 0; j < s.kv_len; ++j) {
          r.weights[row * s.kv_len + j] = p[j];
          if (hidden[j]) continue;  // V of a hidden key is never read
          for (std::size_t c = 0; c < s.head_dim; ++c) {
            r.out[row * s.head_dim + c] +=
                p[j] * v[b * vl.batch + kvh * vl.head + j * vl.token + c];
          }
        }
      }
    }
  }
  return r;
}

namespace {

// x [rows, in] * w [in, out] + bias, in double, as floats for re-use.
std::vector<float> ProjectRows(const float* x, std::size_t rows, std::size_t in,
                               const std::vector<float>& w, std::size_t out,
                               const std::vector<float>& bias,
                               std::vector<double>* exact = nullptr) {
  std::vector<float> y(rows * out);
  if (exact) exact->assign(rows * out, 0.0);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t o = 0; o < out; ++o) {
      double sum = bias.empty() ? 0.0 : bias[o];
      for (std::size_t i = 0; i < in; ++i)
        sum += static_cast<double>(x[r * in + i]) * w[i * out + o];
      y[r * out + o] = static_cast<float>(sum);
      if (exact) (*exact)[r * out + o] = sum;
    }
  }
  return y;
}

}  // namespace

std::vector<double> ReferenceForward(const mha::MultiHeadAttentionConfig& c,
                                     const ReferenceWeights& w,
                                     const float* query, const float* key,
                                     const float* value, std::size_t batch,
                                     std::size_t q_len, std::size_t kv_len,
                                     const mha::AttentionMask& mask,
                                     std::vector<double>* weights) {
  const std::size_t d = c.d_model, heads = c.num_heads;
  const std::size_t kv_heads = c.num_kv_heads ? c.num_kv_heads : heads;
  const std::size_t hd = d / heads, kv = kv_heads * hd;
  // Intermediates rounded to float: the library's inputs to attention are
  // float too, so the comparison measures the kernels, not that rounding.
  const std::vector<float> q =
      ProjectRows(query, batch * q_len, d, w.w_q, d, w.b_q);
  const std::vector<float> k =
      ProjectRows(key, batch * kv_len, d, w.w_k, kv, w.b_k);
  const std::vector<float> v =
      ProjectRows(value, batch * kv_len, d, w.w_v, kv, w.b_v);
  const mha::AttentionShape shape{batch, heads, kv_heads, q_len, kv_len, hd};
  const ReferenceAttentionResult att =
      ReferenceAttention(shape, q.data(), {q_len * d, hd, d}, k.data(),
                         {kv_len * kv, hd, kv}, v.data(), {kv_len * kv, hd, kv},
                         mask, 1.0 / std::sqrt(static_cast<double>(hd)));
  if (weights) *weights = att.weights;
  std::vector<float> concat(batch * q_len * d);
  for (std::size_t b = 0; b < batch; ++b) {
    for (std::size_t h = 0; h < heads; ++h) {
      for (std::size_t i = 0; i < q_len; ++i) {
        for (std::size_t e = 0; e < hd; ++e) {
          concat[(b * q_len + i) * d + h * hd + e] = static_cast<float>(
              att.out[((b * heads + h) * q_len + i) * hd + e]);
        }
      }
    }
  }
  std::vector<double> out;
  ProjectRows(concat.data(), batch * q_len, d, w.w_o, d, w.b_o, &out);
  return out;
}

}  // namespace mha_test
