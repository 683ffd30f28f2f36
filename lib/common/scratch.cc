#include "lib/common/scratch.h"

#include <array>
#include <cstddef>

#include "hwy/aligned_allocator.h"

namespace mha::detail {

float* ThreadScratch(ScratchSlot slot, std::size_t count) {
  struct Buffer {
    hwy::AlignedFreeUniquePtr<float[]> data;
    std::size_t size = 0;
  };
  thread_local std::array<Buffer, static_cast<std::size_t>(ScratchSlot::kCount)>
      buffers;
  Buffer& buffer = buffers[static_cast<std::size_t>(slot)];
  if (buffer.size < count || !buffer.data) {
    // A power of two (never 0: Highway refuses empty allocations), so that
    // sizes growing call by call settle.
    std::size_t size = 1;
    while (size < count) size *= 2;
    buffer.data = hwy::AllocateAligned<float>(size);
    buffer.size = size;
  }
  return buffer.data.get();
}

}  // namespace mha::detail
