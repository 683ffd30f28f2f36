// mha::attention: argument checks, then one dispatch to the chosen target's
// tiled attention (attention-inl.h), compiled here once per Highway target.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lib/attention/attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "hwy/highway.h"
#include "lib/attention/attention-inl.h"
#include "lib/dispatch/dispatch.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {

void AttentionKernel(const detail::AttentionArgs& args) {
  detail::NoteKernelTarget(HWY_TARGET);
  AttentionTasks(args);
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <algorithm>
#include <cmath>
#include <iterator>

#include "lib/common/check.h"
#include "mha/attention.h"

namespace mha {
HWY_EXPORT(AttentionKernel);

namespace detail {

void CheckMask(const char* where, const AttentionMask& mask, std::size_t batch,
               std::size_t kv_len) {
  if (mask.kv_lengths == nullptr) return;
  for (std::size_t b = 0; b < batch; ++b) {
    const std::int32_t length = mask.kv_lengths[b];
    if (length < 0 || static_cast<std::size_t>(length) > kv_len) {
      Fail(where, ": mask.kv_lengths[", b, "] (", length,
           ") must lie in [0, kv_len] = [0, ", kv_len, "]");
    }
  }
}

std::size_t ViewExtent(const char* where, const char* name, Layout layout,
                       std::size_t batch, std::size_t heads, std::size_t tokens,
                       std::size_t head_dim) {
  const SizeCheck size(where, name);
  if (batch == 0 || heads == 0 || tokens == 0 || head_dim == 0) return 0;
  return size.Sum(size.Sum(size.Product(batch - 1, layout.batch),
                           size.Product(heads - 1, layout.head)),
                  size.Sum(size.Product(tokens - 1, layout.token), head_dim));
}

void RunAttention(std::size_t target_index, const AttentionArgs& args) {
  MHA_CALL_TARGET(target_index, AttentionKernel)(args);
}

}  // namespace detail

namespace {

// Sorted by stride, each dimension of more than one row must step past the
// span of all the rows of the dimensions below it: then no two rows share
// an element. (A sufficient test, as PyTorch's for internal overlap: views
// whose rows interleave without sharing elements are rejected too.)
void CheckRowsDisjoint(const char* where, const char* name, Layout layout,
                       std::size_t batch, std::size_t heads, std::size_t tokens,
                       std::size_t head_dim) {
  struct Dimension {
    std::size_t count, stride;
  };
  Dimension dims[] = {
      {batch, layout.batch}, {heads, layout.head}, {tokens, layout.token}};
  std::sort(std::begin(dims), std::end(dims),
            [](const Dimension& x, const Dimension& y) {
              return x.stride < y.stride;
            });
  std::size_t span = head_dim;  // of the rows below (no overflow: ViewExtent)
  for (const Dimension& dim : dims) {
    if (dim.count < 2) continue;
    if (dim.stride < span) {
      detail::Fail(
          where, ": ", name, " (batch ", layout.batch, ", head ", layout.head,
          ", token ", layout.token,
          ") lays rows over one another: sorted by stride, each stride "
          "must be at least the span of the rows it steps over (",
          span, " elements, stride ", dim.stride, ")");
    }
    span += (dim.count - 1) * dim.stride;
  }
}

// Both overloads of mha::attention: K and V hold elements of kv_precision.
void CheckAndRun(const AttentionShape& shape, const float* q, Layout q_layout,
                 const void* k, Layout k_layout, const void* v, Layout v_layout,
                 Precision kv_precision, float* out, Layout out_layout,
                 const AttentionMask& mask, float scale, float* weights) {
  constexpr const char* kWhere = "mha::attention";
  if (shape.batch == 0 || shape.q_len == 0) return;
  const AttentionShape& s = shape;
  detail::CheckPositive(kWhere, "shape.num_heads", s.num_heads);
  detail::CheckPositive(kWhere, "shape.num_kv_heads", s.num_kv_heads);
  detail::CheckPositive(kWhere, "shape.head_dim", s.head_dim);
  if (s.num_heads % s.num_kv_heads != 0) {
    detail::Fail(kWhere, ": shape.num_kv_heads (", s.num_kv_heads,
                 ") must divide shape.num_heads (", s.num_heads, ")");
  }
  detail::CheckFinite(kWhere, "scale", scale);
  detail::CheckNotNull(kWhere, "q", q);
  detail::CheckNotNull(kWhere, "out", out);
  if (s.kv_len > 0) {
    detail::CheckNotNull(kWhere, "k", k);
    detail::CheckNotNull(kWhere, "v", v);
  }
  detail::CheckMask(kWhere, mask, s.batch, s.kv_len);
  // Every query row and every key must be countable, so that the kernels'
  // (signed) index arithmetic cannot overflow.
  detail::SizeCheck(kWhere, "the query rows")
      .Product(s.batch, s.num_heads, s.q_len);
  detail::SizeCheck(kWhere, "the keys")
      .Product(s.batch, s.num_kv_heads, s.kv_len);
  using detail::Span;
  using detail::ViewExtent;
  const std::size_t kv_bytes = bytes_per_element(kv_precision);
  const Span q_span{q, ViewExtent(kWhere, "q", q_layout, s.batch, s.num_heads,
                                  s.q_len, s.head_dim)};
  const Span k_span{k,
                    ViewExtent(kWhere, "k", k_layout, s.batch, s.num_kv_heads,
                               s.kv_len, s.head_dim),
                    kv_bytes};
  const Span v_span{v,
                    ViewExtent(kWhere, "v", v_layout, s.batch, s.num_kv_heads,
                               s.kv_len, s.head_dim),
                    kv_bytes};
  const Span out_span{out, ViewExtent(kWhere, "out", out_layout, s.batch,
                                      s.num_heads, s.q_len, s.head_dim)};
  const Span bias_span{
      mask.bias,
      mask.bias
          ? detail::SizeCheck(kWhere, "mask.bias").Product(s.q_len, s.kv_len)
          : 0};
  const Span weights_span{
      weights, weights ? detail::SizeCheck(kWhere, "weights")
                             .Product(s.batch * s.num_heads, s.q_len, s.kv_len)
                       : 0};
  detail::CheckOutputsDisjoint(
      kWhere, {{"out", out_span}, {"weights", weights_span}},
      {{"q", q_span}, {"k", k_span}, {"v", v_span}, {"mask.bias", bias_span}});
  CheckRowsDisjoint(kWhere, "out_layout", out_layout, s.batch, s.num_heads,
                    s.q_len, s.head_dim);
  if (scale == 0.0f) scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  detail::RunAttention(detail::ChosenTargetIndex(),
                       {shape, q, q_layout, k, k_layout, v, v_layout, out,
                        out_layout, mask, scale, weights, kv_precision});
}

}  // namespace

void attention(const AttentionShape& shape, const float* q, Layout q_layout,
               const float* k, Layout k_layout, const float* v, Layout v_layout,
               float* out, Layout out_layout, const AttentionMask& mask,
               float scale, float* weights) {
  CheckAndRun(shape, q, q_layout, k, k_layout, v, v_layout, Precision::F32, out,
              out_layout, mask, scale, weights);
}

void attention(const AttentionShape& shape, const float* q, Layout q_layout,
               const std::uint16_t* k, Layout k_layout, const std::uint16_t* v,
               Layout v_layout, Precision kv_precision, float* out,
               Layout out_layout, const AttentionMask& mask, float scale,
               float* weights) {
  detail::CheckPrecision("mha::attention", "kv_precision", kv_precision);
  if (kv_precision == Precision::F32) {
    detail::Fail(
        "mha::attention: kv_precision (F32) must be BF16 or F16 for "
        "16-bit k and v; pass float pointers for F32");
  }
  CheckAndRun(shape, q, q_layout, k, k_layout, v, v_layout, kv_precision, out,
              out_layout, mask, scale, weights);
}

}  // namespace mha
#endif  // HWY_ONCE
