// The multi-head attention layer: project, split into heads, attend,
// concatenate, project; and its KV cache for incremental decoding.
#ifndef MHA_LAYER_H_
#define MHA_LAYER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "mha/attention.h"
#include "mha/detail/huge_pages.h"
#include "mha/precision.h"

namespace mha {

// head_dim = d_model / num_heads; kv_dim = num_kv_heads * head_dim.
struct MultiHeadAttentionConfig {
  std::size_t d_model = 0;
  std::size_t num_heads = 0;
  std::size_t num_kv_heads = 0;  // 0 means num_heads; 1 is multi-query; a
                                 // divisor of num_heads is grouped-query
  bool bias = false;             // biases on the four projections
  // Storage of the four weight matrices (not the biases): set_weights and
  // init_random round fp32 weights to it (nearest, ties to even), and the
  // projections widen them in registers. BF16 or F16 halve the bytes a
  // decode step reads (see MultiHeadAttention for the accuracy).
  Precision weight_precision = Precision::F32;
};

enum class WeightLayout {
  InOut,  // y = x * W, W stored [in, out]   (the seed documents' convention)
  OutIn,  // y = x * W^T, W stored [out, in] (PyTorch nn.Linear's convention)
};

struct MultiHeadAttentionWeights {
  const float* w_q = nullptr;  // InOut: [d_model, d_model]
  const float* w_k = nullptr;  // InOut: [d_model, kv_dim]
  const float* w_v = nullptr;  // InOut: [d_model, kv_dim]
  const float* w_o = nullptr;  // InOut: [d_model, d_model]
  const float* b_q = nullptr;  // [d_model]; the four biases are required iff
  const float* b_k = nullptr;  // [kv_dim]     config.bias, and must be null
  const float* b_v = nullptr;  // [kv_dim]     otherwise
  const float* b_o = nullptr;  // [d_model]
  WeightLayout layout = WeightLayout::InOut;
};

class KVCache;
namespace detail {
class LayerWeights;
}

// Accuracy: outputs are within about (d_model + kv_len + 4 L) * 2^-22
// relative of a double-precision evaluation on the same fp32 inputs and
// weights, L being the largest |logit| of the attention; attention weights
// within as much, absolute (they are at most 1). Those weights are
// mha::attention's of the fp32 projections, so its bound per weight, tails
// included, holds against the exact softmax of the projections. With 16-bit
// weights or KV cache that bound holds against the evaluation on the
// rounded weights, keys and values; against fp32 ones, rounding adds about
// 2^-8 relative (BF16) or 2^-11 (F16) for well-scaled data (N(0,1) inputs,
// init_random weights, d_model 512, a decode step over 300 cached tokens,
// both weights and cache in 16 bits: 5.7e-3 normwise for BF16, 7.3e-4 for
// F16; tests/precision_test.cc). F16 stores |x| beyond 65504 as Inf, which
// then propagates as the NaN rules say. Rows that see no key
// output b_o (zeros without bias). NaN or Inf in a query row, in the key or
// value row of a token the row sees, or in the weights makes the outputs it
// reaches NaN; tokens hidden by the mask never count, whatever they hold.
// Sizes whose products overflow (batch x length x d_model, the attention
// weights) throw; outputs must not overlap inputs (checked: throws). Results
// do not depend on the thread count. Copyable and movable; const members may
// run concurrently on one object.
class MultiHeadAttention {
 public:
  // Weights start at zero. Throws std::invalid_argument unless d_model and
  // num_heads are positive, num_heads divides d_model, and num_kv_heads
  // (when not 0) divides num_heads.
  explicit MultiHeadAttention(const MultiHeadAttentionConfig& config);
  // As the seed documents: no biases, random N(0,1) * sqrt(2 / d_model)
  // weights (init_random(0)).
  MultiHeadAttention(std::size_t d_model, std::size_t num_heads);

  const MultiHeadAttentionConfig& config() const;  // num_kv_heads resolved

  // Copies the weights (null weight pointers throw), packed into the
  // kernels' panel format for the target in force (other targets' packings
  // are made from it on first use, after set_target). Throws, keeping the
  // old weights, when a bias is given without config.bias or missing with it.
  void set_weights(const MultiHeadAttentionWeights& weights);
  // N(0,1) * sqrt(2 / d_model) weights from a fixed generator seeded by
  // `seed` (same seed, same weights, on every machine); biases zero.
  void init_random(std::uint64_t seed);

  // query [batch, q_len, d_model]; key, value [batch, kv_len, d_model];
  // output [batch, q_len, d_model]; attention_weights, when given, [batch,
  // num_heads, q_len, kv_len]. Self-attention (the same pointer three times)
  // is projected with one fused GEMM. A few queries over many keys (where
  // it needs at most half the multiply-adds) attend in the absorbed order: W_k
  // folded into the queries and W_v into the context, K and V never projected
  // (README: "A few queries over many keys"); the accuracy above holds either
  // way. Zero batch or q_len does nothing; kv_len == 0 outputs b_o in every
  // row. The mask is as in mha::attention.
  void forward(const float* query, const float* key, const float* value,
               std::size_t batch, std::size_t q_len, std::size_t kv_len,
               float* output, const AttentionMask& mask = {},
               float* attention_weights = nullptr) const;

  // One decoder self-attention step: projects x [batch, new_len, d_model] to
  // K and V, appends them to the cache, and attends causally over all the
  // cache holds; writes output [batch, new_len, d_model]. Throws (leaving the
  // cache unchanged) if the cache's config or batch does not match, or if
  // length() + new_len would exceed capacity(). new_len == 0 changes nothing.
  // Feeding a sequence in chunks of any sizes gives the outputs of one causal
  // forward(x, x, x) over the whole sequence, within the accuracy above.
  void forward_cached(const float* x, std::size_t batch, std::size_t new_len,
                      KVCache& cache, float* output) const;

 private:
  MultiHeadAttentionConfig config_;
  // The weights packed for the kernels of each target the layer has run on:
  // immutable, so copies share them; set_weights replaces them.
  std::shared_ptr<const detail::LayerWeights> weights_;
};

// Keys and values of past tokens: up to max_len per sequence, kv_dim values
// of K and kv_dim of V per token.
//
// Sharing: forward_cached writes the cache it is given, so calls that share
// one cache must not run concurrently (calls on distinct caches, and const
// calls such as length(), may). A copy is independent of its source.
class KVCache {
 public:
  // Room for max_len tokens of each of `batch` sequences, for layers of this
  // config, keys and values stored in kv_precision: forward_cached rounds
  // them to it (nearest, ties to even) as it appends them, and attention
  // widens them back in registers (BF16 and F16 halve the bytes a decode
  // step reads from the cache; see MultiHeadAttention for the accuracy).
  // Throws std::invalid_argument for an invalid config, or when batch x
  // max_len x kv_dim overflows (before allocating anything).
  KVCache(const MultiHeadAttentionConfig& config, std::size_t batch,
          std::size_t max_len, Precision kv_precision = Precision::F32);
  std::size_t length() const;    // tokens held per sequence
  std::size_t capacity() const;  // max_len
  Precision precision() const;   // kv_precision
  void clear();

 private:
  friend class MultiHeadAttention;
  MultiHeadAttentionConfig config_;  // num_kv_heads resolved
  std::size_t batch_, capacity_, length_ = 0;
  Precision precision_;
  // [batch, num_kv_heads, max_len, head_dim] elements of precision_ each:
  // decoding reads each KV head's keys and values as one run, from huge
  // pages where the system has them.
  using Store =
      std::vector<unsigned char, detail::HugePageAllocator<unsigned char>>;
  Store keys_, values_;
};

}  // namespace mha

#endif  // MHA_LAYER_H_
