// Row-wise, numerically stable softmax.
#ifndef MHA_SOFTMAX_H_
#define MHA_SOFTMAX_H_

#include <cstddef>

namespace mha {

// y[r][j] = exp(scale*x[r][j] - m_r) / sum_j exp(scale*x[r][j] - m_r), with
// m_r the maximum of scale*x[r][:]. Subtracting m_r keeps every exponent <= 0,
// so finite logits of any magnitude (1e4, 1e30) never overflow.
//
// Ranges: ldx >= cols, ldy >= cols; rows == 0 or cols == 0 does nothing.
// In place is allowed (y == x with ldy == ldx); other overlaps are not.
// -inf entries get exactly 0; a row that is all -inf gets all zeros (it is a
// row that sees nothing). +inf or NaN entries give unspecified, memory-safe
// results. scale is expected positive and finite.
//
// Accuracy: the exponential is within about 2 ULP; each output is within
// about (cols + 4) * 2^-24 relative of the exact softmax of the fp32 inputs.
// Terms below 2^-126 of the row's largest (scale*x - m < -87.3) are 0.
// Rows run in parallel (oneTBB); results do not depend on the thread count.
// Throws std::invalid_argument (writing nothing) for a too-small leading
// dimension, a null pointer with work to do, or y == x with ldy != ldx.
void softmax(const float* x, std::size_t ldx, float* y, std::size_t ldy,
             std::size_t rows, std::size_t cols, float scale = 1.0f);

}  // namespace mha

#endif  // MHA_SOFTMAX_H_
