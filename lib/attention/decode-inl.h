// Attention for a few query positions per sequence (decoding: one new token,
// or a short chunk), which is bound by reading K and V once. A task owns a
// range of one sequence's keys for one KV head or all of them (see
// KvHeadsPerTask), and walks K and V in memory order (see Run); with
// grouped-query attention each K and V row serves all the query heads of its
// group. The lanes run along head_dim: each key is a dot product per query
// row, each value row is added with the row's probability. Split key ranges
// hand their softmax states over for a merge in range order
// (flash-decoding).

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
#include <type_traits>

#include "hwy/highway.h"
#include "lib/attention/attention_args.h"
#include "lib/attention/task.h"
#include "lib/common/cache_sizes.h"
#include "lib/common/dot_rows-inl.h"
#include "lib/common/prefetch.h"
#include "lib/common/scratch.h"
#include "lib/common/wide_load-inl.h"
#include "lib/gemm/microkernel-inl.h"
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

// The rows of a decode task (TaskRows): the q_len query rows of every query
// head of its KV heads in sequence b, against keys [key_begin, key_stop). K
// and V are stored as KV (float, BF16 or F16) and widened in registers as
// they are loaded.
template <class KV>
class DecodeRange {
 public:
  // Key ranges of split tasks are whole multiples of this many keys.
  static constexpr std::size_t kRangeQuantum = 64;

  // KV heads a task takes: all of them when K is laid out [token, kv_dim]
  // (a block of keys over every head is one contiguous run), one when it is
  // [head, token, head_dim] (the layer's KVCache), so that a task reads its
  // head's K and V in two runs of kv_len rows. Tasks of all the heads, each
  // over a range of the keys, cut those runs in pieces of a few hundred
  // keys, and each piece is a new stream for the prefetchers. Zen 5, L3
  // evicted before each call, in one process against 8 ranges over all
  // heads (the two interleaved in balanced order): 32 KV heads over 2048
  // keys read 1.09x as fast on 1 core and 1.14x on 2 (the layer's decode
  // step at d4096, 1.02x and 1.01x); 8 KV heads over 8192 keys, 1.02x and
  // 1.00-1.04x. Two or four heads a task, head-major (four or eight streams
  // at once), one Zen 4 core, one process: 0.95-0.99x of one (8 KV heads
  // over 4096 keys, 32 over 2048).
  static std::size_t KvHeadsPerTask(const detail::AttentionArgs& a) {
    return a.k_layout.head < a.k_layout.token ? a.shape.num_kv_heads : 1;
  }

  DecodeRange(const detail::AttentionArgs& args, const detail::TaskRows& task)
      : a_(args),
        task_(task),
        marks_(args, task),
        kv_begin_(task.kv_head),
        kv_end_(task.kv_head + task.kv_heads),
        rows_each_(task.group * task.q_count),
        rows_(task.count()),
        dim_(args.shape.head_dim),
        block_(KeysPerBlock()),
        key_lead_(std::max<std::size_t>(
            1, detail::kStreamLeadBytes / (dim_ * sizeof(KV)))),
        prefetch_keys_(PrefetchesKeys()) {
    using detail::ScratchSlot;
    using detail::ThreadScratch;
    queries_ = ThreadScratch(ScratchSlot::kQueryPanels, rows_ * dim_);
    scores_ = ThreadScratch(ScratchSlot::kScoresT, rows_ * kMaxBlock);
    outputs_ = ThreadScratch(ScratchSlot::kOutputRows, rows_ * dim_);
    block_sums_ = ThreadScratch(ScratchSlot::kValueSums, rows_ * dim_);
    float* state = ThreadScratch(ScratchSlot::kRowState, 2 * rows_);
    max_ = state;
    sum_ = state + rows_;
    const float scale2 = a_.scale * kLog2e;
    for (std::size_t r = 0; r < rows_; ++r) {
      const float* q = detail::QueryRow(a_, task_, r);
      for (std::size_t c = 0; c < dim_; ++c) {
        queries_[r * dim_ + c] = scale2 * q[c];
      }
    }
    std::fill(max_, max_ + rows_, kNegInf);
    std::fill(sum_, sum_ + rows_, 0.0f);
    std::memset(outputs_, 0, rows_ * dim_ * sizeof(float));
  }

  // K and V are walked in memory order, block by block of keys, each block
  // over the task's KV heads: in a cache laid out [token, kv_dim] (heads
  // interleaved in a token) a block is one contiguous run; laid out [head,
  // token, head_dim] the task has one head, whose keys are a run of kv_len x
  // head_dim floats. (The attention core at d4096 h32, head-major, read K at
  // 10-13 GB/s block by block over all heads: 32 runs of 32 KiB, each a new
  // stream for the prefetchers.)
  //
  // A block reads its K rows, then its V rows: two runs in turn, and the
  // hardware prefetchers restart on each. So while a block's logits are
  // computed, its V rows and the K rows a few keys ahead are prefetched, two
  // streams at once, when two blocks fit in half of L2 (the prefetched
  // lines must still be there when used). Head-major, one Zen 5 core: 32 KV
  // heads over 2048 keys read 35 GB/s instead of 22.7, 8 over 4096 39 GB/s
  // instead of 18.3 (64 GB/s in cache). A cache laid out [token, kv_dim] at
  // 32 KV heads (1 MiB blocks) ran the layer's decode step 0.91x as fast with
  // the prefetches.
  //
  // K is asked for kStreamLeadBytes of each head's rows ahead. Head-major,
  // one Zen 5 core, in one process against a lead of a whole block (32 KiB):
  // 4 KiB read 1.04-1.10x faster at 32 KV heads over 2048 keys and 8 over
  // 4096, 8 KiB 1.05-1.07x, 2 KiB 0.85-0.94x of 4 KiB, 1 KiB 0.80-0.86x.
  // (Those runs kept part of K and V in L3 between calls. With L3 evicted
  // before each call, blocks of 256 keys read at the same rate with or
  // without any of the prefetches, 0.4-0.6 of a 4-stream read loop, so
  // what limits the rate from DRAM is not yet known. Nor is it that memory
  // idles while P V runs from L2: asking for the next block's K rows during
  // P V, instead of 4 KiB ahead during the logits, read 0.79-1.01x as fast
  // (one task per KV head; 32 over 2048 keys on 1 and 2 cores, 8 over 8192
  // on 1; in one process against the loop, balanced order).)
  void Run() {
    if (TwoBlocksFitHalfOfL2(block_)) {
      RunBlocks</*kPrefetch=*/true>();
    } else {
      RunBlocks</*kPrefetch=*/false>();
    }
    marks_.PoisonSums(sum_);
  }

  void WriteOutputs() const {
    for (std::size_t r = 0; r < rows_; ++r) {
      ScaleRow(outputs_ + r * dim_, dim_, detail::RowMarks::InverseSum(sum_[r]),
               detail::OutputRow(a_, task_, r));
    }
  }

  void ExportStates(float* states, std::size_t stride) const {
    for (std::size_t r = 0; r < rows_; ++r) {
      detail::RowState::Store(max_[r], sum_[r], outputs_ + r * dim_, dim_,
                              states + r * stride);
    }
  }

 private:
  // Keys per block: the most, up to kMaxBlock, whose K and V rows (of every
  // head of a pass) fit in half of L2 beside the next block's, so that the
  // prefetches of Run stay useful; kRangeQuantum when even those do not fit.
  // Head-major, one Zen 5 core (1 MiB L2), L3 evicted before each call, in
  // one process: 256 keys read 1.09-1.22x as fast as 64 (32 KV heads over
  // 2048 keys, 8 over 8192, 1 and 2 threads), 128 and 512 about as 256,
  // 1024 (past the limit, no prefetch) 0.6-0.85x of 64. Fewer blocks mean
  // fewer softmax steps and O updates, and V prefetched further ahead.
  // Token-major caches (all heads in a pass) keep 64 or less: at 8 KV heads
  // blocks of 128, past the limit, read 0.74x as fast; at 32 KV heads 8 to
  // 64 keys all read alike.
  std::size_t KeysPerBlock() const {
    std::size_t keys = kMaxBlock;
    while (keys > kRangeQuantum && !TwoBlocksFitHalfOfL2(keys)) {
      keys /= 2;
    }
    return keys;
  }

  // Whether K and V of a block of `keys` keys over the task's heads (two runs
  // of that many rows) fit in half of L2.
  bool TwoBlocksFitHalfOfL2(std::size_t keys) const {
    const std::size_t block_bytes =
        keys * (kv_end_ - kv_begin_) * dim_ * sizeof(KV);
    return 2 * block_bytes <= detail::MachineCaches().l2 / 2;
  }

  // Whether K is asked for key_lead_ keys ahead, beside V. With one query
  // row per K row the logits loop keeps pace with the hardware prefetchers,
  // and on a core with an 8-way L1 the extra requests only crowd them: one
  // Zen 4 core, 32 KV heads over 2048 keys, one process switching between
  // calls, without them 1.19x and 1.17x as fast on 1 thread, 1.07x on 2;
  // groups of 2 rows 1.00x, of 4 0.85x and 0.93x. Zen 5 (12-way L1) was
  // tuned with them, so they stay there: the L1's ways stand in for the
  // core generation (StreamingPrefetchPays, lib/common/prefetch.h).
  bool PrefetchesKeys() const {
    return rows_each_ > 1 || detail::StreamingPrefetchPays();
  }

  // The first of the rows of KV head kv_head's group.
  std::size_t FirstRow(std::size_t kv_head) const {
    return (kv_head - kv_begin_) * rows_each_;
  }

  // Asks for one row of head_dim values of K or V (see Run), into L2: the
  // loads that use it come a block later for V, and L1 prefetches held the
  // miss buffers on Zen 4 (lib/common/prefetch.h).
  void PrefetchRow(const KV* row) const {
    detail::PrefetchBytes<detail::CacheLevel::kL2>(row, dim_ * sizeof(KV));
  }

  std::size_t Visible(std::size_t r, std::size_t j0, std::size_t n) const {
    return detail::VisibleIn(marks_.end(r), j0, n);
  }

  // kPrefetch: V and K ahead of use (see Run).
  template <bool kPrefetch>
  void RunBlocks() {
    const std::size_t keys_end = marks_.keys_end();
    for (std::size_t j0 = task_.key_begin; j0 < keys_end; j0 += block_) {
      const std::size_t n = std::min(block_, keys_end - j0);
      ComputeLogits<kPrefetch>(j0, n);
      for (std::size_t r = 0; r < rows_; ++r) SoftmaxStep(r, j0, n);
      AccumulateValues(j0, n);
    }
  }

  // scores[r][j] = q_r . k_{j0+j} in base 2, -inf where row r does not see
  // the key. Keys outer, KV heads inner: one pass over each key's row of
  // every head, each K row loaded once for the rows of its group.
  //
  // With one query row per KV head, each key is one chain of head_dim /
  // lanes multiply-adds and a reduction, and this loop takes 3/4 of the
  // time when K and V are in cache. Faster forms were measured on one Zen 5
  // core (32 KV heads, head_dim 128), in one process: four keys a dot
  // product read 1.7-1.9x as fast in cache (256 keys a head) but 0.78-0.91x
  // as fast from DRAM (2048 keys, L3 evicted); the logits of one block
  // interleaved with the P V of the block before, 1.4x in cache but
  // 0.95-1.05x from DRAM. The same loop with the row chunks outside the keys
  // and each K row found by a stride instead of KeyRow: 1.42x in cache at 8
  // KV heads (group 4) and 1.52x at 32, but 0.66-0.75x and 0.87x from DRAM,
  // whatever the software prefetches (none, no V, K 2 to 16 KiB ahead). So
  // from DRAM this loop's speed is not what limits the rate (see Run), and
  // the faster forms were not kept. On Zen 4 (512-bit operations on 256-bit
  // units) it does limit it with groups: 8 KV heads of 4 query heads, one
  // core, the logits took 69% of the time and P V 20% for as many
  // multiply-adds with 4 MiB of K and V in cache (19-24 GB/s), and from
  // DRAM the core read 12-17 GB/s against a read probe's 24-27 while its
  // prefetches went into L1 (into L2, 1.2x faster: PrefetchRow). With those
  // L1 prefetches, four keys a call for the group's rows, their 16 sums
  // reduced four at a time by interleaving lanes, read 1.0-1.25x as fast in
  // cache but 0.35-0.65x from DRAM (6-11 against 12-17 GB/s, alternating
  // builds), also with each K row read whole in turn, with K prefetched 2-8x
  // further ahead, and with K prefetched as it is loaded: the K loads
  // stalled (perf). With L2 prefetches, also asking for the next block's K
  // rows a few lines per step of P V read 0.88x and 0.86x as fast (8 KV
  // heads over 4096 keys, 1 and 2 threads, one process), and two keys a
  // call (DotRows<4, 2>, half the loads of the queries) 1.04x from L3 but
  // 0.90x from DRAM (0.94x over 32 KV heads).
  template <bool kPrefetch>
  void ComputeLogits(std::size_t j0, std::size_t n) {
    for (std::size_t j = 0; j < n; ++j) {
      for (std::size_t kv_head = kv_begin_; kv_head < kv_end_; ++kv_head) {
        const KV* key = detail::KeyRow<KV>(a_, task_.b, kv_head, j0 + j);
        if constexpr (kPrefetch) {
          PrefetchRow(detail::ValueRow<KV>(a_, task_.b, kv_head, j0 + j));
          if (prefetch_keys_ && j0 + j + key_lead_ < marks_.keys_end()) {
            PrefetchRow(
                detail::KeyRow<KV>(a_, task_.b, kv_head, j0 + j + key_lead_));
          }
        }
        ForTilePieces<4>(rows_each_, [&](auto rows, std::size_t first) {
          const std::size_t r = FirstRow(kv_head) + first;
          DotRows<decltype(rows)::value, 1>(
              queries_ + r * dim_, dim_, key, 0, dim_, RowSegments{dim_, 0},
              scores_ + r * block_ + j, block_, 0);
        });
      }
    }
    for (std::size_t r = 0; r < rows_; ++r) {
      float* s = scores_ + r * block_;
      const std::size_t visible = Visible(r, j0, n);
      std::fill(s + visible, s + n, kNegInf);
      FinishLogits(r, s, detail::BiasRow(a_, task_.query(r), j0), visible);
    }
  }

  // The visible logits of row r: a -inf bias hides the key whatever its
  // logit holds; a logit that is not finite (NaN or Inf in q, k or the bias)
  // poisons the row (and becomes -inf, keeping its sums finite: the row's
  // output is NaN anyway).
  void FinishLogits(std::size_t r, float* s, const float* bias,
                    std::size_t visible) {
    const FloatTag d;
    const std::size_t lanes = hn::Lanes(d);
    const FloatVec neg_inf = hn::Set(d, kNegInf);
    const FloatVec log2e = hn::Set(d, kLog2e);
    auto bad = hn::FirstN(d, 0);
    for (std::size_t j = 0; j < visible; j += lanes) {
      const auto valid = hn::FirstN(d, visible - j);
      RowTail scores_tail, bias_tail;
      const bool whole = j + lanes <= visible;
      FloatVec x = whole ? hn::LoadU(d, s + j)
                         : scores_tail.Load(s + j, visible - j, 0.0f);
      auto hidden = hn::Not(valid);
      if (bias) {
        const FloatVec b = whole ? hn::LoadU(d, bias + j)
                                 : bias_tail.Load(bias + j, visible - j, 0.0f);
        hidden = hn::Or(hidden, hn::Eq(b, neg_inf));
        x = hn::MulAdd(b, log2e, x);
      }
      const auto finite = hn::IsFinite(x);
      bad = hn::Or(bad, hn::AndNot(hidden, hn::Not(finite)));
      x = hn::IfThenElse(hn::Or(hidden, hn::Not(finite)), neg_inf, x);
      if (whole) {
        hn::StoreU(x, d, s + j);
      } else {
        scores_tail.Store(x, s + j, visible - j);
      }
    }
    if (!hn::AllFalse(d, bad)) marks_.Poison(r);
  }

  // The online softmax of row r over the block: p = 2^(s - max) in place,
  // the row's O rescaled where its max changed.
  void SoftmaxStep(std::size_t r, std::size_t j0, std::size_t n) {
    const std::size_t visible = Visible(r, j0, n);
    float* s = scores_ + r * block_;
    const float block_max = RowMax(s, visible);
    const float new_max = std::max(max_[r], block_max);
    if (new_max == kNegInf) {  // nothing seen yet
      std::memset(s, 0, visible * sizeof(float));
      return;
    }
    const float correction = std::exp2(max_[r] - new_max);
    sum_[r] = sum_[r] * correction +
              Exp2ShiftedRow(s, s, visible, 1.0f, new_max, 0.0f);
    max_[r] = new_max;
    if (correction != 1.0f) {
      ScaleRow(outputs_ + r * dim_, dim_, correction, outputs_ + r * dim_);
    }
  }

  // O[r] += sum over j of p[r][j] v_{j0+j} (p is 0 where the row does not
  // see the key), the block's sum formed in order of j, then added to O. A
  // block sum that is not finite is redone by the path that skips hidden
  // keys, whose V may hold NaN or Inf (0 * Inf is NaN); a visible key's NaN
  // comes back NaN. Two orders of reading V, by how far apart its rows are:
  //   up to a page (4 KiB: [head, token, head_dim], or a few KV heads in a
  //     token): strips of head_dim summed in registers down the block, each
  //     V vector loaded once for up to 4 rows of a group;
  //   farther (a token-major cache at kv_dim 4096, 16 KiB a token): V in
  //     memory order, the sums in an L1-resident buffer. Strips would walk
  //     64 rows in 64 pages, streams the prefetchers do not follow: one Zen 5
  //     core ran a decode step at d4096 with 32 KV heads on such a cache
  //     1.15x faster this way, and with 8 KV heads (4 KiB a token) 0.97x.
  void AccumulateValues(std::size_t j0, std::size_t n) {
    constexpr std::size_t kPage = 4096;
    if (a_.v_layout.token * sizeof(KV) <= kPage) {
      AccumulateValueStrips(j0, n);
    } else {
      AccumulateValuesInMemoryOrder(j0, n);
    }
  }

  // Per KV head, the rows of its group in chunks of 4, 2 and 1, and head_dim
  // in strips of 8 / rows vectors, summed over the block in registers: each
  // V row is loaded once for the chunk, and O once per block; eight sums,
  // eight independent chains of multiply-adds.
  void AccumulateValueStrips(std::size_t j0, std::size_t n) {
    for (std::size_t kv_head = kv_begin_; kv_head < kv_end_; ++kv_head) {
      const KV* values = detail::ValueRow<KV>(a_, task_.b, kv_head, j0);
      ForTilePieces<4>(rows_each_, [&](auto rows, std::size_t first) {
        constexpr std::size_t kRows = decltype(rows)::value;
        const std::size_t r = FirstRow(kv_head) + first;
        AddValueStrips<kRows, 8 / kRows>(r, values, j0, n, 0);
      });
    }
  }

  // Columns [c, head_dim) of rows [r, r + kRows): strips of kVecs vectors,
  // then of half as many for the rest (head_dim is whole vectors).
  template <std::size_t kRows, std::size_t kVecs>
  HWY_INLINE void AddValueStrips(std::size_t r, const KV* values,
                                 std::size_t j0, std::size_t n, std::size_t c) {
    const std::size_t strip = kVecs * hn::Lanes(FloatTag());
    for (; c + strip <= dim_; c += strip) {
      AddValues<kRows, kVecs>(r, values, j0, n, c);
    }
    if constexpr (kVecs > 1) {
      AddValueStrips<kRows, kVecs / 2>(r, values, j0, n, c);
    }
  }

// The accumulators of AddValues: sum<row><vector>, rows 0-3, vectors 0-7.
// clang-format off
#define MHA_VALUE_SUMS(X)                                                  \
  X(0, 0) X(0, 1) X(0, 2) X(0, 3) X(0, 4) X(0, 5) X(0, 6) X(0, 7)          \
  X(1, 0) X(1, 1) X(1, 2) X(1, 3) X(1, 4) X(1, 5) X(1, 6) X(1, 7)          \
  X(2, 0) X(2, 1) X(2, 2) X(2, 3) X(2, 4) X(2, 5) X(2, 6) X(2, 7)          \
  X(3, 0) X(3, 1) X(3, 2) X(3, 3) X(3, 4) X(3, 5) X(3, 6) X(3, 7)
// clang-format on
#define MHA_VALUE_ROWS(X) X(0) X(1) X(2) X(3)
#define MHA_VALUE_VECS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)

  // Rows [r, r + kRows), columns [c, c + kVecs vectors) of the block's P V,
  // one sum per (row, vector), named variables (sizeless vectors, Arm SVE).
  template <std::size_t kRows, std::size_t kVecs>
  HWY_INLINE void AddValues(std::size_t r, const KV* values, std::size_t j0,
                            std::size_t n, std::size_t c) {
    static_assert(kRows <= 4 && kVecs <= 8 && kRows * kVecs <= 8, "registers");
    const FloatTag d;
    const std::size_t lanes = hn::Lanes(d);
    const std::size_t token = a_.v_layout.token;
    const float* p = scores_ + r * block_;
#define MHA_DECLARE_SUM(row, vec) \
  [[maybe_unused]] FloatVec sum##row##vec = hn::Zero(d);
    MHA_VALUE_SUMS(MHA_DECLARE_SUM)
#undef MHA_DECLARE_SUM
    for (std::size_t j = 0; j < n; ++j) {
      const KV* v = values + j * token + c;
      [[maybe_unused]] FloatVec v0, v1, v2, v3, v4, v5, v6, v7, p0, p1, p2, p3;
#define MHA_LOAD_VALUE(vec) \
  if constexpr (vec < kVecs) v##vec = LoadWide(d, v + vec * lanes);
      MHA_VALUE_VECS(MHA_LOAD_VALUE)
#undef MHA_LOAD_VALUE
#define MHA_SET_P(row) \
  if constexpr (row < kRows) p##row = hn::Set(d, p[row * block_ + j]);
      MHA_VALUE_ROWS(MHA_SET_P)
#undef MHA_SET_P
#define MHA_ADD_VALUE(row, vec)                                \
  if constexpr (row < kRows && vec < kVecs) {                  \
    sum##row##vec = hn::MulAdd(p##row, v##vec, sum##row##vec); \
  }
      MHA_VALUE_SUMS(MHA_ADD_VALUE)
#undef MHA_ADD_VALUE
    }
    // Adds a row's sums to O; sums that are not all finite are redone by the
    // path that skips hidden keys.
    const auto finish_row = [&](std::size_t row, FloatVec s0, FloatVec s1,
                                FloatVec s2, FloatVec s3, FloatVec s4,
                                FloatVec s5, FloatVec s6, FloatVec s7) {
      auto finite = hn::IsFinite(s0);
#define MHA_CHECK_SUM(vec)                          \
  if constexpr (vec > 0 && vec < kVecs) {           \
    finite = hn::And(finite, hn::IsFinite(s##vec)); \
  }
      MHA_VALUE_VECS(MHA_CHECK_SUM)
#undef MHA_CHECK_SUM
      float* o = outputs_ + row * dim_ + c;
      if (!hn::AllTrue(d, finite)) {
        detail::AddVisibleValues(a_, task_.query(row), j0, Visible(row, j0, n),
                                 values, token, scores_ + row * block_,
                                 outputs_ + row * dim_, c, c + kVecs * lanes);
        return;
      }
#define MHA_STORE_SUM(vec)                                        \
  if constexpr (vec < kVecs) {                                    \
    hn::StoreU(hn::Add(hn::LoadU(d, o + vec * lanes), s##vec), d, \
               o + vec * lanes);                                  \
  }
      MHA_VALUE_VECS(MHA_STORE_SUM)
#undef MHA_STORE_SUM
    };
#define MHA_FINISH_ROW(row)                                                 \
  if constexpr (row < kRows) {                                              \
    finish_row(r + row, sum##row##0, sum##row##1, sum##row##2, sum##row##3, \
               sum##row##4, sum##row##5, sum##row##6, sum##row##7);         \
  }
    MHA_VALUE_ROWS(MHA_FINISH_ROW)
#undef MHA_FINISH_ROW
  }
#undef MHA_VALUE_SUMS
#undef MHA_VALUE_ROWS
#undef MHA_VALUE_VECS

  // Four keys at a time, every KV head of the pass, each V vector loaded
  // once for the rows of its group (in chunks of 4), the sums in block_sums_.
  void AccumulateValuesInMemoryOrder(std::size_t j0, std::size_t n) {
    const std::size_t token = a_.v_layout.token;
    std::memset(block_sums_, 0, rows_ * dim_ * sizeof(float));
    for (std::size_t j = 0; j < n;) {
      const bool four = j + 4 <= n;
      for (std::size_t kv_head = kv_begin_; kv_head < kv_end_; ++kv_head) {
        const KV* v = detail::ValueRow<KV>(a_, task_.b, kv_head, j0 + j);
        ForTilePieces<4>(rows_each_, [&](auto rows, std::size_t first) {
          constexpr std::size_t kRows = decltype(rows)::value;
          const std::size_t r = FirstRow(kv_head) + first;
          if (four) {
            AddKeys<4, kRows>(r, j, v, token);
          } else {
            AddKeys<1, kRows>(r, j, v, token);
          }
        });
      }
      j += four ? 4 : 1;
    }
    const FloatTag d;
    const std::size_t lanes = hn::Lanes(d);
    for (std::size_t r = 0; r < rows_; ++r) {
      const float* sum = block_sums_ + r * dim_;
      float* o = outputs_ + r * dim_;
      auto finite = hn::FirstN(d, lanes);
      for (std::size_t c = 0; c < dim_; c += lanes) {
        finite = hn::And(finite, hn::IsFinite(hn::LoadU(d, sum + c)));
      }
      if (!hn::AllTrue(d, finite)) {
        const std::size_t kv_head = kv_begin_ + r / rows_each_;
        detail::AddVisibleValues(a_, task_.query(r), j0, Visible(r, j0, n),
                                 detail::ValueRow<KV>(a_, task_.b, kv_head, j0),
                                 token, scores_ + r * block_, o, 0, dim_);
        continue;
      }
      for (std::size_t c = 0; c < dim_; c += lanes) {
        hn::StoreU(hn::Add(hn::LoadU(d, o + c), hn::LoadU(d, sum + c)), d,
                   o + c);
      }
    }
  }

  // For rows [r, r + kRows): sums += p[row][j + k] v_k for the kKeys (1 or
  // 4) V rows v_k = v + k * token, in order of k; each V vector loaded once.
  template <std::size_t kKeys, std::size_t kRows>
  HWY_INLINE void AddKeys(std::size_t r, std::size_t j,
                          const KV* HWY_RESTRICT v, std::size_t token) const {
    static_assert(kKeys == 1 || kKeys == 4, "one key or four");
    const FloatTag d;
    const std::size_t lanes = hn::Lanes(d);
    for (std::size_t c = 0; c < dim_; c += lanes) {
      const FloatVec v0 = LoadWide(d, v + c);
      const FloatVec v1 = kKeys > 1 ? LoadWide(d, v + token + c) : v0;
      const FloatVec v2 = kKeys > 1 ? LoadWide(d, v + 2 * token + c) : v0;
      const FloatVec v3 = kKeys > 1 ? LoadWide(d, v + 3 * token + c) : v0;
      for (std::size_t row = r; row < r + kRows; ++row) {
        const float* p = scores_ + row * block_ + j;
        float* sum = block_sums_ + row * dim_ + c;
        FloatVec x = hn::MulAdd(hn::Set(d, p[0]), v0, hn::LoadU(d, sum));
        if constexpr (kKeys > 1) {
          x = hn::MulAdd(hn::Set(d, p[1]), v1, x);
          x = hn::MulAdd(hn::Set(d, p[2]), v2, x);
          x = hn::MulAdd(hn::Set(d, p[3]), v3, x);
        }
        hn::StoreU(x, d, sum);
      }
    }
  }

  const detail::AttentionArgs& a_;
  const detail::TaskRows task_;
  detail::RowMarks marks_;
  static constexpr std::size_t kMaxBlock = 256;  // keys per block, at most
  const std::size_t kv_begin_, kv_end_;          // the task's KV heads
  const std::size_t rows_each_;  // rows per KV head: query heads x q_len
  const std::size_t rows_, dim_;
  const std::size_t block_;     // keys per block (KeysPerBlock)
  const std::size_t key_lead_;  // keys K is prefetched ahead (see Run)
  const bool prefetch_keys_;    // whether it is (PrefetchesKeys)
  float *queries_, *scores_, *outputs_, *block_sums_, *max_, *sum_;
};

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_LIB_ATTENTION_DECODE_INL_H_
