// The layer's weights, packed once into the GEMM's panel format (so that
// forward and forward_cached never pack a weight), for each target the
// layer runs on.
#ifndef MHA_LIB_LAYER_LAYER_WEIGHTS_H_
#define MHA_LIB_LAYER_LAYER_WEIGHTS_H_

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "lib/gemm/gemm_args.h"
#include "mha/detail/huge_pages.h"
#include "mha/layer.h"

namespace mha::detail {

// The four projections packed for one panel width (one target's TileCols()).
// W_q, W_k and W_v are one panel set, each padded to whole panels, so that
// self-attention projects Q, K and V with one GEMM into rows laid out
// [Q | pad | K | pad | V | pad], and cross-attention takes Q, or K and V,
// as a run of those panels. The padding columns are zero and so are their
// outputs.
struct PackedProjections {
  std::size_t panel_cols, d_model, kv_dim;
  std::size_t q_width, kv_width;  // d_model, kv_dim rounded to whole panels
  Precision precision;            // of the weights' elements
  // The panels' elements, of `precision`: [d_model, qkv_width()] and
  // [d_model, q_width], on huge pages where the system has them (a decode
  // step streams them all).
  HugePagesArray<unsigned char> qkv, o;
  std::vector<float> qkv_bias;  // [q_width + 2 kv_width], or empty
  std::vector<float> o_bias;    // [d_model], or empty

  std::size_t qkv_width() const { return q_width + 2 * kv_width; }
  // Column of the first K, and of the first V, output in a Q|K|V row.
  std::size_t k_column() const { return q_width; }
  std::size_t v_column() const { return q_width + kv_width; }

  // Panels of output columns [first, first + width) of W_q|W_k|W_v, first a
  // whole number of panels.
  PackedB QkvColumns(std::size_t first, std::size_t width) const {
    return {qkv.get() + first * d_model * bytes_per_element(precision), d_model,
            width, panel_cols, precision};
  }
  PackedB O() const {
    return {o.get(), d_model, d_model, panel_cols, precision};
  }
  const float* QkvBias(std::size_t first) const {
    return qkv_bias.empty() ? nullptr : qkv_bias.data() + first;
  }
  const float* OBias() const {
    return o_bias.empty() ? nullptr : o_bias.data();
  }
};

// The packings of one set of weights, made on first use per target from the
// first one. Immutable once made: copies of a layer share it, and const
// calls may run concurrently.
class LayerWeights {
 public:
  // Packs `weights` (either layout) for `target_index`, whose panel width is
  // `panel_cols`.
  LayerWeights(const MultiHeadAttentionConfig& config,
               const MultiHeadAttentionWeights& weights,
               std::size_t target_index, std::size_t panel_cols);

  // The packing for `target_index` (panel width `panel_cols`).
  const PackedProjections& For(std::size_t target_index,
                               std::size_t panel_cols) const;

 private:
  const MultiHeadAttentionConfig config_;  // num_kv_heads resolved
  mutable std::mutex mutex_;
  mutable std::vector<std::unique_ptr<const PackedProjections>> by_target_;
};

}  // namespace mha::detail

#endif  // MHA_LIB_LAYER_LAYER_WEIGHTS_H_
