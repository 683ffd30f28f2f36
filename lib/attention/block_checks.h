// Whether each whole key block of K and of V holds only finite values,
// found by the first prefill task of a call that reads the block and shared
// with the other query tiles of its KV head. Every tile of a head reads every
// block of its keys, and each checked it again: at L4096 (32 tiles of 128
// queries a head) the checks of K and V, which read the blocks from L3, took
// 6% of the fused core's time on a Sapphire Rapids VM (perf). Shared, one
// process alternating (medians of 9-15): b1 h8 L4096 hd64 1.040x on 1 thread
// and 1.034x on 2, b1 h25 L1024 causal 1.020x; S3's core (one tile a head)
// 1.00x. (Skipping the checks outright, an upper bound: 1.044x and 1.025x.)
//
// A state is only ever set to the one answer the block's values give, so
// tasks that check a block at once (relaxed atomics) agree, and results do
// not depend on the thread count or the order of the tasks.
#ifndef MHA_LIB_ATTENTION_BLOCK_CHECKS_H_
#define MHA_LIB_ATTENTION_BLOCK_CHECKS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>
#include <optional>

#include "lib/common/buffer_pool.h"

namespace mha::detail {

class SharedBlockChecks {
 public:
  enum class Operand { kKeys, kValues };

  // States for `batch` x `kv_heads` heads of `kv_len` keys in blocks of
  // `block_keys`, all unknown, where each head has several query tiles
  // (`tiles_per_head`); with one, nothing is shared and every Finite calls
  // its check.
  SharedBlockChecks(std::size_t tiles_per_head, std::size_t batch,
                    std::size_t kv_heads, std::size_t kv_len,
                    std::size_t block_keys)
      : block_keys_(block_keys),
        blocks_(kv_len / block_keys),
        kv_heads_(kv_heads) {
    if (tiles_per_head < 2 || blocks_ == 0) return;
    const std::size_t count = 2 * batch * kv_heads * blocks_;
    static_assert(sizeof(State) == sizeof(float) &&
                  alignof(State) <= alignof(float));
    storage_.emplace(count);
    states_ = reinterpret_cast<State*>(storage_->get());
    for (std::size_t i = 0; i < count; ++i) new (states_ + i) State(kUnknown);
  }

  // Whether rows [j0, j0 + n) of `which` for (b, kv_head) are all finite:
  // check() for a whole block the first time it is asked (later, its
  // answer), and for every other range of keys (a causal diagonal's, the
  // last ragged block's), whose garbage past the keys a task sees must not
  // count.
  template <class Check>
  bool Finite(Operand which, std::size_t b, std::size_t kv_head, std::size_t j0,
              std::size_t n, const Check& check) const {
    if (states_ == nullptr || n != block_keys_ || j0 % block_keys_ != 0) {
      return check();
    }
    State& state =
        states_[((b * kv_heads_ + kv_head) * 2 + (which == Operand::kValues)) *
                    blocks_ +
                j0 / block_keys_];
    const std::uint32_t known = state.load(std::memory_order_relaxed);
    if (known != kUnknown) return known == kFinite;
    const bool finite = check();
    state.store(finite ? kFinite : kNotFinite, std::memory_order_relaxed);
    return finite;
  }

 private:
  using State = std::atomic<std::uint32_t>;
  static constexpr std::uint32_t kUnknown = 0, kFinite = 1, kNotFinite = 2;

  const std::size_t block_keys_, blocks_, kv_heads_;
  std::optional<PooledBuffer> storage_;
  State* states_ = nullptr;
};

}  // namespace mha::detail

#endif  // MHA_LIB_ATTENTION_BLOCK_CHECKS_H_
