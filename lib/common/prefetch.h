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
//
// Into L2 instead (prefetcht1), tried on Zen 4: a standalone copy of the GQA
// decode loop (4 query rows a K row, blocks of 256 keys, 32 MiB of K and V
// never in L3) read 13.8 GB/s with it against 9.8 with prefetcht0 and 10.9 with
// none, as if prefetches into L1 held its few miss buffers for a DRAM latency.
// In the library, though (streams of K, V and packed weights; one build, the
// hint switched between alternating runs), three such comparisons on the same
// host disagreed: the decode core over 8 KV heads 0.80x, 0.86x and 1.19x on one
// thread, over 32 0.99x, 1.10x and 1.25x, decode steps 0.98-1.15x; the GEMV
// with B in place, prefetched, 0.84x of no prefetch (prefetcht0 0.58x). Not
// kept until a quieter machine settles it.
inline void PrefetchBytes(const void* p, std::size_t bytes) {
  const char* first = static_cast<const char*>(p);
  for (std::size_t i = 0; i < bytes; i += kShortestCacheLine) {
    hwy::Prefetch(first + i);
  }
}

}  // namespace mha::detail

#endif  // MHA_LIB_COMMON_PREFETCH_H_
