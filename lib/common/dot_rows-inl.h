// Dot products of up to four rows of fp32 values with up to eight rows of
// fp32 or 16-bit values (widened as loaded): the inner loop of products
// whose operands' rows both run along the sum, where the lanes run along
// that sum and each result is one horizontal reduction. It serves a block
// of queries against one key in decoding (lib/attention/decode-inl.h), a few
// rows of A against rows of B in the GEMV with B transposed
// (lib/gemm/gemv-inl.h), and the queries against the rows of W_k's packed
// panels in the layer's absorbed order (lib/layer/absorb_queries.cc), whose
// rows are cut in segments of one panel's width.
//
// The order of the additions depends on k, the segments and the target
// only: lane l sums the steps p = l (mod lanes) of the whole vectors in
// order, the lanes are reduced, then the last k mod lanes steps are added
// one by one.

#if defined(MHA_LIB_COMMON_DOT_ROWS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_LIB_COMMON_DOT_ROWS_INL_H_
#undef MHA_LIB_COMMON_DOT_ROWS_INL_H_
#else
#define MHA_LIB_COMMON_DOT_ROWS_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "lib/common/storage.h"
#include "lib/common/wide_load-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Lists the rows, and the (row of a, row of b) pairs, for the macros below.
#define MHA_DOT_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
// clang-format off
#define MHA_DOT_PAIRS(X)                                                    \
  X(0, 0) X(0, 1) X(0, 2) X(0, 3) X(0, 4) X(0, 5) X(0, 6) X(0, 7)           \
  X(1, 0) X(1, 1) X(1, 2) X(1, 3) X(2, 0) X(2, 1) X(2, 2) X(2, 3)           \
  X(3, 0) X(3, 1) X(3, 2) X(3, 3)
// clang-format on

// Where a row of b holds step p: rows stored whole (`segment` >= k and
// `segment_stride` 0, which spares a 64-bit division per dot product: the
// decode logits loop makes one per key and chunk of query rows, and the
// divide showed in its profile), or cut in segments of `segment` steps (a
// multiple of the vector length), each `segment_stride` elements after the one
// before (W_k's rows across its packed panels).
struct RowSegments {
  std::size_t segment, segment_stride;
  std::size_t Offset(std::size_t p) const {
    return segment_stride == 0 ? p : p / segment * segment_stride + p % segment;
  }
};

// out[r * a_stride + s * b_stride] = sum over p < k of a[r * lda + p] *
// b[s * ldb + segments.Offset(p)], for r < kRowsA (1 to 4) and s < kRowsB
// (1 to 8; at most 8 pairs: one sum in a register per pair). Each vector of
// a row of b is loaded once for all the rows of a, and several rows of b are
// several streams for the prefetchers; kPrefetchAhead > 0 also prefetches
// each row of b that many elements ahead of its loads. The sums are named
// variables, not an array (vectors of sizeless types, Arm SVE); pairs past
// the shape are never touched, so the compiler drops them.
template <std::size_t kRowsA, std::size_t kRowsB,
          std::size_t kPrefetchAhead = 0, class T>
HWY_INLINE void DotRows(const float* HWY_RESTRICT a, std::size_t lda,
                        const T* HWY_RESTRICT b, std::size_t ldb, std::size_t k,
                        const RowSegments& segments, float* HWY_RESTRICT out,
                        std::size_t a_stride, std::size_t b_stride) {
  static_assert(kRowsA >= 1 && kRowsA <= 4 && kRowsB >= 1 && kRowsB <= 8 &&
                    kRowsA * kRowsB <= 8 && (kRowsB <= 4 || kRowsA == 1),
                "registers, and the pairs MHA_DOT_PAIRS lists");
  const hn::ScalableTag<float> d;
  const std::size_t lanes = hn::Lanes(d);
#define MHA_DECLARE_SUM(r, s) [[maybe_unused]] auto sum##r##s = hn::Zero(d);
  MHA_DOT_PAIRS(MHA_DECLARE_SUM)
#undef MHA_DECLARE_SUM
  std::size_t p = 0;
  for (std::size_t first = 0; first + lanes <= k; first += segments.segment) {
    const T* HWY_RESTRICT b_segment = b + segments.Offset(first);
    const std::size_t end = std::min(k, first + segments.segment);
    for (; p + lanes <= end; p += lanes) {
      [[maybe_unused]] decltype(sum00) a0, a1, a2, a3, a4, a5, a6, a7;
      [[maybe_unused]] decltype(sum00) b0, b1, b2, b3, b4, b5, b6, b7;
#define MHA_LOAD_ROWS(r)                                                     \
  if constexpr (r < kRowsA) a##r = hn::LoadU(d, a + r * lda + p);            \
  if constexpr (r < kRowsB) {                                                \
    const T* HWY_RESTRICT b_row = b_segment + r * ldb + (p - first);         \
    if constexpr (kPrefetchAhead > 0) hwy::Prefetch(b_row + kPrefetchAhead); \
    b##r = LoadWide(d, b_row);                                               \
  }
      MHA_DOT_ROWS(MHA_LOAD_ROWS)
#undef MHA_LOAD_ROWS
#define MHA_ADD_PRODUCT(r, s)                      \
  if constexpr (r < kRowsA && s < kRowsB) {        \
    sum##r##s = hn::MulAdd(a##r, b##s, sum##r##s); \
  }
      MHA_DOT_PAIRS(MHA_ADD_PRODUCT)
#undef MHA_ADD_PRODUCT
    }
    if (p < end) break;  // a ragged end: the rest one by one
  }
#define MHA_FINISH_SUM(r, s)                                                 \
  if constexpr (r < kRowsA && s < kRowsB) {                                  \
    float total = hn::GetLane(hn::SumOfLanes(d, sum##r##s));                 \
    for (std::size_t q = p; q < k; ++q) {                                    \
      total +=                                                               \
          a[r * lda + q] * detail::ToFloat(b[s * ldb + segments.Offset(q)]); \
    }                                                                        \
    out[r * a_stride + s * b_stride] = total;                                \
  }
  MHA_DOT_PAIRS(MHA_FINISH_SUM)
#undef MHA_FINISH_SUM
}

// out[r * a_stride + j] = the dot product of row r of a with row j of b,
// for r < kRowsA and j < rows_b. The caller's tag Walk says how to walk b:
// Walk::kRowsB<kRowsA> rows of b at a time, and Walk::kPrefetchAhead (0 for
// none) as DotRows takes it. Rows of b re-read from cache want few rows
// (four sums per row of a leave room for four rows of a); rows streamed
// once from DRAM want many streams and the prefetch.
template <std::size_t kRowsA, class Walk, class T>
HWY_INLINE void DotRowsOfB(const float* HWY_RESTRICT a, std::size_t lda,
                           const T* HWY_RESTRICT b, std::size_t ldb,
                           std::size_t rows_b, std::size_t k,
                           const RowSegments& segments, float* HWY_RESTRICT out,
                           std::size_t a_stride) {
  constexpr std::size_t kRowsB = Walk::template kRowsB<kRowsA>;
  std::size_t j = 0;
  for (; j + kRowsB <= rows_b; j += kRowsB) {
    DotRows<kRowsA, kRowsB, Walk::kPrefetchAhead>(
        a, lda, b + j * ldb, ldb, k, segments, out + j, a_stride, 1);
  }
  for (; j < rows_b; ++j) {
    DotRows<kRowsA, 1, Walk::kPrefetchAhead>(a, lda, b + j * ldb, ldb, k,
                                             segments, out + j, a_stride, 1);
  }
}

// A walk of b for DotRowsOfB: four rows for one or two rows of a, two for
// three or four (eight sums in registers), no software prefetch. It serves
// rows re-read from L2 (W_k's panels in the absorbed order: eight rows for
// one query made S6 12-14% slower on Zen 5) and rows streamed from DRAM
// where L1 has too few ways for more streams (gemv-inl.h).
struct FourRowsOfB {
  template <std::size_t kRowsA>
  static constexpr std::size_t kRowsB = kRowsA <= 2 ? 4 : 2;
  static constexpr std::size_t kPrefetchAhead = 0;
};

// f(std::integral_constant<size_t, count>()) for a count of 1 to 4 rows.
template <class F>
HWY_INLINE void WithRowCount(std::size_t count, F&& f) {
  switch (count) {
    case 1:
      return f(std::integral_constant<std::size_t, 1>());
    case 2:
      return f(std::integral_constant<std::size_t, 2>());
    case 3:
      return f(std::integral_constant<std::size_t, 3>());
    default:
      return f(std::integral_constant<std::size_t, 4>());
  }
}

#undef MHA_DOT_ROWS
#undef MHA_DOT_PAIRS

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_LIB_COMMON_DOT_ROWS_INL_H_
