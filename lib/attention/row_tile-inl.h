// The work of one attention task in row-major orientation: a tile of query
// rows (every query head that shares one KV head, for a run of positions)
// against the keys and values of that KV head, one block of keys at a time.
//
// Per block: S = scale * Q K^T (queries read by broadcasts, K packed into
// K^T panels: the smallest operand), masks, softmax, then O += P V (score
// rows read by broadcasts, V rows read in place). The score rows live either
// in per-thread scratch, with an online softmax (fused: memory for one block
// only), or in the caller's weights output, where a row softmax runs once
// all blocks are in (materialized).

#if defined(MHA_LIB_ATTENTION_ROW_TILE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_LIB_ATTENTION_ROW_TILE_INL_H_
#undef MHA_LIB_ATTENTION_ROW_TILE_INL_H_
#else
#define MHA_LIB_ATTENTION_ROW_TILE_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>
#include <vector>

#include "hwy/highway.h"
#include "lib/attention/attention_args.h"
#include "lib/attention/task.h"
#include "lib/common/scratch.h"
#include "lib/gemm/microkernel-inl.h"
#include "lib/gemm/pack-inl.h"
#include "lib/gemm/tile_shape-inl.h"
#include "lib/softmax/row-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Query rows per task: several micro-tile heights, so that each packed key
// block is reused, few enough that a block of scores stays in L2.
constexpr std::size_t kRowsPerTask = 16 * kTileRows;

class RowTile {
 public:
  static constexpr std::size_t kBlock = 256;  // keys per block

  RowTile(const detail::AttentionArgs& args, const detail::TaskRows& task)
      : a_(args),
        s_(args.shape),
        task_(task),
        rows_(task.count()),
        padded_rows_(RoundUp(rows_, kTileRows)),
        dim_(s_.head_dim),
        padded_dim_(RoundUp(dim_, TileCols())) {
    using detail::ScratchSlot;
    using detail::ThreadScratch;
    panels_ = ThreadScratch(ScratchSlot::kPackedK, kBlock * padded_dim_);
    values_ =
        ThreadScratch(ScratchSlot::kAccumulator, padded_rows_ * padded_dim_);
    zero_row_ = ThreadScratch(ScratchSlot::kPackedV, std::max(kBlock, dim_));
    std::memset(zero_row_, 0, std::max(kBlock, dim_) * sizeof(float));
    std::memset(values_, 0, padded_rows_ * padded_dim_ * sizeof(float));
    if (a_.weights == nullptr) {
      scores_ = ThreadScratch(ScratchSlot::kScores, padded_rows_ * kBlock);
    }
    thread_local std::vector<std::size_t> visible;
    thread_local std::vector<float> state;
    visible.resize(rows_);
    state.resize(2 * rows_);
    visible_end_ = visible.data();
    max_ = state.data();
    sum_ = max_ + rows_;
    // Materialized probabilities are normalized already: a sum of one.
    std::fill(max_, max_ + rows_, a_.weights ? 0.0f : kNegInf);
    std::fill(sum_, sum_ + rows_, a_.weights ? 1.0f : 0.0f);
    keys_end_ = detail::FindVisibleKeys(a_, task_, rows_, visible_end_);
  }

  void Run() {
    if (a_.weights) return RunMaterialized();
    for (std::size_t j0 = task_.key_begin; j0 < keys_end_; j0 += kBlock) {
      const std::size_t n = std::min(kBlock, keys_end_ - j0);
      ComputeScores(j0, n);
      for (std::size_t r = 0; r < rows_; ++r) {
        float* s = ScoreRow(r, j0);
        const std::size_t visible = detail::VisibleIn(visible_end_[r], j0, n);
        OnlineSoftmaxStep(s, visible, &max_[r], &sum_[r],
                          values_ + r * padded_dim_, dim_);
        std::memset(s + visible, 0, (n - visible) * sizeof(float));
      }
      AccumulateValues(j0, n);
    }
  }

  detail::RowResults Results() const {
    return {values_, padded_dim_, 1, max_, sum_};
  }

 private:
  void RunMaterialized() {
    for (std::size_t j0 = 0; j0 < s_.kv_len; j0 += kBlock) {
      const std::size_t n = std::min(kBlock, s_.kv_len - j0);
      if (j0 < keys_end_) ComputeScores(j0, n);
      for (std::size_t r = 0; r < rows_;
           ++r) {  // hidden: exactly 0 after softmax
        float* s = ScoreRow(r, j0);
        std::fill(s + detail::VisibleIn(visible_end_[r], j0, n), s + n,
                  kNegInf);
      }
    }
    for (std::size_t r = 0; r < rows_; ++r) {
      SoftmaxRow(ScoreRow(r, 0), ScoreRow(r, 0), s_.kv_len, 1.0f);
    }
    for (std::size_t j0 = 0; j0 < keys_end_; j0 += kBlock) {
      AccumulateValues(j0, std::min(kBlock, keys_end_ - j0));
    }
  }

  // Row r's scores for the block starting at key j0: in scratch (fused) or in
  // the weights output (materialized).
  float* ScoreRow(std::size_t r, std::size_t j0) const {
    if (a_.weights == nullptr) return scores_ + r * kBlock;
    return a_.weights +
           ((task_.b * s_.num_heads + task_.head(r)) * s_.q_len +
            task_.query(r)) *
               s_.kv_len +
           j0;
  }

  // Scores of keys [j0, j0 + n) where visible: scale * q.k (+ bias).
  void ComputeScores(std::size_t j0, std::size_t n) {
    const Layout& kl = a_.k_layout;
    const float* keys =
        a_.k + task_.b * kl.batch + task_.kv_head * kl.head + j0 * kl.token;
    const std::size_t nr = TileCols();
    for (std::size_t c0 = 0; c0 < n; c0 += nr) {
      PackPanel(panels_ + c0 * dim_, nr, keys + c0 * kl.token, kl.token, 1,
                std::min(nr, n - c0), dim_);
    }
    const float* queries[kTileRows];
    for (std::size_t r0 = 0; r0 < rows_; r0 += kTileRows) {
      const std::size_t seen = PanelVisible(r0, j0, n);
      RowPointers(r0, queries, [&](std::size_t r) {
        return detail::QueryRow(a_, task_, r);
      });
      for (std::size_t c0 = 0; c0 < seen; c0 += nr) {
        MultiplyTile<kTileRows>(
            dim_, PointersA{queries}, panels_ + c0 * dim_, nr,
            [&](std::size_t r, FloatVec v0, FloatVec v1) {
              StoreScores(r0 + r, j0, c0, std::min(nr, n - c0), v0, v1);
            });
      }
    }
    for (std::size_t r = 0; r < rows_; ++r) {
      FinishLogits(ScoreRow(r, j0), detail::BiasRow(a_, task_, r, j0),
                   detail::VisibleIn(visible_end_[r], j0, n));
    }
  }

  // Keys of block [j0, j0 + n) that some row of [r0, r0 + rows) sees.
  std::size_t PanelVisible(std::size_t r0, std::size_t j0, std::size_t n,
                           std::size_t rows = kTileRows) const {
    std::size_t seen = 0;
    for (std::size_t r = r0; r < std::min(rows_, r0 + rows); ++r) {
      seen = std::max(seen, detail::VisibleIn(visible_end_[r], j0, n));
    }
    return seen;
  }

  // Rows [r0, r0 + kTileRows) as pointers from `row_of`; rows past the
  // task's point at zeros.
  template <class RowOf>
  void RowPointers(std::size_t r0, const float** rows, RowOf&& row_of) const {
    for (std::size_t r = 0; r < kTileRows; ++r) {
      rows[r] = r0 + r < rows_ ? row_of(r0 + r) : zero_row_;
    }
  }

  // scale * (v0, v1) into score row r, columns [c0, c0 + cols) of the block.
  void StoreScores(std::size_t r, std::size_t j0, std::size_t c0,
                   std::size_t cols, FloatVec v0, FloatVec v1) {
    if (r >= rows_) return;
    const FloatTag d;
    const std::size_t lanes = hn::Lanes(d);
    const FloatVec scale = hn::Set(d, a_.scale);
    if (a_.weights == nullptr) {  // scratch rows hold whole tiles
      float* row = scores_ + r * kBlock + c0;
      hn::StoreU(hn::Mul(scale, v0), d, row);
      hn::StoreU(hn::Mul(scale, v1), d, row + lanes);
      return;
    }
    HWY_ALIGN float scores[kTileVecs * hn::MaxLanes(FloatTag())];
    hn::Store(hn::Mul(scale, v0), d, scores);
    hn::Store(hn::Mul(scale, v1), d, scores + lanes);
    std::memcpy(ScoreRow(r, j0) + c0, scores, cols * sizeof(float));
  }

  // values += P V for keys [j0, j0 + n), P being the score rows.
  void AccumulateValues(std::size_t j0, std::size_t n) {
    const Layout& vl = a_.v_layout;
    const float* values = detail::ValueRow(a_, task_, j0);
    if (!RowsAreFinite(values, PanelVisible(0, j0, n, rows_), vl.token, dim_)) {
      for (std::size_t r = 0; r < rows_; ++r) {
        detail::AddVisibleValues(a_, task_, r, j0,
                                 detail::VisibleIn(visible_end_[r], j0, n),
                                 ScoreRow(r, j0), values_ + r * padded_dim_);
      }
      return;
    }
    const std::size_t nr = TileCols();
    const bool in_place =
        dim_ % nr == 0;  // whole panels: read V rows as they lie
    if (!in_place) {
      for (std::size_t c0 = 0; c0 < dim_; c0 += nr) {
        PackPanel(panels_ + c0 * n, nr, values + c0, 1, vl.token,
                  std::min(nr, dim_ - c0), n);
      }
    }
    const FloatTag d;
    const std::size_t lanes = hn::Lanes(d);
    const float* probabilities[kTileRows];
    for (std::size_t r0 = 0; r0 < rows_; r0 += kTileRows) {
      const std::size_t seen = PanelVisible(r0, j0, n);
      if (seen == 0) continue;
      RowPointers(r0, probabilities, [&](std::size_t r) -> const float* {
        return ScoreRow(r, j0);
      });
      for (std::size_t c0 = 0; c0 < dim_; c0 += nr) {
        // Accumulator rows are padded to whole tiles: add whole vectors.
        auto add = [&](std::size_t r, FloatVec v0, FloatVec v1) {
          float* row = values_ + (r0 + r) * padded_dim_ + c0;
          hn::StoreU(hn::Add(hn::LoadU(d, row), v0), d, row);
          hn::StoreU(hn::Add(hn::LoadU(d, row + lanes), v1), d, row + lanes);
        };
        const float* panel = in_place ? values + c0 : panels_ + c0 * n;
        MultiplyTile<kTileRows>(seen, PointersA{probabilities}, panel,
                                in_place ? vl.token : nr, add);
      }
    }
  }

  const detail::AttentionArgs& a_;
  const AttentionShape& s_;
  detail::TaskRows task_;
  std::size_t rows_, padded_rows_, dim_, padded_dim_, keys_end_;
  float *panels_, *values_, *zero_row_, *scores_ = nullptr;
  float *max_, *sum_;
  std::size_t* visible_end_;
};

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_LIB_ATTENTION_ROW_TILE_INL_H_
