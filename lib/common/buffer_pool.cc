#include "lib/common/buffer_pool.h"

#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

namespace mha::detail {
namespace {

// Free buffers, at most kKept of them: a few concurrent calls each hold a
// handful at once.
class Pool {
 public:
  static Pool& Get() {
    static Pool* pool = new Pool;  // never destroyed: buffers outlive statics
    return *pool;
  }

  // The smallest free buffer of at least `count` floats, else a new one.
  ReusableFloats Take(std::size_t count) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto best = free_.end();
      for (auto it = free_.begin(); it != free_.end(); ++it) {
        if (it->size >= count && (best == free_.end() || it->size < best->size))
          best = it;
      }
      if (best != free_.end()) {
        ReusableFloats entry = std::move(*best);
        free_.erase(best);
        return entry;
      }
    }
    return ReusableFloats::Allocate(count);
  }

  // Keeps the buffer for later calls, dropping the smallest when full.
  void Give(ReusableFloats entry) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(std::move(entry));
    if (free_.size() > kKept) {
      auto smallest = std::min_element(
          free_.begin(), free_.end(),
          [](const ReusableFloats& a, const ReusableFloats& b) {
            return a.size < b.size;
          });
      free_.erase(smallest);
    }
  }

 private:
  static constexpr std::size_t kKept = 16;
  std::mutex mutex_;
  std::vector<ReusableFloats> free_;
};

}  // namespace

PooledBuffer::PooledBuffer(std::size_t count)
    : buffer_(Pool::Get().Take(count)) {}

PooledBuffer::~PooledBuffer() {
  if (buffer_.data) Pool::Get().Give(std::move(buffer_));
}

}  // namespace mha::detail
