// Scaled dot-product attention over [batch, head, token, head_dim] views, for
// engines that project Q, K and V themselves.
#ifndef MHA_ATTENTION_H_
#define MHA_ATTENTION_H_

#include <cstddef>
#include <cstdint>

#include "mha/precision.h"

namespace mha {

// Which keys each query may see. The three kinds combine: a key is visible
// only if every mask given lets it through.
struct AttentionMask {
  // Query i sees key j only if j <= i + (kv_len - q_len), in signed arithmetic
  // (aligned bottom-right, as in decoding with a KV cache): when q_len >
  // kv_len the first q_len - kv_len query rows see no key.
  bool causal = false;
  // Optional [batch]: keys j >= kv_lengths[b] are hidden. Each value must lie
  // in [0, kv_len].
  const std::int32_t* kv_lengths = nullptr;
  // Optional additive [q_len, kv_len], row-major, added to the scaled logits,
  // broadcast over batch and heads; -inf hides the key.
  const float* bias = nullptr;
};

// Element strides of a [batch, head, token, head_dim] view; head_dim is
// contiguous (stride 1). Elements outside the view are never read into a
// result nor written. Rows of an input may repeat (stride 0: a K shared by
// every head); rows of an output may not overlap one another (see
// attention's ranges).
struct Layout {
  std::size_t batch, head, token;
};

// num_kv_heads divides num_heads; query head h reads kv head
// h / (num_heads / num_kv_heads) (grouped-query and multi-query attention,
// without copying K or V).
struct AttentionShape {
  std::size_t batch, num_heads, num_kv_heads, q_len, kv_len, head_dim;
};

// out = softmax(scale * q k^T + bias, masked) v per (batch, head).
//
// q: [batch, num_heads, q_len, head_dim]; k, v: [batch, num_kv_heads, kv_len,
// head_dim]; out like q. scale == 0 means 1/sqrt(head_dim).
// weights (optional out): [batch, num_heads, q_len, kv_len], contiguous; the
// softmax probabilities, exactly 0 for hidden keys.
//
// A query row that sees no key at all (fully masked, kv_len == 0, or a causal
// row before the first key) gets an output of zeros and weights of zeros.
//
// Hidden keys never count: a key hidden from a row (causal, kv_lengths, a
// -inf bias) is never read into that row, so NaN or Inf in its K or V (an
// engine's padded or unwritten cache slots) changes nothing there.
// NaN propagates: NaN or Inf in a query row, in the K of a key the row
// sees, or a NaN or +inf bias of such a key, makes that row's output and its
// weights NaN (the weights of its hidden keys stay exactly 0); NaN or Inf in
// the V of a key the row sees makes the output elements it reaches NaN, as
// IEEE arithmetic would. Never a silently clean value. Finite inputs whose
// logits overflow float (|scale * q.k| > 3.4e38) count as Inf.
//
// Without weights the kernel is fused (online softmax over key blocks): its
// extra memory is O(threads x tile), never O(q_len x kv_len).
//
// Ranges: num_heads, num_kv_heads and head_dim positive; batch, q_len, kv_len
// may be zero (nothing to do, or zeros for kv_len == 0); scale finite (0
// means 1/sqrt(head_dim)). A view's extent (the elements from its first to
// its last), the weights' or the bias's size, or the count of query rows or
// keys that overflows throws. out and weights must not overlap q, k, v, the
// bias or each other (each taken as the range it spans): that throws. Nor
// may out's rows overlap one another: sorted by stride, each stride of
// out_layout over more than one row must be at least the span of the rows
// it steps over, else it throws, naming out_layout (a sufficient rule:
// some layouts whose rows interleave without sharing an element fail it).
// Otherwise throws std::invalid_argument naming the parameter, having
// written nothing.
// Accuracy: with L the largest |logit| (scale * q.k + bias) of a row, each
// output is within about (head_dim + 64 + 4 L) * 2^-23 of the exact result
// for the fp32 inputs, relative to max |v| over the keys the row sees
// (sums of p v). Each weight p is within
// (2 (head_dim + 5) S + 10 L + 2 kv_len + 12) * 2^-24 * p of the exact
// softmax, S being the row's largest scale * sum_c |q_c k_c| over the keys
// it sees: tails as much as the largest weights, down to p = 2^-126
// (float's smallest normal); smaller weights are within 2^-126 (0 or
// denormal). Parallel over (batch, kv head, query tile) with oneTBB;
// bitwise identical whatever the thread count.
void attention(const AttentionShape& shape, const float* q, Layout q_layout,
               const float* k, Layout k_layout, const float* v, Layout v_layout,
               float* out, Layout out_layout, const AttentionMask& mask = {},
               float scale = 0.0f, float* weights = nullptr);

// The same attention over K and V stored in 16 bits, as an engine keeps its
// KV cache: k and v hold the bit patterns of kv_precision (BF16 or F16, as
// to_bf16 / to_f16 round them; F32 throws: use the overload above), widened
// to fp32 in registers as they are read, never copied to fp32 whole.
// Everything else is as above, the rules on hidden keys and NaN included
// (F16 Inf, from values beyond 65504, is Inf); the accuracy bound holds
// against the exact attention over the widened K and V. Layout strides count
// 16-bit elements.
void attention(const AttentionShape& shape, const float* q, Layout q_layout,
               const std::uint16_t* k, Layout k_layout, const std::uint16_t* v,
               Layout v_layout, Precision kv_precision, float* out,
               Layout out_layout, const AttentionMask& mask = {},
               float scale = 0.0f, float* weights = nullptr);

}  // namespace mha

#endif  // MHA_ATTENTION_H_
