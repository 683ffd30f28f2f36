// What an attention task covers, independent of how it computes: its rows
// (query head and position), the prefix of keys each row sees, and where its
// results go.
#ifndef MHA_LIB_ATTENTION_TASK_H_
#define MHA_LIB_ATTENTION_TASK_H_

#include <algorithm>
#include <cstddef>
#include <limits>

#include "lib/attention/attention_args.h"

namespace mha::detail {

// Row r is query position q0 + r % q_count of query head kv_head * group +
// r / q_count, in sequence b; the task looks at keys in [key_begin,
// key_stop) (all of them unless the keys are split into ranges).
struct TaskRows {
  std::size_t b, kv_head, q0, q_count, group, key_begin, key_stop;
  std::size_t count() const { return group * q_count; }
  std::size_t head(std::size_t r) const {
    return kv_head * group + r / q_count;
  }
  std::size_t query(std::size_t r) const { return q0 + r % q_count; }
};

// Row r sees keys [key_begin, visible_end[r]) of its range: masks only ever
// hide a suffix (causal, kv_lengths) or single keys (a -inf bias).
// Rows in [count, padded_rows) are padding and see nothing. Returns the end
// of the keys some row sees.
inline std::size_t FindVisibleKeys(const AttentionArgs& a, const TaskRows& task,
                                   std::size_t padded_rows,
                                   std::size_t* visible_end) {
  const AttentionShape& s = a.shape;
  const std::ptrdiff_t shift = static_cast<std::ptrdiff_t>(s.kv_len) -
                               static_cast<std::ptrdiff_t>(s.q_len);
  std::size_t limit = std::min(s.kv_len, task.key_stop);
  if (a.mask.kv_lengths) {
    limit =
        std::min(limit, static_cast<std::size_t>(a.mask.kv_lengths[task.b]));
  }
  std::size_t keys_end = 0;
  for (std::size_t r = 0; r < padded_rows; ++r) {
    std::size_t end = r < task.count() ? limit : 0;
    if (a.mask.causal && r < task.count()) {
      // Query i sees key j iff j <= i + kv_len - q_len (signed).
      const std::ptrdiff_t last =
          static_cast<std::ptrdiff_t>(task.query(r)) + shift;
      end = last < 0 ? 0 : std::min(end, static_cast<std::size_t>(last) + 1);
    }
    visible_end[r] = std::max(end, task.key_begin);  // nothing before the range
    keys_end = std::max(keys_end, visible_end[r]);
  }
  return keys_end;
}

// How many of keys [j0, j0 + n) a row whose visible keys end at `end` sees.
inline std::size_t VisibleIn(std::size_t end, std::size_t j0, std::size_t n) {
  return end <= j0 ? 0 : std::min(n, end - j0);
}

// Row r's bias from key j0 on, or null without a bias.
inline const float* BiasRow(const AttentionArgs& a, const TaskRows& task,
                            std::size_t r, std::size_t j0) {
  if (a.mask.bias == nullptr) return nullptr;
  return a.mask.bias + task.query(r) * a.shape.kv_len + j0;
}

// Whether a -inf bias hides key j of [0, visible_end[r]) from row r.
inline bool BiasHides(const AttentionArgs& a, const TaskRows& task,
                      std::size_t r, std::size_t j) {
  const float* bias = BiasRow(a, task, r, j);
  return bias != nullptr && *bias == -std::numeric_limits<float>::infinity();
}

inline const float* ValueRow(const AttentionArgs& a, const TaskRows& task,
                             std::size_t j) {
  const Layout& l = a.v_layout;
  return a.v + task.b * l.batch + task.kv_head * l.head + j * l.token;
}

// values[c] += p[j - j0] * V(j, c) over the keys j in [j0, j0 + n) that row r
// sees, skipping hidden ones outright: the path for blocks of V that hold
// NaN or Inf, where the tiled product's 0 * Inf for a hidden key would
// poison rows that never see it. Rare, so plain scalar code.
inline void AddVisibleValues(const AttentionArgs& a, const TaskRows& task,
                             std::size_t r, std::size_t j0, std::size_t n,
                             const float* p, float* values) {
  for (std::size_t j = j0; j < j0 + n; ++j) {
    if (BiasHides(a, task, r, j)) continue;
    const float* v = ValueRow(a, task, j);
    for (std::size_t c = 0; c < a.shape.head_dim; ++c) {
      values[c] += p[j - j0] * v[c];
    }
  }
}

inline float* OutputRow(const AttentionArgs& a, const TaskRows& task,
                        std::size_t r) {
  const Layout& l = a.out_layout;
  return a.out + task.b * l.batch + task.head(r) * l.head +
         task.query(r) * l.token;
}

inline const float* QueryRow(const AttentionArgs& a, const TaskRows& task,
                             std::size_t r) {
  const Layout& l = a.q_layout;
  return a.q + task.b * l.batch + task.head(r) * l.head +
         task.query(r) * l.token;
}

// The accumulated values of a task's rows, and their softmax state: value
// (r, c) at values[r * row_stride + c * col_stride].
struct RowResults {
  const float* values;
  std::size_t row_stride, col_stride;
  const float *max, *sum;

  // out row r = values of r / sum[r]; zeros for a row that saw no key.
  void Write(const AttentionArgs& a, const TaskRows& task) const {
    for (std::size_t r = 0; r < task.count(); ++r) {
      float* out = OutputRow(a, task, r);
      const float inverse = sum[r] == 0.0f ? 0.0f : 1.0f / sum[r];
      for (std::size_t c = 0; c < a.shape.head_dim; ++c) {
        out[c] = values[r * row_stride + c * col_stride] * inverse;
      }
    }
  }

  // Row r's state as [max, sum, values...], for merging split key ranges.
  void Export(const AttentionArgs& a, std::size_t r, float* state) const {
    state[0] = max[r];
    state[1] = sum[r];
    for (std::size_t c = 0; c < a.shape.head_dim; ++c) {
      state[2 + c] = values[r * row_stride + c * col_stride];
    }
  }
};

}  // namespace mha::detail

#endif  // MHA_LIB_ATTENTION_TASK_H_
