// Float buffers sized to be reused by calls whose sizes vary: the one way
// the buffer pool (buffer_pool.h) and per-thread scratch (scratch.h)
// allocate.
#ifndef MHA_LIB_COMMON_REUSABLE_FLOATS_H_
#define MHA_LIB_COMMON_REUSABLE_FLOATS_H_

#include <cstddef>

#include "hwy/aligned_allocator.h"

namespace mha::detail {

struct ReusableFloats {
  hwy::AlignedFreeUniquePtr<float[]> data;
  std::size_t size = 0;  // floats

  // At least `count` floats, 64-byte aligned: a power of two of them (never
  // 0: Highway refuses empty allocations), so that a size growing call by
  // call (a decode step's states, one more key each time) settles on a
  // buffer it finds again.
  static ReusableFloats Allocate(std::size_t count) {
    std::size_t size = 1;
    while (size < count) size *= 2;
    return {hwy::AllocateAligned<float>(size), size};
  }
};

}  // namespace mha::detail

#endif  // MHA_LIB_COMMON_REUSABLE_FLOATS_H_
