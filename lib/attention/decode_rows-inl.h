// Attention for tasks of a few query rows (decoding: one new token per
// sequence, or a small group of heads sharing a KV head). Panels of queries
// would leave most vector lanes idle, so here the lanes run along head_dim:
// each key is a dot product with every row, each value row is added with the
// row's probability. K and V are read once, in place.

#if defined(MHA_LIB_ATTENTION_DECODE_ROWS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_LIB_ATTENTION_DECODE_ROWS_INL_H_
#undef MHA_LIB_ATTENTION_DECODE_ROWS_INL_H_
#else
#define MHA_LIB_ATTENTION_DECODE_ROWS_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "hwy/highway.h"
#include "lib/attention/attention_args.h"
#include "lib/attention/task.h"
#include "lib/common/scratch.h"
#include "lib/softmax/row-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Tasks of at most this many rows take this path, when head_dim is a whole
// number of vectors.
constexpr std::size_t kDecodeRows = 4;

inline bool SuitsDecodeRows(const detail::AttentionArgs& a, std::size_t rows) {
  return a.weights == nullptr && rows <= kDecodeRows &&
         a.shape.head_dim % hn::Lanes(hn::ScalableTag<float>()) == 0;
}

class DecodeRows {
 public:
  static constexpr std::size_t kBlock = 256;  // keys per block

  DecodeRows(const detail::AttentionArgs& args, const detail::TaskRows& task)
      : a_(args), task_(task), rows_(task.count()), dim_(args.shape.head_dim) {
    using detail::ScratchSlot;
    using detail::ThreadScratch;
    queries_ = ThreadScratch(ScratchSlot::kPackedA, kDecodeRows * dim_);
    scores_ = ThreadScratch(ScratchSlot::kScores, kDecodeRows * kBlock);
    values_ = ThreadScratch(ScratchSlot::kAccumulator, kDecodeRows * dim_);
    std::memset(values_, 0, rows_ * dim_ * sizeof(float));
    std::fill(max_, max_ + kDecodeRows, kNegInf);
    std::fill(sum_, sum_ + kDecodeRows, 0.0f);
    keys_end_ = detail::FindVisibleKeys(a_, task_, rows_, visible_end_);
    for (std::size_t r = 0; r < rows_; ++r) {
      const float* q = detail::QueryRow(a_, task_, r);
      for (std::size_t c = 0; c < dim_; ++c)
        queries_[r * dim_ + c] = a_.scale * q[c];
    }
  }

  void Run() {
    for (std::size_t j0 = task_.key_begin; j0 < keys_end_; j0 += kBlock) {
      const std::size_t n = std::min(kBlock, keys_end_ - j0);
      ComputeScores(j0, n);
      for (std::size_t r = 0; r < rows_; ++r) OnlineSoftmax(r, j0, n);
      AccumulateValues(j0, n);
    }
  }

  detail::RowResults Results() const { return {values_, dim_, 1, max_, sum_}; }

 private:
  std::size_t Visible(std::size_t r, std::size_t j0, std::size_t n) const {
    return detail::VisibleIn(visible_end_[r], j0, n);
  }

  // scores[r][j] = q_r . k_{j0+j} (+ bias) for the keys row r sees.
  void ComputeScores(std::size_t j0, std::size_t n) {
    const hn::ScalableTag<float> d;
    const std::size_t lanes = hn::Lanes(d);
    const Layout& kl = a_.k_layout;
    const float* keys = a_.k + task_.b * kl.batch + task_.kv_head * kl.head;
    std::size_t seen = 0;
    for (std::size_t r = 0; r < rows_; ++r)
      seen = std::max(seen, Visible(r, j0, n));
    for (std::size_t j = 0; j < seen; ++j) {
      const float* key = keys + (j0 + j) * kl.token;
      hn::Vec<decltype(d)> dots[kDecodeRows];
      for (std::size_t r = 0; r < rows_; ++r) dots[r] = hn::Zero(d);
      for (std::size_t c = 0; c < dim_; c += lanes) {
        const auto k = hn::LoadU(d, key + c);
        for (std::size_t r = 0; r < rows_; ++r) {
          dots[r] =
              hn::MulAdd(hn::LoadU(d, queries_ + r * dim_ + c), k, dots[r]);
        }
      }
      for (std::size_t r = 0; r < rows_; ++r) {
        scores_[r * kBlock + j] = hn::GetLane(hn::SumOfLanes(d, dots[r]));
      }
    }
    for (std::size_t r = 0; r < rows_; ++r) {
      FinishLogits(scores_ + r * kBlock, detail::BiasRow(a_, task_, r, j0),
                   Visible(r, j0, n));
    }
  }

  void OnlineSoftmax(std::size_t r, std::size_t j0, std::size_t n) {
    OnlineSoftmaxStep(scores_ + r * kBlock, Visible(r, j0, n), &max_[r],
                      &sum_[r], values_ + r * dim_, dim_);
  }

  // values[r] += sum over visible j of p[r][j] * v_{j0+j}.
  void AccumulateValues(std::size_t j0, std::size_t n) {
    const hn::ScalableTag<float> d;
    const std::size_t lanes = hn::Lanes(d);
    const Layout& vl = a_.v_layout;
    const float* values = detail::ValueRow(a_, task_, 0);
    std::size_t seen = 0;
    for (std::size_t r = 0; r < rows_; ++r)
      seen = std::max(seen, Visible(r, j0, n));
    const bool finite =
        RowsAreFinite(values + j0 * vl.token, seen, vl.token, dim_);
    for (std::size_t r = 0; r < rows_; ++r) {
      const float* p = scores_ + r * kBlock;
      float* out = values_ + r * dim_;
      const std::size_t visible = Visible(r, j0, n);
      if (!finite) {
        detail::AddVisibleValues(a_, task_, r, j0, visible, p, out);
        continue;
      }
      for (std::size_t c = 0; c < dim_; c += lanes) {
        auto acc = hn::LoadU(d, out + c);
        for (std::size_t j = 0; j < visible; ++j) {
          acc = hn::MulAdd(hn::Set(d, p[j]),
                           hn::LoadU(d, values + (j0 + j) * vl.token + c), acc);
        }
        hn::StoreU(acc, d, out + c);
      }
    }
  }

  const detail::AttentionArgs& a_;
  detail::TaskRows task_;
  std::size_t rows_, dim_, keys_end_;
  float *queries_, *scores_, *values_;
  float max_[kDecodeRows], sum_[kDecodeRows];
  std::size_t visible_end_[kDecodeRows];
};

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_LIB_ATTENTION_DECODE_ROWS_INL_H_
