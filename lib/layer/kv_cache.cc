#include "lib/common/check.h"
#include "lib/layer/config.h"
#include "mha/layer.h"

namespace mha {
namespace {

constexpr const char* kWhere = "mha::KVCache";

// Bytes in each of the key and value stores; throws before anything is
// allocated if the product overflows.
std::size_t StoreBytes(const MultiHeadAttentionConfig& resolved,
                       std::size_t batch, std::size_t max_len,
                       Precision precision) {
  detail::CheckPrecision(kWhere, "kv_precision", precision);
  const detail::SizeCheck size(kWhere, "the cache (batch x max_len x kv_dim)");
  return size.Product(size.Product(batch, max_len, detail::KvDim(resolved)),
                      bytes_per_element(precision));
}

}  // namespace

KVCache::KVCache(const MultiHeadAttentionConfig& config, std::size_t batch,
                 std::size_t max_len, Precision kv_precision)
    : config_(detail::ResolveConfig(kWhere, config)),
      batch_(batch),
      capacity_(max_len),
      precision_(kv_precision),
      keys_(StoreBytes(config_, batch, max_len, kv_precision)),
      values_(keys_.size()) {}

std::size_t KVCache::length() const { return length_; }
std::size_t KVCache::capacity() const { return capacity_; }
Precision KVCache::precision() const { return precision_; }
void KVCache::clear() { length_ = 0; }

}  // namespace mha
