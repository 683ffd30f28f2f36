// MultiHeadAttention::forward and forward_cached: project, attend with heads
// as strided views of the projections (no copies, no transposes), project.
// The target is chosen once per call and every kernel below runs on it.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "lib/attention/attention_args.h"
#include "lib/common/buffer_pool.h"
#include "lib/common/check.h"
#include "lib/common/storage.h"
#include "lib/dispatch/dispatch.h"
#include "lib/gemm/gemm_args.h"
#include "lib/layer/config.h"
#include "lib/layer/layer_weights.h"
#include "mha/layer.h"

namespace mha {
namespace {

using detail::PackedB;
using detail::PackedProjections;
using detail::PooledBuffer;

// A row-major matrix of projections: row t of sequence b at data + (b *
// rows_per_batch + t) * ld.
struct Projected {
  const float* data;
  std::size_t ld, rows_per_batch;

  // Its [batch, head, token, head_dim] view: head h is columns [h *
  // head_dim, (h + 1) * head_dim) of data.
  Layout Heads(std::size_t head_dim) const {
    return {rows_per_batch * ld, head_dim, ld};
  }
};

// out[rows, w.n] (row stride ldo) = x[rows, w.k] * w + bias, w pre-packed.
void Project(std::size_t target, const float* x, std::size_t rows,
             const PackedB& w, const float* bias, float* out, std::size_t ldo) {
  detail::RunGemm(target, {rows, w.n, w.k, 1.0f, x, w.k, false, nullptr, 0,
                           false, 0.0f, out, ldo, bias, &w});
}

// Keys and values of every KV head, as attention reads them: projections
// (fp32) or a KV cache (any precision), laid out alike.
struct KeysAndValues {
  const void* k;
  const void* v;
  std::size_t ld, rows_per_batch;
  Precision precision;

  static KeysAndValues Of(const Projected& keys, const Projected& values) {
    return {keys.data, values.data, keys.ld, keys.rows_per_batch,
            Precision::F32};
  }
  Layout Heads(std::size_t head_dim) const {
    return {rows_per_batch * ld, head_dim, ld};
  }
};

// The second half of a forward pass: attention of the projected heads into
// a context buffer, then the output projection into `output`.
void AttendAndProject(std::size_t target, const MultiHeadAttentionConfig& c,
                      const PackedProjections& w, std::size_t batch,
                      std::size_t q_len, std::size_t kv_len, const Projected& q,
                      const KeysAndValues& kv, const AttentionMask& mask,
                      float* weights, float* output) {
  const std::size_t d = c.d_model, hd = detail::HeadDim(c);
  const PooledBuffer context(batch * q_len * d);
  const Projected ctx{context.get(), d, q_len};
  detail::RunAttention(target,
                       {{batch, c.num_heads, c.num_kv_heads, q_len, kv_len, hd},
                        q.data,
                        q.Heads(hd),
                        kv.k,
                        kv.Heads(hd),
                        kv.v,
                        kv.Heads(hd),
                        context.get(),
                        ctx.Heads(hd),
                        mask,
                        1.0f / std::sqrt(static_cast<float>(hd)),
                        weights,
                        kv.precision});
  Project(target, context.get(), batch * q_len, w.O(), w.OBias(), output, d);
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
  const std::pair<const char*, detail::Span> inputs[] = {
      {"query", query_span},
      {"key", key_span},
      {"value", value_span},
      {"mask.bias", bias_span}};
  for (const auto& [name, span] : inputs) {
    detail::CheckDisjoint(kWhere, "output", output_span, name, span);
    detail::CheckDisjoint(kWhere, "attention_weights", weights_span, name,
                          span);
  }
  detail::CheckDisjoint(kWhere, "attention_weights", weights_span, "output",
                        output_span);
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
  const std::size_t kv_width = w.kv_width;
  if (query == key && key == value && q_len == kv_len) {
    // Self-attention: Q, K and V in one GEMM against the fused weights.
    const std::size_t wide = w.qkv_width();
    const PooledBuffer qkv(q_rows * wide);
    Project(target, query, q_rows, w.QkvColumns(0, wide), w.QkvBias(0),
            qkv.get(), wide);
    const Projected q{qkv.get(), wide, q_len};
    const Projected k{qkv.get() + w.k_column(), wide, kv_len};
    const Projected v{qkv.get() + w.v_column(), wide, kv_len};
    return AttendAndProject(target, config_, w, batch, q_len, kv_len, q,
                            KeysAndValues::Of(k, v), mask, attention_weights,
                            output);
  }
  const PooledBuffer q_proj(q_rows * w.q_width);
  Project(target, query, q_rows, w.QkvColumns(0, w.q_width), w.QkvBias(0),
          q_proj.get(), w.q_width);
  const Projected q{q_proj.get(), w.q_width, q_len};
  const PooledBuffer kv_proj(kv_rows * 2 * kv_width);
  Projected k{kv_proj.get(), 2 * kv_width, kv_len};
  Projected v{kv_proj.get() + kv_width, 2 * kv_width, kv_len};
  if (key == value) {  // K and V in one GEMM
    Project(target, key, kv_rows, w.QkvColumns(w.k_column(), 2 * kv_width),
            w.QkvBias(w.k_column()), kv_proj.get(), 2 * kv_width);
  } else {
    Project(target, key, kv_rows, w.QkvColumns(w.k_column(), kv_width),
            w.QkvBias(w.k_column()), kv_proj.get(), 2 * kv_width);
    Project(target, value, kv_rows, w.QkvColumns(w.v_column(), kv_width),
            w.QkvBias(w.v_column()), kv_proj.get() + kv_width, 2 * kv_width);
  }
  AttendAndProject(target, config_, w, batch, q_len, kv_len, q,
                   KeysAndValues::Of(k, v), mask, attention_weights, output);
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

  const std::size_t kv = detail::KvDim(config_), wide = w.qkv_width();
  const std::size_t past = cache.length_;
  const PooledBuffer qkv(rows * wide);
  Project(target, x, rows, w.QkvColumns(0, wide), w.QkvBias(0), qkv.get(),
          wide);
  const std::size_t bytes = bytes_per_element(cache.precision_);
  for (std::size_t b = 0; b < batch; ++b) {
    for (std::size_t t = 0; t < new_len; ++t) {
      const float* row = qkv.get() + (b * new_len + t) * wide;
      const std::size_t slot = (b * cache.capacity_ + past + t) * kv * bytes;
      detail::StoreRounded(cache.precision_, row + w.k_column(), kv,
                           cache.keys_.data() + slot);
      detail::StoreRounded(cache.precision_, row + w.v_column(), kv,
                           cache.values_.data() + slot);
    }
  }
  cache.length_ = past + new_len;

  const Projected q{qkv.get(), wide, new_len};
  AttentionMask causal;
  causal.causal = true;
  AttendAndProject(target, config_, w, batch, new_len, cache.length_, q,
                   {cache.keys_.data(), cache.values_.data(), kv,
                    cache.capacity_, cache.precision_},
                   causal, nullptr, output);
}

}  // namespace mha
