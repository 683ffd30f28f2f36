// The one way kernels spread work over threads: oneTBB tasks in the caller's
// arena, or the same tasks inline, in order, when the whole call is too small
// to pay for waking threads. Tasks are cut by the caller from the shape alone
// and each computes the same whichever thread runs it, so results are
// identical either way.
#ifndef MHA_LIB_COMMON_PARALLEL_H_
#define MHA_LIB_COMMON_PARALLEL_H_

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <cstddef>

namespace mha::detail {

// The threads of the caller's arena (oneTBB's default one outside any).
// Work may be cut by it only where the cut cannot change a result.
inline std::size_t ArenaThreads() {
  return static_cast<std::size_t>(tbb::this_task_arena::max_concurrency());
}

// Below this many multiply-adds (or comparable units) in a whole call, a
// fork and join costs more than it saves.
constexpr double kParallelWork = 1 << 16;

// Calls task(i) for every i in [0, count); inline when total_work is below
// `threshold`.
template <class Task>
void ForEachTask(std::size_t count, double total_work, Task&& task,
                 double threshold = kParallelWork) {
  if (total_work < threshold || count < 2) {
    for (std::size_t i = 0; i < count; ++i) task(i);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, count, 1),
                    [&](const tbb::blocked_range<std::size_t>& range) {
                      for (std::size_t i = range.begin(); i < range.end();
                           ++i) {
                        task(i);
                      }
                    });
}

}  // namespace mha::detail

#endif  // MHA_LIB_COMMON_PARALLEL_H_
