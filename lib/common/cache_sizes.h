// The data cache sizes of the machine, read once at run time, from which the
// kernels size their blocks (never from constants that fit one CPU).
#ifndef MHA_LIB_COMMON_CACHE_SIZES_H_
#define MHA_LIB_COMMON_CACHE_SIZES_H_

#include <cstddef>
#include <string>

namespace mha::detail {

struct CacheSizes {
  std::size_t l1d;       // bytes of L1 data cache per core
  std::size_t l1d_ways;  // its associativity
  std::size_t line;      // bytes of its cache line
  std::size_t l2;        // bytes of L2 per core
  std::size_t l3;        // bytes of the last-level cache cpu0 shares
  // Whether one core can fill all of l3: where MHA_CACHES names it, or on
  // Intel's x86 CPUs, whose last-level cache is one per socket (slices on a
  // mesh or ring). Not on AMD's, whose L3 is one per core complex (32 MiB on
  // Zen 4 and Zen 5) while VMs may report a whole socket's (508 MiB on the
  // Zen 5 VMs), nor on Arm's (unmeasured).
  bool l3_fills_from_one_core;
  // Where each size came from, "MHA_CACHES", "sysfs", "sysconf" or "default",
  // in the order above: a VM may report none in sysfs, or a whole socket's L3
  // in sysconf.
  const char* source[5];
};

// Read once, on first use: each size the environment variable MHA_CACHES
// names ("l1d=32K,ways=8,line=64,l2=512K,l3=8M", any of them, in any order),
// else from /sys/devices/system/cpu/cpu0/cache (Linux, x86 and Arm), else
// from sysconf, else typical sizes (48 KiB 8-way L1d, 1 MiB L2, 32 MiB L3,
// 64-byte lines). Sizes a VM reports that are not plausible (an L2 below
// 256 KiB, say) fall back likewise.
// MHA_CACHES lets a VM that reports its caches wrongly be corrected, and the
// tests run every kernel under the blocking and walks of other machines'
// caches. While it is malformed or implausible, every call throws
// std::invalid_argument naming it (ChosenTargetIndex() calls this first, so
// that a kernel throws before it writes anything).
const CacheSizes& MachineCaches();

// MachineCaches() in words, with the source of each size, for benchmark
// reports: "L1d 48 KiB (sysconf), 12-way (sysconf), ...", ending with ", one
// core fills it" where l3_fills_from_one_core.
std::string DescribeMachineCaches();

// A row stride for rows of at least `floats` floats: whole cache lines, an
// odd number of them, so that successive rows fall into different sets of
// L1 and a strip down many rows spreads over all its sets (rows a power of
// two of lines apart share a fraction of them). For a copied A sliver
// (gemm-inl.h) and the attention tile's S^T (prefill_tile-inl.h).
inline std::size_t OddLinesStride(std::size_t floats) {
  const std::size_t line = MachineCaches().line / sizeof(float);
  const std::size_t lines = (floats + line - 1) / line;
  return (lines | 1) * line;
}

// The shortest cache line of the CPUs mha targets (x86 and Arm servers: 64
// bytes; some Arm cores have 128): a loop over a buffer's lines that steps by
// it never skips one, where the line size is needed at compile time.
constexpr std::size_t kShortestCacheLine = 64;

}  // namespace mha::detail

#endif  // MHA_LIB_COMMON_CACHE_SIZES_H_
