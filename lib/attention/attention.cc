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
#include <cmath>

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

void RunAttention(std::size_t target_index, const AttentionArgs& args) {
  MHA_CALL_TARGET(target_index, AttentionKernel)(args);
}

}  // namespace detail

void attention(const AttentionShape& shape, const float* q, Layout q_layout,
               const float* k, Layout k_layout, const float* v, Layout v_layout,
               float* out, Layout out_layout, const AttentionMask& mask,
               float scale, float* weights) {
  constexpr const char* kWhere = "mha::attention";
  if (shape.batch == 0 || shape.q_len == 0) return;
  detail::CheckPositive(kWhere, "shape.num_heads", shape.num_heads);
  detail::CheckPositive(kWhere, "shape.num_kv_heads", shape.num_kv_heads);
  detail::CheckPositive(kWhere, "shape.head_dim", shape.head_dim);
  if (shape.num_heads % shape.num_kv_heads != 0) {
    detail::Fail(kWhere, ": shape.num_kv_heads (", shape.num_kv_heads,
                 ") must divide shape.num_heads (", shape.num_heads, ")");
  }
  detail::CheckNotNull(kWhere, "q", q);
  detail::CheckNotNull(kWhere, "out", out);
  if (shape.kv_len > 0) {
    detail::CheckNotNull(kWhere, "k", k);
    detail::CheckNotNull(kWhere, "v", v);
  }
  detail::CheckMask(kWhere, mask, shape.batch, shape.kv_len);
  if (scale == 0.0f)
    scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  detail::RunAttention(detail::ChosenTargetIndex(),
                       {shape, q, q_layout, k, k_layout, v, v_layout, out,
                        out_layout, mask, scale, weights});
}

}  // namespace mha
#endif  // HWY_ONCE
