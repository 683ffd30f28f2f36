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
// scale must be finite. In place is allowed (y == x with ldy == ldx); any
// other overlap of y with x throws. A size (rows - 1) * ld + cols that
// overflows throws.
// -inf entries of x get exactly 0, whatever the scale; a row that is all
// -inf gets all zeros (it is a row that sees nothing). Any other entry counts
// as scale * x: a row where that is NaN or +inf is all NaN (NaN in x, or
// +inf in x with scale >= 0), and +inf in x with scale < 0 gets 0.
//
// Accuracy: with L the largest |scale * x| of a row, each output p is within
// (cols + 4 + 3 L) * 2^-24 * p of the exact softmax of the fp32 inputs, for
// p down to 2^-126 (float's smallest normal); smaller outputs are within
// 2^-126 (0 or denormal; terms where scale * x - m < -87.3 are 0). On
// targets with FMA (AVX2 and up, NEON, SVE) scale * x - m is computed with
// one rounding and the L term is about 0; without it (SSE4, SSSE3, SCALAR,
// EMU128), and with scale <= 0 on every target, large logits lose L * 2^-24.
// Rows run in parallel (oneTBB); results do not depend on the thread count.
// Throws std::invalid_argument (writing nothing) for a too-small leading
// dimension, a null pointer with work to do, a non-finite scale, a forbidden
// overlap, or y == x with ldy != ldx.
void softmax(const float* x, std::size_t ldx, float* y, std::size_t ldy,
             std::size_t rows, std::size_t cols, float scale = 1.0f);

}  // namespace mha

#endif  // MHA_SOFTMAX_H_
