// MultiHeadAttention::forward and forward_cached: project (head-major where
// the GEMM can write it), attend with heads as strided views of the
// projections (no copies, no transposes), project.
// The target is chosen once per call and every kernel below runs on it.

#include <algorithm>
#include <cmath>

#include "lib/attention/attention_args.h"
#include "lib/common/buffer_pool.h"
#include "lib/common/check.h"
#include "lib/common/storage.h"
#include "lib/dispatch/dispatch.h"
#include "lib/gemm/gemm_args.h"
#include "lib/layer/absorbed_attention.h"
#include "lib/layer/config.h"
#include "lib/layer/layer_weights.h"
#include "mha/layer.h"

namespace mha {
namespace {

using detail::PackedB;
using detail::PackedProjections;
using detail::PooledBuffer;

// The output of projections: `rows` rows of `width` columns, in one of two
// layouts:
//   token-major: row r at data + r * width, every head's columns in it;
//   head-major:  each head's head_dim columns a block of rows x head_dim
//                floats of its own, element (r, c) at data + c / head_dim *
//                rows * head_dim + r * head_dim + c % head_dim.
// Attention reads a head's rows of Q, K and V: head_dim floats each, from
// d_model or more apart when token-major (a page of memory per row at d_model
// 768 and up), from one contiguous block when head-major. On Zen 5,
// interleaved medians, head-major against token-major: the attention core
// of S3 (b8 h12 L128 hd64) 1.12x on one core, of S4 (b1 h16 L2048) 1.10x,
// of S5 (b1 h8 L4096) 1.07x; forward, 1 thread / 2 threads: S4 1.08-1.10x /
// 1.07-1.09x, S5 1.10-1.13x / 1.08-1.10x, S2 1.03x / 1.02-1.04x, S3
// 1.02-1.03x / 1.01-1.04x, S1 and S6 within 1%. The GEMM writes head-major
// only in whole panels per head (GemmArgs::c_block_cols), so the layout is
// taken where head_dim is a multiple of the panel width.
struct Projections {
  float* data;
  std::size_t rows, width, head_dim;
  bool head_major;

  // Output columns [first, ...) as GEMM's C (first: a head's first column).
  void SetAsC(std::size_t first, detail::GemmArgs& g) const {
    g.c = Column(first);
    g.ldc = head_major ? head_dim : width;
    g.c_block_cols = head_major ? head_dim : 0;
    g.c_block_stride = rows * head_dim;
  }
  // Row 0 of column `first` (a head's first column).
  float* Column(std::size_t first) const {
    return data + (head_major ? first * rows : first);
  }
  // The [batch, head, token, head_dim] view of heads from column `first`
  // on, sequences of `tokens` rows.
  Layout HeadLayout(std::size_t tokens) const {
    if (head_major) return {tokens * head_dim, rows * head_dim, head_dim};
    return {tokens * width, head_dim, width};
  }
};

// Projections of `rows` x `width` into a pooled buffer, head-major where
// the target's panels allow it.
class ProjectionBuffer {
 public:
  ProjectionBuffer(std::size_t target, std::size_t rows, std::size_t width,
                   std::size_t head_dim)
      : buffer_(rows * width),
        projections_{buffer_.get(), rows, width, head_dim,
                     head_dim % detail::PanelCols(target) == 0} {}
  const Projections& operator*() const { return projections_; }

 private:
  PooledBuffer buffer_;
  Projections projections_;
};

// Columns [first, first + w.n) of `out` = x[rows, w.k] * w + bias, w
// pre-packed.
void Project(std::size_t target, const float* x, std::size_t rows,
             const PackedB& w, const float* bias, const Projections& out,
             std::size_t first) {
  detail::GemmArgs g{rows, w.n,   w.k,  1.0f,    x, w.k,  false, nullptr,
                     0,    false, 0.0f, nullptr, 0, bias, &w};
  out.SetAsC(first, g);
  detail::RunGemm(target, g);
}

// Queries, keys or values as attention reads them: the heads of fp32
// projections or of a KV cache (any precision).
struct Heads {
  const void* data;
  Layout layout;

  static Heads Of(const Projections& p, std::size_t first, std::size_t tokens) {
    return {p.Column(first), p.HeadLayout(tokens)};
  }
};

// output [rows, d_model] = context [rows, d_model] W_o + b_o.
void ProjectContext(std::size_t target, const PackedProjections& w,
                    const float* context, std::size_t rows, float* output) {
  const std::size_t d = w.d_model;
  Project(target, context, rows, w.O(), w.OBias(), {output, rows, d, d, false},
          0);
}

// The second half of a forward pass: attention of the projected heads into
// a context buffer, then the output projection into `output`.
void AttendAndProject(std::size_t target, const MultiHeadAttentionConfig& c,
                      const PackedProjections& w, std::size_t batch,
                      std::size_t q_len, std::size_t kv_len, const Heads& q,
                      const Heads& k, const Heads& v, Precision kv_precision,
                      const AttentionMask& mask, float* weights,
                      float* output) {
  const std::size_t d = c.d_model, hd = detail::HeadDim(c);
  const std::size_t rows = batch * q_len;
  const PooledBuffer context(rows * d);
  const Projections ctx{context.get(), rows, d, hd, false};
  detail::RunAttention(target,
                       {{batch, c.num_heads, c.num_kv_heads, q_len, kv_len, hd},
                        static_cast<const float*>(q.data),
                        q.layout,
                        k.data,
                        k.layout,
                        v.data,
                        v.layout,
                        context.get(),
                        ctx.HeadLayout(q_len),
                        mask,
                        1.0f / std::sqrt(static_cast<float>(hd)),
                        weights,
                        kv_precision});
  ProjectContext(target, w, context.get(), rows, output);
}

// Throws if a size product of forward's arguments or buffers overflows, or
// if an output overlaps an input.
void CheckForwardSizesAndAliasing(const MultiHeadAttentionConfig& c,
                                  const float* query, const float* key,
                                  const float* value, std::size_t batch,
                                  std::size_t q_len, std::size_t kv_len,
                                  const float* output,
                                  const AttentionMask& mask,
                                  const float* weights) {
  constexpr const char* kWhere = "mha::MultiHeadAttention::forward";
  const std::size_t d = c.d_model;
  const detail::SizeCheck query_size(kWhere, "query and output");
  const detail::SizeCheck key_size(kWhere, "key and value");
  const std::size_t q_rows = query_size.Product(batch, q_len);
  const std::size_t kv_rows = key_size.Product(batch, kv_len);
  const detail::Span query_span{query, query_size.Product(q_rows, d)};
  const detail::Span output_span{output, query_span.count};
  const detail::Span key_span{key, key_size.Product(kv_rows, d)};
  const detail::Span value_span{value, key_span.count};
  // The projections' rows are padded to whole panels: at most 3 x 128
  // floats (2048-bit SVE) beyond Q|K|V.
  detail::SizeCheck(kWhere, "the projections")
      .Product(std::max(q_rows, kv_rows), detail::QkvWidth(c) + 3 * 128);
  const detail::Span bias_span{
      mask.bias,
      mask.bias ? detail::SizeCheck(kWhere, "mask.bias").Product(q_len, kv_len)
                : 0};
  const detail::Span weights_span{
      weights, weights ? detail::SizeCheck(kWhere, "attention_weights")
                             .Product(q_rows, c.num_heads, kv_len)
                       : 0};
  detail::CheckOutputsDisjoint(
      kWhere, {{"output", output_span}, {"attention_weights", weights_span}},
      {{"query", query_span},
       {"key", key_span},
       {"value", value_span},
       {"mask.bias", bias_span}});
}

}  // namespace

void MultiHeadAttention::forward(const float* query, const float* key,
                                 const float* value, std::size_t batch,
                                 std::size_t q_len, std::size_t kv_len,
                                 float* output, const AttentionMask& mask,
                                 float* attention_weights) const {
  constexpr const char* kWhere = "mha::MultiHeadAttention::forward";
  if (batch == 0 || q_len == 0) return;
  detail::CheckNotNull(kWhere, "query", query);
  detail::CheckNotNull(kWhere, "output", output);
  if (kv_len > 0) {
    detail::CheckNotNull(kWhere, "key", key);
    detail::CheckNotNull(kWhere, "value", value);
  }
  detail::CheckMask(kWhere, mask, batch, kv_len);
  CheckForwardSizesAndAliasing(config_, query, key, value, batch, q_len, kv_len,
                               output, mask, attention_weights);
  const std::size_t target = detail::ChosenTargetIndex();
  const PackedProjections& w = weights_->For(target, detail::PanelCols(target));

  const std::size_t q_rows = batch * q_len, kv_rows = batch * kv_len;
  const std::size_t kv_width = w.kv_width, hd = detail::HeadDim(config_);
  if (query == key && key == value && q_len == kv_len) {
    // Self-attention: Q, K and V in one GEMM against the fused weights.
    const ProjectionBuffer qkv(target, q_rows, w.qkv_width(), hd);
    Project(target, query, q_rows, w.QkvColumns(0, w.qkv_width()), w.QkvBias(0),
            *qkv, 0);
    return AttendAndProject(target, config_, w, batch, q_len, kv_len,
                            Heads::Of(*qkv, 0, q_len),
                            Heads::Of(*qkv, w.k_column(), kv_len),
                            Heads::Of(*qkv, w.v_column(), kv_len),
                            Precision::F32, mask, attention_weights, output);
  }
  const ProjectionBuffer q(target, q_rows, w.q_width, hd);
  Project(target, query, q_rows, w.QkvColumns(0, w.q_width), w.QkvBias(0), *q,
          0);
  if (detail::PrefersAbsorbedOrder(config_, w.panel_cols, q_len, kv_len,
                                   mask)) {
    // A few queries over many keys: K and V are never projected.
    const PooledBuffer context(q_rows * config_.d_model);
    detail::AttendAbsorbed(target, config_, w, (*q).Column(0),
                           (*q).HeadLayout(q_len), key, value, batch, q_len,
                           kv_len, mask, attention_weights, context.get());
    return ProjectContext(target, w, context.get(), q_rows, output);
  }
  const ProjectionBuffer kv(target, kv_rows, 2 * kv_width, hd);
  if (key == value) {  // K and V in one GEMM
    Project(target, key, kv_rows, w.QkvColumns(w.k_column(), 2 * kv_width),
            w.QkvBias(w.k_column()), *kv, 0);
  } else {
    Project(target, key, kv_rows, w.QkvColumns(w.k_column(), kv_width),
            w.QkvBias(w.k_column()), *kv, 0);
    Project(target, value, kv_rows, w.QkvColumns(w.v_column(), kv_width),
            w.QkvBias(w.v_column()), *kv, kv_width);
  }
  AttendAndProject(target, config_, w, batch, q_len, kv_len,
                   Heads::Of(*q, 0, q_len), Heads::Of(*kv, 0, kv_len),
                   Heads::Of(*kv, kv_width, kv_len), Precision::F32, mask,
                   attention_weights, output);
}

void MultiHeadAttention::forward_cached(const float* x, std::size_t batch,
                                        std::size_t new_len, KVCache& cache,
                                        float* output) const {
  constexpr const char* kWhere = "mha::MultiHeadAttention::forward_cached";
  if (batch == 0 || new_len == 0) return;
  detail::CheckNotNull(kWhere, "x", x);
  detail::CheckNotNull(kWhere, "output", output);
  const MultiHeadAttentionConfig& c = cache.config_;
  if (c.d_model != config_.d_model || c.num_heads != config_.num_heads ||
      c.num_kv_heads != config_.num_kv_heads) {
    detail::Fail(kWhere, ": the cache's config (d_model ", c.d_model,
                 ", num_heads ", c.num_heads, ", num_kv_heads ", c.num_kv_heads,
                 ") does not match the layer's (d_model ", config_.d_model,
                 ", num_heads ", config_.num_heads, ", num_kv_heads ",
                 config_.num_kv_heads, ")");
  }
  if (cache.batch_ != batch) {
    detail::Fail(kWhere, ": batch (", batch, ") does not match the cache's (",
                 cache.batch_, ")");
  }
  if (new_len > cache.capacity_ - cache.length_) {
    detail::Fail(kWhere, ": new_len (", new_len, ") exceeds the cache's room (",
                 cache.capacity_ - cache.length_, " of capacity ",
                 cache.capacity_, ")");
  }
  const detail::SizeCheck size(kWhere, "x and output");
  const std::size_t rows = size.Product(batch, new_len);
  const std::size_t count = size.Product(rows, config_.d_model);
  detail::SizeCheck(kWhere, "the projections")
      .Product(rows, detail::QkvWidth(config_) + 3 * 128);
  detail::CheckDisjoint(kWhere, "output", {output, count}, "x", {x, count});
  const std::size_t target = detail::ChosenTargetIndex();
  const PackedProjections& w = weights_->For(target, detail::PanelCols(target));

  const std::size_t kv_heads = c.num_kv_heads;
  const std::size_t hd = detail::HeadDim(config_), past = cache.length_;
  const ProjectionBuffer buffer(target, rows, w.qkv_width(), hd);
  const Projections& qkv = *buffer;
  Project(target, x, rows, w.QkvColumns(0, w.qkv_width()), w.QkvBias(0), qkv,
          0);
  // The new tokens' K and V rows, head by head, into the cache's
  // [batch, kv_heads, capacity, head_dim] storage.
  const Layout cached{kv_heads * cache.capacity_ * hd, cache.capacity_ * hd,
                      hd};
  const Layout projected = qkv.HeadLayout(new_len);
  const std::size_t bytes = bytes_per_element(cache.precision_);
  for (std::size_t b = 0; b < batch; ++b) {
    for (std::size_t g = 0; g < kv_heads; ++g) {
      for (std::size_t t = 0; t < new_len; ++t) {
        const std::size_t row = detail::ElementOffset(projected, b, g, t);
        const std::size_t to =
            detail::ElementOffset(cached, b, g, past + t) * bytes;
        detail::StoreRounded(cache.precision_, qkv.Column(w.k_column()) + row,
                             hd, cache.keys_.data() + to);
        detail::StoreRounded(cache.precision_, qkv.Column(w.v_column()) + row,
                             hd, cache.values_.data() + to);
      }
    }
  }
  cache.length_ = past + new_len;

  AttentionMask causal;
  causal.causal = true;
  AttendAndProject(target, config_, w, batch, new_len, cache.length_,
                   Heads::Of(qkv, 0, new_len), {cache.keys_.data(), cached},
                   {cache.values_.data(), cached}, cache.precision_, causal,
                   nullptr, output);
}

}  // namespace mha
