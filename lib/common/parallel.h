// The one way kernels spread work over threads: oneTBB tasks in the caller's
// arena, or the same tasks inline, in order, when the whole call is too small
// to pay for waking threads or the arena has one. Tasks are cut by the caller
// from the shape alone and each computes the same whichever thread runs it, so
// results are identical either way.
#ifndef MHA_LIB_COMMON_PARALLEL_H_
#define MHA_LIB_COMMON_PARALLEL_H_

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
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
// `threshold` or the arena has one thread, where oneTBB's fork and join of
// the same tasks only costs: the seed's example (S1, 2 x 10 tokens, d_model
// 512, about 6 calls a forward) ran 1.010-1.025x faster inline on a 1-thread
// arena (Zen 5, one process alternating, six runs), S2 and S3 1.00x.
template <class Task>
void ForEachTask(std::size_t count, double total_work, Task&& task,
                 double threshold = kParallelWork) {
  if (total_work < threshold || count < 2 || ArenaThreads() == 1) {
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

// How many ranges to split a dimension of `length` into when `pieces`
// tasks would be fewer than `wanted`: enough to reach it, but none shorter
// than min_length. Callers pass constants for `wanted`, never the thread
// count, so that the cut (and the order of the ranges' sums) does not
// depend on it.
inline std::size_t SplitsForTasks(std::size_t pieces, std::size_t wanted,
                                  std::size_t length, std::size_t min_length) {
  if (pieces == 0 || pieces >= wanted) return 1;
  return std::clamp<std::size_t>((wanted + pieces - 1) / pieces, 1,
                                 std::max<std::size_t>(1, length / min_length));
}

}  // namespace mha::detail

#endif  // MHA_LIB_COMMON_PARALLEL_H_
