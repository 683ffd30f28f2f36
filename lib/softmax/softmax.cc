// mha::softmax: argument checks, then one dispatch to the chosen target's
// row kernel (row-inl.h), rows in parallel.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lib/softmax/softmax.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include <algorithm>
#include <cstddef>

#include "hwy/highway.h"
#include "lib/common/parallel.h"
#include "lib/dispatch/dispatch.h"
#include "lib/softmax/row-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {

void SoftmaxKernel(const float* x, std::size_t ldx, float* y, std::size_t ldy,
                   std::size_t rows, std::size_t cols, float scale) {
  detail::NoteKernelTarget(HWY_TARGET);
  // Rows of a few thousand elements per task amortize the scheduling; an
  // exponential costs about as much as a dozen multiply-adds.
  const std::size_t rows_per_task = std::max<std::size_t>(1, 4096 / cols);
  const std::size_t tasks = (rows + rows_per_task - 1) / rows_per_task;
  detail::ForEachTask(tasks, 12.0 * rows * cols, [&](std::size_t t) {
    const std::size_t end = std::min(rows, (t + 1) * rows_per_task);
    for (std::size_t r = t * rows_per_task; r < end; ++r) {
      SoftmaxRow(x + r * ldx, y + r * ldy, cols, scale);
    }
  });
}

void Exp2Kernel(const float* x, float* y, std::size_t n) {
  detail::NoteKernelTarget(HWY_TARGET);
  const RowTag d;
  const std::size_t lanes = hn::Lanes(d);
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(Exp2OfNonPositive(d, hn::LoadU(d, x + i)), d, y + i);
  }
  if (i < n) {
    RowTail tail;
    tail.Store(Exp2OfNonPositive(d, tail.Load(x + i, n - i, 0.0f)), y + i,
               n - i);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "lib/common/check.h"
#include "lib/softmax/exp2_for_test.h"
#include "lib/softmax/softmax_rows.h"
#include "mha/softmax.h"

namespace mha {
HWY_EXPORT(SoftmaxKernel);
HWY_EXPORT(Exp2Kernel);

namespace detail {
void Exp2OfNonPositiveForTest(const float* x, float* y, std::size_t n) {
  MHA_CALL_TARGET(ChosenTargetIndex(), Exp2Kernel)(x, y, n);
}

void RunSoftmax(std::size_t target_index, const float* x, std::size_t ldx,
                float* y, std::size_t ldy, std::size_t rows, std::size_t cols,
                float scale) {
  MHA_CALL_TARGET(target_index, SoftmaxKernel)
  (x, ldx, y, ldy, rows, cols, scale);
}
}  // namespace detail

void softmax(const float* x, std::size_t ldx, float* y, std::size_t ldy,
             std::size_t rows, std::size_t cols, float scale) {
  constexpr const char* kWhere = "mha::softmax";
  if (rows == 0 || cols == 0) return;
  detail::CheckNotNull(kWhere, "x", x);
  detail::CheckNotNull(kWhere, "y", y);
  detail::CheckLeadingDim(kWhere, "ldx", ldx, cols);
  detail::CheckLeadingDim(kWhere, "ldy", ldy, cols);
  detail::CheckFinite(kWhere, "scale", scale);
  if (x == y && ldx != ldy) {
    detail::Fail(kWhere, ": in place (y == x) needs ldy (", ldy,
                 ") equal to ldx (", ldx, ")");
  }
  const std::size_t x_count =
      detail::SizeCheck(kWhere, "x").Matrix(rows, cols, ldx);
  const std::size_t y_count =
      detail::SizeCheck(kWhere, "y").Matrix(rows, cols, ldy);
  if (x != y)
    detail::CheckDisjoint(kWhere, "y", {y, y_count}, "x", {x, x_count});
  detail::RunSoftmax(detail::ChosenTargetIndex(), x, ldx, y, ldy, rows, cols,
                     scale);
}

}  // namespace mha
#endif  // HWY_ONCE
