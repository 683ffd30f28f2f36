// Float buffers sized to be reused by calls whose sizes vary: the one way
// the buffer pool (buffer_pool.h) and per-thread scratch (scratch.h)
// allocate.
#ifndef MHA_LIB_COMMON_REUSABLE_FLOATS_H_
#define MHA_LIB_COMMON_REUSABLE_FLOATS_H_

#include <cstddef>

#include "mha/detail/huge_pages.h"

namespace mha::detail {

struct ReusableFloats {
  HugePagesArray<float> data;
  std::size_t size = 0;  // floats

  // At least `count` floats, 64-byte aligned: a power of two of them (at
  // least one), so that a size growing call by call (a decode step's
  // states, one more key each time) settles on a buffer it finds again. On
  // huge pages from 2 MiB on (huge_pages.h), as the weights they are used
  // with, so that the tables of peer_table, whose process has every buffer
  // on them, time what a caller gets (on Zen 4, S4 and S5 as self-attention
  // took 0.96-1.01x the time with every buffer on huge pages, 3 processes
  // each).
  static ReusableFloats Allocate(std::size_t count) {
    std::size_t size = 1;
    while (size < count) size *= 2;
    return {AllocateHugePagesArray<float>(size), size};
  }
};

}  // namespace mha::detail

#endif  // MHA_LIB_COMMON_REUSABLE_FLOATS_H_
