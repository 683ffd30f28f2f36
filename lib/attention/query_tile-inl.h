// The work of one attention task: a tile of query rows (the rows of every
// query head that shares one KV head, for a run of query positions) against
// the keys and values of that KV head, one block of keys at a time.
//
// The tile computes the transposed products, so that nothing in the loop over
// key blocks is repacked: S^T = K Q^T reads keys by broadcasts straight from
// K (Q^T is packed once per task, the scale folded in), the softmax runs
// across queries in vector lanes, and O^T += V^T P^T reads V rows as they lie
// and S^T as it was stored. Queries are the vector dimension: panels of up to
// kAttnVecs vectors, narrower when fewer queries remain (decode).

#if defined(MHA_LIB_ATTENTION_QUERY_TILE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_LIB_ATTENTION_QUERY_TILE_INL_H_
#undef MHA_LIB_ATTENTION_QUERY_TILE_INL_H_
#else
#define MHA_LIB_ATTENTION_QUERY_TILE_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <vector>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "lib/attention/attention_args.h"
#include "lib/attention/task.h"
#include "lib/common/scratch.h"
#include "lib/gemm/blocking-inl.h"
#include "lib/gemm/microkernel-inl.h"
#include "lib/softmax/row-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// 8 x 3 zmm accumulators; 8 divides the usual head_dim.
constexpr std::size_t kAttnRows = 8, kAttnVecs = 3;
#else
constexpr std::size_t kAttnRows = 4, kAttnVecs = 2;
#endif
// Keys per block: a multiple of kAttnRows.
constexpr std::size_t kKeyBlock = 256;
// Query panels per task: enough to reuse each key block, few enough to keep
// S^T of a block in L2.
constexpr std::size_t kPanelsPerTask = 4;

inline std::size_t PanelWidth() { return kAttnVecs * hn::Lanes(FloatTag()); }

// Calls f(std::integral_constant<size_t, vecs>) for vecs in [1, kAttnVecs].
template <class F>
HWY_INLINE void WithVecs(std::size_t vecs, F&& f) {
  if (vecs == 1) return f(std::integral_constant<std::size_t, 1>());
  if constexpr (kAttnVecs >= 2) {
    if (vecs == 2) return f(std::integral_constant<std::size_t, 2>());
  }
  if constexpr (kAttnVecs >= 3) f(std::integral_constant<std::size_t, 3>());
}

using detail::TaskRows;

class QueryTile {
 public:
  QueryTile(const detail::AttentionArgs& args, const TaskRows& rows)
      : a_(args), s_(args.shape), task_(rows), rows_(rows.count()),
        ld_(RoundUp(rows_, hn::Lanes(FloatTag()))), dim_(s_.head_dim),
        padded_dim_(RoundUp(dim_, kAttnRows)) {
    using detail::ScratchSlot;
    using detail::ThreadScratch;
    q_t_ = ThreadScratch(ScratchSlot::kPackedA, RoundUp(rows_, PanelWidth()) * dim_);
    s_t_ = ThreadScratch(ScratchSlot::kScores, kKeyBlock * ld_);
    o_t_ = ThreadScratch(ScratchSlot::kAccumulator, padded_dim_ * ld_);
    v_panel_ = ThreadScratch(ScratchSlot::kPackedV, kKeyBlock * kAttnRows + dim_);
    zero_key_ = v_panel_ + kKeyBlock * kAttnRows;  // a key of zeros, for padding
    float* state = ThreadScratch(ScratchSlot::kRowState, 4 * ld_);
    limit_ = state;
    max_ = state + ld_;
    sum_ = state + 2 * ld_;
    correction_ = state + 3 * ld_;
    thread_local std::vector<std::size_t> visible;
    visible.resize(ld_);
    visible_end_ = visible.data();
    std::memset(zero_key_, 0, dim_ * sizeof(float));
    std::memset(o_t_, 0, padded_dim_ * ld_ * sizeof(float));
    std::fill(max_, max_ + ld_, kNegInf);
    std::fill(sum_, sum_ + ld_, 0.0f);
    FindVisibleKeys();
    PackQueries();
  }

  std::size_t rows() const { return rows_; }
  // Keys [key_begin, keys_end()) hold every key some row of the task sees.
  std::size_t keys_begin() const { return task_.key_begin; }
  std::size_t keys_end() const { return keys_end_; }

  // How many of keys [j0, j0 + n) row r sees: always a prefix of the block.
  std::size_t Visible(std::size_t r, std::size_t j0, std::size_t n) const {
    return detail::VisibleIn(visible_end_[r], j0, n);
  }

  // S^T for keys [j0, j0 + n): scale * q.k (+ bias) where visible; keys past
  // every row's visible prefix are left unspecified.
  void ComputeScores(std::size_t j0, std::size_t n) {
    const Layout& kl = a_.k_layout;
    const float* keys = a_.k + task_.b * kl.batch + task_.kv_head * kl.head;
    ForEachPanel([&](std::size_t q0, std::size_t valid, auto vecs) {
      const std::size_t seen = PanelVisible(q0, valid, j0, n);
      const float* q_panel = q_t_ + q0 * dim_;
      const std::size_t width = vecs * hn::Lanes(FloatTag());
      Tile<kAttnRows, decltype(vecs)::value> tile;
      for (std::size_t k0 = 0; k0 < seen; k0 += kAttnRows) {
        RowsA<kAttnRows> key_rows;
        for (std::size_t r = 0; r < kAttnRows; ++r) {
          key_rows.rows[r] =
              k0 + r < seen ? keys + (j0 + k0 + r) * kl.token : zero_key_;
        }
        MultiplyTile(dim_, key_rows, q_panel, width, tile);
        StoreTile(tile, s_t_ + k0 * ld_ + q0, ld_);
      }
    });
    if (a_.mask.bias) AddBias(j0, n);
  }

  // Turns S^T of keys [j0, j0 + n) into unnormalized probabilities against
  // running row maxima (online softmax), updating the maxima and sums and
  // rescaling O^T by exp(old max - new max).
  void OnlineSoftmax(std::size_t j0, std::size_t n) {
    const FloatTag d;
    const std::size_t lanes = hn::Lanes(d);
    const FloatVec neg_inf = hn::Set(d, kNegInf), zero = hn::Zero(d);
    ForEachPanel([&](std::size_t q0, std::size_t valid, auto vecs) {
      const std::size_t seen = PanelVisible(q0, valid, j0, n);
      for (std::size_t q = q0; q < q0 + vecs * lanes; q += lanes) {
        const FloatVec limit = hn::Load(d, limit_ + q);
        const FloatVec old_max = hn::Load(d, max_ + q);
        FloatVec block_max = neg_inf;
        for (std::size_t j = 0; j < seen; ++j) {
          float* s = s_t_ + j * ld_ + q;
          const auto visible = hn::Lt(hn::Set(d, static_cast<float>(j0 + j)), limit);
          const FloatVec masked = hn::IfThenElse(visible, hn::LoadU(d, s), neg_inf);
          hn::StoreU(masked, d, s);
          block_max = hn::Max(block_max, masked);
        }
        const FloatVec new_max = hn::Max(old_max, block_max);
        // Rows that have seen nothing keep a finite shift, so exp gives 0.
        const FloatVec shift = hn::IfThenElse(hn::Eq(new_max, neg_inf), zero, new_max);
        FloatVec sum = zero;
        for (std::size_t j = 0; j < seen; ++j) {
          float* s = s_t_ + j * ld_ + q;
          const FloatVec p = hn::Exp(d, hn::Sub(hn::LoadU(d, s), shift));
          hn::StoreU(p, d, s);
          sum = hn::Add(sum, p);
        }
        const FloatVec correction = hn::Exp(d, hn::Sub(old_max, shift));
        hn::Store(new_max, d, max_ + q);
        hn::Store(hn::MulAdd(hn::Load(d, sum_ + q), correction, sum), d, sum_ + q);
        hn::Store(correction, d, correction_ + q);
      }
    });
    RescaleAccumulator();
  }

  // O^T += V^T P^T for keys [j0, j0 + n), P^T being in S^T's place.
  void AccumulateValues(std::size_t j0, std::size_t n) {
    const Layout& vl = a_.v_layout;
    const float* values =
        a_.v + task_.b * vl.batch + task_.kv_head * vl.head + j0 * vl.token;
    for (std::size_t c0 = 0; c0 < dim_; c0 += kAttnRows) {
      PanelA v_t{values + c0, vl.token};
      if (c0 + kAttnRows > dim_) v_t = PackRaggedValues(values + c0, n, dim_ - c0);
      ForEachPanel([&](std::size_t q0, std::size_t valid, auto vecs) {
        const std::size_t seen = PanelVisible(q0, valid, j0, n);
        if (seen == 0) return;
        Tile<kAttnRows, decltype(vecs)::value> tile;
        MultiplyTile(seen, v_t, s_t_ + q0, ld_, tile);
        AddTile(tile, o_t_ + c0 * ld_ + q0, ld_);
      });
    }
  }

  // The accumulated O^T and the softmax state of the rows.
  detail::RowResults Results() const { return {o_t_, 1, ld_, max_, sum_}; }

 private:
  // f(q0, valid, vecs) for each panel of queries: columns [q0, q0 + valid)
  // of the tile, computed vecs vectors wide.
  template <class F>
  void ForEachPanel(F&& f) const {
    const std::size_t lanes = hn::Lanes(FloatTag()), width = PanelWidth();
    for (std::size_t q0 = 0; q0 < rows_; q0 += width) {
      const std::size_t valid = std::min(width, rows_ - q0);
      WithVecs((valid + lanes - 1) / lanes, [&](auto vecs) { f(q0, valid, vecs); });
    }
  }

  // Keys of block [j0, j0 + n) that some row of the panel sees.
  std::size_t PanelVisible(std::size_t q0, std::size_t valid, std::size_t j0,
                           std::size_t n) const {
    std::size_t seen = 0;
    for (std::size_t r = q0; r < q0 + valid; ++r) seen = std::max(seen, Visible(r, j0, n));
    return seen;
  }

  void FindVisibleKeys() {
    keys_end_ = detail::FindVisibleKeys(a_, task_, ld_, visible_end_);
    for (std::size_t r = 0; r < ld_; ++r) limit_[r] = static_cast<float>(visible_end_[r]);
  }

  // Q^T in panels (panel at q0, w wide: element (p, c) at q0 * dim + p * w +
  // c), scaled, zero in padding columns.
  void PackQueries() {
    const std::size_t width = PanelWidth(), lanes = hn::Lanes(FloatTag());
    for (std::size_t q0 = 0; q0 < rows_; q0 += width) {
      const std::size_t valid = std::min(width, rows_ - q0);
      const std::size_t w = RoundUp(valid, lanes);
      float* panel = q_t_ + q0 * dim_;
      for (std::size_t c = 0; c < w; ++c) {
        if (c >= valid) {
          for (std::size_t p = 0; p < dim_; ++p) panel[p * w + c] = 0.0f;
          continue;
        }
        const float* q = detail::QueryRow(a_, task_, q0 + c);
        for (std::size_t p = 0; p < dim_; ++p) panel[p * w + c] = a_.scale * q[p];
      }
    }
  }

  void AddBias(std::size_t j0, std::size_t n) {
    for (std::size_t r = 0; r < rows_; ++r) {
      const float* bias = a_.mask.bias + task_.query(r) * s_.kv_len + j0;
      const std::size_t seen = Visible(r, j0, n);
      for (std::size_t j = 0; j < seen; ++j) s_t_[j * ld_ + r] += bias[j];
    }
  }

  void RescaleAccumulator() {
    const FloatTag d;
    const std::size_t lanes = hn::Lanes(d);
    for (std::size_t c = 0; c < dim_; ++c) {
      float* row = o_t_ + c * ld_;
      for (std::size_t q = 0; q < ld_; q += lanes) {
        hn::Store(hn::Mul(hn::Load(d, row + q), hn::Load(d, correction_ + q)), d, row + q);
      }
    }
  }

  // The last, partial group of value columns, zero-padded to kAttnRows.
  PanelA PackRaggedValues(const float* values, std::size_t n, std::size_t cols) {
    for (std::size_t j = 0; j < n; ++j) {
      float* step = v_panel_ + j * kAttnRows;
      for (std::size_t c = 0; c < kAttnRows; ++c) {
        step[c] = c < cols ? values[j * a_.v_layout.token + c] : 0.0f;
      }
    }
    return PanelA{v_panel_, kAttnRows};
  }

  const detail::AttentionArgs& a_;
  const AttentionShape& s_;
  TaskRows task_;
  std::size_t rows_, ld_, dim_, padded_dim_, keys_end_ = 0;
  float *q_t_, *s_t_, *o_t_, *v_panel_, *zero_key_;
  float *limit_, *max_, *sum_, *correction_;
  std::size_t* visible_end_;
};

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_LIB_ATTENTION_QUERY_TILE_INL_H_
