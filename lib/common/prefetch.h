// Software prefetch of a run of memory the hardware prefetchers would miss:
// rows of a few hundred bytes, read once, or far apart.
#ifndef MHA_LIB_COMMON_PREFETCH_H_
#define MHA_LIB_COMMON_PREFETCH_H_

#include <cstddef>

#include "hwy/cache_control.h"
#include "lib/common/cache_sizes.h"

namespace mha::detail {

// How far ahead to ask for a stream read in order (a head's K rows): about
// what one stream must have in flight to read at DRAM speed, latency x
// bandwidth (~100 ns x 40 GB/s). Farther, the lines risk leaving L1 before
// use; nearer, they come late (see the caller for the measurements).
constexpr std::size_t kStreamLeadBytes = 4096;

// Where a prefetch puts the lines it asks for.
enum class CacheLevel {
  kL1,  // hwy::Prefetch: prefetcht0 on x86 (nothing on targets without one)
  kL2,  // prefetcht1 on x86, PLDL2KEEP on Arm
};

// Asks for the cache line of p into kLevel.
//
// Into L2 is for runs read from DRAM by a loop with little else in flight: on
// Zen 4 (8-way L1d, 1 MiB L2) prefetches into L1 seem to hold the core's few L1
// miss buffers for a DRAM latency. The decode core over 8 KV heads
// (lib/attention/decode-inl.h), one build switching the hint between calls in
// one process (mha::attention, 32 query heads, head_dim 128, 4096 keys, K and V
// cycled through 256 MiB so that they come from DRAM; medians of 21): into L2
// 1.28x and 1.23x as fast as into L1 on one thread in two runs (19.1 against
// 15.5 GB/s), 1.22x on two; over 32 KV heads (2048 keys) 1.03-1.17x; from L3
// (256 and 128 keys) 1.04x and 1.83x. On Zen 5 (12-way L1d) the
// hint does not matter: the decode step with the core's rows asked into L1,
// against L2, 0.98-1.01x as fast (8 and 32 KV heads, 1 and 2 threads, two
// runs) but for one cell at 1.04x.
template <CacheLevel kLevel = CacheLevel::kL1>
inline void PrefetchLine(const void* p) {
  if constexpr (kLevel == CacheLevel::kL1) {
    hwy::Prefetch(p);
  } else {
    __builtin_prefetch(p, /*rw=*/0, /*locality=*/2);
  }
}

// Asks for the cache lines of [p, p + bytes) into kLevel.
template <CacheLevel kLevel = CacheLevel::kL1>
inline void PrefetchBytes(const void* p, std::size_t bytes) {
  const char* first = static_cast<const char*>(p);
  for (std::size_t i = 0; i < bytes; i += kShortestCacheLine) {
    PrefetchLine<kLevel>(first + i);
  }
}

// Streams at once that an L1 must have more ways than for software prefetch
// to pay beside them: the eight rows of B a GEMV pass reads
// (kGemvRowsPerPass in lib/gemm/gemv-inl.h).
constexpr std::size_t kStreamsThatNeedMoreL1Ways = 8;

// Whether streams read from DRAM go faster with software prefetch, and GEMV
// with eight streams rather than four. The machine does not report what
// decides it (how well its own prefetchers keep up), so the L1's ways stand
// in for the core generation. B of a GEMV, 1.5 KiB ahead of each stream: the
// 12-way L1 of Zen 5 came with a gain from both, the 8-way L1s of Zen 1 and
// Zen 3 with a loss, whatever the rows' stride (GemvTransposedB's walks, and
// the passes of B in place in Gemv), and so did the 8-way L1 of Zen 4 (B in
// place, 1 x 4096 x 4096: 5.5-6.9 GFLOP/s prefetched 1.5 to 4 KiB ahead
// against 9.7-10.1 without, 1 thread). Into L2 instead (prefetcht1), Zen 4,
// one build switching between calls in one process: B in place 0.91x and
// 0.95x as fast as without prefetch (1 and 2 threads), B transposed 1.08x
// and 1.09x, too little to change the walk where it is unmeasured. The
// decode core's K rows follow the same line (DecodeRange::PrefetchesKeys).
// Where it does not pay, the GEMV walk of more than 8 rows of C still asks
// for its next pass into L2 (Gemv, lib/gemm/gemv-inl.h: Zen 3). Other cores
// are unmeasured.
inline bool StreamingPrefetchPays() {
  return MachineCaches().l1d_ways > kStreamsThatNeedMoreL1Ways;
}

}  // namespace mha::detail

#endif  // MHA_LIB_COMMON_PREFETCH_H_
