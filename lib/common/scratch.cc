#include "lib/common/scratch.h"

#include <array>
#include <cstddef>

#include "lib/common/reusable_floats.h"

namespace mha::detail {

float* ThreadScratch(ScratchSlot slot, std::size_t count) {
  thread_local std::array<ReusableFloats,
                          static_cast<std::size_t>(ScratchSlot::kCount)>
      buffers;
  ReusableFloats& buffer = buffers[static_cast<std::size_t>(slot)];
  if (buffer.size < count || !buffer.data) {
    buffer = ReusableFloats::Allocate(count);
  }
  return buffer.data.get();
}

}  // namespace mha::detail
