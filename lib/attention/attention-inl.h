// Attention over all tasks in parallel. How the work is cut depends on the
// shape only, and each piece is computed the same way on any thread, so
// results do not depend on the thread count.
//   Prefill (many query rows per KV head): tasks over (batch, KV head, query
//     tile), each a PrefillTile over all keys; when there are too few tasks
//     for the cores, also over ranges of keys.
//   Decode (a few query positions): tasks over (batch, KV heads), each a
//     DecodeRange (see KvHeadsPerTask); when there are too few tasks for the
//     cores, also over ranges of keys.
// Split key ranges export their rows' softmax states, merged afterwards in
// range order.

#if defined(MHA_LIB_ATTENTION_ATTENTION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_LIB_ATTENTION_ATTENTION_INL_H_
#undef MHA_LIB_ATTENTION_ATTENTION_INL_H_
#else
#define MHA_LIB_ATTENTION_ATTENTION_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "hwy/highway.h"
#include "lib/attention/attention_args.h"
#include "lib/attention/block_checks.h"
#include "lib/attention/decode-inl.h"
#include "lib/attention/prefill_tile-inl.h"
#include "lib/attention/task.h"
#include "lib/common/buffer_pool.h"
#include "lib/common/parallel.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {

// Enough tasks to balance a few cores, whatever their number: the cut must
// not depend on it.
constexpr std::size_t kTasksWanted = 8;

// Ranges the keys are split into when `tasks` would otherwise be too few:
// none below min_keys keys a range.
inline std::size_t KeyRanges(std::size_t tasks, std::size_t kv_len,
                             std::size_t min_keys) {
  return detail::SplitsForTasks(tasks, kTasksWanted, kv_len, min_keys);
}

// Runs task(t, state) for every task, each covering one of `ranges` key
// ranges of a piece of `rows` rows, with `state` where it exports them (null
// when the keys are not split: the task writes its outputs itself); then
// merges each piece's rows into output_row(piece, row) (null: a row past
// the piece's end, skipped).
template <class Task, class OutputRowOf>
void RunWithKeyRanges(const detail::AttentionArgs& a, std::size_t pieces,
                      std::size_t ranges, std::size_t rows, Task&& task,
                      OutputRowOf&& output_row) {
  const AttentionShape& s = a.shape;
  const double work =
      2.0 * s.batch * s.num_heads * s.q_len * s.kv_len * s.head_dim;
  const std::size_t stride = detail::RowState::Stride(s.head_dim);
  const std::size_t range_stride = rows * stride;
  detail::PooledBuffer states(ranges > 1 ? pieces * ranges * range_stride : 0);
  detail::ForEachTask(pieces * ranges, work, [&](std::size_t t) {
    task(t / ranges, t % ranges,
         ranges > 1 ? states.get() + t * range_stride : nullptr);
  });
  if (ranges == 1) return;
  detail::ForEachTask(
      pieces, double(pieces) * ranges * range_stride, [&](std::size_t piece) {
        const float* first = states.get() + piece * ranges * range_stride;
        for (std::size_t r = 0; r < rows; ++r) {
          float* out = output_row(piece, r);
          if (out == nullptr) continue;
          detail::MergeRowStates(first + r * stride, ranges, range_stride,
                                 s.head_dim, out);
        }
      });
}

template <class Mode, class KV>
void RunPrefill(const detail::AttentionArgs& a) {
  const AttentionShape& s = a.shape;
  const std::size_t group = s.num_heads / s.num_kv_heads;
  const std::size_t q_tile =
      std::clamp<std::size_t>(PrefillRows() / group, 1, s.q_len);
  const std::size_t q_tiles = (s.q_len + q_tile - 1) / q_tile;
  const std::size_t tiles = s.batch * s.num_kv_heads * q_tiles;
  // Weights need each row's final max and sum in one task: never split.
  const std::size_t ranges = std::is_same_v<Mode, Fused>
                                 ? KeyRanges(tiles, s.kv_len, 2 * kKeyBlock)
                                 : 1;
  const std::size_t range_keys =
      RoundUp((s.kv_len + ranges - 1) / ranges, kKeyBlock);
  const detail::SharedBlockChecks checks(q_tiles, s.batch, s.num_kv_heads,
                                         s.kv_len, kKeyBlock);
  auto rows_of = [&](std::size_t tile, std::size_t range) {
    const std::size_t q0 = tile % q_tiles * q_tile;
    return detail::TaskRows{tile / q_tiles / s.num_kv_heads,
                            tile / q_tiles % s.num_kv_heads,
                            q0,
                            std::min(q_tile, s.q_len - q0),
                            group,
                            range * range_keys,
                            (range + 1) * range_keys};
  };
  RunWithKeyRanges(
      a, tiles, ranges, group * q_tile,
      [&](std::size_t tile, std::size_t range, float* states) {
        PrefillTile<Mode, KV> work(a, rows_of(tile, range), checks);
        work.Run(/*write_outputs=*/states == nullptr);
        if (states != nullptr) {
          work.ExportStates(states, detail::RowState::Stride(s.head_dim));
        }
      },
      [&](std::size_t tile, std::size_t r) -> float* {
        const detail::TaskRows rows = rows_of(tile, 0);
        if (r >= rows.count()) return nullptr;  // a short last tile
        return detail::OutputRow(a, rows, r);
      });
}

template <class KV>
void RunDecode(const detail::AttentionArgs& a) {
  const AttentionShape& s = a.shape;
  const std::size_t group = s.num_heads / s.num_kv_heads;
  const std::size_t kv_heads = DecodeRange<KV>::KvHeadsPerTask(a);
  const std::size_t head_pieces = s.num_kv_heads / kv_heads;
  const std::size_t ranges = KeyRanges(s.batch * head_pieces, s.kv_len, 256);
  const std::size_t range_keys =
      RoundUp((s.kv_len + ranges - 1) / ranges, DecodeRange<KV>::kRangeQuantum);
  // Piece p: sequence p / head_pieces, kv_heads KV heads.
  auto rows_of = [&](std::size_t piece, std::size_t range) {
    return detail::TaskRows{piece / head_pieces,
                            piece % head_pieces * kv_heads,
                            0,
                            s.q_len,
                            group,
                            range * range_keys,
                            (range + 1) * range_keys,
                            kv_heads};
  };
  RunWithKeyRanges(
      a, s.batch * head_pieces, ranges, kv_heads * group * s.q_len,
      [&](std::size_t piece, std::size_t range, float* states) {
        DecodeRange<KV> work(a, rows_of(piece, range));
        work.Run();
        if (states == nullptr) return work.WriteOutputs();
        work.ExportStates(states, detail::RowState::Stride(s.head_dim));
      },
      [&](std::size_t piece, std::size_t r) -> float* {
        return detail::OutputRow(a, rows_of(piece, 0), r);
      });
}

// K and V stored as a.kv_precision says: the one place where the storage
// type becomes a template parameter of the kernels.
inline void AttentionTasks(const detail::AttentionArgs& a) {
  detail::WithStorageType(a.kv_precision, [&](auto kv) {
    using KV = decltype(kv);
    if (SuitsDecode(a)) return RunDecode<KV>(a);
    if (a.weights) return RunPrefill<WithWeights, KV>(a);
    RunPrefill<Fused, KV>(a);
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_LIB_ATTENTION_ATTENTION_INL_H_
