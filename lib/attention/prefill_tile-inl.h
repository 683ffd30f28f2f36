// The work of one attention task with many query rows (prefill): a tile of
// rows -- every query head that shares one KV head, for a run of positions
// -- against that KV head's keys, one block of keys at a time, with an
// online softmax (FlashAttention). Transposed, so that both products run on
// the GEMM micro-kernel with nothing packed per key block:
//
//   S^T = K Q^T     keys broadcast straight from K (6 a tile against two
//                   panels of Q^T, or 12 against one), Q^T packed
//                   once per task as the vector operand, pre-scaled by
//                   scale * log2(e): the logits come out in base 2;
//   softmax         down the columns of S^T, one query per lane: the block
//                   max and sum are element-wise over key rows, no
//                   horizontal reduction; 2^(s - max) by exp2-inl.h;
//   O = c O + P V   P^T is written by the softmax as packed slivers of A
//                   (12 queries contiguous per key), V rows are read in
//                   place as B; the epilogue rescales a row of O only when
//                   its max changed (c != 1).
//
// The mode is a compile-time choice: Fused keeps the scores in one block of
// per-thread scratch (memory O(rows x block), never O(q_len x kv_len));
// WithWeights also stores each block's logits in the caller's weights
// output and turns them into probabilities once the row's max and sum are
// final.

#if defined(MHA_LIB_ATTENTION_PREFILL_TILE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_LIB_ATTENTION_PREFILL_TILE_INL_H_
#undef MHA_LIB_ATTENTION_PREFILL_TILE_INL_H_
#else
#define MHA_LIB_ATTENTION_PREFILL_TILE_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <vector>

#include "hwy/highway.h"
#include "lib/attention/attention_args.h"
#include "lib/attention/block_checks.h"
#include "lib/attention/task.h"
#include "lib/common/cache_sizes.h"
#include "lib/common/prefetch.h"
#include "lib/common/scratch.h"
#include "lib/common/wide_load-inl.h"
#include "lib/gemm/microkernel-inl.h"
#include "lib/gemm/pack-inl.h"
#include "lib/gemm/tile_shape-inl.h"
#include "lib/softmax/exp2-inl.h"
#include "lib/softmax/row-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Modes of the prefill tile.
struct Fused {};        // probabilities never leave the tile
struct WithWeights {};  // also written to the caller's weights output

// Query rows per task: 128 (a multiple of the panel width) balances the
// packing of Q^T and the rescaling of O against the L2 footprint of a key
// block: S^T and P^T are 128 x 256 floats each (128 KiB), O 128 x
// head_dim.
inline std::size_t PrefillRows() { return RoundUp(128, TileCols()); }
// Keys per block. Sapphire Rapids VM, b1 h8 L4096 hd64, 1 thread, against
// 256 (one process alternating, medians of 9): 128 keys 0.969x, causal
// 0.964x; 192 0.949x and 0.962x (both also checking K and V again per
// query tile: SharedBlockChecks keeps whole blocks of 256); 512 (S^T and
// P^T of 256 KiB each, two builds alternating process by process) 0.987x
// and 0.990x.
constexpr std::size_t kKeyBlock = 256;

// K and V are stored as KV (float, BF16 or F16).
template <class Mode, class KV>
class PrefillTile {
  static constexpr bool kWithWeights = std::is_same_v<Mode, WithWeights>;
  static constexpr bool kWidened = !std::is_same_v<KV, float>;

 public:
  // `checks`: the finiteness of K's and V's blocks, shared by the call's
  // tasks.
  PrefillTile(const detail::AttentionArgs& args, const detail::TaskRows& task,
              const detail::SharedBlockChecks& checks)
      : a_(args),
        task_(task),
        checks_(checks),
        marks_(args, task),
        rows_(task.count()),
        dim_(args.shape.head_dim),
        nr_(TileCols()),
        q_cols_(rows_ <= hn::Lanes(FloatTag()) ? hn::Lanes(FloatTag()) : nr_),
        ld_(RoundUp(rows_, q_cols_)),
        score_stride_(detail::OddLinesStride(ld_)),
        ldo_(RoundUp(dim_, nr_)) {
    using detail::ScratchSlot;
    using detail::ThreadScratch;
    queries_ = ThreadScratch(ScratchSlot::kQueryPanels, dim_ * ld_);
    scores_ = ThreadScratch(ScratchSlot::kScoresT, kKeyBlock * score_stride_);
    // A sliver past the last and a vector before the first: the masked
    // stores of ExponentiateColumns address whole vectors around them.
    const std::size_t lanes = hn::Lanes(FloatTag());
    prob_slivers_ =
        ThreadScratch(
            ScratchSlot::kProbSlivers,
            (RoundUp(ld_, kTileRows) + kTileRows) * kKeyBlock + lanes) +
        lanes;
    outputs_ = ThreadScratch(ScratchSlot::kOutputRows, ld_ * ldo_);
    value_panels_ = dim_ % nr_ == 0 ? nullptr
                                    : ThreadScratch(ScratchSlot::kValuePanels,
                                                    kKeyBlock * ldo_);
    if constexpr (kWidened) {
      key_block_ = ThreadScratch(ScratchSlot::kKeyBlock, kKeyBlock * dim_);
      value_block_ = ThreadScratch(ScratchSlot::kValueBlock, kKeyBlock * dim_);
    }
    if (a_.mask.bias) {
      bias_rows_ = ThreadScratch(ScratchSlot::kBiasRows,
                                 hn::Lanes(FloatTag()) * kKeyBlock);
    }
    float* state = ThreadScratch(ScratchSlot::kRowState, 4 * ld_);
    max_ = state;
    sum_ = state + ld_;
    correction_ = state + 2 * ld_;
    relative_end_ = state + 3 * ld_;
    min_end_ = *std::min_element(marks_.ends(), marks_.ends() + rows_);
    std::fill(max_, max_ + ld_, kNegInf);
    std::fill(sum_, sum_ + ld_, 0.0f);
    PackQueries();
  }

  // All key blocks, then the outputs if `write_outputs` (else the row
  // states stay for ExportStates). The first block's P V is O (no O to
  // zero and read back), and the last one's, normalized, is the output
  // row where it can be (OutputsFromLastBlock): each row of O is then
  // stored and read once less, and the stores of the output, which miss
  // the caches (rows head_dim floats long), are spread over the last
  // block's multiply-adds rather than stalled on in one pass. S3's
  // attention core (b8 h12 L128 d64), Zen 5, in-process interleaved: 1.04x
  // token-major and 1.06x head-major (the layer's layout) on 1 thread,
  // token-major 1.03x on 2; S2's (b1 h8 L128) 1.01-1.02x; b1 h8 L1024, where
  // only the last of 4 blocks writes the outputs, 1.01x.
  void Run(bool write_outputs) {
    bool outputs_written = false;
    if (marks_.keys_end() <= task_.key_begin) {  // no row sees a key: O stays 0
      std::memset(outputs_, 0, rows_ * ldo_ * sizeof(float));
    }
    for (std::size_t j0 = task_.key_begin; j0 < marks_.keys_end();
         j0 += kKeyBlock) {
      const std::size_t n = std::min(kKeyBlock, marks_.keys_end() - j0);
      const bool first = j0 == task_.key_begin,
                 last = j0 + n == marks_.keys_end();
      ComputeLogits(j0, n);
      if constexpr (kWithWeights) StoreLogits(j0, n);
      const bool rescale = SoftmaxStep(n);
      if (last) marks_.PoisonSums(sum_);
      const bool to_outputs = last && write_outputs && OutputsFromLastBlock();
      const auto accumulate = [&](auto is_first, auto is_to_outputs) {
        outputs_written =
            AccumulateValues<decltype(is_first)::value,
                             decltype(is_to_outputs)::value>(j0, n, rescale);
      };
      if (first && to_outputs) {
        accumulate(std::true_type(), std::true_type());
      } else if (first) {
        accumulate(std::true_type(), std::false_type());
      } else if (to_outputs) {
        accumulate(std::false_type(), std::true_type());
      } else {
        accumulate(std::false_type(), std::false_type());
      }
    }
    if constexpr (kWithWeights) NormalizeWeights();
    if (write_outputs && !outputs_written) WriteOutputs();
  }

  // Each row's state, `stride` floats apart, for merging key ranges.
  void ExportStates(float* states, std::size_t stride) const {
    for (std::size_t r = 0; r < rows_; ++r) {
      detail::RowState::Store(max_[r], sum_[r], outputs_ + r * ldo_, dim_,
                              states + r * stride);
    }
  }

 private:
  // Whether the last key block's P V may be stored as the output rows:
  // whole panels (a ragged last panel would store past a row's end).
  bool OutputsFromLastBlock() const { return dim_ % nr_ == 0; }

  // out row = O row / sum.
  void WriteOutputs() const {
    for (std::size_t r = 0; r < rows_; ++r) {
      ScaleRow(outputs_ + r * ldo_, dim_, detail::RowMarks::InverseSum(sum_[r]),
               OutputRow(r));
    }
  }

  float* OutputRow(std::size_t r) const {
    return detail::OutputRow(a_, task_, r);
  }

  // Q^T in panels of q_cols_ rows, scaled by scale * log2(e), four rows at a
  // time where panels hold a multiple of 4 (every target with vectors), so
  // that the four share a panel; rows holding NaN or Inf are poisoned now
  // (every logit they make is NaN or Inf).
  //
  // This is the one read of the task's Q, from L3 or DRAM, in runs of
  // head_dim floats too short for the hardware prefetchers to get ahead
  // (token-major projections put them d_model floats apart): the check
  // stalled on each row. So the rows kQueryPrefetchRows ahead are prefetched.
  // Zen 5, 1 thread, three interleaved runs: b4 h16 L512 causal 2-4% faster, b1
  // h25 L1024 causal 1-3%, b8 h12 L128 (S3's core) 0-5%, S3's forward 1-2%,
  // S1's and S2's within the noise (+-2%). 4 rows ahead gained nothing, 16
  // as much as 8. Zen 4, 1 thread, in one process: all of the task's Q rows
  // and its first key block's K and V rows prefetched into L1 before this
  // ran 0.93x as fast at S1's core (b2 h8 L10: the rows were in L1 or L2
  // already), Q alone 0.97x; the next task's Q, K and V asked into L2 at
  // the start of each task, 1.00x at S3's core (b8 h12 L128). Sapphire
  // Rapids VM, 1 thread, the next task's Q and first K and V rows asked
  // into L2 a share per tile of the last block: S3's core 1.003x, b1 h8
  // L128 0.977x, L4096 1.001x.
  static constexpr std::size_t kQueryPrefetchRows = 8;
  void PackQueries() {
    const float scale2 = a_.scale * kLog2e;
    // Whole panels are overwritten below; a ragged last one is zeroed first,
    // so that its columns past the task's rows hold finite logits.
    if (rows_ % q_cols_ != 0) {
      std::memset(QueryPanel(rows_), 0, dim_ * q_cols_ * sizeof(float));
    }
    const std::size_t group = std::min<std::size_t>(4, q_cols_);
    for (std::size_t r = 0; r < rows_; r += group) {
      const std::size_t count = std::min(group, rows_ - r);
      const std::size_t ahead = r + kQueryPrefetchRows;
      for (std::size_t i = ahead; i < std::min(rows_, ahead + count); ++i) {
        detail::PrefetchBytes(QueryRow(i), dim_ * sizeof(float));
      }
      const float* rows[4];
      for (std::size_t i = 0; i < count; ++i) {
        rows[i] = QueryRow(r + i);
        if (!RowsAreFinite(rows[i], 1, 0, dim_)) marks_.Poison(r + i);
      }
      TransposeRowsIntoPanel(QueryPanel(r) + r % q_cols_, q_cols_, rows, count,
                             dim_, scale2);
    }
  }

  // The panel of Q^T that holds row r's column.
  float* QueryPanel(std::size_t r) const {
    return queries_ + r / q_cols_ * dim_ * q_cols_;
  }

  const float* QueryRow(std::size_t r) const {
    return detail::QueryRow(a_, task_, r);
  }

  // S^T's rows lie an odd number of cache lines apart (OddLinesStride). The
  // softmax reads S^T down a column of vectors (a row a step, kKeyBlock
  // rows): rows 8 lines apart (128 queries) put such a strip's lines in 8
  // of L1's 64 sets, room for 96 of its 256 (12 ways), so each pass over it
  // came from L2. Sapphire Rapids VM, 1 thread, one process alternating
  // (medians of 15), when P V also read S^T down a sliver's columns: b1 h8
  // L4096 hd64 1.023x and 1.009x in two runs, b8 h12 L128 (S3's core)
  // 1.011x and 1.029x, b1 h25 L1024 causal 1.023x; S3's forward 1.02x,
  // S2's 1.00x. With P in slivers (ExponentiateColumns), against rows
  // ld_ apart: L4096 1.023x, S3's core 1.04x.
  float* ScoreRow(std::size_t j) const { return scores_ + j * score_stride_; }

  // Rows of a key block as fp32: row j at first + j * token.
  struct BlockRows {
    const float* first;
    std::size_t token;
    const float* Row(std::size_t j) const { return first + j * token; }
  };

  // K's or V's rows [j0, j0 + n) (from `rows`, `token` apart) as fp32: in
  // place when stored as fp32; else widened into `block` (kKeyBlock x
  // head_dim floats per thread). One widening load per key and head_dim
  // element feeds the 2 x 128 multiply-adds of a task's rows, and the
  // micro-kernel then broadcasts K and streams V as plain fp32 (a scalar F16
  // conversion per broadcast would cost more than the FMAs it feeds).
  BlockRows Widened(const KV* rows, std::size_t token, std::size_t n,
                    float* block) const {
    if constexpr (!kWidened) {
      return {rows, token};
    } else {
      const FloatTag d;
      const std::size_t lanes = hn::Lanes(d);
      for (std::size_t j = 0; j < n; ++j) {
        const KV* from = rows + j * token;
        float* to = block + j * dim_;
        std::size_t c = 0;
        for (; c + lanes <= dim_; c += lanes) {
          hn::StoreU(LoadWide(d, from + c), d, to + c);
        }
        for (; c < dim_; ++c) to[c] = detail::ToFloat(from[c]);
      }
      return {block, dim_};
    }
  }

  // The end of the keys that any of the task's rows [first, first + count)
  // sees: keys from there on are hidden from all of them.
  std::size_t EndOfRows(std::size_t first, std::size_t count) const {
    return *std::max_element(marks_.ends() + first,
                             marks_.ends() + std::min(rows_, first + count));
  }

  // S^T for keys [j0, j0 + n): base-2 logits, -inf where a key is hidden.
  // A tile whose keys every query of its panel has passed (the upper part
  // of a causal diagonal block) is not computed: HideKeysPastEnds writes
  // its -inf. (Its columns past the task's rows keep stale values, which
  // no output reads.)
  void ComputeLogits(std::size_t j0, std::size_t n) {
    const BlockRows keys =
        Widened(detail::KeyRow<KV>(a_, task_.b, task_.kv_head, j0),
                a_.k_layout.token, n, key_block_);
    // K's block is checked before it is multiplied (by the first of the
    // head's query tiles that reads it: block_checks.h): the check reads it
    // row after row, a stream the hardware prefetchers follow, where the tiles'
    // 6 or 12 interleaved rows (512 bytes each at head_dim 128) are too short
    // for them, and every line of K from DRAM stalled the FMAs. 16 queries over
    // 2048 keys (b4 h32 kvh8 d128, 64 MB of K and V), Zen 5, GFLOP/s: 161 ->
    // 191 on 1 thread, 317 -> 373 on 2. With K from L3, 1 thread / 2: b8
    // h12 L128 (S3's core) 165 -> 185 / 375 -> 381, b4 h16 L512 causal 160
    // -> 167 / 325 -> 327, b1 h8 L4096 214 -> 222 / 427 -> 434. Software
    // prefetch of the next block's K and V rows, a sliver's worth per tile
    // row (to L1 or L2), gained nothing with the check or without it.
    const bool keys_finite = checks_.Finite(
        detail::SharedBlockChecks::Operand::kKeys, task_.b, task_.kv_head, j0,
        n, [&] { return RowsAreFinite(keys.first, n, keys.token, dim_); });
    const FloatTag d;
    const std::size_t lanes = hn::Lanes(d);
    // The bias of the next block is prefetched in step with the tiles, a
    // share of the task's queries per tile (the first block's at once).
    const bool bias = a_.mask.bias != nullptr;
    if (bias && j0 == task_.key_begin) PrefetchBias(j0, 0, task_.q_count);
    std::size_t bias_fetched = 0;
    // Tiles of up to max_rows keys against `panels` panels of Q^T (of `vecs`
    // vectors each) at a time, over S^T's columns [c_begin, c_end).
    const auto tiles = [&](auto max_rows, auto panels, auto vecs,
                           std::size_t c_begin, std::size_t c_end) {
      constexpr std::size_t kPanels = decltype(panels)::value;
      constexpr std::size_t kVecs = decltype(vecs)::value;
      const std::size_t width = kPanels * q_cols_;
      ForTilePieces<decltype(max_rows)::value>(n, [&](auto height,
                                                      std::size_t first) {
        if (bias) {
          const std::size_t done = first + height();
          bias_fetched = PrefetchBias(j0 + kKeyBlock, bias_fetched,
                                      (task_.q_count * done + n - 1) / n);
        }
        // Every row sees the tile's first key before min_end_: only tiles
        // past it look up their panels' end (a max over 32 rows, once per
        // tile and panel, was 2.6% of this function at L4096; skipping it
        // there: b1 h8 L4096 1.02x, b8 h12 L128 1.015x, Zen 5, 1 thread).
        // A pair is skipped only whole: computing the panel of a pair that
        // still sees the tile's keys alone ran 0.96x as fast at b4 h16 L512
        // causal, 0.98x at L1024 (Sapphire Rapids, 1 thread).
        const bool all_see_first = j0 + first < min_end_;
        for (std::size_t c0 = c_begin; c0 < c_end; c0 += width) {
          if (!all_see_first && j0 + first >= EndOfRows(c0, width)) continue;
          // The tile's stores address S^T from copies made here: through
          // the members, GCC reloaded scores_, score_stride_ and q_cols_
          // after each store (a vector store may alias anything), and these
          // tiles are only head_dim steps deep. Sapphire Rapids VM, 1
          // thread, two builds alternating process by process (medians of 5
          // and 6): b1 h8 L4096 hd64 1.009x and 1.022x, b8 h12 L128 (S3's
          // core) 1.010x and 1.018x, b1 h25 L1024 causal 1.015x and 1.015x.
          // (The same for P V's epilogue, which has 256 steps a tile
          // there: 0.99x.)
          float* const tile_scores = ScoreRow(first) + c0;
          const std::size_t stride = score_stride_, panel_cols = q_cols_;
          MultiplyPanels<decltype(height)::value, kPanels, kVecs>(
              dim_, RowsA{keys.Row(first), keys.token}, QueryPanel(c0),
              dim_ * q_cols_, q_cols_,
              [=](std::size_t panel, std::size_t r, FloatVec v0, FloatVec v1) {
                float* row = tile_scores + r * stride + panel * panel_cols;
                hn::StoreU(v0, d, row);
                if constexpr (kVecs == 2) hn::StoreU(v1, d, row + lanes);
              });
        }
      });
    };
    using One = std::integral_constant<std::size_t, 1>;
    using Two = std::integral_constant<std::size_t, 2>;
    using TileRows = std::integral_constant<std::size_t, kTileRows>;
    using WideRows = std::integral_constant<std::size_t, kWideTileRows>;
    using TileVecs = std::integral_constant<std::size_t, kTileVecs>;
    if (q_cols_ == lanes) {
      tiles(TileRows(), One(), One(), 0, ld_);
    } else if constexpr (kWideTileIs6x4) {
      // Pairs of Q^T panels by the 6 x 4 tile: 10 loads per 24 FMAs where
      // 12 x 2 has 14 (a synthetic K Q^T: 88% of the FMA peak against 85%).
      // Sapphire Rapids VM, 1 thread, one process alternating (medians of
      // 7): b1 h8 L4096 1.043x and 1.056x, 2 threads 1.038x and 1.036x; b8
      // h12 L128 (S3's core) 1.004x and 1.009x; b1 h25 L1024 causal 1.004x
      // and 1.012x. (P V by the 6 x 4 tile over both panels of V: 0.96x.)
      const std::size_t paired = ld_ / (2 * q_cols_) * 2 * q_cols_;
      if (paired > 0) {
        tiles(WideRows(), Two(), TileVecs(), 0, paired);
      }
      if (paired < ld_) {  // a lone last panel
        tiles(TileRows(), One(), TileVecs(), paired, ld_);
      }
    } else {
      tiles(TileRows(), One(), TileVecs(), 0, ld_);
    }
    if (!keys_finite) PoisonRowsSeeingBadKeys(keys, j0, n);
    if (j0 + n > min_end_) HideKeysPastEnds(j0, n);
    if (a_.mask.bias) AddBias(j0, n);
  }

  // A key whose K holds NaN or Inf poisons the rows that see it.
  void PoisonRowsSeeingBadKeys(const BlockRows& keys, std::size_t j0,
                               std::size_t n) {
    for (std::size_t j = j0; j < j0 + n; ++j) {
      if (RowsAreFinite(keys.Row(j - j0), 1, 0, dim_)) continue;
      for (std::size_t r = 0; r < rows_; ++r) {
        if (j < marks_.end(r) && !detail::BiasHides(a_, task_.query(r), j)) {
          marks_.Poison(r);
        }
      }
    }
  }

  // relative_end_[r]: how many keys of [j0, j0 + n) row r sees (the
  // columns past the task's rows: as many as any row), as floats, for lane
  // compares with a key's index in the block (exact: n <= kKeyBlock).
  void SetRelativeEnds(std::size_t j0, std::size_t n) {
    for (std::size_t r = 0; r < ld_; ++r) {
      const std::size_t end = r < rows_ ? marks_.end(r) : marks_.keys_end();
      relative_end_[r] = static_cast<float>(detail::VisibleIn(end, j0, n));
    }
  }

  // -inf for the keys of the block past each row's visible end (causal,
  // kv_lengths): a lane compare per key row against the rows' ends.
  void HideKeysPastEnds(std::size_t j0, std::size_t n) {
    const FloatTag d;
    const std::size_t lanes = hn::Lanes(d);
    SetRelativeEnds(j0, n);
    const FloatVec neg_inf = hn::Set(d, kNegInf);
    for (std::size_t j = 0; j < n; ++j) {
      const FloatVec key = hn::Set(d, static_cast<float>(j));
      float* row = ScoreRow(j);
      for (std::size_t c = 0; c < ld_; c += lanes) {
        const auto hidden = hn::Ge(key, hn::LoadU(d, relative_end_ + c));
        hn::StoreU(hn::IfThenElse(hidden, neg_inf, hn::LoadU(d, row + c)), d,
                   row + c);
      }
    }
  }

  // The bias, in base 2, where keys are visible: a -inf bias hides the key
  // (whatever its logit), a sum that is not finite poisons the row. The bias
  // is [q_len, kv_len], the transpose of S^T's layout. For each vector of
  // S^T's columns (a lane per task row), the rows' bias for the block's keys
  // is copied four keys at a time into bias_rows_, chunk by chunk of four
  // keys, and LoadInterleaved4 transposes each chunk into four columns of
  // the bias. Zen 4, the time with a bias over the time without, 1 thread,
  // b8 h12 L128, b1 h8 L1024, b1 h4 L4096: 1.43x, 1.56x, 1.58x with the
  // scalar pass over S^T's columns this replaced; 1.15x, 1.25x, 1.28x. Each
  // column gathered instead (2 threads): 1.19x, 1.51x, 1.36x from the bias
  // in place (rows kv_len apart share a set of L1), 1.16x, 1.30-1.40x,
  // 1.39-1.45x from a copy (Zen 4's gathers: about 24 cycles for 16 floats).
  void AddBias(std::size_t j0, std::size_t n) {
    SetRelativeEnds(j0, n);
    const FloatTag d;
    const std::size_t lanes = hn::Lanes(d);
    for (std::size_t c = 0; c < ld_; c += lanes) {
      const FloatVec ends = hn::LoadU(d, relative_end_ + c);
      const auto keys =
          static_cast<std::size_t>(hn::GetLane(hn::MaxOfLanes(d, ends)));
      CopyBiasInChunks(c, j0, keys);
      auto bad = hn::FirstN(d, 0);
      for (std::size_t j = 0; j < keys; j += 4) {
        FloatVec b0, b1, b2, b3;
        hn::LoadInterleaved4(d, bias_rows_ + j * lanes, b0, b1, b2, b3);
        AddBiasColumn(c, j, ends, b0, bad);
        if (j + 1 < keys) AddBiasColumn(c, j + 1, ends, b1, bad);
        if (j + 2 < keys) AddBiasColumn(c, j + 2, ends, b2, bad);
        if (j + 3 < keys) AddBiasColumn(c, j + 3, ends, b3, bad);
      }
      if (hn::AllFalse(d, bad)) continue;
      HWY_ALIGN float flags[hn::MaxLanes(FloatTag())];
      hn::Store(hn::IfThenElseZero(bad, hn::Set(d, 1.0f)), d, flags);
      for (std::size_t i = 0; i < lanes && c + i < rows_; ++i) {
        if (flags[i] != 0.0f) marks_.Poison(c + i);
      }
    }
  }

  // Prefetches the bias of queries [q0 + from, q0 + to) for the key block
  // from j0 (if the task has one there); returns `to`. The copy of each
  // block's bias (CopyBiasInChunks) reads a run of 1 KiB from each of 128
  // rows kv_len apart: from L3 or DRAM, too short for the hardware
  // prefetchers. Zen 4, 1 thread, b1 h8 L4096, cycles in the copy 1.13G
  // without, 0.69G with it; at L1024 (the bias in L3) unchanged.
  std::size_t PrefetchBias(std::size_t j0, std::size_t from,
                           std::size_t to) const {
    if (j0 >= marks_.keys_end()) return to;
    const std::size_t keys = std::min(kKeyBlock, marks_.keys_end() - j0);
    for (std::size_t i = from; i < to; ++i) {
      detail::PrefetchBytes(detail::BiasRow(a_, task_.q0 + i, j0),
                            keys * sizeof(float));
    }
    return to;
  }

  // bias_rows_ as LoadInterleaved4 reads it: the bias of task rows [c, c +
  // lanes) for keys [j0, j0 + keys), chunk q of four keys at q * 4 * lanes,
  // row c + i's four at (q * lanes + i) * 4; zeros past `keys`. (Columns
  // past the task's rows take its first row's bias, never used.)
  void CopyBiasInChunks(std::size_t c, std::size_t j0, std::size_t keys) {
    const std::size_t lanes = hn::Lanes(FloatTag());
    const std::size_t whole = keys / 4 * 4;
    for (std::size_t i = 0; i < lanes; ++i) {
      const std::size_t r = c + i < rows_ ? c + i : 0;
      const float* from = detail::BiasRow(a_, task_.query(r), j0);
      float* to = bias_rows_ + i * 4;
      for (std::size_t j = 0; j < whole; j += 4) {
        std::memcpy(to + j * lanes, from + j, 4 * sizeof(float));
      }
      if (whole == keys) continue;
      float last[4] = {};
      std::copy(from + whole, from + keys, last);
      std::memcpy(to + whole * lanes, last, sizeof(last));
    }
  }

  // Key j's bias (one lane per task row from c on) into its row of S^T,
  // where visible (key j before the row's relative end); `bad` gains the
  // lanes whose sum is not finite.
  template <class Mask>
  HWY_INLINE void AddBiasColumn(std::size_t c, std::size_t j, FloatVec ends,
                                FloatVec bias, Mask& bad) {
    const FloatTag d;
    const FloatVec neg_inf = hn::Set(d, kNegInf);
    float* row = ScoreRow(j) + c;
    const FloatVec logits = hn::LoadU(d, row);
    const auto visible = hn::Lt(hn::Set(d, static_cast<float>(j)), ends);
    const auto hides = hn::And(visible, hn::Eq(bias, neg_inf));
    const FloatVec sum = hn::MulAdd(bias, hn::Set(d, kLog2e), logits);
    const auto not_finite = hn::Not(hn::IsFinite(sum));
    bad = hn::Or(bad, hn::AndNot(hides, hn::And(visible, not_finite)));
    hn::StoreU(
        hn::IfThenElse(hides, neg_inf, hn::IfThenElse(visible, sum, logits)), d,
        row);
  }

  // weights[row][j0 + j] = S^T[j][row]: the logits, normalized at the end.
  void StoreLogits(std::size_t j0, std::size_t n) {
    for (std::size_t r = 0; r < rows_; ++r) {
      float* w =
          detail::WeightsRow(a_, task_.b, task_.head(r), task_.query(r)) + j0;
      for (std::size_t j = 0; j < n; ++j) w[j] = ScoreRow(j)[r];
    }
  }

  // The max of S^T's columns [c, c + lanes) over the block's n key rows, in
  // four independent chains (and ExponentiateColumns' sum in two): one chain
  // waited on each vmaxps or vaddps in turn, n times per vector. Zen 5, 1
  // thread, the attention core alternating in one process, nine pairs of
  // runs, none slower: b1 h8 L128 1.007-1.027x, b8 h12 L128 1.002-1.011x,
  // b1 h8 L1024 1.004-1.007x, L4096 1.001x. What taking the max in K Q^T's
  // epilogue instead could save is bounded by skipping this pass altogether
  // (each block's first row as its max: wrong results, for timing only):
  // Sapphire Rapids VM, 1 thread, L4096 1.015x, b8 h12 L128 1.011x.
  FloatVec BlockMax(std::size_t c, std::size_t n) const {
    const FloatTag d;
    FloatVec m0 = hn::Set(d, kNegInf), m1 = m0, m2 = m0, m3 = m0;
    std::size_t j = 0;
    for (; j + 4 <= n; j += 4) {
      m0 = hn::Max(m0, hn::LoadU(d, ScoreRow(j) + c));
      m1 = hn::Max(m1, hn::LoadU(d, ScoreRow(j + 1) + c));
      m2 = hn::Max(m2, hn::LoadU(d, ScoreRow(j + 2) + c));
      m3 = hn::Max(m3, hn::LoadU(d, ScoreRow(j + 3) + c));
    }
    for (; j < n; ++j) m0 = hn::Max(m0, hn::LoadU(d, ScoreRow(j) + c));
    return hn::Max(hn::Max(m0, m1), hn::Max(m2, m3));
  }

  // P^T = 2^(S^T - shift) for S^T's columns [c, c + lanes) over the
  // block's n key rows, stored into the slivers that hold those rows
  // (ProbSliver); returns their sum.
  //
  // P V reads P^T as a packed panel of A, its kTileRows queries of a key
  // contiguous; read in place from S^T instead, a step's 12 queries (48
  // bytes) straddled lines of rows an odd number of lines apart, and a
  // sliver of 256 keys spread over 16-32 KiB, with V's 64 KiB, past L1.
  // Sapphire Rapids VM, 1 thread, one process alternating (medians of
  // 7-9): b1 h8 L4096 hd64 1.025x and 1.047x on 2 threads, b8 h12 L128
  // (S3's core) 1.037x and 1.041x on 2, b1 h8 L128 1.056x, b1 h25 L1024
  // causal 1.017x, S1's core (b2 h8 L10) 1.00x. V packed per block too
  // (both operands packed, as a synthetic P V ran 17% faster than in
  // place): 0.98-0.99x of P packed alone.
  //
  // A vector of columns reaches two slivers at most where it is no wider
  // than one (every target but SVE beyond 512 bits): a masked store for
  // each, their masks made once per vector, not per key. (Made per key,
  // L4096 ran 0.97x as fast as before the slivers.) These stores, which
  // mostly straddle lines, are not what bounds the softmax: one aligned
  // store instead (wrong results, for timing) ran 0.99x at L4096 and 0.97x
  // at S3's core; nor is P^T's trip through L2: the softmax and P V taken
  // in groups of 48 or 96 rows, each group's slivers read back from L1,
  // 1.00x at L4096, 0.98-1.005x at S3's core (Sapphire Rapids VM, 1
  // thread).
  FloatVec ExponentiateColumns(std::size_t c, std::size_t n,
                               FloatVec shift) const {
    const FloatTag d;
    const std::size_t lanes = hn::Lanes(d);
    const std::size_t s = c / kTileRows, offset = c % kTileRows;
    if (offset + lanes <= 2 * kTileRows) {
      const auto in_first = hn::FirstN(d, kTileRows - offset);
      const auto in_second = hn::Not(in_first);
      float* first = SliverColumns(s, c);
      float* second = SliverColumns(s + 1, c);
      return Exponentiate(c, n, shift, [&](std::size_t j, FloatVec p) {
        hn::BlendedStore(p, in_first, d, first + j * kTileRows);
        hn::BlendedStore(p, in_second, d, second + j * kTileRows);
      });
    }
    return Exponentiate(c, n, shift, [&](std::size_t j, FloatVec p) {
      for (std::size_t t = s; t * kTileRows < c + lanes; ++t) {
        const std::size_t from = std::max(c, t * kTileRows) - c;
        const std::size_t to = std::min(c + lanes, (t + 1) * kTileRows) - c;
        hn::BlendedStore(p, hn::AndNot(hn::FirstN(d, from), hn::FirstN(d, to)),
                         d, SliverColumns(t, c) + j * kTileRows);
      }
    });
  }

  // 2^(S^T - shift) for S^T's columns [c, c + lanes) over the block's n key
  // rows, handed to store(j, p) key row by key row; returns their sum.
  template <class Store>
  HWY_INLINE FloatVec Exponentiate(std::size_t c, std::size_t n, FloatVec shift,
                                   const Store& store) const {
    const FloatTag d;
    const auto exponentiate = [&](std::size_t j) {
      const FloatVec p =
          Exp2OfNonPositive(d, hn::Sub(hn::LoadU(d, ScoreRow(j) + c), shift));
      store(j, p);
      return p;
    };
    FloatVec sum0 = hn::Zero(d), sum1 = sum0;
    std::size_t j = 0;
    for (; j + 2 <= n; j += 2) {
      sum0 = hn::Add(sum0, exponentiate(j));
      sum1 = hn::Add(sum1, exponentiate(j + 1));
    }
    if (j < n) sum0 = hn::Add(sum0, exponentiate(j));
    return hn::Add(sum0, sum1);
  }

  // Sliver s of P^T (task rows [s kTileRows, (s + 1) kTileRows)): key j's
  // probabilities at j * kTileRows.
  float* ProbSliver(std::size_t s) const {
    return prob_slivers_ + s * kTileRows * kKeyBlock;
  }

  // Where lane i of a vector of task rows from c would go for key 0 if row
  // c + i were in sliver s: row c + i's own place where it is.
  float* SliverColumns(std::size_t s, std::size_t c) const {
    return ProbSliver(s) + c - s * kTileRows;
  }

  // The online softmax over the block's n key rows of S^T, one query per
  // lane: new max, P^T = 2^(S^T - max) into its slivers, sum, and the
  // correction 2^(old max - new max) of each row's O (exactly 1 where the
  // max did not change). Returns whether any row needs its O rescaled.
  bool SoftmaxStep(std::size_t n) {
    const FloatTag d;
    const std::size_t lanes = hn::Lanes(d);
    const FloatVec neg_inf = hn::Set(d, kNegInf), one = hn::Set(d, 1.0f);
    auto rescale = hn::FirstN(d, 0);
    for (std::size_t c = 0; c < ld_; c += lanes) {
      const FloatVec block_max = BlockMax(c, n);
      const FloatVec old_max = hn::LoadU(d, max_ + c);
      const FloatVec new_max = hn::Max(old_max, block_max);
      // Rows that have seen nothing yet subtract 0: 2^-inf is then 0.
      const FloatVec shift =
          hn::IfThenZeroElse(hn::Eq(new_max, neg_inf), new_max);
      const FloatVec correction = Exp2OfNonPositive(d, hn::Sub(old_max, shift));
      const FloatVec sum = ExponentiateColumns(c, n, shift);
      hn::StoreU(new_max, d, max_ + c);
      hn::StoreU(hn::MulAdd(hn::LoadU(d, sum_ + c), correction, sum), d,
                 sum_ + c);
      hn::StoreU(correction, d, correction_ + c);
      rescale = hn::Or(rescale, hn::Ne(correction, one));
    }
    return !hn::AllFalse(d, rescale);
  }

  // O = correction * O + P V for keys [j0, j0 + n) (O = P V for the first
  // block, kFirst), each sliver of rows summing only the keys one of its
  // rows sees (fewer on a causal diagonal); with kToOutputs (the last
  // block, sums final), output row = that / sum, O left as it was. Returns
  // whether the output rows were written. With ComputeLogits' skipped
  // tiles, causal attention on one Zen 5 core, head_dim 64: b4 h16 L512
  // +11%, b1 h25 L1024 +7%, b1 h8 L4096 +2%; non-causal unchanged. The 6 x 4
  // wide tile over both panels of head_dim 64 (6 rows, V's row read once
  // per tile rather than once per panel) was not kept: Zen 4, 1 thread, in
  // one process, 0.98x at b8 h12 L128, 1.00x at b1 h8 L128, 1.01x at L1024.
  // Slivers inside panels, V's panel (32 KiB at head_dim 64) then kept in
  // L1 across the slivers and P^T read once per panel, was not kept either:
  // Sapphire Rapids VM, 1 thread, L4096 1.003x, b8 h12 L128 0.985x.
  template <bool kFirst, bool kToOutputs>
  bool AccumulateValues(std::size_t j0, std::size_t n, bool rescale) {
    const BlockRows values =
        Widened(detail::ValueRow<KV>(a_, task_.b, task_.kv_head, j0),
                a_.v_layout.token, n, value_block_);
    const bool values_finite = checks_.Finite(
        detail::SharedBlockChecks::Operand::kValues, task_.b, task_.kv_head, j0,
        n, [&] { return RowsAreFinite(values.first, n, values.token, dim_); });
    if (!values_finite) {
      if constexpr (kFirst) {
        std::memset(outputs_, 0, rows_ * ldo_ * sizeof(float));
      }
      AccumulateVisibleValues(values, j0, n, rescale);
      return false;
    }
    const float* panels = values.first;
    std::size_t panel_stride = nr_, step_stride = values.token;
    if (value_panels_) {  // head_dim is not whole panels: pack, zero-padded
      PackPanels(value_panels_, nr_, values.first, 1, values.token, dim_, n);
      panels = value_panels_;
      panel_stride = nr_ * n;
      step_stride = nr_;
    }
    const FloatTag d;
    const std::size_t lanes = hn::Lanes(d);
    for (std::size_t r0 = 0; r0 < rows_; r0 += kTileRows) {
      // Keys past every row of the sliver weigh 0 in it: not summed. Per
      // sliver, not per tile piece: computed inside ForTilePieces' lambda,
      // the depth made non-causal L1024 11% slower (GCC 12, Zen 5).
      const std::size_t depth =
          detail::VisibleIn(EndOfRows(r0, kTileRows), j0, n);
      ForTilePieces(
          std::min(kTileRows, rows_ - r0), [&](auto height, std::size_t first) {
            const std::size_t row0 = r0 + first;
            for (std::size_t p = 0; p * nr_ < dim_; ++p) {
              MultiplyTile<decltype(height)::value>(
                  depth, StepsA{ProbSliver(r0 / kTileRows) + first, kTileRows},
                  panels + p * panel_stride, step_stride,
                  [&](std::size_t r, FloatVec v0, FloatVec v1) {
                    const std::size_t row = row0 + r;
                    float* o = outputs_ + row * ldo_ + p * nr_;
                    if constexpr (!kFirst) {
                      FloatVec o0 = hn::LoadU(d, o);
                      FloatVec o1 = hn::LoadU(d, o + lanes);
                      const float c = correction_[row];
                      if (rescale && c != 1.0f) {
                        o0 = hn::Mul(o0, hn::Set(d, c));
                        o1 = hn::Mul(o1, hn::Set(d, c));
                      }
                      v0 = hn::Add(o0, v0);
                      v1 = hn::Add(o1, v1);
                    }
                    if constexpr (kToOutputs) {
                      const FloatVec inverse =
                          hn::Set(d, detail::RowMarks::InverseSum(sum_[row]));
                      o = OutputRow(row) + p * nr_;
                      v0 = hn::Mul(v0, inverse);
                      v1 = hn::Mul(v1, inverse);
                    }
                    hn::StoreU(v0, d, o);
                    hn::StoreU(v1, d, o + lanes);
                  });
            }
          });
    }
    return kToOutputs;
  }

  // The path for a block of V holding NaN or Inf: hidden keys skipped.
  void AccumulateVisibleValues(const BlockRows& values, std::size_t j0,
                               std::size_t n, bool rescale) {
    thread_local std::vector<float> p;
    p.resize(n);
    for (std::size_t r = 0; r < rows_; ++r) {
      float* o = outputs_ + r * ldo_;
      if (rescale) {
        for (std::size_t c = 0; c < dim_; ++c) o[c] *= correction_[r];
      }
      const float* sliver = SliverColumns(r / kTileRows, r);
      for (std::size_t j = 0; j < n; ++j) p[j] = sliver[j * kTileRows];
      detail::AddVisibleValues(
          a_, task_.query(r), j0, detail::VisibleIn(marks_.end(r), j0, n),
          values.first, values.token, p.data(), o, 0, dim_);
    }
  }

  // weights row = 2^(logit - max) / sum up to the keys some row sees, 0
  // past them (hidden keys: exactly 0); NaN for a poisoned row.
  void NormalizeWeights() {
    const FloatTag d;
    const std::size_t lanes = hn::Lanes(d);
    for (std::size_t r = 0; r < rows_; ++r) {
      float* w = detail::WeightsRow(a_, task_.b, task_.head(r), task_.query(r));
      if (sum_[r] == 0.0f) {  // saw no key
        std::fill(w, w + a_.shape.kv_len, 0.0f);
        continue;
      }
      if (std::isnan(sum_[r])) {  // poisoned: NaN where it sees a key
        for (std::size_t j = 0; j < a_.shape.kv_len; ++j) {
          const bool hidden =
              j >= marks_.end(r) || detail::BiasHides(a_, task_.query(r), j);
          w[j] = hidden ? 0.0f : kNaN;
        }
        continue;
      }
      const std::size_t computed = marks_.keys_end();
      std::fill(w + computed, w + a_.shape.kv_len, 0.0f);
      const FloatVec shift = hn::Set(d, max_[r]);
      const FloatVec inverse = hn::Set(d, 1.0f / sum_[r]);
      std::size_t j = 0;
      for (; j + lanes <= computed; j += lanes) {
        const FloatVec e =
            Exp2OfNonPositive(d, hn::Sub(hn::LoadU(d, w + j), shift));
        hn::StoreU(hn::Mul(e, inverse), d, w + j);
      }
      for (; j < computed; ++j) w[j] = std::exp2(w[j] - max_[r]) / sum_[r];
    }
  }

  const detail::AttentionArgs& a_;
  const detail::TaskRows task_;
  const detail::SharedBlockChecks& checks_;
  detail::RowMarks marks_;
  const std::size_t rows_, dim_;
  const std::size_t nr_;  // columns of a panel of V (TileCols)
  // Columns of a panel of Q^T: one vector when the task's rows fit in one
  // (S1's 10 queries: half the multiply-adds of K Q^T and of the softmax),
  // else nr_.
  const std::size_t q_cols_;
  const std::size_t ld_;            // columns of S^T: rows_, whole Q^T panels
  const std::size_t score_stride_;  // floats from one S^T row to the next
  const std::size_t ldo_;           // floats per O row: head_dim, whole panels
  std::size_t min_end_;
  float *queries_, *scores_, *outputs_, *value_panels_;
  float* prob_slivers_;  // P^T in slivers of kTileRows rows (ProbSliver)
  float *key_block_ = nullptr, *value_block_ = nullptr;  // widened K, V
  float* bias_rows_ = nullptr;  // the bias of a vector of rows (AddBias)
  float *max_, *sum_, *correction_, *relative_end_;
};

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_LIB_ATTENTION_PREFILL_TILE_INL_H_
