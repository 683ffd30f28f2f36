// What an attention task covers, independent of how it computes: its rows
// (query head and position), the keys each row sees, where its inputs and
// results lie, and the softmax state a task hands over when the keys of its
// rows are split into ranges.
#ifndef MHA_LIB_ATTENTION_TASK_H_
#define MHA_LIB_ATTENTION_TASK_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "lib/attention/attention_args.h"
#include "lib/common/storage.h"

namespace mha::detail {

// Row r is query position q0 + r % q_count of query head kv_head * group +
// r / q_count, in sequence b: the rows of the `group` query heads of each of
// `kv_heads` KV heads from kv_head on (one for prefill; decode may take
// them all). The task looks at keys in [key_begin, key_stop) (all of them
// unless the keys are split into ranges).
struct TaskRows {
  std::size_t b, kv_head, q0, q_count, group, key_begin, key_stop;
  std::size_t kv_heads = 1;
  std::size_t count() const { return kv_heads * group * q_count; }
  std::size_t head(std::size_t r) const {
    return kv_head * group + r / q_count;
  }
  std::size_t query(std::size_t r) const { return q0 + r % q_count; }
};

// The end of the keys query position `query` of sequence b sees: masks only
// ever hide a suffix (causal, kv_lengths) or single keys (a -inf bias).
inline std::size_t VisibleEnd(const AttentionArgs& a, std::size_t b,
                              std::size_t query) {
  const AttentionShape& s = a.shape;
  std::size_t end = s.kv_len;
  if (a.mask.kv_lengths) {
    end = std::min(end, static_cast<std::size_t>(a.mask.kv_lengths[b]));
  }
  if (a.mask.causal) {
    // Query i sees key j iff j <= i + kv_len - q_len, in signed arithmetic
    // (sizes are checked to fit std::ptrdiff_t).
    const std::ptrdiff_t last = static_cast<std::ptrdiff_t>(query) +
                                static_cast<std::ptrdiff_t>(s.kv_len) -
                                static_cast<std::ptrdiff_t>(s.q_len);
    end = last < 0 ? 0 : std::min(end, static_cast<std::size_t>(last) + 1);
  }
  return end;
}

// How many of keys [j0, j0 + n) a row whose visible keys end at `end` sees.
inline std::size_t VisibleIn(std::size_t end, std::size_t j0, std::size_t n) {
  return end <= j0 ? 0 : std::min(n, end - j0);
}

// Row r of a task's query and output.
inline const float* QueryRow(const AttentionArgs& a, const TaskRows& task,
                             std::size_t r) {
  return a.q + ElementOffset(a.q_layout, task.b, task.head(r), task.query(r));
}

inline float* OutputRow(const AttentionArgs& a, const TaskRows& task,
                        std::size_t r) {
  return a.out +
         ElementOffset(a.out_layout, task.b, task.head(r), task.query(r));
}

// K's and V's rows, their elements of type T (float, BF16 or F16: the
// storage of a.kv_precision).
template <class T>
const T* KeyRow(const AttentionArgs& a, std::size_t b, std::size_t kv_head,
                std::size_t key) {
  return static_cast<const T*>(a.k) +
         ElementOffset(a.k_layout, b, kv_head, key);
}

template <class T>
const T* ValueRow(const AttentionArgs& a, std::size_t b, std::size_t kv_head,
                  std::size_t key) {
  return static_cast<const T*>(a.v) +
         ElementOffset(a.v_layout, b, kv_head, key);
}

// The bias of query position `query` from key j0 on, or null without one.
inline const float* BiasRow(const AttentionArgs& a, std::size_t query,
                            std::size_t j0) {
  if (a.mask.bias == nullptr) return nullptr;
  return a.mask.bias + query * a.shape.kv_len + j0;
}

// Whether a -inf bias hides key j from query position `query`.
inline bool BiasHides(const AttentionArgs& a, std::size_t query,
                      std::size_t j) {
  const float* bias = BiasRow(a, query, j);
  return bias != nullptr && *bias == -std::numeric_limits<float>::infinity();
}

// What a task knows of its rows besides their softmax state: where the keys
// each sees end, and which rows NaN or Inf poisoned. In per-thread storage that
// every task of the thread reuses: steady-state calls allocate nothing.
class RowMarks {
 public:
  RowMarks(const AttentionArgs& a, const TaskRows& task) : a_(a), task_(task) {
    thread_local std::vector<std::size_t> ends;
    thread_local std::vector<char> poisoned;
    ends.resize(task.count());
    poisoned.assign(task.count(), 0);
    end_ = ends.data();
    poisoned_ = poisoned.data();
    keys_end_ = task.key_begin;
    for (std::size_t r = 0; r < task.count(); ++r) {
      end_[r] = std::clamp(VisibleEnd(a, task.b, task.query(r)), task.key_begin,
                           std::max(task.key_begin, task.key_stop));
      keys_end_ = std::max(keys_end_, end_[r]);
    }
  }

  // Row r sees keys [task.key_begin, end(r)) of the task's range, but those
  // a -inf bias hides.
  std::size_t end(std::size_t r) const { return end_[r]; }
  const std::size_t* ends() const { return end_; }
  // The largest end: no row sees the keys from there on.
  std::size_t keys_end() const { return keys_end_; }

  void Poison(std::size_t r) { poisoned_[r] = 1; }

  // Sums of the rows, once final: NaN for a poisoned row that sees some key,
  // so that its output (and weights) come out NaN. A row that sees no key is
  // never poisoned: it outputs zeros, whatever its query holds.
  void PoisonSums(float* sums) const {
    for (std::size_t r = 0; r < task_.count(); ++r) {
      if (poisoned_[r] && SeesSomeKey(r)) sums[r] = kNaN;
    }
  }

  // 1 / a row's final sum: 0 for a row that saw no key (its O is 0), NaN for
  // a poisoned one.
  static float InverseSum(float sum) { return sum == 0.0f ? 0.0f : 1.0f / sum; }

 private:
  static constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

  bool SeesSomeKey(std::size_t r) const {
    for (std::size_t j = task_.key_begin; j < end_[r]; ++j) {
      if (!BiasHides(a_, task_.query(r), j)) return true;
    }
    return false;
  }

  const AttentionArgs& a_;
  const TaskRows task_;
  std::size_t* end_;
  char* poisoned_;
  std::size_t keys_end_;
};

// Row (b, head, query)'s attention weights from key 0 on.
inline float* WeightsRow(const AttentionArgs& a, std::size_t b,
                         std::size_t head, std::size_t query) {
  const AttentionShape& s = a.shape;
  return a.weights + ((b * s.num_heads + head) * s.q_len + query) * s.kv_len;
}

// values[c] += p[j] * V(j0 + j, c), c in [c0, c1), over the keys j0 + j,
// j < n, that query position `query` sees (n stops at its visible end),
// skipping hidden ones outright: the path for blocks of V that hold NaN or
// Inf, where a tiled product's 0 * Inf for a hidden key would poison rows
// that never see it. V's rows: block + j * token. Rare, so plain scalar code.
template <class T>
void AddVisibleValues(const AttentionArgs& a, std::size_t query, std::size_t j0,
                      std::size_t n, const T* block, std::size_t token,
                      const float* p, float* values, std::size_t c0,
                      std::size_t c1) {
  for (std::size_t j = 0; j < n; ++j) {
    if (BiasHides(a, query, j0 + j)) continue;
    const T* v = block + j * token;
    for (std::size_t c = c0; c < c1; ++c) values[c] += p[j] * ToFloat(v[c]);
  }
}

// The state of one row's online softmax over a range of keys, as the tasks
// of split key ranges hand it over: base-2 running max, sum, and the
// unnormalized values (head_dim floats), `Stride(head_dim)` floats in all.
// A sum of NaN marks a row poisoned by NaN or Inf; a max of -inf, a row that
// saw no key.
struct RowState {
  static std::size_t Stride(std::size_t head_dim) { return head_dim + 2; }
  static void Store(float max, float sum, const float* values,
                    std::size_t head_dim, float* state) {
    state[0] = max;
    state[1] = sum;
    std::copy_n(values, head_dim, state + 2);
  }
};

// Combines the states of one row over `ranges` key ranges (`range_stride`
// floats apart), in range order, into `out`: zeros if no range saw a key,
// NaN if any range was poisoned.
inline void MergeRowStates(const float* states, std::size_t ranges,
                           std::size_t range_stride, std::size_t head_dim,
                           float* out) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  float max = kNegInf;
  bool poisoned = false;
  for (std::size_t k = 0; k < ranges; ++k) {
    max = std::max(max, states[k * range_stride]);
    poisoned |= std::isnan(states[k * range_stride + 1]);
  }
  std::fill(out, out + head_dim,
            poisoned ? std::numeric_limits<float>::quiet_NaN() : 0.0f);
  if (poisoned || max == kNegInf) return;
  float sum = 0.0f;
  for (std::size_t k = 0; k < ranges; ++k) {
    const float* state = states + k * range_stride;
    if (state[0] == kNegInf) continue;  // saw no key: weighs nothing
    const float weight = std::exp2(state[0] - max);
    sum += state[1] * weight;
    for (std::size_t c = 0; c < head_dim; ++c) out[c] += state[2 + c] * weight;
  }
  for (std::size_t c = 0; c < head_dim; ++c) out[c] /= sum;
}

}  // namespace mha::detail

#endif  // MHA_LIB_ATTENTION_TASK_H_
