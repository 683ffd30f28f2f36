#include "lib/layer/config.h"
#include "mha/layer.h"

namespace mha {

KVCache::KVCache(const MultiHeadAttentionConfig& config, std::size_t batch,
                 std::size_t max_len)
    : config_(detail::ResolveConfig("mha::KVCache", config)),
      batch_(batch),
      capacity_(max_len),
      keys_(batch * max_len * detail::KvDim(config_)),
      values_(keys_.size()) {}

std::size_t KVCache::length() const { return length_; }
std::size_t KVCache::capacity() const { return capacity_; }
void KVCache::clear() { length_ = 0; }

}  // namespace mha
