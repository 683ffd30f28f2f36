// Attention over all (batch, KV head, query tile) tasks in parallel. Each task
// is independent and computed the same way on any thread, so results do not
// depend on the thread count.
//
// Without weights: fused, online softmax (FlashAttention): a running row max
// m and sum l; for each key block, P = exp(S - m_new), acc = acc *
// exp(m_old - m_new) + P V; at the end out = acc / l. Memory: one tile.
// With weights: the scores of a tile are written to the weights output,
// turned into probabilities by a row softmax, then multiplied by V.

#if defined(MHA_LIB_ATTENTION_ATTENTION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_LIB_ATTENTION_ATTENTION_INL_H_
#undef MHA_LIB_ATTENTION_ATTENTION_INL_H_
#else
#define MHA_LIB_ATTENTION_ATTENTION_INL_H_
#endif

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "hwy/highway.h"
#include "lib/attention/attention_args.h"
#include "lib/attention/query_tile-inl.h"
#include "lib/common/scratch.h"
#include "lib/softmax/row-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {

// Turns row r's scores for a block of n keys into unnormalized probabilities
// against the running max, and updates the running max and sum.
inline void OnlineSoftmaxRow(QueryTile& tile, std::size_t r, std::size_t n,
                             std::size_t visible, float* max, float* sum) {
  float* s = tile.ScoreRow(r);
  const float new_max = std::max(max[r], ScaledRowMax(s, visible, 1.0f));
  if (new_max == kNegInf) {  // nothing seen yet: contributes nothing
    std::memset(s, 0, n * sizeof(float));
    return;
  }
  const float correction = std::exp(max[r] - new_max);  // 0 on the first keys
  const float block_sum = ExpShiftedRow(s, s, visible, 1.0f, new_max);
  std::memset(s + visible, 0, (n - visible) * sizeof(float));
  sum[r] = sum[r] * correction + block_sum;
  max[r] = new_max;
  if (correction != 1.0f) tile.RescaleAccumulator(r, correction);
}

inline void FusedTile(QueryTile& tile) {
  const std::size_t rows = tile.rows();
  float* max = detail::ThreadScratch(detail::ScratchSlot::kRowState, 2 * rows);
  float* sum = max + rows;
  std::fill(max, max + rows, kNegInf);
  std::fill(sum, sum + rows, 0.0f);
  for (std::size_t j0 = 0; j0 < tile.keys_end(); j0 += kKeyBlock) {
    const std::size_t n = std::min(kKeyBlock, tile.keys_end() - j0);
    tile.ComputeScores(j0, n);
    for (std::size_t r = 0; r < rows; ++r) {
      OnlineSoftmaxRow(tile, r, n, tile.Visible(r, j0, n), max, sum);
    }
    tile.AccumulateFromScores(j0, n);
  }
  tile.WriteOutput(sum);
}

inline void MaterializedTile(QueryTile& tile, std::size_t kv_len) {
  const std::size_t rows = tile.rows();
  for (std::size_t j0 = 0; j0 < kv_len; j0 += kKeyBlock) {
    const std::size_t n = std::min(kKeyBlock, kv_len - j0);
    const bool any_visible = j0 < tile.keys_end();
    if (any_visible) tile.ComputeScores(j0, n);
    for (std::size_t r = 0; r < rows; ++r) {
      float* w = tile.WeightsRow(r) + j0;
      const std::size_t visible = any_visible ? tile.Visible(r, j0, n) : 0;
      std::memcpy(w, tile.ScoreRow(r), visible * sizeof(float));
      std::fill(w + visible, w + n, kNegInf);  // hidden: exactly 0 after softmax
    }
  }
  for (std::size_t r = 0; r < rows; ++r) {
    SoftmaxRow(tile.WeightsRow(r), tile.WeightsRow(r), kv_len, 1.0f);
  }
  for (std::size_t j0 = 0; j0 < tile.keys_end(); j0 += kKeyBlock) {
    tile.AccumulateFromWeights(j0, std::min(kKeyBlock, tile.keys_end() - j0));
  }
  tile.WriteOutput(nullptr);
}

inline void AttentionTasks(const detail::AttentionArgs& args) {
  const AttentionShape& s = args.shape;
  const std::size_t group = s.num_heads / s.num_kv_heads;
  const std::size_t q_tile =
      std::min(s.q_len, std::max<std::size_t>(1, kRowsPerTask / group));
  const std::size_t q_tiles = (s.q_len + q_tile - 1) / q_tile;
  const std::size_t tasks = s.batch * s.num_kv_heads * q_tiles;
  tbb::parallel_for(
      tbb::blocked_range<std::size_t>(0, tasks, 1),
      [&](const tbb::blocked_range<std::size_t>& range) {
        for (std::size_t t = range.begin(); t < range.end(); ++t) {
          const std::size_t q0 = (t % q_tiles) * q_tile;
          const TaskRows rows{t / q_tiles / s.num_kv_heads,
                              t / q_tiles % s.num_kv_heads, q0,
                              std::min(q_tile, s.q_len - q0), group};
          QueryTile tile(args, rows);
          if (args.weights) {
            MaterializedTile(tile, s.kv_len);
          } else {
            FusedTile(tile);
          }
        }
      });
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_LIB_ATTENTION_ATTENTION_INL_H_
