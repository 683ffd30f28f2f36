// Attention of a few queries over many keys in the absorbed order: the key
// and value projections folded into the queries and the context, so that
// the layer never projects the keys and values themselves.
//
// For query head h (KV head g) and a query row q_h, the standard order
// projects every key, k_j = x_j W_k,g + b_k,g, then scores q_h . k_j; by
// associativity that score is x_j . (W_k,g q_h) + q_h . b_k,g. Likewise
// sum_j p_j (x_j W_v,g + b_v,g) = (sum_j p_j x_j) W_v,g + b_v,g, the
// weights p_j summing to 1. The standard order costs 4 kv_len d_model kv_dim
// floating-point operations per sequence for the K and V projections, the
// absorbed one 4 q_len num_heads d_model (kv_len + head_dim) in all: at q_len
// 1, kv_len 2048, d_model 4096, 32 heads (S6 of the benchmarks), 1.1 GFLOP
// instead of 137. It pays when q_len num_heads is well under kv_dim, which is
// the cross-attention of a few decoder tokens over an encoder's output.
#ifndef MHA_LIB_LAYER_ABSORBED_ATTENTION_H_
#define MHA_LIB_LAYER_ABSORBED_ATTENTION_H_

#include <cstddef>

#include "lib/layer/layer_weights.h"
#include "mha/attention.h"
#include "mha/layer.h"

namespace mha::detail {

// Whether forward should attend in the absorbed order, with weights packed
// in panels of `panel_cols` columns: it needs at most half the
// multiply-adds of the standard order (the absorbed products are skinny,
// 1.4-2x slower per multiply-add on Zen 5: 175 and 124 GFLOP/s against
// 240), heads of whole panels (the query absorption reads a head's panels
// of W_k as they are stored), and no -inf in mask.bias (a key hidden
// inside the visible range would multiply its x_j by 0, which the contract
// forbids when x_j holds NaN or Inf).
bool PrefersAbsorbedOrder(const MultiHeadAttentionConfig& c,
                          std::size_t panel_cols, std::size_t q_len,
                          std::size_t kv_len, const AttentionMask& mask);

// The concatenated heads' context [batch * q_len, d_model] (token-major),
// before the output projection, of queries projected and laid out as `q`
// (a [batch, head, token, head_dim] view) over keys and values given as
// the layer's inputs key, value [batch, kv_len, d_model]. Writes the
// attention weights [batch, num_heads, q_len, kv_len] when `weights` is not
// null. Rows that see no key get a zero context.
void AttendAbsorbed(std::size_t target, const MultiHeadAttentionConfig& c,
                    const PackedProjections& w, const float* q,
                    const Layout& q_layout, const float* key,
                    const float* value, std::size_t batch, std::size_t q_len,
                    std::size_t kv_len, const AttentionMask& mask,
                    float* weights, float* context);

}  // namespace mha::detail

#endif  // MHA_LIB_LAYER_ABSORBED_ATTENTION_H_
