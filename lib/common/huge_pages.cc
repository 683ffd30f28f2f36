// Why huge pages: a decode step streams the packed weights and the KV cache
// from DRAM, hundreds of MiB, and on 4 KiB pages each page is a TLB miss where
// the hardware prefetchers also stop. The layer's decode step (d_model 4096, 32
// heads, 2047 cached tokens) on Zen 4 with its weights and cache on huge
// pages, against the same on 4 KiB pages, one process alternating the two
// (medians of 31-41 steps, caches evicted): 8 KV heads 1.12x as fast on 1
// thread, 1.08x on 2; 32 KV heads 1.04-1.06x on 1, 1.09x on 2. A plain read
// loop ran 1.15-1.23x as fast there on huge pages. Not on every host: on a
// Zen 5 VM (no caches in sysfs, L3 reported as 508 MiB) the same read loop
// (4 streams over 256 MiB) ran 0.86-0.97x as fast on huge pages, in six
// processes, and the decode step 0.82-0.87x with 8 KV heads (weights on huge
// pages against small, the cache on either), 0.78-1.02x with 32, for half an
// hour; then the loop 1.00-1.29x and the step 1.03-1.05x with 8 KV heads,
// 0.95-0.98x with 32. Its S4 and S5 forward (compute-bound) 0.97-1.02x.
// Hence mha::set_huge_pages (mha/memory.h), for hosts and times where the
// advice loses.
#include "mha/detail/huge_pages.h"

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <new>

#include "mha/memory.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace mha {
namespace {
std::atomic<bool> g_advise_huge_pages{true};
}  // namespace

void set_huge_pages(bool advise) { g_advise_huge_pages.store(advise); }
bool huge_pages() { return g_advise_huge_pages.load(); }

namespace detail {
namespace {

// The size of the transparent huge pages the kernel reports, 2 MiB if it
// does not say (x86-64, and Arm with 4 KiB base pages).
std::size_t HugePageBytes() {
  static const std::size_t bytes = [] {
    std::size_t reported = 0;
    std::ifstream("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size") >>
        reported;
    return reported > 0 ? reported : std::size_t{2} << 20;
  }();
  return bytes;
}

// A cache line, as hwy::AllocateAligned gives (no two buffers share one), and
// an AVX-512 vector.
constexpr std::size_t kMinAlignment = 64;

std::size_t RoundUp(std::size_t bytes, std::size_t unit) {
  return (bytes + unit - 1) / unit * unit;
}

}  // namespace

void* AllocateHugePages(std::size_t bytes) {
  const std::size_t huge = HugePageBytes();
  // A buffer smaller than one huge page would mostly leave it empty.
  const std::size_t alignment = bytes >= huge ? huge : kMinAlignment;
  const std::size_t size = RoundUp(bytes == 0 ? 1 : bytes, alignment);
  void* p = std::aligned_alloc(alignment, size);
  if (p == nullptr) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // Before the first touch, so the page faults map huge pages. Advice only:
  // where the kernel refuses (transparent huge pages "never"), small pages.
  if (alignment == huge && huge_pages()) madvise(p, size, MADV_HUGEPAGE);
#endif
  return p;
}

void FreeHugePages(void* p) noexcept { std::free(p); }

}  // namespace detail
}  // namespace mha
