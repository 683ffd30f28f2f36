// Buffers that one call shares between its tasks (a packed operand, the
// projections of a layer), taken from a process-wide pool and given back
// when the call ends, so that calls in steady state allocate nothing.
//
// Unlike per-thread scratch (scratch.h), a pooled buffer stays the caller's
// while the caller waits for its tasks, even if the waiting thread runs
// other work meanwhile (oneTBB lets a waiting thread take unrelated tasks,
// which may start calls of their own).
#ifndef MHA_LIB_COMMON_BUFFER_POOL_H_
#define MHA_LIB_COMMON_BUFFER_POOL_H_

#include <cstddef>

#include "lib/common/reusable_floats.h"

namespace mha::detail {

class PooledBuffer {
 public:
  // At least `count` floats, 64-byte aligned, contents unspecified.
  explicit PooledBuffer(std::size_t count);
  ~PooledBuffer();
  PooledBuffer(const PooledBuffer&) = delete;
  PooledBuffer& operator=(const PooledBuffer&) = delete;

  float* get() const { return buffer_.data.get(); }

 private:
  ReusableFloats buffer_;
};

}  // namespace mha::detail

#endif  // MHA_LIB_COMMON_BUFFER_POOL_H_
