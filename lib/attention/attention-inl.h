// Attention over all tasks in parallel: (batch, KV head, query tile) and, for
// decode-like shapes with few tasks, also ranges of keys. How the work is cut
// depends on the shape only, and each piece is computed the same way on any
// thread, so results do not depend on the thread count.
//
// Without weights: fused, online softmax (FlashAttention): a running row max
// m and sum l; for each key block, P = exp(S - m_new), acc = acc *
// exp(m_old - m_new) + P V; at the end out = acc / l. Memory: one tile per
// thread (plus, with split key ranges, one row state per range).
// With weights: see weights_tile-inl.h.

#if defined(MHA_LIB_ATTENTION_ATTENTION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_LIB_ATTENTION_ATTENTION_INL_H_
#undef MHA_LIB_ATTENTION_ATTENTION_INL_H_
#else
#define MHA_LIB_ATTENTION_ATTENTION_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "hwy/highway.h"
#include "lib/attention/attention_args.h"
#include "lib/attention/decode_rows-inl.h"
#include "lib/attention/row_tile-inl.h"
#include "lib/attention/task.h"
#include "lib/common/parallel.h"
#include "lib/softmax/row-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {

// How the work is cut: a function of the shape alone.
struct TaskGrid {
  std::size_t group, q_tile, q_tiles, key_ranges, range_keys;

  explicit TaskGrid(const detail::AttentionArgs& args) {
    const AttentionShape& s = args.shape;
    group = s.num_heads / s.num_kv_heads;
    q_tile = std::min(s.q_len, std::max<std::size_t>(1, kRowsPerTask / group));
    q_tiles = (s.q_len + q_tile - 1) / q_tile;
    // Few tasks over many keys (decoding): split the keys into ranges of at
    // least 512, merged afterwards, so that every core has work.
    constexpr std::size_t kTasksWanted = 16, kMinRangeKeys = 512;
    const std::size_t tasks = s.batch * s.num_kv_heads * q_tiles;
    key_ranges = 1;
    if (args.weights == nullptr && tasks < kTasksWanted) {
      key_ranges = std::min((kTasksWanted + tasks - 1) / tasks,
                            std::max<std::size_t>(1, s.kv_len / kMinRangeKeys));
    }
    range_keys =
        RoundUp((s.kv_len + key_ranges - 1) / key_ranges, RowTile::kBlock);
  }
  std::size_t tasks(const AttentionShape& s) const {
    return s.batch * s.num_kv_heads * q_tiles * key_ranges;
  }
  // Task t: key range t % key_ranges of query tile t / key_ranges.
  detail::TaskRows Rows(const AttentionShape& s, std::size_t t) const {
    const std::size_t range = t % key_ranges, tile = t / key_ranges;
    const std::size_t q0 = (tile % q_tiles) * q_tile;
    return {tile / q_tiles / s.num_kv_heads,
            tile / q_tiles % s.num_kv_heads,
            q0,
            std::min(q_tile, s.q_len - q0),
            group,
            range * range_keys,
            (range + 1) * range_keys};
  }
};

// Combines the row states of a query tile's key ranges, in range order, and
// writes the tile's output rows.
inline void MergeRanges(const detail::AttentionArgs& args, const TaskGrid& grid,
                        const detail::TaskRows& rows, const float* states) {
  const std::size_t dim = args.shape.head_dim, stride = dim + 2;
  const std::size_t range_stride = rows.group * grid.q_tile * stride;
  for (std::size_t r = 0; r < rows.count(); ++r) {
    float max = kNegInf;
    for (std::size_t k = 0; k < grid.key_ranges; ++k) {
      max = std::max(max, states[k * range_stride + r * stride]);
    }
    float* out = detail::OutputRow(args, rows, r);
    bool poisoned = false;  // a range saw NaN or +inf logits
    for (std::size_t k = 0; k < grid.key_ranges; ++k) {
      poisoned |= std::isnan(states[k * range_stride + r * stride + 1]);
    }
    std::fill(out, out + dim, poisoned ? kNaN : 0.0f);
    if (poisoned || max == kNegInf) continue;  // NaN, or saw no key
    float sum = 0.0f;
    for (std::size_t k = 0; k < grid.key_ranges; ++k) {
      const float* state = states + k * range_stride + r * stride;
      const float weight = std::exp2(state[0] - max);  // maxima in base 2
      sum += state[1] * weight;
      for (std::size_t c = 0; c < dim; ++c) out[c] += state[2 + c] * weight;
    }
    for (std::size_t c = 0; c < dim; ++c) out[c] /= sum;
  }
}

// Writes a task's output rows, or (when its keys are one range of several)
// exports its row states for MergeRanges.
inline void Finish(const detail::AttentionArgs& args,
                   const detail::TaskRows& rows,
                   const detail::RowResults& results, float* state) {
  if (state == nullptr) return results.Write(args, rows);
  const std::size_t stride = args.shape.head_dim + 2;
  for (std::size_t r = 0; r < rows.count(); ++r)
    results.Export(args, r, state + r * stride);
}

inline void AttentionTasks(const detail::AttentionArgs& args) {
  const AttentionShape& s = args.shape;
  const TaskGrid grid(args);
  const std::size_t stride = s.head_dim + 2;
  const std::size_t tile_states =
      grid.key_ranges * grid.group * grid.q_tile * stride;
  std::vector<float> states(
      grid.key_ranges > 1 ? grid.tasks(s) / grid.key_ranges * tile_states : 0);
  // Multiply-adds of Q K^T and P V.
  const double work =
      2.0 * s.batch * s.num_heads * s.q_len * s.kv_len * s.head_dim;
  detail::ForEachTask(grid.tasks(s), work, [&](std::size_t t) {
    const detail::TaskRows rows = grid.Rows(s, t);
    float* state =
        grid.key_ranges == 1
            ? nullptr
            : states.data() + t / grid.key_ranges * tile_states +
                  t % grid.key_ranges * grid.group * grid.q_tile * stride;
    if (args.weights == nullptr && SuitsDecodeRows(args, rows.count())) {
      DecodeRows task(args, rows);
      task.Run();
      Finish(args, rows, task.Results(), state);
    } else {
      RowTile tile(args, rows);
      tile.Run();
      Finish(args, rows, tile.Results(), state);
    }
  });
  if (grid.key_ranges == 1) return;
  const std::size_t tiles = grid.tasks(s) / grid.key_ranges;
  detail::ForEachTask(
      tiles, double(tiles) * tile_states, [&](std::size_t tile) {
        MergeRanges(args, grid, grid.Rows(s, tile * grid.key_ranges),
                    states.data() + tile * tile_states);
      });
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_LIB_ATTENTION_ATTENTION_INL_H_
