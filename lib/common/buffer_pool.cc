#include "lib/common/buffer_pool.h"

#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

namespace mha::detail {
namespace {

struct Entry {
  hwy::AlignedFreeUniquePtr<float[]> data;
  std::size_t size;
};

// Free buffers, at most kKept of them: a few concurrent calls each hold a
// handful at once.
class Pool {
 public:
  static Pool& Get() {
    static Pool* pool = new Pool;  // never destroyed: buffers outlive statics
    return *pool;
  }

  // The smallest free buffer of at least `count` floats, else a new one.
  Entry Take(std::size_t count) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto best = free_.end();
      for (auto it = free_.begin(); it != free_.end(); ++it) {
        if (it->size >= count && (best == free_.end() || it->size < best->size))
          best = it;
      }
      if (best != free_.end()) {
        Entry entry = std::move(*best);
        free_.erase(best);
        return entry;
      }
    }
    // A power of two: a size that grows call by call (a decode step's
    // states, one more key each time) finds its buffer again.
    std::size_t size = 1;
    while (size < count) size *= 2;
    return {hwy::AllocateAligned<float>(size), size};
  }

  // Keeps the buffer for later calls, dropping the smallest when full.
  void Give(Entry entry) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(std::move(entry));
    if (free_.size() > kKept) {
      auto smallest = std::min_element(
          free_.begin(), free_.end(),
          [](const Entry& a, const Entry& b) { return a.size < b.size; });
      free_.erase(smallest);
    }
  }

 private:
  static constexpr std::size_t kKept = 16;
  std::mutex mutex_;
  std::vector<Entry> free_;
};

}  // namespace

PooledBuffer::PooledBuffer(std::size_t count) {
  Entry entry = Pool::Get().Take(count);
  data_ = std::move(entry.data);
  size_ = entry.size;
}

PooledBuffer::~PooledBuffer() {
  if (data_) Pool::Get().Give({std::move(data_), size_});
}

}  // namespace mha::detail
