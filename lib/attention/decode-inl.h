// Attention for a few query positions per sequence (decoding: one new token,
// or a short chunk), which is bound by reading K and V once. A task owns one
// sequence's range of keys for every head: it walks the keys in order and,
// per key, every KV head, so that in a cache laid out [token, kv_dim] (the
// layer's) it streams one contiguous run of memory, and with grouped-query
// attention each K and V row serves all the query heads of its group. The
// lanes run along head_dim: each key is a dot product per query row, each
// value row is added with the row's probability. Split key ranges hand
// their softmax states over for a merge in range order (flash-decoding).

#if defined(MHA_LIB_ATTENTION_DECODE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_LIB_ATTENTION_DECODE_INL_H_
#undef MHA_LIB_ATTENTION_DECODE_INL_H_
#else
#define MHA_LIB_ATTENTION_DECODE_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "hwy/highway.h"
#include "lib/attention/attention_args.h"
#include "lib/attention/task.h"
#include "lib/common/scratch.h"
#include "lib/gemm/tile_shape-inl.h"
#include "lib/softmax/exp2-inl.h"
#include "lib/softmax/row-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// At most this many query positions take the decode path.
constexpr std::size_t kDecodeQueries = 4;

// Whether a call suits the decode path: few query rows per KV head (fewer
// than half a tile's columns, which the prefill tile would leave idle), no
// weights to return, and head_dim a whole number of vectors.
inline bool SuitsDecode(const detail::AttentionArgs& a) {
  const AttentionShape& s = a.shape;
  const std::size_t group = s.num_heads / s.num_kv_heads;
  return a.weights == nullptr && s.q_len <= kDecodeQueries &&
         group * s.q_len <= TileCols() / 2 &&
         s.head_dim % hn::Lanes(FloatTag()) == 0;
}

// The rows of a decode task: all num_heads x q_len query rows of sequence
// b, row h * q_len + i being head h at query position i, against keys
// [key_begin, key_stop).
class DecodeRange {
 public:
  static constexpr std::size_t kBlock = 64;  // keys per block

  DecodeRange(const detail::AttentionArgs& args, std::size_t b,
              std::size_t key_begin, std::size_t key_stop)
      : a_(args),
        s_(args.shape),
        b_(b),
        key_begin_(key_begin),
        rows_(s_.num_heads * s_.q_len),
        group_(s_.num_heads / s_.num_kv_heads),
        dim_(s_.head_dim) {
    using detail::ScratchSlot;
    using detail::ThreadScratch;
    queries_ = ThreadScratch(ScratchSlot::kQueryPanels, rows_ * dim_);
    scores_ = ThreadScratch(ScratchSlot::kScoresT, rows_ * kBlock);
    outputs_ = ThreadScratch(ScratchSlot::kOutputRows, rows_ * dim_);
    float* state = ThreadScratch(ScratchSlot::kRowState, 2 * rows_);
    max_ = state;
    sum_ = state + rows_;
    thread_local std::vector<std::size_t> ends;
    thread_local std::vector<char> flags;
    ends.resize(rows_);
    flags.assign(2 * rows_, 0);
    end_ = ends.data();
    poisoned_ = flags.data();
    saw_key_ = flags.data() + rows_;
    keys_end_ = key_begin;
    const float scale2 = a_.scale * kLog2e;
    for (std::size_t r = 0; r < rows_; ++r) {
      end_[r] = std::clamp(detail::VisibleEnd(a_, b_, Query(r)), key_begin,
                           std::max(key_begin, key_stop));
      keys_end_ = std::max(keys_end_, end_[r]);
      const float* q = detail::QueryRow(a_, b_, Head(r), Query(r));
      for (std::size_t c = 0; c < dim_; ++c) {
        queries_[r * dim_ + c] = scale2 * q[c];
      }
    }
    std::fill(max_, max_ + rows_, kNegInf);
    std::fill(sum_, sum_ + rows_, 0.0f);
    std::memset(outputs_, 0, rows_ * dim_ * sizeof(float));
  }

  void Run() {
    for (std::size_t j0 = key_begin_; j0 < keys_end_; j0 += kBlock) {
      const std::size_t n = std::min(kBlock, keys_end_ - j0);
      ComputeLogits(j0, n);
      for (std::size_t r = 0; r < rows_; ++r) SoftmaxStep(r, j0, n);
      AccumulateValues(j0, n);
    }
    // A poisoned row's output is NaN, unless it saw no key at all (then it
    // is a row of zeros, whatever its query holds).
    for (std::size_t r = 0; r < rows_; ++r) {
      if (poisoned_[r] && saw_key_[r]) sum_[r] = kNaN;
    }
  }

  void WriteOutputs() const {
    for (std::size_t r = 0; r < rows_; ++r) {
      float* out = detail::OutputRow(a_, b_, Head(r), Query(r));
      const float inverse = sum_[r] == 0.0f ? 0.0f : 1.0f / sum_[r];
      for (std::size_t c = 0; c < dim_; ++c) {
        out[c] = outputs_[r * dim_ + c] * inverse;
      }
    }
  }

  void ExportStates(float* states, std::size_t stride) const {
    for (std::size_t r = 0; r < rows_; ++r) {
      detail::RowState::Store(max_[r], sum_[r], outputs_ + r * dim_, dim_,
                              states + r * stride);
    }
  }

  std::size_t rows() const { return rows_; }
  std::size_t Head(std::size_t r) const { return r / s_.q_len; }
  std::size_t Query(std::size_t r) const { return r % s_.q_len; }

 private:
  std::size_t Visible(std::size_t r, std::size_t j0, std::size_t n) const {
    return detail::VisibleIn(end_[r], j0, n);
  }

  // scores[r][j] = q_r . k_{j0+j} in base 2 where row r sees the key. Keys
  // outer, KV heads inner: one pass over each key's row of every head.
  void ComputeLogits(std::size_t j0, std::size_t n) {
    const FloatTag d;
    const std::size_t lanes = hn::Lanes(d);
    for (std::size_t j = 0; j < n; ++j) {
      for (std::size_t kv_head = 0; kv_head < s_.num_kv_heads; ++kv_head) {
        const float* key = detail::KeyRow(a_, b_, kv_head, j0 + j);
        const std::size_t r0 = kv_head * group_ * s_.q_len;
        for (std::size_t r = r0; r < r0 + group_ * s_.q_len; ++r) {
          if (j0 + j >= end_[r]) continue;
          const float* q = queries_ + r * dim_;
          FloatVec dot = hn::Zero(d);
          for (std::size_t c = 0; c < dim_; c += lanes) {
            dot = hn::MulAdd(hn::LoadU(d, q + c), hn::LoadU(d, key + c), dot);
          }
          scores_[r * kBlock + j] = hn::GetLane(hn::SumOfLanes(d, dot));
        }
      }
    }
    // Bias (-inf hides whatever the logit), and a visible logit that is not
    // finite (NaN or Inf in q, k or the bias) poisons its row.
    for (std::size_t r = 0; r < rows_; ++r) {
      float* s = scores_ + r * kBlock;
      const float* bias = detail::BiasRow(a_, Query(r), j0);
      for (std::size_t j = 0; j < Visible(r, j0, n); ++j) {
        if (bias) {
          if (bias[j] == kNegInf) {
            s[j] = kNegInf;
            continue;
          }
          s[j] += bias[j] * kLog2e;
        }
        saw_key_[r] = 1;
        if (!std::isfinite(s[j])) {
          poisoned_[r] = 1;
          s[j] = kNegInf;  // the row's output is NaN: keep its sums finite
        }
      }
    }
  }

  // The online softmax of row r over the block: p = 2^(s - max) in place,
  // the row's O rescaled where its max changed.
  void SoftmaxStep(std::size_t r, std::size_t j0, std::size_t n) {
    const std::size_t visible = Visible(r, j0, n);
    float* s = scores_ + r * kBlock;
    const float block_max = RowExtreme(s, visible, 1.0f);
    const float new_max = std::max(max_[r], block_max);
    if (new_max == kNegInf) {  // nothing seen yet
      std::memset(s, 0, visible * sizeof(float));
      return;
    }
    const float correction = std::exp2(max_[r] - new_max);
    sum_[r] = sum_[r] * correction +
              Exp2ShiftedRow(s, s, visible, 1.0f, new_max, 0.0f);
    max_[r] = new_max;
    if (correction != 1.0f) ScaleRow(outputs_ + r * dim_, dim_, correction);
  }

  // O[r] += sum over visible j of p[r][j] v_{j0+j}. Keys outer, KV heads
  // inner, as for the logits; the V rows of a block holding NaN or Inf skip
  // the keys each row does not see.
  void AccumulateValues(std::size_t j0, std::size_t n) {
    const FloatTag d;
    const std::size_t lanes = hn::Lanes(d);
    for (std::size_t j = 0; j < n; ++j) {
      for (std::size_t kv_head = 0; kv_head < s_.num_kv_heads; ++kv_head) {
        const float* value = detail::ValueRow(a_, b_, kv_head, j0 + j);
        const bool finite = RowsAreFinite(value, 1, 0, dim_);
        const std::size_t r0 = kv_head * group_ * s_.q_len;
        for (std::size_t r = r0; r < r0 + group_ * s_.q_len; ++r) {
          if (j0 + j >= end_[r]) continue;
          if (!finite && detail::BiasHides(a_, Query(r), j0 + j)) continue;
          const FloatVec p = hn::Set(d, scores_[r * kBlock + j]);
          float* o = outputs_ + r * dim_;
          for (std::size_t c = 0; c < dim_; c += lanes) {
            hn::StoreU(
                hn::MulAdd(p, hn::LoadU(d, value + c), hn::LoadU(d, o + c)), d,
                o + c);
          }
        }
      }
    }
  }

  const detail::AttentionArgs& a_;
  const AttentionShape& s_;
  const std::size_t b_, key_begin_, rows_, group_, dim_;
  std::size_t keys_end_;
  float *queries_, *scores_, *outputs_, *max_, *sum_;
  std::size_t* end_;
  char *poisoned_, *saw_key_;
};

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_LIB_ATTENTION_DECODE_INL_H_
