// The queries folded into W_k (absorb_queries.h): every element one dot
// product of a query with a row of W_k's head columns, which cross
// head_dim / panel_cols packed panels (DotRows over row segments), read as
// stored and widened in registers.
//
// S6 (one query, d_model 4096, 32 heads) on one Zen 5 core: 2.7 ms in fp32,
// 1.35 with BF16 or F16 weights; W_k read once at the DRAM's rate is 64 MiB
// / 41 GB/s, 1.6 ms, and what is left is mostly the one reduction per row
// and pass (one pass per panel took 3.4 ms). As a GEMM, q W_k^T with W_k's
// panels as the transposed operand, the step took 6.7 ms (m = 1 products
// that packed B), after fp32 copies of 16-bit weights (BF16 S6 35 ms in
// all, against 12.5 now).

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lib/layer/absorb_queries.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include <algorithm>
#include <cstddef>

#include "hwy/highway.h"
#include "lib/common/dot_rows-inl.h"
#include "lib/common/parallel.h"
#include "lib/common/storage.h"
#include "lib/dispatch/dispatch.h"
#include "lib/layer/absorb_queries.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {

// Rows of W_k per task, and per pass of the queries: a block of kBlockRows
// rows of a head, 64 KiB of each of its panels in fp32 (hd 128: 256 KiB in
// all, in L2 while every group of up to four queries passes it). Tasks and
// blocks of 4096 and 512, 1024 and 256, 2048 and 1024 rows ran within 10%.
constexpr std::size_t kTaskRows = 1024, kBlockRows = 512;

// Panels read side by side: the head's panels are d_model rows apart (512
// KiB at d_model 4096), and one Zen 5 core read three or four streams that
// far apart at 21-23 GB/s, two at 38-42 (a standalone loop of sums over 64
// MiB, interleaved in 512-byte runs; 36 GB/s for four in 64 KiB runs). So
// a block is passed a pair of panels at a time, each pass's dot products
// added to the last's.
constexpr std::size_t kPanelsPerPass = 2;

template <class T>
void AbsorbQueriesOf(const detail::AbsorbQueriesArgs& x) {
  const std::size_t nr = x.panel_cols, d = x.d_model;
  const std::size_t pass_steps = kPanelsPerPass * nr;
  const T* panels = static_cast<const T*>(x.key_panels);
  // A row of the head's W_k: panel_cols steps per panel, panels d nr apart.
  const RowSegments across_panels{nr, d * nr};
  const std::size_t chunks = (d + kTaskRows - 1) / kTaskRows;
  detail::ForEachTask(
      x.heads * chunks, double(x.heads) * x.q_len * d * x.head_dim,
      [&](std::size_t t) {
        const std::size_t h = t / chunks;
        const std::size_t first_row = t % chunks * kTaskRows;
        const std::size_t end_row = std::min(d, first_row + kTaskRows);
        const T* head_panels = panels + h / x.group * x.head_dim * d;
        const float* q_h = x.queries + h * x.head_stride;
        float* out_h = x.absorbed + h * x.q_len * d;
        float pass_sums[4 * kBlockRows];
        for (std::size_t r0 = first_row; r0 < end_row; r0 += kBlockRows) {
          const std::size_t rows = std::min(kBlockRows, end_row - r0);
          for (std::size_t i = 0; i < x.q_len; i += 4) {
            const std::size_t count = std::min<std::size_t>(4, x.q_len - i);
            float* out = out_h + i * d + r0;
            for (std::size_t p = 0; p < x.head_dim; p += pass_steps) {
              // The first pass writes the block's sums, later ones add.
              float* sums = p == 0 ? out : pass_sums;
              const std::size_t sums_stride = p == 0 ? d : rows;
              WithRowCount(count, [&](auto queries) {
                DotRowsOfB<decltype(queries)::value, FourRowsOfB>(
                    q_h + i * x.token + p, x.token,
                    head_panels + p * d + r0 * nr, nr, rows,
                    std::min(pass_steps, x.head_dim - p), across_panels, sums,
                    sums_stride);
              });
              if (p == 0) continue;
              for (std::size_t q = 0; q < count; ++q) {
                for (std::size_t r = 0; r < rows; ++r) {
                  out[q * d + r] += pass_sums[q * rows + r];
                }
              }
            }
            for (std::size_t q = 0; q < count; ++q) {
              for (std::size_t r = 0; r < rows; ++r) out[q * d + r] *= x.scale;
            }
          }
        }
      });
}

void AbsorbQueriesKernel(const detail::AbsorbQueriesArgs& x) {
  detail::NoteKernelTarget(HWY_TARGET);
  detail::WithStorageType(x.precision, [&](auto element) {
    AbsorbQueriesOf<decltype(element)>(x);
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mha {
HWY_EXPORT(AbsorbQueriesKernel);

namespace detail {
void AbsorbQueries(std::size_t target_index, const AbsorbQueriesArgs& args) {
  MHA_CALL_TARGET(target_index, AbsorbQueriesKernel)(args);
}
}  // namespace detail
}  // namespace mha
#endif  // HWY_ONCE
