// Attention that returns its weights: the probabilities must land in the
// [batch, num_heads, q_len, kv_len] output row by row, so this task works in
// row-major orientation: S = scale * Q K^T goes straight into the weights
// rows (Q read by broadcasts, K packed as K^T panels, the smallest operand),
// a row softmax turns it into probabilities in place, and O = W V reads the
// weights rows by broadcasts and V rows as they lie.

#if defined(MHA_LIB_ATTENTION_WEIGHTS_TILE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_LIB_ATTENTION_WEIGHTS_TILE_INL_H_
#undef MHA_LIB_ATTENTION_WEIGHTS_TILE_INL_H_
#else
#define MHA_LIB_ATTENTION_WEIGHTS_TILE_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

#include "hwy/highway.h"
#include "lib/attention/attention_args.h"
#include "lib/attention/task.h"
#include "lib/common/scratch.h"
#include "lib/gemm/blocking-inl.h"
#include "lib/gemm/microkernel-inl.h"
#include "lib/gemm/pack-inl.h"
#include "lib/softmax/row-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

class WeightsTile {
 public:
  static constexpr std::size_t kBlock = 256;  // keys per block

  WeightsTile(const detail::AttentionArgs& args, const detail::TaskRows& task)
      : a_(args), s_(args.shape), task_(task), rows_(task.count()),
        dim_(s_.head_dim), padded_dim_(RoundUp(dim_, TileCols())) {
    using detail::ScratchSlot;
    using detail::ThreadScratch;
    panels_ = ThreadScratch(ScratchSlot::kPackedK, kBlock * padded_dim_);
    values_ = ThreadScratch(ScratchSlot::kAccumulator, RoundUp(rows_, kTileRows) * padded_dim_);
    zero_row_ = ThreadScratch(ScratchSlot::kPackedV, std::max(kBlock, dim_));
    std::memset(zero_row_, 0, std::max(kBlock, dim_) * sizeof(float));
    std::memset(values_, 0, RoundUp(rows_, kTileRows) * padded_dim_ * sizeof(float));
    thread_local std::vector<std::size_t> visible;
    thread_local std::vector<float> ones;
    visible.resize(rows_);
    ones.assign(rows_, 1.0f);
    visible_end_ = visible.data();
    sums_ = ones.data();
    keys_end_ = detail::FindVisibleKeys(a_, task_, rows_, visible_end_);
  }

  void Run() {
    for (std::size_t j0 = 0; j0 < s_.kv_len; j0 += kBlock) {
      ScoresInto(j0, std::min(kBlock, s_.kv_len - j0));
    }
    for (std::size_t r = 0; r < rows_; ++r) SoftmaxRow(Row(r), Row(r), s_.kv_len, 1.0f);
    for (std::size_t j0 = 0; j0 < keys_end_; j0 += kBlock) {
      AccumulateValues(j0, std::min(kBlock, keys_end_ - j0));
    }
  }

  // Probabilities are normalized already: sums of one.
  detail::RowResults Results() const { return {values_, padded_dim_, 1, sums_, sums_}; }

 private:
  float* Row(std::size_t r) const {
    return a_.weights +
           ((task_.b * s_.num_heads + task_.head(r)) * s_.q_len + task_.query(r)) * s_.kv_len;
  }

  // Weights rows, keys [j0, j0 + n): scale * q.k (+ bias) where visible,
  // -inf where hidden.
  void ScoresInto(std::size_t j0, std::size_t n) {
    if (j0 < keys_end_) {
      const Layout& kl = a_.k_layout;
      const float* keys = a_.k + task_.b * kl.batch + task_.kv_head * kl.head + j0 * kl.token;
      const std::size_t nr = TileCols();
      for (std::size_t c0 = 0; c0 < n; c0 += nr) {
        PackPanel(panels_ + c0 * dim_, nr, keys + c0 * kl.token, kl.token, 1,
                  std::min(nr, n - c0), dim_);
      }
      Tile<kTileRows, kTileVecs> tile;
      for (std::size_t r0 = 0; r0 < rows_; r0 += kTileRows) {
        const RowsA<kTileRows> queries = RowPointers(r0, [&](std::size_t r) {
          return detail::QueryRow(a_, task_, r);
        });
        for (std::size_t c0 = 0; c0 < n; c0 += nr) {
          MultiplyTile(dim_, queries, panels_ + c0 * dim_, nr, tile);
          StoreScores(tile, r0, j0 + c0, std::min(nr, n - c0));
        }
      }
    }
    for (std::size_t r = 0; r < rows_; ++r) {
      float* w = Row(r) + j0;
      const std::size_t visible = detail::VisibleIn(visible_end_[r], j0, n);
      if (a_.mask.bias) {
        const float* bias = a_.mask.bias + task_.query(r) * s_.kv_len + j0;
        for (std::size_t j = 0; j < visible; ++j) w[j] += bias[j];
      }
      std::fill(w + visible, w + n, kNegInf);  // hidden: exactly 0 after softmax
    }
  }

  // Rows [r0, r0 + kTileRows) of the tile as pointers from `row_of`, rows past
  // the task's pointing at zeros.
  template <class RowOf>
  RowsA<kTileRows> RowPointers(std::size_t r0, RowOf&& row_of) const {
    RowsA<kTileRows> rows;
    for (std::size_t r = 0; r < kTileRows; ++r) {
      rows.rows[r] = r0 + r < rows_ ? row_of(r0 + r) : zero_row_;
    }
    return rows;
  }

  void StoreScores(const Tile<kTileRows, kTileVecs>& tile, std::size_t r0,
                   std::size_t column, std::size_t cols) {
    constexpr std::size_t kCap = kTileVecs * hn::MaxLanes(FloatTag());
    HWY_ALIGN float scores[kTileRows * kCap];
    StoreTile(tile, scores, kCap);
    for (std::size_t r = 0; r < kTileRows && r0 + r < rows_; ++r) {
      float* w = Row(r0 + r) + column;
      for (std::size_t c = 0; c < cols; ++c) w[c] = a_.scale * scores[r * kCap + c];
    }
  }

  // values += W V for keys [j0, j0 + n).
  void AccumulateValues(std::size_t j0, std::size_t n) {
    const Layout& vl = a_.v_layout;
    const float* values = a_.v + task_.b * vl.batch + task_.kv_head * vl.head + j0 * vl.token;
    const std::size_t nr = TileCols();
    const bool direct = dim_ % nr == 0;  // whole panels: read V rows in place
    if (!direct) {
      for (std::size_t c0 = 0; c0 < dim_; c0 += nr) {
        PackPanel(panels_ + c0 * n, nr, values + c0, 1, vl.token, std::min(nr, dim_ - c0), n);
      }
    }
    Tile<kTileRows, kTileVecs> tile;
    for (std::size_t r0 = 0; r0 < rows_; r0 += kTileRows) {
      const RowsA<kTileRows> weights =
          RowPointers(r0, [&](std::size_t r) -> const float* { return Row(r) + j0; });
      for (std::size_t c0 = 0; c0 < dim_; c0 += nr) {
        if (direct) {
          MultiplyTile(n, weights, values + c0, vl.token, tile);
        } else {
          MultiplyTile(n, weights, panels_ + c0 * n, nr, tile);
        }
        AddTile(tile, values_ + r0 * padded_dim_ + c0, padded_dim_);
      }
    }
  }

  const detail::AttentionArgs& a_;
  const AttentionShape& s_;
  detail::TaskRows task_;
  std::size_t rows_, dim_, padded_dim_, keys_end_;
  float *panels_, *values_, *zero_row_, *sums_;
  std::size_t* visible_end_;
};

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_LIB_ATTENTION_WEIGHTS_TILE_INL_H_
