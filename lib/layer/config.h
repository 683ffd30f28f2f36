// Validation and derived sizes of a MultiHeadAttentionConfig.
#ifndef MHA_LIB_LAYER_CONFIG_H_
#define MHA_LIB_LAYER_CONFIG_H_

#include <cstddef>

#include "mha/layer.h"

namespace mha::detail {

// The config with num_kv_heads resolved (0 -> num_heads); throws
// std::invalid_argument, prefixed with `where`, for an invalid one.
MultiHeadAttentionConfig ResolveConfig(const char* where,
                                       const MultiHeadAttentionConfig& config);

inline std::size_t HeadDim(const MultiHeadAttentionConfig& c) {
  return c.d_model / c.num_heads;
}
inline std::size_t KvDim(const MultiHeadAttentionConfig& c) {
  return c.num_kv_heads * HeadDim(c);
}
// Columns of the fused Q|K|V projection.
inline std::size_t QkvWidth(const MultiHeadAttentionConfig& c) {
  return c.d_model + 2 * KvDim(c);
}

}  // namespace mha::detail

#endif  // MHA_LIB_LAYER_CONFIG_H_
