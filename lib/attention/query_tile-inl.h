// The work of one attention task: a tile of query rows (the rows of every
// query head that shares one KV head, for a run of query positions) against
// the keys and values of that KV head, one block of keys at a time.
//
// Per key block: S = scale * Q K^T (+ bias), masked -> probabilities P
// (online softmax or a materialized row softmax) -> O += P V. Q, K^T, P and V
// are packed into micro-kernel panels, so both products run on the GEMM's
// register-blocked micro-kernel with every tile full.

#if defined(MHA_LIB_ATTENTION_QUERY_TILE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_LIB_ATTENTION_QUERY_TILE_INL_H_
#undef MHA_LIB_ATTENTION_QUERY_TILE_INL_H_
#else
#define MHA_LIB_ATTENTION_QUERY_TILE_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "hwy/highway.h"
#include "lib/attention/attention_args.h"
#include "lib/common/scratch.h"
#include "lib/gemm/blocking-inl.h"
#include "lib/gemm/microkernel-inl.h"
#include "lib/gemm/pack-inl.h"
#include "lib/softmax/row-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Keys per block: a multiple of every target's TileCols().
constexpr std::size_t kKeyBlock = 256;
// Query rows per task: several micro-tile heights, to reuse each K/V block.
constexpr std::size_t kRowsPerTask = 4 * kTileRows;

inline std::size_t RoundUp(std::size_t x, std::size_t multiple) {
  return (x + multiple - 1) / multiple * multiple;
}

// Which rows a task owns: row r is query position q0 + r % q_count of query
// head kv_head * group + r / q_count, in sequence b.
struct TaskRows {
  std::size_t b, kv_head, q0, q_count, group;
  std::size_t count() const { return group * q_count; }
  std::size_t head(std::size_t r) const { return kv_head * group + r / q_count; }
  std::size_t query(std::size_t r) const { return q0 + r % q_count; }
};

class QueryTile {
 public:
  QueryTile(const detail::AttentionArgs& args, const TaskRows& rows)
      : a_(args), s_(args.shape), rows_(rows), count_(rows.count()),
        padded_(RoundUp(count_, kTileRows)), head_dim_(s_.head_dim),
        padded_dim_(RoundUp(head_dim_, TileCols())) {
    using detail::ScratchSlot;
    using detail::ThreadScratch;
    q_packed_ = ThreadScratch(ScratchSlot::kPackedA, padded_ * head_dim_);
    scores_ = ThreadScratch(ScratchSlot::kScores, padded_ * kKeyBlock);
    p_packed_ = ThreadScratch(ScratchSlot::kProbabilities, padded_ * kKeyBlock);
    k_packed_ = ThreadScratch(ScratchSlot::kPackedK, head_dim_ * kKeyBlock);
    v_packed_ = ThreadScratch(ScratchSlot::kPackedV, kKeyBlock * padded_dim_);
    acc_ = ThreadScratch(ScratchSlot::kAccumulator, padded_ * padded_dim_);
    thread_local std::vector<const float*> row_pointers;
    thread_local std::vector<std::size_t> visible;
    row_pointers.resize(count_);
    visible.resize(count_);
    row_ptrs_ = row_pointers.data();
    visible_end_ = visible.data();
    FindVisibleKeys();
    PackQueries();
    std::memset(acc_, 0, padded_ * padded_dim_ * sizeof(float));
  }

  // Keys [0, keys_end()) hold every key some row of the tile sees.
  std::size_t keys_end() const { return keys_end_; }

  // Scores of keys [j0, j0 + n) for every row (scale and bias applied,
  // hidden keys left unspecified past visible(r, j0, n)).
  void ComputeScores(std::size_t j0, std::size_t n) {
    const Layout& kl = a_.k_layout;
    const float* keys = a_.k + rows_.b * kl.batch + rows_.kv_head * kl.head;
    const std::size_t nr = TileCols();
    for (std::size_t c0 = 0; c0 < n; c0 += nr) {
      PackPanel(k_packed_ + c0 * head_dim_, nr, keys + (j0 + c0) * kl.token,
                kl.token, 1, std::min(nr, n - c0), head_dim_);
    }
    Tile tile;
    for (std::size_t c0 = 0; c0 < n; c0 += nr) {
      for (std::size_t r0 = 0; r0 < padded_; r0 += kTileRows) {
        MultiplyPanels(head_dim_, q_packed_ + r0 * head_dim_,
                       k_packed_ + c0 * head_dim_, nr, tile);
        StoreTile(tile, scores_ + r0 * kKeyBlock + c0, kKeyBlock);
      }
    }
    for (std::size_t r = 0; r < count_; ++r) {
      ScaleAndBias(r, j0, Visible(r, j0, n));
    }
  }

  float* ScoreRow(std::size_t r) { return scores_ + r * kKeyBlock; }

  // How many of keys [j0, j0 + n) row r sees: always a prefix of the block.
  std::size_t Visible(std::size_t r, std::size_t j0, std::size_t n) const {
    return visible_end_[r] <= j0 ? 0 : std::min(n, visible_end_[r] - j0);
  }

  // acc += P V for keys [j0, j0 + n), P being the score rows (which the
  // caller has turned into probabilities).
  void AccumulateFromScores(std::size_t j0, std::size_t n) {
    for (std::size_t r = 0; r < count_; ++r) row_ptrs_[r] = ScoreRow(r);
    AccumulateValues(0, j0, n);
  }

  // acc += P V for keys [j0, j0 + n), P being rows of the weights output.
  void AccumulateFromWeights(std::size_t j0, std::size_t n) {
    for (std::size_t r = 0; r < count_; ++r) row_ptrs_[r] = WeightsRow(r);
    AccumulateValues(j0, j0, n);
  }

  // Row r of the [batch, num_heads, q_len, kv_len] weights output.
  float* WeightsRow(std::size_t r) const {
    return a_.weights +
           ((rows_.b * s_.num_heads + rows_.head(r)) * s_.q_len +
            rows_.query(r)) * s_.kv_len;
  }

  // Multiplies row r of the accumulator by `factor` (online softmax).
  void RescaleAccumulator(std::size_t r, float factor) {
    ScaleRow(acc_ + r * padded_dim_, padded_dim_, factor);
  }

  // out row r = acc row r / divisor[r]; zeros where divisor[r] == 0 (a row
  // that saw no key). divisor == nullptr means 1.
  void WriteOutput(const float* divisor) const {
    const Layout& ol = a_.out_layout;
    for (std::size_t r = 0; r < count_; ++r) {
      float* out = a_.out + rows_.b * ol.batch + rows_.head(r) * ol.head +
                   rows_.query(r) * ol.token;
      const float d = divisor ? divisor[r] : 1.0f;
      if (d == 0.0f) {
        std::memset(out, 0, head_dim_ * sizeof(float));
        continue;
      }
      std::memcpy(out, acc_ + r * padded_dim_, head_dim_ * sizeof(float));
      if (d != 1.0f) ScaleRow(out, head_dim_, 1.0f / d);
    }
  }

  std::size_t rows() const { return count_; }

 private:
  // acc += P V for keys [j0, j0 + n), P's row r read from row_ptrs_[r] + col0.
  void AccumulateValues(std::size_t col0, std::size_t j0, std::size_t n) {
    const Layout& vl = a_.v_layout;
    const float* values = a_.v + rows_.b * vl.batch + rows_.kv_head * vl.head;
    const std::size_t nr = TileCols();
    for (std::size_t c0 = 0; c0 < head_dim_; c0 += nr) {
      PackPanel(v_packed_ + c0 * n, nr, values + j0 * vl.token + c0, 1,
                vl.token, std::min(nr, head_dim_ - c0), n);
    }
    PackRowPanels(p_packed_, kTileRows, row_ptrs_, count_, col0, n);
    const FloatTag d;
    const std::size_t lanes = hn::Lanes(d);
    Tile tile;
    for (std::size_t c0 = 0; c0 < head_dim_; c0 += nr) {
      for (std::size_t r0 = 0; r0 < padded_; r0 += kTileRows) {
        MultiplyPanels(n, p_packed_ + r0 * n, v_packed_ + c0 * n, nr, tile);
        for (std::size_t r = 0; r < kTileRows; ++r) {
          float* at = acc_ + (r0 + r) * padded_dim_ + c0;
          for (std::size_t v = 0; v < kTileVecs; ++v) {
            hn::StoreU(hn::Add(hn::LoadU(d, at + v * lanes), tile.v[r][v]), d,
                       at + v * lanes);
          }
        }
      }
    }
  }

  void FindVisibleKeys() {
    const std::ptrdiff_t shift = static_cast<std::ptrdiff_t>(s_.kv_len) -
                                 static_cast<std::ptrdiff_t>(s_.q_len);
    std::size_t limit = s_.kv_len;
    if (a_.mask.kv_lengths) {
      limit = static_cast<std::size_t>(a_.mask.kv_lengths[rows_.b]);
    }
    keys_end_ = 0;
    for (std::size_t r = 0; r < count_; ++r) {
      std::size_t end = limit;
      if (a_.mask.causal) {
        // Query i sees key j iff j <= i + kv_len - q_len (signed).
        const std::ptrdiff_t last = static_cast<std::ptrdiff_t>(rows_.query(r)) + shift;
        end = last < 0 ? 0 : std::min(end, static_cast<std::size_t>(last) + 1);
      }
      visible_end_[r] = end;
      keys_end_ = std::max(keys_end_, end);
    }
  }

  void PackQueries() {
    const Layout& ql = a_.q_layout;
    for (std::size_t r = 0; r < count_; ++r) {
      row_ptrs_[r] = a_.q + rows_.b * ql.batch + rows_.head(r) * ql.head +
                     rows_.query(r) * ql.token;
    }
    PackRowPanels(q_packed_, kTileRows, row_ptrs_, count_, 0, head_dim_);
  }

  // s = scale * s + bias for the `visible` first scores of row r.
  void ScaleAndBias(std::size_t r, std::size_t j0, std::size_t visible) {
    float* s = ScoreRow(r);
    ScaleRow(s, visible, a_.scale);
    if (a_.mask.bias == nullptr) return;
    const float* bias = a_.mask.bias + rows_.query(r) * s_.kv_len + j0;
    for (std::size_t c = 0; c < visible; ++c) s[c] += bias[c];
  }

  const detail::AttentionArgs& a_;
  const AttentionShape& s_;
  TaskRows rows_;
  std::size_t count_, padded_, head_dim_, padded_dim_, keys_end_ = 0;
  float *q_packed_, *scores_, *p_packed_, *k_packed_, *v_packed_, *acc_;
  const float** row_ptrs_;
  std::size_t* visible_end_;
};

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_LIB_ATTENTION_QUERY_TILE_INL_H_
