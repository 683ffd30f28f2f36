// Software prefetch of a run of memory the hardware prefetchers would miss:
// rows of a few hundred bytes, read once, or far apart.
#ifndef MHA_LIB_COMMON_PREFETCH_H_
#define MHA_LIB_COMMON_PREFETCH_H_

#include <cstddef>

#include "hwy/cache_control.h"
#include "lib/common/cache_sizes.h"

namespace mha::detail {

// How far ahead to ask for a stream read in order (a panel of packed
// weights, a head's K rows): about what one stream must have in flight to
// read at DRAM speed, latency x bandwidth (~100 ns x 40 GB/s). Farther, the
// lines risk leaving L1 before use; nearer, they come late (see the callers
// for the measurements).
constexpr std::size_t kStreamLeadBytes = 4096;

// Where a prefetch puts the lines it asks for.
enum class CacheLevel {
  kL1,  // hwy::Prefetch: prefetcht0 on x86 (nothing on targets without one)
  kL2,  // prefetcht1 on x86, PLDL2KEEP on Arm
};

// Asks for the cache lines of [p, p + bytes) into kLevel.
//
// Into L2 is for runs read from DRAM by a loop with little else in flight: on
// Zen 4 (8-way L1d, 1 MiB L2) prefetches into L1 seem to hold the core's few L1
// miss buffers for a DRAM latency. The decode core over 8 KV heads
// (lib/attention/decode-inl.h), one build switching the hint between calls in
// one process (mha::attention, 32 query heads, head_dim 128, 4096 keys, K and V
// cycled through 256 MiB so that they come from DRAM; medians of 21): into L2
// 1.28x and 1.23x as fast as into L1 on one thread in two runs (19.1 against
// 15.5 GB/s), 1.22x on two; over 32 KV heads (2048 keys) 1.03-1.17x; from L3
// (256 and 128 keys) 1.04x and 1.83x. The layer's decode step at d4096, mostly
// the GEMV of pre-packed weights (lib/gemm/gemv-inl.h), ran 0.98-1.00x as fast
// with its panels asked into L2, so those stay L1.
template <CacheLevel kLevel = CacheLevel::kL1>
inline void PrefetchBytes(const void* p, std::size_t bytes) {
  const char* first = static_cast<const char*>(p);
  for (std::size_t i = 0; i < bytes; i += kShortestCacheLine) {
    if constexpr (kLevel == CacheLevel::kL1) {
      hwy::Prefetch(first + i);
    } else {
      __builtin_prefetch(first + i, /*rw=*/0, /*locality=*/2);
    }
  }
}

}  // namespace mha::detail

#endif  // MHA_LIB_COMMON_PREFETCH_H_
