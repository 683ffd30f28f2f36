// mha::sgemm: argument checks, then one dispatch to the chosen target's
// blocked GEMM (gemm-inl.h), compiled here once per Highway target.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lib/gemm/gemm.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "hwy/highway.h"
#include "lib/dispatch/dispatch.h"
#include "lib/gemm/gemm-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {

void GemmKernel(const detail::GemmArgs& args) {
  detail::NoteKernelTarget(HWY_TARGET);
  GemmBlocked(args);
}

void GemmWideTilesKernel(const detail::GemmArgs& args) {
  GemmSlices<float>(args, Sweep::kWideSlivers, StreamedCBytes(args));
}

bool GemmStreamingCKernel(const detail::GemmArgs& args) {
  GemmSlices<float>(args, ChooseSweep(args), 0);
  return StreamsC(args, 0);
}

std::size_t GemmPanelCols() { return TileCols(); }

// The deepest slice (a multiple of 8) at which L2 holds two sliver blocks,
// or 0.
std::size_t AsksNextDepth() {
  const std::size_t depth =
      std::min(Blocking().kc,
               detail::MachineCaches().l2 /
                   (4 * sizeof(float) * kMinSliverPanels * TileCols())) /
      8 * 8;
  return depth != 0 && L2HoldsTwoSliverBlocks(depth) ? depth : 0;
}

detail::GemmShapeParams GemmShapeParamsOfTarget() {
  const std::size_t asks_next_kc = AsksNextDepth();
  return {
      kTileRows,
      TileCols(),
      Blocking().kc,
      BlockCols(Blocking().kc, Sweep::kSlivers),
      MaxSliceDepth(2 * TileCols(), false),
      kHasPairSweep ? kSweepPairsMinRows : 0,
      SweepDepth(),
      SweepRows(SweepDepth()),
      kPackedGemvRows,
      kWalkRows,
      WalkMinBFloats(),
      detail::MachineCaches().l2 / sizeof(float),
      kSliverPacksBL2s * detail::MachineCaches().l2 / sizeof(float),
      asks_next_kc,
      asks_next_kc == 0 ? 0 : BlockCols(asks_next_kc, Sweep::kSlivers, true),
      kPackBReuse * kTileRows};
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "lib/common/check.h"
#include "mha/gemm.h"

namespace mha {
HWY_EXPORT(GemmKernel);
HWY_EXPORT(GemmWideTilesKernel);
HWY_EXPORT(GemmStreamingCKernel);
HWY_EXPORT(GemmPanelCols);
HWY_EXPORT(GemmShapeParamsOfTarget);

namespace detail {
void RunGemm(std::size_t target_index, const GemmArgs& args) {
  MHA_CALL_TARGET(target_index, GemmKernel)(args);
}
std::size_t PanelCols(std::size_t target_index) {
  return MHA_CALL_TARGET(target_index, GemmPanelCols)();
}
void RunGemmWithWideTilesForTest(std::size_t target_index,
                                 const GemmArgs& args) {
  MHA_CALL_TARGET(target_index, GemmWideTilesKernel)(args);
}
bool RunGemmStreamingCForTest(std::size_t target_index, const GemmArgs& args) {
  return MHA_CALL_TARGET(target_index, GemmStreamingCKernel)(args);
}
GemmShapeParams GemmShapeParamsForTest() {
  return MHA_CALL_TARGET(ChosenTargetIndex(), GemmShapeParamsOfTarget)();
}
}  // namespace detail

void sgemm(Transpose trans_a, Transpose trans_b, std::size_t m, std::size_t n,
           std::size_t k, float alpha, const float* a, std::size_t lda,
           const float* b, std::size_t ldb, float beta, float* c,
           std::size_t ldc) {
  constexpr const char* kWhere = "mha::sgemm";
  if (m == 0 || n == 0) return;
  const bool ta = trans_a == Transpose::Yes, tb = trans_b == Transpose::Yes;
  detail::CheckNotNull(kWhere, "c", c);
  detail::CheckLeadingDim(kWhere, "ldc", ldc, n);
  const detail::Span c_span{c,
                            detail::SizeCheck(kWhere, "C").Matrix(m, n, ldc)};
  if (k > 0) {
    detail::CheckNotNull(kWhere, "a", a);
    detail::CheckNotNull(kWhere, "b", b);
    detail::CheckLeadingDim(kWhere, "lda", lda, ta ? m : k);
    detail::CheckLeadingDim(kWhere, "ldb", ldb, tb ? k : n);
    const std::size_t a_count =
        detail::SizeCheck(kWhere, "A").Matrix(ta ? k : m, ta ? m : k, lda);
    const std::size_t b_count =
        detail::SizeCheck(kWhere, "B").Matrix(tb ? n : k, tb ? k : n, ldb);
    detail::CheckOutputsDisjoint(kWhere, {{"c", c_span}},
                                 {{"a", {a, a_count}}, {"b", {b, b_count}}});
  }
  detail::RunGemm(detail::ChosenTargetIndex(),
                  {m, n, k, alpha, a, lda, ta, b, ldb, tb, beta, c, ldc});
}

}  // namespace mha
#endif  // HWY_ONCE
