#include "lib/layer/config.h"

#include "lib/common/check.h"

namespace mha::detail {

MultiHeadAttentionConfig ResolveConfig(const char* where,
                                       const MultiHeadAttentionConfig& config) {
  CheckPositive(where, "d_model", config.d_model);
  CheckPositive(where, "num_heads", config.num_heads);
  if (config.d_model % config.num_heads != 0) {
    Fail(where, ": d_model (", config.d_model,
         ") must be divisible by num_heads (", config.num_heads, ")");
  }
  CheckPrecision(where, "weight_precision", config.weight_precision);
  MultiHeadAttentionConfig resolved = config;
  if (resolved.num_kv_heads == 0) resolved.num_kv_heads = config.num_heads;
  if (config.num_heads % resolved.num_kv_heads != 0) {
    Fail(where, ": num_kv_heads (", resolved.num_kv_heads,
         ") must divide num_heads (", config.num_heads, ")");
  }
  return resolved;
}

}  // namespace mha::detail
