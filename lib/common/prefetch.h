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

// Asks for the cache lines of [p, p + bytes) (hwy::Prefetch: into L1 where
// the target has a prefetch instruction, else nothing).
inline void PrefetchBytes(const void* p, std::size_t bytes) {
  const char* first = static_cast<const char*>(p);
  for (std::size_t i = 0; i < bytes; i += kShortestCacheLine) {
    hwy::Prefetch(first + i);
  }
}

}  // namespace mha::detail

#endif  // MHA_LIB_COMMON_PREFETCH_H_
