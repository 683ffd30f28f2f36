// Step 1 of the absorbed order (absorbed_attention.h): the queries folded
// into the key weights, read from the layer's packed panels of W_k as they
// are stored (fp32, BF16 or F16).
#ifndef MHA_LIB_LAYER_ABSORB_QUERIES_H_
#define MHA_LIB_LAYER_ABSORB_QUERIES_H_

#include <cstddef>

#include "mha/precision.h"

namespace mha::detail {

struct AbsorbQueriesArgs {
  // W_k's packed panels (the layer's, of `precision`): column c of W_k in
  // panel c / panel_cols, [d_model, panel_cols] row-major.
  const void* key_panels;
  Precision precision;
  std::size_t d_model, panel_cols, head_dim;
  std::size_t heads, group;  // query heads; query heads per KV head
  std::size_t q_len;
  // Query (head h, position i) at queries + h * head_stride + i * token.
  const float* queries;
  std::size_t head_stride, token;
  float scale;
  float* absorbed;  // [heads * q_len, d_model], row (h, i) at h * q_len + i
};

// absorbed[(h, i), r] = scale * q_{h,i} . W_k[r, g hd : (g + 1) hd] for every
// row r of W_k, g = h / group the head's KV head, on the target of a
// ChosenTargetIndex(); head_dim a whole number of panels. Each element is
// one dot product over head_dim in the order of dot_rows-inl.h, so results
// do not depend on the threads. A NaN or Inf in a query or in W_k gives a
// NaN or Inf in the rows it reaches, as the products would.
void AbsorbQueries(std::size_t target_index, const AbsorbQueriesArgs& args);

}  // namespace mha::detail

#endif  // MHA_LIB_LAYER_ABSORB_QUERIES_H_
