// The absorbed order of attention (absorbed_attention.h), one sequence at a
// time, in five steps, 2, 4 and 5 on the library's GEMM:
//   1. queries absorbed into the key weights, Q'[(h, i), :] = scale q_{i,h}
//      W_k,g^T, dot products over W_k,g's packed panels as stored
//      (absorb_queries.h);
//   2. logits S = X_k Q'^T over the keys some row sees, keys as rows (the
//      skinny product the GEMM runs fastest: 175 GFLOP/s at 2048 x 32 x
//      4096 against 66 for Q' X_k^T, Zen 5, 1 thread);
//   3. weights P[(h, i), :] = softmax of S's column plus the bias logit
//      scale q_{i,h} . b_k,g and the mask's bias, over the row's visible keys;
//   4. Z = P X_v, each row over its visible keys only (a hidden key's x_j is
//      never read, even multiplied by 0);
//   5. context_h = Z_h W_v,g + b_v,g, on the pre-packed W_v.
// Rows are ordered (head, query) so that P is the attention weights' layout
// and the rows of one query position are a strided matrix.

#include "lib/layer/absorbed_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "lib/attention/attention_args.h"
#include "lib/attention/task.h"
#include "lib/common/buffer_pool.h"
#include "lib/common/parallel.h"
#include "lib/gemm/gemm_args.h"
#include "lib/layer/absorb_queries.h"
#include "lib/layer/config.h"
#include "lib/softmax/softmax_rows.h"

namespace mha::detail {

bool PrefersAbsorbedOrder(const MultiHeadAttentionConfig& c,
                          std::size_t panel_cols, std::size_t q_len,
                          std::size_t kv_len, const AttentionMask& mask) {
  const std::size_t hd = HeadDim(c);
  if (kv_len == 0 || hd % panel_cols != 0) {
    return false;
  }
  const double queries = static_cast<double>(q_len) * c.num_heads;
  const double d = static_cast<double>(c.d_model);
  const double standard = 4.0 * kv_len * d * static_cast<double>(KvDim(c)) +
                          4.0 * queries * kv_len * hd;
  const double absorbed =
      4.0 * queries * d * (static_cast<double>(kv_len) + hd);
  if (2.0 * absorbed > standard) return false;
  // Half the standard cost bounds q_len num_heads by kv_dim, so the
  // buffers below (q_len num_heads x kv_len and x d_model) are no larger
  // than the inputs and weights.
  if (mask.bias == nullptr) return true;
  const float* end = mask.bias + q_len * kv_len;
  return std::find(mask.bias, end, -std::numeric_limits<float>::infinity()) ==
         end;
}

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The GEMM C[m, n] = A[m, k] B, alpha 1, beta 0; the caller names B.
GemmArgs Product(std::size_t m, std::size_t n, std::size_t k, const float* a,
                 std::size_t lda, float* c, std::size_t ldc) {
  GemmArgs g{m, n, k, 1.0f, a, lda, false, nullptr, 0, false, 0.0f, c, ldc};
  return g;
}

// Attention arguments that hold only what VisibleEnd reads.
AttentionArgs ShapeAndMask(const AttentionShape& shape,
                           const AttentionMask& mask) {
  AttentionArgs args{};
  args.shape = shape;
  args.mask = mask;
  return args;
}

// The five steps for one sequence at a time, with buffers that serve every
// sequence of the call.
class AbsorbedSequence {
 public:
  AbsorbedSequence(std::size_t target, const MultiHeadAttentionConfig& c,
                   const PackedProjections& w, const AttentionMask& mask,
                   std::size_t batch, std::size_t q_len, std::size_t kv_len)
      : target_(target),
        w_(w),
        d_(c.d_model),
        hd_(HeadDim(c)),
        heads_(c.num_heads),
        group_(c.num_heads / c.num_kv_heads),
        q_len_(q_len),
        kv_len_(kv_len),
        rows_(c.num_heads * q_len),
        scale_(1.0f / std::sqrt(static_cast<float>(hd_))),
        args_(ShapeAndMask(
            {batch, c.num_heads, c.num_kv_heads, q_len, kv_len, hd_}, mask)),
        absorbed_(rows_ * d_),
        scores_(kv_len * rows_),
        bias_logits_(rows_) {}

  // The context rows [q_len, d_model] of sequence b (ldc d_model apart).
  void Run(const float* q, const Layout& q_layout, const float* key,
           const float* value, std::size_t b, float* probabilities,
           float* context) {
    std::size_t keys = 0;  // keys any row sees: a prefix
    for (std::size_t i = 0; i < q_len_; ++i) keys = std::max(keys, End(b, i));
    AbsorbQueries(q, q_layout, b);
    if (keys > 0) {
      // 2: S [keys, rows] = X_k Q'^T.
      GemmArgs s = Product(keys, rows_, d_, key, d_, scores_.get(), rows_);
      s.b = absorbed_.get();
      s.ldb = d_;
      s.trans_b = true;
      RunGemm(target_, s);
    }
    Normalize(b, probabilities);
    MixValues(b, value, probabilities);  // Z into absorbed_
    ProjectValues(b, context);
  }

 private:
  // The end of the keys query position i of sequence b sees.
  std::size_t End(std::size_t b, std::size_t i) const {
    return VisibleEnd(args_, b, i);
  }

  // 1: Q' = scale q W_k^T (absorb_queries.h), and the bias logits
  // scale q . b_k.
  void AbsorbQueries(const float* q, const Layout& q_layout, std::size_t b) {
    const float* q_b = q + ElementOffset(q_layout, b, 0, 0);
    detail::AbsorbQueries(
        target_, {w_.QkvColumns(w_.k_column(), w_.kv_width).data, w_.precision,
                  d_, w_.panel_cols, hd_, heads_, group_, q_len_, q_b,
                  q_layout.head, q_layout.token, scale_, absorbed_.get()});
    const float* k_bias = w_.QkvBias(w_.k_column());
    for (std::size_t h = 0; h < heads_; ++h) {
      const float* bias =
          k_bias != nullptr ? k_bias + h / group_ * hd_ : nullptr;
      for (std::size_t i = 0; i < q_len_; ++i) {
        float logit = 0.0f;
        if (bias != nullptr) {
          const float* q_row = q_b + h * q_layout.head + i * q_layout.token;
          for (std::size_t c = 0; c < hd_; ++c) logit += q_row[c] * bias[c];
        }
        bias_logits_.get()[h * q_len_ + i] = scale_ * logit;
      }
    }
  }

  // 3: the weights of row (h, i), at probabilities[(h q_len + i) kv_len]:
  // S's column plus the bias logits over the visible keys, softmax, zeros
  // past them. A visible logit that is not finite (NaN or Inf in the query,
  // a key's input row or the weights; -inf too, which softmax would take
  // for a hidden key) makes the row's weights NaN, as in mha::attention.
  void Normalize(std::size_t b, float* probabilities) const {
    const float* bias = args_.mask.bias;
    const float* scores = scores_.get();
    const float* bias_logits = bias_logits_.get();
    for (std::size_t r = 0; r < rows_; ++r) {
      const std::size_t i = r % q_len_, end = End(b, i);
      float* row = probabilities + r * kv_len_;
      bool finite = true;
      for (std::size_t j = 0; j < end; ++j) {
        row[j] = scores[j * rows_ + r] + bias_logits[r] +
                 (bias != nullptr ? bias[i * kv_len_ + j] : 0.0f);
        finite &= std::isfinite(row[j]);
      }
      if (!finite) std::fill(row, row + end, kNaN);
      std::fill(row + end, row + kv_len_, 0.0f);
    }
    for (std::size_t i = 0; i < q_len_; ++i) {
      const std::size_t end = End(b, i);
      if (end == 0) continue;
      float* rows_of_i = probabilities + i * kv_len_;
      RunSoftmax(target_, rows_of_i, q_len_ * kv_len_, rows_of_i,
                 q_len_ * kv_len_, heads_, end, 1.0f);
    }
  }

  // 4: Z = P X_v over each row's visible keys: one product when every
  // query position sees the same keys, else one per position.
  void MixValues(std::size_t b, const float* value,
                 const float* probabilities) {
    bool uniform = true;
    for (std::size_t i = 1; i < q_len_; ++i) uniform &= End(b, i) == End(b, 0);
    const std::size_t positions = uniform ? 1 : q_len_;
    for (std::size_t i = 0; i < positions; ++i) {
      const std::size_t keys = End(b, i);
      if (keys == 0) continue;
      const std::size_t m = uniform ? rows_ : heads_;
      const std::size_t step = uniform ? 1 : q_len_;  // rows apart
      GemmArgs g = Product(m, d_, keys, probabilities + i * kv_len_,
                           step * kv_len_, absorbed_.get() + i * d_, step * d_);
      g.b = value;
      g.ldb = d_;
      RunGemm(target_, g);
    }
  }

  // 5: context[i, h hd:(h + 1) hd] = Z[(h, i), :] W_v,g + b_v,g; zeros for
  // positions that see no key.
  void ProjectValues(std::size_t b, float* context) const {
    ForEachTask(heads_, 1.0 * rows_ * d_ * hd_, [&](std::size_t h) {
      const std::size_t first = w_.v_column() + h / group_ * hd_;
      const PackedB w_v = w_.QkvColumns(first, hd_);
      GemmArgs g = Product(q_len_, hd_, d_, absorbed_.get() + h * q_len_ * d_,
                           d_, context + h * hd_, d_);
      g.packed_b = &w_v;
      g.column_bias = w_.QkvBias(first);
      RunGemm(target_, g);
    });
    for (std::size_t i = 0; i < q_len_; ++i) {
      if (End(b, i) == 0) std::fill_n(context + i * d_, d_, 0.0f);
    }
  }

  const std::size_t target_;
  const PackedProjections& w_;
  const std::size_t d_, hd_, heads_, group_, q_len_, kv_len_, rows_;
  const float scale_;
  const AttentionArgs args_;        // the shape and mask, for VisibleEnd
  const PooledBuffer absorbed_;     // Q', then Z: [rows, d_model]
  const PooledBuffer scores_;       // S: [kv_len, rows]
  const PooledBuffer bias_logits_;  // [rows]
};

}  // namespace

void AttendAbsorbed(std::size_t target, const MultiHeadAttentionConfig& c,
                    const PackedProjections& w, const float* q,
                    const Layout& q_layout, const float* key,
                    const float* value, std::size_t batch, std::size_t q_len,
                    std::size_t kv_len, const AttentionMask& mask,
                    float* weights, float* context) {
  AbsorbedSequence sequence(target, c, w, mask, batch, q_len, kv_len);
  const std::size_t rows = c.num_heads * q_len;
  const PooledBuffer own_weights(weights != nullptr ? 0 : rows * kv_len);
  for (std::size_t b = 0; b < batch; ++b) {
    float* probabilities =
        weights != nullptr ? weights + b * rows * kv_len : own_weights.get();
    sequence.Run(q, q_layout, key + b * kv_len * c.d_model,
                 value + b * kv_len * c.d_model, b, probabilities,
                 context + b * q_len * c.d_model);
  }
}

}  // namespace mha::detail
