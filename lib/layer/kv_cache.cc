#include "lib/common/check.h"
#include "lib/layer/config.h"
#include "mha/layer.h"

namespace mha {
namespace {

constexpr const char* kWhere = "mha::KVCache";

// Floats in each of the key and value stores; throws before anything is
// allocated if the product overflows.
std::size_t StoreSize(const MultiHeadAttentionConfig& resolved,
                      std::size_t batch, std::size_t max_len) {
  return detail::SizeCheck(kWhere, "the cache (batch x max_len x kv_dim)")
      .Product(batch, max_len, detail::KvDim(resolved));
}

}  // namespace

KVCache::KVCache(const MultiHeadAttentionConfig& config, std::size_t batch,
                 std::size_t max_len)
    : config_(detail::ResolveConfig(kWhere, config)),
      batch_(batch),
      capacity_(max_len),
      keys_(StoreSize(config_, batch, max_len)),
      values_(keys_.size()) {}

std::size_t KVCache::length() const { return length_; }
std::size_t KVCache::capacity() const { return capacity_; }
void KVCache::clear() { length_ = 0; }

}  // namespace mha
