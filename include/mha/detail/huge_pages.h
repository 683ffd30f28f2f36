// Memory for mha's large, long-lived buffers (packed weights, KV caches) on
// transparent huge pages where the system allows them. Internal: public
// headers include it only to name KVCache's storage.
#ifndef MHA_DETAIL_HUGE_PAGES_H_
#define MHA_DETAIL_HUGE_PAGES_H_

#include <cstddef>
#include <memory>

namespace mha::detail {

// At least `bytes` (vector-aligned, 64 bytes at least; throws std::bad_alloc
// when out of memory). Runs of a huge page or more are aligned to one and
// advised onto huge pages before anything touches them; advice only, so
// without transparent huge pages (or outside Linux) they stay on small pages.
void* AllocateHugePages(std::size_t bytes);
void FreeHugePages(void* p) noexcept;  // of AllocateHugePages; null is fine

// An array of `count` T (trivial types: nothing is constructed) owned as
// AllocateHugePages's.
struct HugePagesFree {
  void operator()(void* p) const noexcept { FreeHugePages(p); }
};
template <class T>
using HugePagesArray = std::unique_ptr<T[], HugePagesFree>;
template <class T>
HugePagesArray<T> AllocateHugePagesArray(std::size_t count) {
  return HugePagesArray<T>(
      static_cast<T*>(AllocateHugePages(count * sizeof(T))));
}

// A std::allocator for containers that hold such buffers.
template <class T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT: rebinding
  T* allocate(std::size_t n) {
    return static_cast<T*>(AllocateHugePages(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t) noexcept { FreeHugePages(p); }
  friend bool operator==(HugePageAllocator, HugePageAllocator) { return true; }
  friend bool operator!=(HugePageAllocator, HugePageAllocator) { return false; }
};

}  // namespace mha::detail

#endif  // MHA_DETAIL_HUGE_PAGES_H_
